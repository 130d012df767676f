"""Shared transformer layers: RMSNorm, rotary embeddings, multi-head attention, time embeddings.

Every layer acts on ONE sequence (``[L, dim]``) or one vector; vmap for batches.
"""

import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, PRNGKeyArray, Real

from ..core.checks import check_positive, check_positive_int

#: Optional low-rank hook of a linear map: ``adapter(name, x) -> delta`` with ``x`` the map's
#: input ``(L, d_in)`` and ``delta`` ``(L, d_out)`` added to ``x @ W^T``. ``name`` is the weight's
#: path inside its block (``"attn.w_qkv"``, ``"mixer.w_gate"``, ...). ``None``: no adapter, the
#: graph is exactly the plain one.
LinearAdapter = Callable[[str, Float[Array, "L d_in"]], Float[Array, "L d_out"]]


def adapted_linear(
    x: Float[Array, "L d_in"],
    w: Float[Array, "d_out d_in"],
    name: str,
    adapter: LinearAdapter | None,
) -> Float[Array, "L d_out"]:
    """``x W^T``, plus ``adapter(name, x)`` when an adapter is given (e.g. LoRA experts)."""
    y = x @ w.T.astype(x.dtype)
    return y if adapter is None else y + adapter(name, x)


def init_normal(
    key: PRNGKeyArray, shape: tuple[int, ...], std: float = 0.02, dtype: jnp.dtype | None = None
) -> Array:
    """``N(0, std^2)`` weights in the default float dtype (or ``dtype``)."""
    return std * jr.normal(key, shape, dtype=dtype or jnp.zeros(()).dtype)


class RMSNorm(eqx.Module):
    """``y = x / sqrt(mean(x^2) + eps) * weight`` (Zhang and Sennrich 2019)."""

    weight: Float[Array, " dim"]
    eps: float = eqx.field(static=True)

    def __init__(self, dim: int, eps: float = 1e-6, *, dtype: jnp.dtype | None = None):
        dim = check_positive_int(dim, "dim")
        check_positive(eps, "eps")  # a static float: raises now
        self.weight = jnp.ones((dim,), dtype=dtype or jnp.zeros(()).dtype)
        self.eps = eps

    def __call__(self, x: Float[Array, " dim"]) -> Float[Array, " dim"]:
        """Normalise one vector."""
        if x.shape != self.weight.shape:
            raise ValueError(f"RMSNorm expects shape {self.weight.shape}, got {x.shape}.")
        w = self.weight.astype(x.dtype)
        return x * jax.lax.rsqrt(jnp.mean(x * x) + jnp.asarray(self.eps, x.dtype)) * w


def apply_rotary(
    x: Float[Array, "L H hd"], positions: Real[Array, " L"], base: float = 10000.0
) -> Float[Array, "L H hd"]:
    """Rotary position embedding (RoFormer, arXiv 2104.09864) on pairs of channels.

    Channel pair ``(2i, 2i+1)`` at position ``m`` is rotated by ``m * base^(-2i/hd)``.
    """
    hd = x.shape[-1]
    if hd % 2:
        raise ValueError(f"rotary embeddings need an even head dimension, got {hd}.")
    base = check_positive(base, "base").astype(x.dtype)  # a number: checked at trace time
    freqs = base ** (-jnp.arange(0, hd, 2, dtype=x.dtype) / hd)
    angles = positions.astype(x.dtype)[:, None] * freqs[None, :]  # (L, hd/2)
    cos, sin = jnp.cos(angles)[:, None, :], jnp.sin(angles)[:, None, :]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = jnp.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    return out.reshape(x.shape)


