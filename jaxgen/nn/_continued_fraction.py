"""Continued fractions 1/(a_1 + 1/(a_2 + ... + 1/a_d)) and their numerically safe evaluations.

Notation: continuants of the last ``k`` partial denominators,
``K_0 = 1``, ``K_1 = a_d``, ``K_k = a_{d-k+1} K_{k-1} + K_{k-2}``; then ``f(a) = K_{d-1} / K_d``
and ``df/da_k = (-1)^k (K_{d-k} / K_d)^2`` (CoFrGeNet, Proposition 1). All functions act on the
last axis (depth ``d``) and broadcast over leading axes; depth is static, so loops unroll and XLA
fuses them.

References:
    Dhurandhar et al., "CoFrGeNet: Continued Fraction Architectures for Language Generation",
    arXiv 2601.21766. Puri et al., "CoFrNets", NeurIPS 2021 (capped reciprocal, AIX360).
"""

import functools as ft
import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ..core.checks import check_finite, check_positive, is_traced


def _check_depth(a: Array, name: str) -> int:
    if a.ndim < 1 or a.shape[-1] < 1:
        raise ValueError(f"`{name}` must have a last (depth) axis of size >= 1, got {a.shape}.")
    return a.shape[-1]


def _check_eps(eps: float) -> None:
    """A clamp ``eps`` given as a number: finite and > 0 (raises ``ValueError`` now).

    A traced ``eps`` (a jitted argument) is not checked: the clamps are static hyperparameters.
    """
    if not is_traced(eps):
        check_positive(eps, "eps")


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
    _check_eps(eps)
    return _cf_value(a, eps)


def _capped_reciprocal(v: Array, eps: float) -> Array:
    inside = jnp.abs(v) < eps
    safe = jnp.where(inside, jnp.ones_like(v), v)
    return jnp.where(inside, _signum(v) / eps, 1.0 / safe)


def capped_reciprocal(v: Float[Array, "*shape"], eps: float = 0.1) -> Float[Array, "*shape"]:
    """CoFrNet's capped reciprocal: ``1/v`` if ``|v| >= eps`` else ``sign(v)/eps`` (sign(0) =
    +1).

    Raises:
        ValueError: ``eps`` not a finite float > 0; ``v`` not finite (an ``EquinoxRuntimeError``
            under `jax.jit`): ``1/inf = 0`` would hide the overflow that produced it.
    """
    _check_eps(eps)
    return _capped_reciprocal(check_finite(v, "v"), eps)


def _recip_logexp(v: Array, eps: float) -> Array:
    mag = jnp.abs(v)
    inside = mag < eps
    safe = jnp.where(inside, jnp.full_like(v, eps), mag)  # keep log away from 0 for the gradient
    return _signum(v) * jnp.exp(-jnp.log(safe))


def recip_logexp(v: Float[Array, "*shape"], eps: float = 0.01) -> Float[Array, "*shape"]:
    """Reciprocal through log and exp: ``sign(v) exp(-max(log|v|, log eps))``, sign(0) = +1.

    Equals `capped_reciprocal` with the same ``eps``; the gradient is ``-1/v^2`` outside the clamp
    and exactly 0 inside (no NaN at ``v = 0``).

    Raises:
        ValueError: ``eps`` not a finite float > 0; ``v`` not finite (an ``EquinoxRuntimeError``
            under `jax.jit`).
    """
    _check_eps(eps)
    return _recip_logexp(check_finite(v, "v"), eps)


def cf_bottom_up(a: Float[Array, "*batch d"], eps: float | None = None) -> Float[Array, " *batch"]:
    """Reference bottom-up evaluation ``t_d = a_d``, ``t_k = a_k + 1/t_{k+1}``, ``f = 1/t_1``.

    With ``eps`` every reciprocal is `capped_reciprocal` (CoFrNet/AIX360 semantics); without it
    plain division (poles give inf).

    Raises:
        ValueError: ``a`` not finite (an ``EquinoxRuntimeError`` under `jax.jit`): an infinite
            partial denominator would silently read as ``1/inf = 0``; ``eps`` given and not a
            finite float > 0.
    """
    d = _check_depth(a, "a")
    if eps is not None:
        _check_eps(eps)
    a = check_finite(a, "a")

    def recip(v: Array) -> Array:
        return 1.0 / v if eps is None else _capped_reciprocal(v, eps)

    t = a[..., d - 1]
    for k in range(d - 2, -1, -1):
        t = a[..., k] + recip(t)
    return recip(t)


