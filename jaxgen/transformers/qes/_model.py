"""Routed LoRA experts attached to a frozen `jaxgen.nn.Transformer` (QES).

Every block's attention input projection and mixer matrices get ``E`` LoRA experts through the
`jaxgen.nn` adapter hook; a `TokenRouter` per block (shared by the block's adapted maps) gates
them per token from the block input ``h``:

    y = W0 x + sum_e mu_e g_e(h) (alpha / r) B_e A_e x                               (eq. 2.2)

``mu`` (the deployment mask) is an array leaf, so `shutdown` and `restore` change values only and
never recompile a jitted forward. Plain LoRA (baseline B1) is the same model with one expert, no
router and gate 1.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree

from ...core.checks import check_module
from ...nn import AbstractAdaptableMixer, AbstractCausalLM, Transformer
from ._experts import MoLoRALinear, QESConfig, TokenRouter, shutdown_mask


def _adapted_maps(block, index: int) -> dict[str, Array]:
    """The weights the hook adapts in one block, by hook name (``"attn.w_qkv"``, ...).

    The adapters need only the `AbstractAdaptableMixer` contract of the block's mixer (its
    ``adapted_weights`` and ``apply_sequence(h, adapter)``): a built-in ('mlp', 'swiglu') or a
    user's subclass, built with ``Transformer(..., mixer=factory)``.
    """
    check_module(block.mixer, AbstractAdaptableMixer, f"model.blocks[{index}].mixer")
    maps = {"attn.w_qkv": block.attn.w_qkv}
    maps.update({f"mixer.{n}": w for n, w in block.mixer.adapted_weights().items()})
    return maps


class QESTransformer(AbstractCausalLM):
    """A frozen causal `Transformer` with routed LoRA experts (see `attach_qes`, `attach_lora`).

    Attributes:
        base: the frozen base model (its weights are the ``W0`` of eq. 2.2).
        adapters: per block, hook name -> `MoLoRALinear` (its ``weight`` is a frozen copy of the
            base matrix, used only by ``merge``-style inspection; the forward uses ``base``).
        routers: per block `TokenRouter`, or ``None`` for plain LoRA (one expert, gate 1).
        mask: deployment mask ``mu`` (E,), float, 1 = expert on.
        quarantine: index ``q`` of the quarantine expert.
    """

    base: Transformer
    adapters: tuple[dict[str, MoLoRALinear], ...]
    routers: tuple[TokenRouter, ...] | None
    mask: Float[Array, " E"]
    quarantine: int = eqx.field(static=True)

    def __check_init__(self) -> None:
        # Built by `attach_qes` / `attach_lora`; a hand-built one must agree with its experts.
        if jnp.ndim(self.mask) != 1 or jnp.shape(self.mask)[0] < 1:
            raise ValueError(
                f"`mask` must have shape (E,) with E >= 1, got {jnp.shape(self.mask)}."
            )
        E = jnp.shape(self.mask)[0]
        if len(self.adapters) != len(self.base.blocks):
            raise ValueError(
                f"`adapters` must hold one dict per block ({len(self.base.blocks)}), got "
                f"{len(self.adapters)}."
            )
        for block in self.adapters:
            for name, layer in block.items():
                if layer.A.shape[0] != E:
                    raise ValueError(
                        f"`mask` has {E} experts but adapter {name!r} has {layer.A.shape[0]}."
                    )
        if self.routers is not None and (
            len(self.routers) != len(self.base.blocks)
            or any(r.W.shape[0] != E for r in self.routers)
        ):
            raise ValueError(f"`routers` must hold one TokenRouter over {E} experts per block.")
        if isinstance(self.quarantine, bool) or not 0 <= self.quarantine < E:
            raise ValueError(
                f"`quarantine` must be an expert index in [0, {E}), got {self.quarantine!r}."
            )

    @property
    def num_experts(self) -> int:
        """Number of experts ``E``."""
        return self.mask.shape[0]

    # The `AbstractCausalLM` attributes, read from the base.
    @property
    def causal(self) -> bool:
        """Always a causal LM."""
        return self.base.causal

    @property
    def max_len(self) -> int:
        """Longest sequence accepted."""
        return self.base.max_len

    @property
    def vocab_size(self) -> int:
        """Number of token ids."""
        return self.base.vocab_size

    @property
    def out_size(self) -> int:
        """Number of logits per position."""
        return self.base.out_size

    def forward(
        self, tokens: Int[Array, " L"], keep: Float[Array, ""] | float = 1.0
    ) -> tuple[Float[Array, "L V"], Float[Array, "layers L E"]]:
        """(logits ``(L, V)``, router gates ``(layers, L, E)``) for one sequence.

        ``keep`` (scalar, this sequence's trimming weight ``k_i``) masks the gradient of every
        non-quarantine expert's output; the value is unchanged.
        """
        h, gates = self.hidden(tokens, keep)
        return self.base.logits(jax.vmap(self.base.final_norm)(h)), gates

    def features(self, tokens: Int[Array, " L"]) -> tuple[Float[Array, "L dim"], Float[Array, ""]]:
        """Final normalised hidden states (deployment mask) and a zero auxiliary loss."""
        h, _ = self.hidden(tokens)
        return jax.vmap(self.base.final_norm)(h), jnp.zeros((), h.dtype)

    def logits(self, features: Float[Array, "L dim"]) -> Float[Array, "L V"]:
        """The base model's output head."""
        return self.base.logits(features)

    def hidden(
        self, tokens: Int[Array, " L"], keep: Float[Array, ""] | float = 1.0
    ) -> tuple[Float[Array, "L dim"], Float[Array, "layers L E"]]:
        """Residual stream after the last block (before the final norm) and the gates."""
        base = self.base
        h = base.embed(tokens)  # the base model's input checks and embeddings
        all_gates = [jnp.zeros((0, h.shape[0], self.num_experts), h.dtype)]
        for i, block in enumerate(base.blocks):
            if self.routers is None:
                gates = jnp.ones((h.shape[0], 1), h.dtype)
            else:
                gates = jax.vmap(self.routers[i])(h)
            experts = self.adapters[i]

            def adapter(name: str, x: Array, experts=experts, gates=gates) -> Array:
                layer = experts[name]
                return jax.vmap(
                    lambda xt, gt: layer.delta(xt, gt, self.mask, keep, self.quarantine)
                )(x, gates)

            h, _ = block(h, None, causal=True, adapter=adapter)
            all_gates.append(gates)
        return h, jnp.concatenate([g[None] if g.ndim == 2 else g for g in all_gates])

    def __call__(self, tokens: Int[Array, " L"]) -> Float[Array, "L V"]:
        """Logits ``(L, V)`` of one sequence (deployment: the current ``mask``)."""
        return self.forward(tokens)[0]


def _check_base(model: Transformer) -> None:
    # QES adapts the base's blocks in place, so it needs `Transformer`'s block structure (with
    # any `AbstractAdaptableMixer`), not just the `AbstractCausalLM` contract.
    if not isinstance(model, Transformer):
        raise TypeError(f"`model` must be a jaxgen.nn.Transformer, got {type(model).__name__}.")
    if not model.causal or model.time_embedding is not None:
        raise ValueError("QES adapters need a causal Transformer without time conditioning.")


def _build(
    model: Transformer, num_experts: int, rank: int, alpha: float, key: PRNGKeyArray
) -> tuple[dict[str, MoLoRALinear], ...]:
    adapters = []
    block_keys = jr.split(key, len(model.blocks))
    for i, (block, kb) in enumerate(zip(model.blocks, block_keys, strict=True)):
        maps = _adapted_maps(block, i)
        keys = jr.split(kb, len(maps))
        adapters.append(
            {
                name: MoLoRALinear(w, num_experts, rank, alpha=alpha, key=k)
                for (name, w), k in zip(maps.items(), keys, strict=True)
            }
        )
    return tuple(adapters)


def attach_qes(model: Transformer, cfg: QESConfig, *, key: PRNGKeyArray) -> QESTransformer:
    """Wrap a causal base with ``cfg.num_experts`` routed LoRA experts per adapted map.

    Experts start at ``B = 0`` so the result computes exactly the base model; routers start
    near uniform (``W ~ N(0, 0.02^2)``, ``b = 0``). The mask starts all-on.

    References:
        Hu et al., LoRA, arXiv 2106.09685; Dou et al., LoRAMoE, arXiv 2312.09979; the
        QES routing is reconstructed from its abstract.
    """
    _check_base(model)
    if not isinstance(cfg, QESConfig):
        raise TypeError(f"`cfg` must be a QESConfig, got {type(cfg).__name__}.")
    ka, kr = jr.split(key)
    adapters = _build(model, cfg.num_experts, cfg.rank, cfg.alpha, ka)
    routers = tuple(
        TokenRouter(model.dim, cfg.num_experts, key=k) for k in jr.split(kr, len(model.blocks))
    )
    routers = jtu.tree_map(lambda a: a.astype(model.embedding.dtype), routers)
    mask = jnp.ones((cfg.num_experts,), model.embedding.dtype)
    return QESTransformer(model, adapters, routers, mask, cfg.quarantine)


def attach_lora(
    model: Transformer, *, rank: int = 32, alpha: float = 64.0, key: PRNGKeyArray
) -> QESTransformer:
    """Plain LoRA on the same maps (baseline B1/B4): one expert, gate 1, no router.

    The default ``alpha / rank = 2`` matches the QES experts' scale.
    """
    _check_base(model)
    adapters = _build(model, 1, rank, alpha, key)
    return QESTransformer(model, adapters, None, jnp.ones((1,), model.embedding.dtype), 0)


def _check_qes(model: QESTransformer) -> None:
    if not isinstance(model, QESTransformer):
        raise TypeError(f"`model` must be a QESTransformer, got {type(model).__name__}.")


def shutdown(model: QESTransformer, expert: int | Int[Array, ""]) -> QESTransformer:
    """Switch ``expert`` off: ``mu_expert <- 0``. Only the mask leaf changes."""
    _check_qes(model)
    return eqx.tree_at(lambda m: m.mask, model, shutdown_mask(model.mask, expert))


def restore(model: QESTransformer) -> QESTransformer:
    """Every expert back on (``mu = 1``)."""
    _check_qes(model)
    return eqx.tree_at(lambda m: m.mask, model, jnp.ones_like(model.mask))


def trainable_filter(model: QESTransformer) -> PyTree[bool]:
    """Bool pytree for `eqx.partition`: True on the experts' ``A``, ``B`` and the routers.

    The base, the adapters' frozen weight copies and the mask are False.
    """
    _check_qes(model)
    filt = jtu.tree_map(lambda _: False, model)

    def adapter_filter(layer: MoLoRALinear) -> MoLoRALinear:
        return eqx.tree_at(lambda a: (a.A, a.B), layer, (True, True))

    adapters = tuple(
        {name: adapter_filter(layer) for name, layer in block.items()} for block in filt.adapters
    )
    filt = eqx.tree_at(lambda m: m.adapters, filt, adapters)
    if model.routers is not None:
        filt = eqx.tree_at(lambda m: m.routers, filt, jtu.tree_map(lambda _: True, model.routers))
    return filt