class MultiHeadAttention(eqx.Module):
    """Multi-head self-attention on one sequence, causal or bidirectional, optional rotary."""

    w_qkv: Float[Array, "dim3 dim"]
    w_out: Float[Array, "dim dim"]
    num_heads: int = eqx.field(static=True)
    rotary: bool = eqx.field(static=True)

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        rotary: bool = True,
        key: PRNGKeyArray,
        out_std: float = 0.02,
    ):
        dim = check_positive_int(dim, "dim")
        num_heads = check_positive_int(num_heads, "num_heads")
        if dim % num_heads:
            raise ValueError(f"`dim` ({dim}) must be divisible by `num_heads` ({num_heads}).")
        k1, k2 = jr.split(key)
        self.w_qkv = init_normal(k1, (3 * dim, dim))
        self.w_out = init_normal(k2, (dim, dim), out_std)
        self.num_heads = num_heads
        self.rotary = rotary

    def __call__(
        self,
        x: Float[Array, "L dim"],
        *,
        causal: bool,
        mask: Bool[Array, " L"] | None = None,
        adapter: LinearAdapter | None = None,
    ) -> Float[Array, "L dim"]:
        """Attend over the sequence ``x``.

        Args:
            x: one sequence, shape ``(L, dim)``.
            causal: position i sees only positions j <= i.
            mask: optional key mask, shape ``(L,)``: position j serves as a key/value only where
                ``mask[j]`` is True (padding = False). Every query keeps its row; a query with no
                allowed key gets a uniform average instead of NaN. ``None``: no masking (the
                graph is exactly the unmasked one).
            adapter: optional additive term of the input projection, called as
                ``adapter("attn.w_qkv", x)`` (see `LinearAdapter`); ``None``: the plain graph.

        Returns:
            The attention update, shape ``(L, dim)`` (no residual).
        """
        seq, dim = x.shape
        if mask is not None and mask.shape != (seq,):
            raise ValueError(f"`mask` must have shape ({seq},) (one per key), got {mask.shape}.")
        hd = dim // self.num_heads
        qkv = adapted_linear(x, self.w_qkv, "attn.w_qkv", adapter)
        q, k, v = (
            qkv[:, i * dim : (i + 1) * dim].reshape(seq, self.num_heads, hd) for i in range(3)
        )
        if self.rotary:
            pos = jnp.arange(seq)
            q, k = apply_rotary(q, pos), apply_rotary(k, pos)
        scores = jnp.einsum("qhd,khd->hqk", q, k) / jnp.asarray(math.sqrt(hd), x.dtype)
        allowed = None
        if causal:
            allowed = jnp.tril(jnp.ones((seq, seq), dtype=bool))
        if mask is not None:
            keys = jnp.broadcast_to(mask.astype(bool)[None, :], (seq, seq))
            allowed = keys if allowed is None else allowed & keys
        if allowed is not None:
            scores = jnp.where(allowed[None], scores, jnp.finfo(x.dtype).min)
        weights = jax.nn.softmax(scores, axis=-1)
        out = jnp.einsum("hqk,khd->qhd", weights, v).reshape(seq, dim)
        return out @ self.w_out.T.astype(x.dtype)


def sinusoidal_embedding(
    t: Float[Array, ""], dim: int, max_period: float = 10000.0
) -> Float[Array, " dim"]:
    """``[cos(t w_i), sin(t w_i)]`` with ``w_i = max_period^(-i/(dim/2))`` (Vaswani et al. 2017).

    ``t`` is used as given (scale diffusion times in [0, 1] by e.g. 1000 for more resolution).
    """
    if dim % 2:
        raise ValueError(f"`dim` must be even, got {dim}.")
    t = jnp.asarray(t)
    if t.ndim != 0:
        raise ValueError(f"`t` must be a scalar, got shape {t.shape}.")
    dtype = t.dtype if jnp.issubdtype(t.dtype, jnp.floating) else jnp.zeros(()).dtype
    max_period = check_positive(max_period, "max_period").astype(dtype)
    freqs = max_period ** (-jnp.arange(dim // 2, dtype=dtype) / (dim // 2))
    angles = t.astype(dtype) * freqs
    return jnp.concatenate([jnp.cos(angles), jnp.sin(angles)])


class TimeEmbedding(eqx.Module):
    """``t -> MLP(sinusoidal(scale * t))`` in R^dim (SiLU, one hidden layer of width dim)."""

    mlp: eqx.nn.MLP
    dim: int = eqx.field(static=True)
    scale: float = eqx.field(static=True)

    def __init__(self, dim: int, *, scale: float = 1000.0, key: PRNGKeyArray):
        dim = check_positive_int(dim, "dim")
        check_positive(scale, "scale")  # a static float: raises now
        self.mlp = eqx.nn.MLP(dim, dim, dim, 1, activation=jax.nn.silu, key=key)
        self.dim = dim
        self.scale = scale

    def __call__(self, t: Float[Array, ""]) -> Float[Array, " dim"]:
        """Embed one scalar time."""
        return self.mlp(sinusoidal_embedding(jnp.asarray(t) * self.scale, self.dim))
