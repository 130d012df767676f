"""Channel mixers (the transformer's position-wise feed-forward slot).

``"mlp"`` (GELU, 4x), ``"swiglu"`` (Shazeer 2020), ``"cofrgenet"`` (the prior continued-fraction
FFN, Cffn), ``"gated_cofrgenet"`` (the non-expanding gated continued-fraction block, GatedCF) and
``"moe"`` (top-k mixture of SwiGLU or GatedCF experts). Every mixer maps one token ``x: [dim]`` to
``[dim]``; ``apply_sequence(h: [L, dim]) -> ([L, dim], aux_loss)`` is what the transformer calls
(``aux_loss`` is the MoE load-balancing loss, 0 elsewhere).

References:
    Dhurandhar et al., "CoFrGeNet", arXiv 2601.21766 (Cffn, dyadic schedule); the
    GatedCF block and the log/exp divisions are reconstructions from its abstract.
    Shazeer, "GLU Variants Improve Transformer", arXiv 2002.05202. Fedus et al., Switch
    Transformers, arXiv 2101.03961 (load loss).
"""

import abc
import math
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import optax
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from ..core.checks import check_module, check_nonnegative, check_positive_int
from ._continued_fraction import _cf_log_positive_axis, _cf_signed_logexp, _check_eps, cf_value
from ._layers import LinearAdapter, adapted_linear, init_normal

MIXERS = ("mlp", "swiglu", "moe", "cofrgenet", "gated_cofrgenet")
DIVISIONS = ("log_positive", "signed_logexp", "direct")


def _check_token(x: Array, dim: int) -> None:
    if x.shape != (dim,):
        raise ValueError(
            f"a channel mixer acts on one token of shape ({dim},), got {x.shape}; "
            "vmap over positions."
        )


def _matvec(w: Array, x: Array) -> Array:
    # Written as x @ w^T so that, vmapped over tokens, XLA emits a token-major (N, out) matmul;
    # ``w @ x`` vmaps to an (out, N) product whose layout costs 2-3x on CPU.
    return x @ w.astype(x.dtype).T


class AbstractChannelMixer(eqx.Module):
    """A position-wise map ``R^dim -> R^dim``."""

    dim: eqx.AbstractVar[int]

    @abc.abstractmethod
    def __call__(self, x: Float[Array, " dim"]) -> Float[Array, " dim"]:
        """Mix the channels of one token."""

    @abc.abstractmethod
    def apply_sequence(
        self, h: Float[Array, "L dim"]
    ) -> tuple[Float[Array, "L dim"], Float[Array, ""]]:
        """Apply to every position; returns (outputs, auxiliary loss)."""


class AbstractAdaptableMixer(AbstractChannelMixer):
    """A channel mixer whose matrices accept a `LinearAdapter` term (LoRA, routed experts).

    ``adapted_weights()`` names the adapted matrices (``{"w_in": W, ...}``; the hook calls them
    ``"mixer.<name>"``), and ``apply_sequence(h, adapter)`` adds ``adapter("mixer.<name>", x)`` to
    each product ``x @ W^T``; with ``adapter=None`` it is the plain mixer.
    """

    @abc.abstractmethod
    def adapted_weights(self) -> dict[str, Float[Array, "out in"]]:
        """The adapted matrices ``(out, in)`` by field name (the hook name without ``mixer.``)."""

    @abc.abstractmethod
    def apply_sequence(
        self, h: Float[Array, "L dim"], adapter: LinearAdapter | None = None
    ) -> tuple[Float[Array, "L dim"], Float[Array, ""]]:
        """Apply to every position, adding ``adapter``'s terms; returns (outputs, aux loss)."""


def _per_token(mixer: AbstractChannelMixer, h: Array) -> tuple[Array, Array]:
    return jax.vmap(mixer)(h), jnp.zeros((), h.dtype)