def _cf_signed_logexp(a: Array, eps: float) -> Array:
    d = a.shape[-1]
    t = a[..., d - 1]
    for k in range(d - 2, -1, -1):
        t = a[..., k] + _recip_logexp(t, eps)
    return _recip_logexp(t, eps)


def cf_signed_logexp(a: Float[Array, "*batch d"], eps: float = 0.01) -> Float[Array, " *batch"]:
    """Variant B: the bottom-up ladder with every division as `recip_logexp` (signed, capped).

    Raises:
        ValueError: ``a`` not finite (an ``EquinoxRuntimeError`` under `jax.jit`); ``eps`` not a
            finite float > 0. The mixers' per-token ladders (`GatedCFMixer`, `CffnMixer`) call
            the same evaluation without the finiteness check (a reduction per token).
    """
    _check_depth(a, "a")
    _check_eps(eps)
    return _cf_signed_logexp(check_finite(a, "a"), eps)


# Positive ladders by scaled linear continuants. With |l_k| <= B every continuant factor is
# 1 + a_k <= 2 e^B, so ``_BLOCK`` levels grow by at most e^{_BLOCK (B + log 2)}: B is chosen so
# that this stays below the dtype's largest finite value, and every ``_BLOCK - 1`` levels past
# the first ``_BLOCK`` the pair (K_{m-1}, K_m) is divided by K_m (the only divisions besides the
# final one; none at depth <= _BLOCK).
_BLOCK = 5


def _log_bound(dtype) -> float:
    """``B`` with ``_BLOCK (B + log 2) = log(finfo.max) - 1`` (float32: 16.85; float64: 141)."""
    top = math.log(float(jnp.finfo(dtype).max)) - 1.0
    return top / _BLOCK - math.log(2.0)


def _norm_points(d: int) -> list[int]:
    """Continuant indices ``m < d`` after which the running pair is renormalised."""
    return list(range(_BLOCK, d, _BLOCK - 1))


def _positive_continuants(a: Array, axis: int) -> tuple[list[Array], list[Array], Array]:
    """Stored continuants ``K_0..K_d`` (each in its block's scale), the reciprocals ``1/K_m`` of
    the normalisation points, and ``f = K_{d-1}/K_d``.
    """
    d = a.shape[axis]
    level = [jax.lax.index_in_dim(a, k, axis, keepdims=False) for k in range(d)]
    norms = set(_norm_points(d))
    prev, cur = jnp.ones_like(level[0]), level[d - 1]
    stored, recips = [prev, cur], []
    for i in range(2, d + 1):
        prev, cur = cur, level[d - i] * cur + prev
        stored.append(cur)
        if i in norms:
            s = 1.0 / cur
            recips.append(s)
            prev, cur = prev * s, jnp.ones_like(cur)
    return stored, recips, prev / cur


def _clipped_exp(log_a: Array) -> Array:
    bound = _log_bound(log_a.dtype)
    return jnp.exp(jnp.clip(log_a, -bound, bound))


@ft.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _cf_positive(log_a: Array, axis: int) -> Array:
    return _positive_continuants(_clipped_exp(log_a), axis)[2]


def _cf_positive_fwd(log_a: Array, axis: int) -> tuple[Array, Array]:
    # The residual is log_a alone: recomputing exp and the continuant multiply-adds in the
    # backward pass is cheaper than storing them (they fuse into the gradient's one loop).
    return _cf_positive(log_a, axis), log_a


