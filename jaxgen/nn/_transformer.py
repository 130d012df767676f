"""A small pre-norm transformer over token sequences with a pluggable channel mixer.

``h = h + Attn(RMSNorm(h)); h = h + Mixer(RMSNorm(h))`` per block, causal (language model) or
bidirectional (discrete diffusion), rotary or learned positions, optional time conditioning
(adaptive RMSNorm shift/scale from an embedding of a scalar ``t``, zero-initialised so an
untrained time path is the identity), tied or separate output head.
"""

import abc
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from ._layers import LinearAdapter, MultiHeadAttention, RMSNorm, TimeEmbedding, init_normal
from ._mixers import AbstractAdaptableMixer, AbstractChannelMixer, MixerFactory, make_mixer

POSITIONS = ("rotary", "learned")


class TransformerBlock(eqx.Module):
    """Pre-norm block: attention then channel mixer, both residual; optional adaptive norms."""

    attn_norm: RMSNorm
    attn: MultiHeadAttention
    mixer_norm: RMSNorm
    mixer: AbstractChannelMixer
    modulation: Float[Array, "dim4 dim"] | None

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mixer: str | MixerFactory,
        mixer_kwargs: dict[str, Any],
        *,
        rotary: bool,
        time_conditioning: bool,
        out_std: float,
        key: PRNGKeyArray,
    ):
        ka, km = jr.split(key)
        self.attn_norm = RMSNorm(dim)
        self.attn = MultiHeadAttention(dim, num_heads, rotary=rotary, key=ka, out_std=out_std)
        self.mixer_norm = RMSNorm(dim)
        kwargs = dict(mixer_kwargs)
        if isinstance(mixer, str) and mixer != "moe":  # a user factory gets only its kwargs
            kwargs.setdefault("out_std", out_std)
        self.mixer = make_mixer(mixer, dim, key=km, **kwargs)
        self.modulation = jnp.zeros((4 * dim, dim)) if time_conditioning else None

    def __call__(
        self,
        h: Float[Array, "L dim"],
        cond: Float[Array, " dim"] | None,
        *,
        causal: bool,
        mask: Bool[Array, " L"] | None = None,
        adapter: LinearAdapter | None = None,
    ) -> tuple[Float[Array, "L dim"], Float[Array, ""]]:
        """One block on one sequence; returns (hidden states, mixer auxiliary loss).

        ``mask`` (``(L,)`` bool, optional) marks the positions usable as attention keys (see
        `MultiHeadAttention`); masked positions still get their own outputs. ``adapter``
        (optional, see `jaxgen.nn.LinearAdapter`) adds a term to the attention input projection
        (``"attn.w_qkv"``) and to the mixer matrices (``"mixer.<field>"``, any
        `AbstractAdaptableMixer`: ``"mlp"``, ``"swiglu"``); ``None`` is the plain graph.
        """
        if adapter is not None and not isinstance(self.mixer, AbstractAdaptableMixer):
            raise TypeError(
                "`adapter` needs an AbstractAdaptableMixer in the block (the 'mlp' or 'swiglu' "
                f"mixer, or your own subclass), got {type(self.mixer).__name__}."
            )
        a = jax.vmap(self.attn_norm)(h)
        m_shift = m_scale = None
        if self.modulation is not None and cond is not None:
            mod = self.modulation.astype(h.dtype) @ jax.nn.silu(cond)
            a_shift, a_scale, m_shift, m_scale = jnp.split(mod, 4)
            a = a * (1 + a_scale)[None, :] + a_shift[None, :]
        h = h + self.attn(a, causal=causal, mask=mask, adapter=adapter)
        m = jax.vmap(self.mixer_norm)(h)
        if m_shift is not None and m_scale is not None:
            m = m * (1 + m_scale)[None, :] + m_shift[None, :]
        if adapter is None:
            out, aux = self.mixer.apply_sequence(m)
        else:
            out, aux = self.mixer.apply_sequence(m, adapter=adapter)  # type: ignore[call-arg]
        return h + out, aux