class MLPMixer(AbstractAdaptableMixer):
    """``W_2 gelu(W_1 x)`` with hidden width ``expansion * dim``, no biases (8 dim^2 parameters)."""

    w_in: Float[Array, "hidden dim"]
    w_out: Float[Array, "dim hidden"]
    dim: int = eqx.field(static=True)

    def __init__(self, dim: int, expansion: int = 4, *, key: PRNGKeyArray, out_std: float = 0.02):
        dim = check_positive_int(dim, "dim")
        expansion = check_positive_int(expansion, "expansion")
        k1, k2 = jr.split(key)
        self.w_in = init_normal(k1, (expansion * dim, dim))
        self.w_out = init_normal(k2, (dim, expansion * dim), out_std)
        self.dim = dim

    def __call__(self, x):
        """Mix one token."""
        _check_token(x, self.dim)
        return _matvec(self.w_out, jax.nn.gelu(_matvec(self.w_in, x)))

    def adapted_weights(self):
        """``w_in`` and ``w_out``."""
        return {"w_in": self.w_in, "w_out": self.w_out}

    def apply_sequence(self, h, adapter: LinearAdapter | None = None):
        """Apply to every position; ``adapter`` adds to ``"mixer.w_in"``, ``"mixer.w_out"``."""
        if adapter is None:
            return _per_token(self, h)
        u = jax.nn.gelu(adapted_linear(h, self.w_in, "mixer.w_in", adapter))
        return adapted_linear(u, self.w_out, "mixer.w_out", adapter), jnp.zeros((), h.dtype)


def swiglu_hidden(dim: int) -> int:
    """Default SwiGLU width: ``8 dim / 3`` rounded up to a multiple of 8 (128 -> 344)."""
    return int(math.ceil(8 * dim / 3 / 8) * 8)


class SwiGLUMixer(AbstractAdaptableMixer):
    """``W_o (silu(W_g x) * W_v x)`` with hidden width ``hidden`` (default `swiglu_hidden`)."""

    w_gate: Float[Array, "hidden dim"]
    w_value: Float[Array, "hidden dim"]
    w_out: Float[Array, "dim hidden"]
    dim: int = eqx.field(static=True)

    def __init__(
        self, dim: int, hidden: int | None = None, *, key: PRNGKeyArray, out_std: float = 0.02
    ):
        dim = check_positive_int(dim, "dim")
        hidden = swiglu_hidden(dim) if hidden is None else check_positive_int(hidden, "hidden")
        k1, k2, k3 = jr.split(key, 3)
        self.w_gate = init_normal(k1, (hidden, dim))
        self.w_value = init_normal(k2, (hidden, dim))
        self.w_out = init_normal(k3, (dim, hidden), out_std)
        self.dim = dim

    def __call__(self, x):
        """Mix one token."""
        _check_token(x, self.dim)
        g = jax.nn.silu(_matvec(self.w_gate, x))
        return _matvec(self.w_out, g * _matvec(self.w_value, x))

    def adapted_weights(self):
        """``w_gate``, ``w_value`` and ``w_out``."""
        return {"w_gate": self.w_gate, "w_value": self.w_value, "w_out": self.w_out}

    def apply_sequence(self, h, adapter: LinearAdapter | None = None):
        """Apply to every position.

        ``adapter`` adds to ``"mixer.w_gate"``, ``"mixer.w_value"`` and ``"mixer.w_out"``.
        """
        if adapter is None:
            return _per_token(self, h)
        g = jax.nn.silu(adapted_linear(h, self.w_gate, "mixer.w_gate", adapter))
        u = g * adapted_linear(h, self.w_value, "mixer.w_value", adapter)
        return adapted_linear(u, self.w_out, "mixer.w_out", adapter), jnp.zeros((), h.dtype)