def _cf_positive_bwd(axis: int, log_a: Array, g: Array) -> tuple[Array]:
    a = _clipped_exp(log_a)
    bound = _log_bound(log_a.dtype)
    d = a.shape[axis]
    stored, recips, _ = _positive_continuants(a, axis)
    # R_i = K_i / K_d (true ratio): stored_i times its block's factor c; the last block's factor
    # is 1/K_d, an earlier block's is the next one's times 1/K_m (m its normalisation point).
    # R_i <= max(1, f) for every i and a_k R_{d-k} <= 1, so no factor overflows.
    points = _norm_points(d)
    c = 1.0 / stored[d]
    ratio: list[Array | None] = [None] * d
    upper = d
    for m, s in zip(points[::-1], recips[::-1], strict=True):
        for i in range(m + 1, upper):
            ratio[i] = stored[i] * c
        ratio[m] = c  # K_m = 1 in the next block's scale
        c = c * s
        upper = m
    for i in range(0, upper):
        ratio[i] = stored[i] * c
    # df/dl_k = a_k df/da_k = (-1)^k (a_k R_{d-k}) R_{d-k} (CoFrGeNet Proposition 1), k = 1..d;
    # 0 where l_k is clamped.
    outs = []
    for k in range(1, d + 1):
        r = ratio[d - k]
        lk = jax.lax.index_in_dim(log_a, k - 1, axis, keepdims=False)
        ak = jax.lax.index_in_dim(a, k - 1, axis, keepdims=False)
        term = jnp.where(jnp.abs(lk) <= bound, (ak * r) * (r * g), 0.0)
        outs.append(-term if k % 2 else term)
    return (jnp.stack(outs, axis=axis),)


_cf_positive.defvjp(_cf_positive_fwd, _cf_positive_bwd)


def _cf_log_positive_axis(log_a: Array, axis: int) -> Array:
    """`cf_log_positive` over depth axis ``axis`` (the mixers keep depth on axis -2)."""
    return _cf_positive(log_a, axis)


def cf_log_positive(log_a: Float[Array, "*batch d"]) -> Float[Array, " *batch"]:
    """Variant A: positive ladder ``a_k = exp(l_k)``: the log-domain values without their cost.

    Mathematically ``log K_0 = 0``, ``log K_1 = l_d``, ``log K_k = logaddexp(l_{d-k+1} +
    log K_{k-1}, log K_{k-2})``, ``f = exp(log K_{d-1} - log K_d)`` in ``(0, exp(-l_1))``: no
    poles at any depth. Evaluating it through logaddexp costs an exp and a log1p per level, and
    their autodiff as much again (the gated layer trained at 0.6x the direct Cffn). Here instead:

    - **Values** by the linear continuants ``K_k = a_{d-k+1} K_{k-1} + K_{k-2}`` (multiply-adds,
      sums of positives: forward stable) and one division ``K_{d-1}/K_d``. With ``|l_k| <= B``,
      ``B = (log(finfo.max) - 1)/5 - log 2`` (float32 16.85, float64 141), five levels grow by at
      most ``(2 e^B)^5 < finfo.max``; deeper ladders renormalise the running pair by ``K_m``
      every four levels past the fifth (``d <= 5``: no extra division).
    - **Gradients** in closed form (a ``custom_vjp``; CoFrGeNet Proposition 1 times
      ``da_k/dl_k = a_k``): ``df/dl_k = (-1)^k (a_k R_{d-k}) R_{d-k}``, ``R_i = K_i/K_d``
      (carried across renormalisations by the saved ``1/K_m``). Each factor is bounded
      (``a_k R_{d-k} <= 1``, ``R_i <= max(1, f)``), so no inf * 0 where the logaddexp autodiff
      gives inf/NaN (float32, ``|l| ~ 90``). The only residual is ``log_a``; the backward pass
      recomputes exp and the multiply-adds inside its one fused loop.

    ``l_k`` is clamped to ``[-B, B]`` (gradient 0 outside). Inside, values and gradients equal the
    logaddexp form to rounding (tested: float64 values 1e-12 relative, gradients 1e-10 of the
    largest; float32 values 1e-5 relative, gradients 1e-4 of the largest); the closed-form
    gradient is exact to 1e-10 relative even on the tiny deep-level entries where the logaddexp
    autodiff loses all relative accuracy.

    Args:
        log_a: ``l_k = log a_k``, depth on the last axis.

    Returns:
        ``f(exp(l))`` over the leading axes, in ``(0, exp(-l_1))``.

    Raises:
        ValueError: ``log_a`` not finite (an ``EquinoxRuntimeError`` under `jax.jit`): the clamp
            would turn an inf into a plausible value. The mixers' per-token ladders
            (`GatedCFMixer`) call the same evaluation without this check (a reduction per token).
    """
    _check_depth(log_a, "log_a")
    return _cf_log_positive_axis(check_finite(log_a, "log_a"), -1)