class AbstractCausalLM(eqx.Module):
    """A language model on ONE token sequence: ``tokens: int[L]`` -> logits ``[L, out_size]``.

    The slot of every LM function of `jaxgen.transformers` (`lm_loss`, `fit_lm`,
    `evaluate_lm`, `sample_lm`, `score_sequences`): subclass it with your own equinox module.
    Logits are ``logits(features(tokens)[0])``; the second output of ``features`` is an
    auxiliary training loss (e.g. an MoE load loss; return ``0`` if there is none), which
    `lm_loss` adds with a small weight.

    Attributes:
        vocab_size: number of input token ids.
        out_size: number of logits per position.
        max_len: longest sequence accepted.
        causal: whether position ``i`` sees only tokens ``<= i``; next-token likelihoods and
            sampling require ``True``.
    """

    vocab_size: eqx.AbstractVar[int]
    out_size: eqx.AbstractVar[int]
    max_len: eqx.AbstractVar[int]
    causal: eqx.AbstractVar[bool]

    @abc.abstractmethod
    def features(self, tokens: Int[Array, " L"]) -> tuple[Float[Array, "L dim"], Float[Array, ""]]:
        """Final hidden states ``[L, dim]`` of one sequence and the auxiliary loss (scalar)."""

    @abc.abstractmethod
    def logits(self, features: Float[Array, "L dim"]) -> Float[Array, "L out"]:
        """Output head: logits ``[L, out_size]`` from the hidden states."""