def _ladders(
    coeffs: Array, w: Array, b: Array | None, u: Array, division: str, eps: float
) -> Array:
    """``f(w_1*u + b_1, ..., w_d*u + b_d)`` for every ladder and channel: ``[L, dim]``."""
    pre = w.astype(u.dtype) * u[None, None, :]  # (ladders, depth, dim)
    if b is not None:
        pre = pre + b.astype(u.dtype)
    if division == "log_positive":  # depth stays on axis -2: contiguous levels, no transpose
        return coeffs.astype(u.dtype) * _cf_log_positive_axis(pre, -2)
    pre = jnp.moveaxis(pre, 1, -1)  # depth last: (ladders, dim, depth)
    if division == "signed_logexp":
        z = _cf_signed_logexp(pre, eps)
    else:
        z = cf_value(pre, eps)
    return coeffs.astype(u.dtype) * z


def _check_division(division: str) -> None:
    if division not in DIVISIONS:
        raise ValueError(f"unknown `division` {division!r}; expected one of {list(DIVISIONS)}.")


class _LadderMixer(AbstractChannelMixer):
    """What `CffnMixer` and `GatedCFMixer` share: ``L`` ladders of depth ``d`` per channel.

    ``w``, ``b``: ``(ladders, depth, dim)`` slopes and offsets of the partial denominators;
    biases start at 1 (0 for ``"log_positive"``) so the ladder starts away from the pole of odd
    depth at 0 (a jaxgen choice).
    """

    w: Float[Array, "ladders depth dim"]
    b: Float[Array, "ladders depth dim"] | None
    dim: int = eqx.field(static=True)
    depth: int = eqx.field(static=True)
    eps: float = eqx.field(static=True)
    division: str = eqx.field(static=True)

    def _init_ladders(
        self,
        key: PRNGKeyArray,
        dim: int,
        num_ladders: int,
        depth: int,
        *,
        division: str,
        eps: float,
        bias: bool,
    ) -> None:
        _check_division(division)
        dim = check_positive_int(dim, "dim")
        _check_eps(eps)
        if depth < 1 or num_ladders < 0:
            raise ValueError(
                f"need `depth` >= 1 and `num_ladders` >= 0, got {depth}, {num_ladders}."
            )
        self.w = init_normal(key, (num_ladders, depth, dim))
        bias0 = 0.0 if division == "log_positive" else 1.0
        self.b = jnp.full((num_ladders, depth, dim), bias0, self.w.dtype) if bias else None
        self.dim, self.depth, self.eps, self.division = dim, depth, eps, division

    def apply_sequence(self, h):
        """Apply to every position."""
        return _per_token(self, h)


class CffnMixer(_LadderMixer):
    """Prior CoFrGeNet feed-forward block (Cffn, CoFrGeNet-F).

    ``x_hat = sigmoid(G x) * x``; ladder ``j``: ``a^{(j)}_k = w^{(j)}_k * x_hat + b^{(j)}_k``;
    ``y = U x + sum_j v^{(j)} * f(a^{(j)}_1, ..., a^{(j)}_d)`` (elementwise per channel).
    Parameters ``2 dim^2 + L dim (d + 1)`` (+ ``L dim d`` biases, initialised to 1 so the ladder
    starts away from the pole of odd depth at 0; choice).
    """

    u: Float[Array, "dim dim"]
    g: Float[Array, "dim dim"]
    v: Float[Array, "ladders dim"]

    def __init__(
        self,
        dim: int,
        num_ladders: int = 3,
        depth: int = 5,
        *,
        key: PRNGKeyArray,
        eps: float = 0.01,
        ladder_bias: bool = True,
        division: str = "direct",
        out_std: float = 0.02,
    ):
        ku, kg, kw, kv = jr.split(key, 4)
        self._init_ladders(
            kw, dim, num_ladders, depth, division=division, eps=eps, bias=ladder_bias
        )
        self.u = init_normal(ku, (dim, dim), out_std)
        self.g = init_normal(kg, (dim, dim))
        self.v = init_normal(kv, (num_ladders, dim))

    def __call__(self, x):
        """Mix one token."""
        _check_token(x, self.dim)
        x_hat = jax.nn.sigmoid(_matvec(self.g, x)) * x
        z = _ladders(self.v, self.w, self.b, x_hat, self.division, self.eps)
        return _matvec(self.u, x) + jnp.sum(z, axis=0)


