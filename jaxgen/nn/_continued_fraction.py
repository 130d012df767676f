"""Continued fractions 1/(a_1 + 1/(a_2 + ... + 1/a_d)) and their numerically safe evaluations.

Notation (spec ``cofrgenet.md`` section 2): continuants of the last ``k`` partial denominators,
``K_0 = 1``, ``K_1 = a_d``, ``K_k = a_{d-k+1} K_{k-1} + K_{k-2}``; then ``f(a) = K_{d-1} / K_d``
and ``df/da_k = (-1)^k (K_{d-k} / K_d)^2`` (CoFrGeNet, Proposition 1). All functions act on the
last axis (depth ``d``) and broadcast over leading axes; depth is static, so loops unroll and XLA
fuses them.

References:
    Dhurandhar et al., "CoFrGeNet: Continued Fraction Architectures for Language Generation",
    arXiv 2601.21766. Puri et al., "CoFrNets", NeurIPS 2021 (capped reciprocal, AIX360).
"""

import functools as ft

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float


def _check_depth(a: Array, name: str) -> int:
    if a.ndim < 1 or a.shape[-1] < 1:
        raise ValueError(f"`{name}` must have a last (depth) axis of size >= 1, got {a.shape}.")
    return a.shape[-1]


def _signum(v: Array) -> Array:
    """Sign with sign(0) := +1."""
    return jnp.where(v >= 0, jnp.ones_like(v), -jnp.ones_like(v))


def continuants(a: Float[Array, "*batch d"]) -> Float[Array, "*batch d+1"]:
    """Continuants ``K_0..K_d`` of the last ``k`` entries of ``a`` (stacked on the last axis)."""
    d = _check_depth(a, "a")
    ks = [jnp.ones_like(a[..., 0]), a[..., d - 1]]
    for k in range(2, d + 1):
        ks.append(a[..., d - k] * ks[k - 1] + ks[k - 2])
    return jnp.stack(ks, axis=-1)


def _clamp_signed(v: Array, eps: float) -> Array:
    return _signum(v) * jnp.maximum(jnp.abs(v), eps)


@ft.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _cf_value(a: Array, eps: float) -> Array:
    k = continuants(a)
    return k[..., -2] / _clamp_signed(k[..., -1], eps)


def _cf_value_fwd(a: Array, eps: float) -> tuple[Array, tuple[Array, Array]]:
    k = continuants(a)
    kd = _clamp_signed(k[..., -1], eps)
    return k[..., -2] / kd, (k, kd)


def _cf_value_bwd(eps: float, res: tuple[Array, Array], g: Array) -> tuple[Array]:
    k, kd = res
    d = k.shape[-1] - 1
    # df/da_k = (-1)^k (K_{d-k} / K_d)^2, k = 1..d: one reciprocal for the whole gradient.
    inv = 1.0 / kd
    ratios = k[..., d - 1 :: -1] * inv[..., None]  # K_{d-1}, ..., K_0 over K_d
    signs = jnp.broadcast_to(
        jnp.asarray([(-1.0) ** j for j in range(1, d + 1)], dtype=k.dtype), ratios.shape
    )
    return (g[..., None] * signs * ratios**2,)


_cf_value.defvjp(_cf_value_fwd, _cf_value_bwd)


def cf_value(a: Float[Array, "*batch d"], eps: float = 0.01) -> Float[Array, " *batch"]:
    """Continued fraction by direct continuants, ``K_{d-1} / K_d^safe`` (the prior CoFrGeNet path).

    ``K_d^safe = sign(K_d) max(|K_d|, eps)`` (``sign(0) = +1``) caps the pole. The backward pass is
    the closed form of Proposition 1, ``df/da_k = (-1)^k (K_{d-k}/K_d^safe)^2`` (a ``custom_vjp``).
    Continuants grow like a product of the ``a_k``, so deep ladders overflow in low precision
    (``inf/inf = NaN``); see `cf_log_positive`.

    Args:
        a: partial denominators, depth on the last axis.
        eps: pole clamp (> 0).

    Returns:
        ``f(a)`` over the leading axes.
    """
    _check_depth(a, "a")
    if not eps > 0:
        raise ValueError(f"`eps` must be > 0, got {eps!r}.")
    return _cf_value(a, eps)


def capped_reciprocal(v: Float[Array, "*shape"], eps: float = 0.1) -> Float[Array, "*shape"]:
    """CoFrNet's capped reciprocal: ``1/v`` if ``|v| >= eps`` else ``sign(v)/eps`` (sign(0) =
    +1).
    """
    inside = jnp.abs(v) < eps
    safe = jnp.where(inside, jnp.ones_like(v), v)
    return jnp.where(inside, _signum(v) / eps, 1.0 / safe)


def recip_logexp(v: Float[Array, "*shape"], eps: float = 0.01) -> Float[Array, "*shape"]:
    """Reciprocal through log and exp: ``sign(v) exp(-max(log|v|, log eps))``, sign(0) = +1.

    Equals `capped_reciprocal` with the same ``eps``; the gradient is ``-1/v^2`` outside the clamp
    and exactly 0 inside (no NaN at ``v = 0``).
    """
    mag = jnp.abs(v)
    inside = mag < eps
    safe = jnp.where(inside, jnp.full_like(v, eps), mag)  # keep log away from 0 for the gradient
    return _signum(v) * jnp.exp(-jnp.log(safe))


def cf_bottom_up(a: Float[Array, "*batch d"], eps: float | None = None) -> Float[Array, " *batch"]:
    """Reference bottom-up evaluation ``t_d = a_d``, ``t_k = a_k + 1/t_{k+1}``, ``f = 1/t_1``.

    With ``eps`` every reciprocal is `capped_reciprocal` (CoFrNet/AIX360 semantics); without it
    plain division (poles give inf).
    """
    d = _check_depth(a, "a")

    def recip(v: Array) -> Array:
        return 1.0 / v if eps is None else capped_reciprocal(v, eps)

    t = a[..., d - 1]
    for k in range(d - 2, -1, -1):
        t = a[..., k] + recip(t)
    return recip(t)


def cf_signed_logexp(a: Float[Array, "*batch d"], eps: float = 0.01) -> Float[Array, " *batch"]:
    """Variant B: the bottom-up ladder with every division as `recip_logexp` (signed, capped)."""
    d = _check_depth(a, "a")
    if not eps > 0:
        raise ValueError(f"`eps` must be > 0, got {eps!r}.")
    t = a[..., d - 1]
    for k in range(d - 2, -1, -1):
        t = a[..., k] + recip_logexp(t, eps)
    return recip_logexp(t, eps)


def cf_log_positive(log_a: Float[Array, "*batch d"]) -> Float[Array, " *batch"]:
    """Variant A: positive ladder ``a_k = exp(l_k)`` evaluated entirely in the log domain.

    ``log K_0 = 0``, ``log K_1 = l_d``, ``log K_k = logaddexp(l_{d-k+1} + log K_{k-1},
    log K_{k-2})``, ``f = exp(log K_{d-1} - log K_d)`` in ``(0, exp(-l_1))``. No poles and no
    overflow at any depth; plain autodiff is stable.
    """
    d = _check_depth(log_a, "log_a")
    prev2 = jnp.zeros_like(log_a[..., 0])
    prev1 = log_a[..., d - 1]
    if d == 1:
        return jnp.exp(prev2 - prev1)
    for k in range(2, d + 1):
        prev2, prev1 = prev1, jnp.logaddexp(log_a[..., d - k] + prev1, prev2)
    return jnp.exp(prev2 - prev1)