class Transformer(AbstractCausalLM):
    """Token transformer acting on ONE sequence ``tokens: int[L]`` -> logits ``[L, out_size]``.

    Args (constructor):
        vocab_size: number of input token ids (include special ids such as a mask id).
        dim: model width; num_layers; num_heads; max_len: longest sequence accepted.
        mixer: one of ``jaxgen.nn.MIXERS``, or a factory ``(dim, *, key, **mixer_kwargs) ->
            AbstractChannelMixer`` (e.g. your own subclass; see `make_mixer`), called once per
            block; mixer_kwargs: passed to its constructor.
        causal: causal (autoregressive LM) or bidirectional attention.
        positions: ``"rotary"`` or ``"learned"`` absolute embeddings.
        tie_embeddings: reuse the input embedding as output head (needs ``out_size ==
            vocab_size``).
        time_conditioning: accept a scalar ``t`` (diffusion time) that modulates every block.
        out_size: number of output logits per position (default ``vocab_size``).
        key: PRNG key.

    Use ``model(tokens)`` for logits, ``model(tokens, t)`` with time conditioning,
    ``model.forward`` for (logits, auxiliary MoE loss) and ``model.features`` for the final
    normalised hidden states (to attach extra heads, e.g. an exit-rate head).
    """

    embedding: Float[Array, "vocab dim"]
    position_embedding: Float[Array, "max_len dim"] | None
    blocks: tuple[TransformerBlock, ...]
    final_norm: RMSNorm
    head: Float[Array, "out dim"] | None
    time_embedding: TimeEmbedding | None
    vocab_size: int = eqx.field(static=True)
    out_size: int = eqx.field(static=True)
    dim: int = eqx.field(static=True)
    max_len: int = eqx.field(static=True)
    causal: bool = eqx.field(static=True)

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        num_layers: int,
        num_heads: int,
        max_len: int,
        *,
        key: PRNGKeyArray,
        mixer: str | MixerFactory = "swiglu",
        mixer_kwargs: dict[str, Any] | None = None,
        causal: bool = True,
        positions: str = "rotary",
        tie_embeddings: bool = True,
        time_conditioning: bool = False,
        out_size: int | None = None,
    ):
        if positions not in POSITIONS:
            raise ValueError(
                f"unknown `positions` {positions!r}; expected one of {list(POSITIONS)}."
            )
        for name, val in (
            ("vocab_size", vocab_size),
            ("dim", dim),
            ("num_layers", num_layers),
            ("num_heads", num_heads),
            ("max_len", max_len),
        ):
            if not isinstance(val, int) or val < 1:
                raise ValueError(f"`{name}` must be an int >= 1, got {val!r}.")
        out_size = vocab_size if out_size is None else out_size
        if tie_embeddings and out_size != vocab_size:
            raise ValueError(
                f"tied embeddings need out_size == vocab_size, got {out_size} != "
                f"{vocab_size}; pass tie_embeddings=False."
            )
        ke, kp, kb, kh, kt = jr.split(key, 5)
        out_std = 0.02 / (2 * num_layers) ** 0.5  # GPT-2 scaled init of residual projections
        self.embedding = init_normal(ke, (vocab_size, dim))
        self.position_embedding = (
            init_normal(kp, (max_len, dim)) if positions == "learned" else None
        )
        self.blocks = tuple(
            TransformerBlock(
                dim,
                num_heads,
                mixer,
                mixer_kwargs or {},
                rotary=positions == "rotary",
                time_conditioning=time_conditioning,
                out_std=out_std,
                key=k,
            )
            for k in jr.split(kb, num_layers)
        )
        self.final_norm = RMSNorm(dim)
        self.head = None if tie_embeddings else init_normal(kh, (out_size, dim))
        self.time_embedding = TimeEmbedding(dim, key=kt) if time_conditioning else None
        self.vocab_size, self.out_size, self.dim = vocab_size, out_size, dim
        self.max_len, self.causal = max_len, causal

    def _check(self, tokens: Array, t: Any) -> None:
        if tokens.ndim != 1:
            raise ValueError(
                f"`tokens` must be one sequence of shape (L,), got {tokens.shape}; "
                "vmap over the batch."
            )
        if not jnp.issubdtype(tokens.dtype, jnp.integer):
            raise TypeError(f"`tokens` must be integer ids, got dtype {tokens.dtype}.")
        if tokens.shape[0] > self.max_len:
            raise ValueError(
                f"sequence length {tokens.shape[0]} exceeds the model's max_len {self.max_len}."
            )
        if self.time_embedding is None and t is not None:
            raise ValueError(
                "this model has no time conditioning (time_conditioning=False) but `t` was given."
            )
        if self.time_embedding is not None and t is None:
            raise ValueError("this model is time-conditioned: pass `t`.")

    def embed(
        self, tokens: Int[Array, " L"], t: Float[Array, ""] | None = None
    ) -> Float[Array, "L dim"]:
        """Checked input embedding of one sequence: token plus (learned) position embeddings.

        Shapes, dtype and the time argument are checked at trace time; ids outside
        ``[0, vocab_size)`` raise through `eqx.error_if`.
        """
        self._check(tokens, t)
        tokens = eqx.error_if(
            tokens,
            jnp.any((tokens < 0) | (tokens >= self.vocab_size)),
            "`tokens`: ids outside [0, vocab_size).",
        )
        h = self.embedding[tokens]
        if self.position_embedding is not None:
            h = h + self.position_embedding[: tokens.shape[0]]
        return h

    def features(
        self, tokens: Int[Array, " L"], t: Float[Array, ""] | None = None
    ) -> tuple[Float[Array, "L dim"], Float[Array, ""]]:
        """Final normalised hidden states ``[L, dim]`` and the summed auxiliary (MoE) loss."""
        h = self.embed(tokens, t)
        cond = None if self.time_embedding is None else self.time_embedding(jnp.asarray(t, h.dtype))
        aux = jnp.zeros((), h.dtype)
        for block in self.blocks:
            h, a = block(h, cond, causal=self.causal)
            aux = aux + a
        return jax.vmap(self.final_norm)(h), aux

    def logits(self, features: Float[Array, "L dim"]) -> Float[Array, "L out"]:
        """Output head on hidden states (tied embedding or separate matrix)."""
        w = self.embedding if self.head is None else self.head
        return features @ w.T.astype(features.dtype)

    def forward(
        self, tokens: Int[Array, " L"], t: Float[Array, ""] | None = None
    ) -> tuple[Float[Array, "L out"], Float[Array, ""]]:
        """(logits ``[L, out_size]``, auxiliary loss)."""
        h, aux = self.features(tokens, t)
        return self.logits(h), aux

    def __call__(
        self, tokens: Int[Array, " L"], t: Float[Array, ""] | None = None
    ) -> Float[Array, "L out"]:
        """Logits ``[L, out_size]`` for one sequence."""
        return self.forward(tokens, t)[0]