class GatedCFMixer(_LadderMixer):
    """Non-expanding gated continued-fraction block (GatedCF), reconstructed from the abstract.

    ``u = W_v x``, ``g = silu(W_g x)``,
    ``r = sum_j c^{(j)} * f(w^{(j)}_1 * u + b^{(j)}_1, ..., w^{(j)}_d * u + b^{(j)}_d)``,
    ``y = W_o (g * (u + r))``. With ``r = 0`` (``num_ladders=0`` or ``c = 0``) it is a
    non-expanded SwiGLU. Parameters ``3 dim^2 + L dim (2d + 1)``.

    ``division``: ``"log_positive"`` (variant A: ``a_k = exp(w_k u + b_k) > 0``, no poles at any
    depth; the log-domain ladder's values with a closed-form gradient, see `cf_log_positive`),
    ``"signed_logexp"`` (variant B: signed ladder, capped log/exp reciprocal) or ``"direct"``
    (continuants and one clamped division, the prior path).
    ``c`` starts at 0 (choice: the block starts as a GLU; ``c_std > 0`` draws it instead).
    """

    w_value: Float[Array, "dim dim"]
    w_gate: Float[Array, "dim dim"]
    w_out: Float[Array, "dim dim"]
    c: Float[Array, "ladders dim"]

    def __init__(
        self,
        dim: int,
        num_ladders: int = 3,
        depth: int = 5,
        *,
        division: str = "log_positive",
        eps: float = 0.01,
        c_std: float = 0.0,
        out_std: float = 0.02,
        key: PRNGKeyArray,
    ):
        check_nonnegative(c_std, "c_std")  # a static float: raises now
        kv, kg, ko, kw, kc = jr.split(key, 5)
        self._init_ladders(kw, dim, num_ladders, depth, division=division, eps=eps, bias=True)
        self.w_value = init_normal(kv, (dim, dim))
        self.w_gate = init_normal(kg, (dim, dim))
        self.w_out = init_normal(ko, (dim, dim), out_std)
        self.c = (
            init_normal(kc, (num_ladders, dim), c_std)
            if c_std > 0
            else jnp.zeros((num_ladders, dim), self.w.dtype)
        )

    def __call__(self, x):
        """Mix one token."""
        _check_token(x, self.dim)
        # One (2 dim, dim) product for value and gate: on small widths two matmuls (and their
        # two backward pairs) cost more than one of twice the size.
        ug = _matvec(jnp.concatenate([self.w_value, self.w_gate]), x)
        u, g = ug[: self.dim], jax.nn.silu(ug[self.dim :])
        r = jnp.sum(_ladders(self.c, self.w, self.b, u, self.division, self.eps), axis=0)
        return _matvec(self.w_out, g * (u + r))


class MoEMixer(AbstractChannelMixer):
    """Top-k mixture of experts (SwiGLU or GatedCF experts) with a softmax router.

    ``p = softmax(W_r x)``; the ``top_k`` largest probabilities, renormalised, weight their
    experts. Load-balancing loss over a sequence (Switch Transformer):
    ``E * sum_i f_i P_i``, ``f_i`` the fraction of routed slots sent to expert ``i`` and ``P_i``
    the mean router probability (1 when balanced). Experts are evaluated densely (small models).
    """

    router: Float[Array, "experts dim"]
    experts: AbstractChannelMixer  # stacked: every array has a leading experts axis
    dim: int = eqx.field(static=True)
    num_experts: int = eqx.field(static=True)
    top_k: int = eqx.field(static=True)

    def __init__(
        self,
        dim: int,
        num_experts: int = 4,
        top_k: int = 2,
        *,
        key: PRNGKeyArray,
        expert: str = "swiglu",
        expert_kwargs: dict[str, Any] | None = None,
    ):
        if expert not in ("mlp", "swiglu", "cofrgenet", "gated_cofrgenet"):
            raise ValueError(
                f"unknown `expert` {expert!r}; expected one of "
                "['mlp', 'swiglu', 'cofrgenet', 'gated_cofrgenet']."
            )
        dim = check_positive_int(dim, "dim")
        if not 1 <= top_k <= num_experts:
            raise ValueError(f"need 1 <= top_k <= num_experts, got {top_k}, {num_experts}.")
        kr, ke = jr.split(key)
        kwargs = dict(expert_kwargs or {})
        self.router = init_normal(kr, (num_experts, dim))
        self.experts = eqx.filter_vmap(lambda k: make_mixer(expert, dim, key=k, **kwargs))(
            jr.split(ke, num_experts)
        )
        self.dim, self.num_experts, self.top_k = dim, num_experts, top_k

    def _route(self, x: Array) -> tuple[Array, Array]:
        probs = jax.nn.softmax(_matvec(self.router, x))
        _, idx = jax.lax.top_k(probs, self.top_k)
        chosen = jnp.zeros_like(probs).at[idx].set(1.0)
        return probs, chosen

    def __call__(self, x):
        """Mix one token."""
        _check_token(x, self.dim)
        probs, chosen = self._route(x)
        gates = probs * chosen / jnp.sum(probs * chosen)
        outs = eqx.filter_vmap(lambda e: e(x))(self.experts)  # (experts, dim)
        return gates @ outs

    def apply_sequence(self, h):
        """Apply to every position; returns (outputs, load-balancing loss)."""
        out = jax.vmap(self)(h)
        probs, chosen = jax.vmap(self._route)(h)
        frac = jnp.mean(chosen, axis=0) / self.top_k
        aux = self.num_experts * jnp.sum(frac * jnp.mean(probs, axis=0))
        return out, aux


#: A user's mixer factory ``(dim, *, key, **kwargs) -> AbstractChannelMixer`` (e.g. the class
#: of an equinox module whose constructor reads so).
MixerFactory = Callable[..., AbstractChannelMixer]


def make_mixer(
    mixer: str | MixerFactory, dim: int, *, key: PRNGKeyArray, **kwargs: Any
) -> AbstractChannelMixer:
    """Build a channel mixer by name (one of ``MIXERS``) or with a user factory.

    Args:
        mixer: a name in ``MIXERS``, or a factory ``(dim, *, key, **kwargs) ->
            AbstractChannelMixer`` such as your own subclass (its result is checked against
            the interface and ``dim``).
        dim: model width; the mixer maps ``R^dim -> R^dim``.
        key: PRNG key.
        **kwargs: passed to the constructor (or the factory).

    Raises:
        ValueError: an unknown name, or a factory whose mixer has another ``dim``.
        TypeError: ``mixer`` neither a name nor callable, or a factory that does not return an
            `AbstractChannelMixer`.
    """
    if isinstance(mixer, str):
        classes = {
            "mlp": MLPMixer,
            "swiglu": SwiGLUMixer,
            "moe": MoEMixer,
            "cofrgenet": CffnMixer,
            "gated_cofrgenet": GatedCFMixer,
        }
        if mixer not in classes:
            raise ValueError(f"unknown mixer {mixer!r}; expected one of {list(MIXERS)}.")
        return classes[mixer](dim, key=key, **kwargs)
    if not callable(mixer):
        raise TypeError(
            f"`mixer` must be one of {list(MIXERS)} or a factory (dim, *, key, **kwargs) -> "
            f"AbstractChannelMixer, got {type(mixer).__name__}."
        )
    built = check_module(mixer(dim, key=key, **kwargs), AbstractChannelMixer, "mixer")
    if built.dim != dim:
        raise ValueError(
            f"`mixer` must map R^{dim} -> R^{dim} (the model width), its factory built a "
            f"mixer with dim {built.dim}."
        )
    return built


# ---------------------------------------------------------------------------------------------
# Dyadic ("incremental") schedule of the prior CoFrGeNet: depth level k learns from step
# ceil((1 - 2^-k) S) on; implemented as a mask on gradients and on the final updates.


def dyadic_start_steps(total_steps: int, depth: int) -> list[int]:
    """First step at which depth level ``k = 1..depth`` is trained: ``ceil((1 - 2^-k) S)``."""
    if total_steps < 1 or depth < 1:
        raise ValueError(f"need `total_steps` >= 1 and `depth` >= 1, got {total_steps}, {depth}.")
    return [math.ceil((1.0 - 2.0**-k) * total_steps) for k in range(1, depth + 1)]


def dyadic_active_depth(step: Any, total_steps: int, depth: int) -> Array:
    """Number of depth levels trained at ``step`` (0..depth); works on traced steps."""
    starts = jnp.asarray(dyadic_start_steps(total_steps, depth))
    return jnp.sum(jnp.asarray(step) >= starts)


def _is_cffn(node: Any) -> bool:
    return isinstance(node, CffnMixer)


def dyadic_grad_mask(tree: PyTree, active_depth: Any) -> PyTree:
    """Multiplicative mask for ``tree`` (a model, or its grads/updates): 1 everywhere except on the
    ladder weights/biases of every `CffnMixer` at depth levels beyond ``active_depth`` (0).

    Leaves that are not inexact arrays map to ``None``.
    """

    def leaf_ones(x: Any) -> Any:
        return jnp.ones_like(x) if eqx.is_inexact_array(x) else None

    def node_mask(node: Any) -> Any:
        if not _is_cffn(node):
            return leaf_ones(node)
        mask = jtu.tree_map(leaf_ones, node)
        if node.w is None or not eqx.is_inexact_array(node.w):
            return mask
        # Level k (1-based) is column k - 1 of the depth axis (axis -2).
        keep = (jnp.arange(node.w.shape[-2]) < active_depth).astype(node.w.dtype)
        col = jnp.broadcast_to(keep[:, None], node.w.shape)
        mask = eqx.tree_at(lambda m: m.w, mask, col)
        if node.b is not None and eqx.is_inexact_array(node.b):
            mask = eqx.tree_at(lambda m: m.b, mask, col.astype(node.b.dtype))
        return mask

    return jtu.tree_map(node_mask, tree, is_leaf=_is_cffn)


class _DyadicState(eqx.Module):
    count: Array
    inner: PyTree


def dyadic_schedule(
    optimizer: optax.GradientTransformation, total_steps: int, depth: int
) -> optax.GradientTransformation:
    """Wrap ``optimizer`` so CoFrGeNet ladders are unfrozen level by level (dyadic schedule).

    Gradients of frozen levels are zeroed before ``optimizer`` (so Adam moments stay 0) and
    their updates are zeroed after it (so weight decay does not move them either).
    """
    starts = dyadic_start_steps(total_steps, depth)

    def init(params: PyTree) -> _DyadicState:
        return _DyadicState(jnp.zeros((), jnp.int32), optimizer.init(params))

    def update(
        updates: PyTree, state: _DyadicState, params: PyTree | None = None
    ) -> tuple[PyTree, _DyadicState]:
        active = jnp.sum(state.count >= jnp.asarray(starts))

        def masked(tree: PyTree) -> PyTree:
            mask = dyadic_grad_mask(tree, active)
            return jtu.tree_map(
                lambda u, m: None if u is None else u * m.astype(u.dtype),
                tree,
                mask,
                is_leaf=lambda x: x is None,
            )

        updates, inner = optimizer.update(masked(updates), state.inner, params)
        return masked(updates), _DyadicState(state.count + 1, inner)

    return optax.GradientTransformation(init, update)  # type: ignore[arg-type]


def count_parameters(tree: PyTree) -> int:
    """Number of scalars in the inexact arrays (or shape structs) of ``tree``."""
    leaves = jtu.tree_leaves(tree)  # arrays or ShapeDtypeStructs (from eqx.filter_eval_shape)
    return int(
        sum(
            math.prod(x.shape)
            for x in leaves
            if hasattr(x, "dtype") and hasattr(x, "shape") and jnp.issubdtype(x.dtype, jnp.inexact)
        )
    )
