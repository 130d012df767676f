"""Input checks shared by the confidence-sequence functions.

Concrete inputs are checked in Python (``ValueError`` naming the argument, expected vs got); traced
inputs are checked with ``eqx.error_if`` so a jitted call still refuses a silently wrong set.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array


def _concrete(a) -> bool:
    return not isinstance(a, jax.core.Tracer)


def _as_float(a, name: str) -> Array:
    a = jnp.asarray(a)
    if not jnp.issubdtype(a.dtype, jnp.floating):
        if jnp.issubdtype(a.dtype, jnp.integer) or a.dtype == jnp.bool_:
            a = a.astype(jnp.result_type(float))
        else:
            raise TypeError(f"{name} must be a real array, got dtype {a.dtype}.")
    return a


def check_unit(a, name: str) -> Array:
    """``a`` must be finite and inside [0, 1] (elementwise)."""
    bad_msg = f"{name} must lie in [0, 1] and contain no NaN (rescale to [0, 1] first)."
    if _concrete(a):
        arr = np.asarray(a)
        if arr.size and (np.isnan(arr).any() or arr.min() < 0 or arr.max() > 1):
            lo, hi = np.nanmin(arr), np.nanmax(arr)
            raise ValueError(f"{bad_msg} Got range [{lo}, {hi}], NaN: {bool(np.isnan(arr).any())}.")
        return _as_float(a, name)  # checked above: no eager error_if dispatch on the hot path
    a = _as_float(a, name)
    return eqx.error_if(a, jnp.any(~((a >= 0) & (a <= 1))), bad_msg)


def check_x(x, ndim: int = 2) -> Array:
    """Observations: shape ``(T, d)`` (or ``(T,)`` with ``ndim=1``), values in [0, 1], no NaN."""
    x = _as_float(x, "x")
    if x.ndim != ndim or x.shape[0] < 1:
        want = "(T, d)" if ndim == 2 else "(T,)"
        raise ValueError(f"x must have shape {want} with T >= 1, got shape {x.shape}.")
    return check_unit(x, "x")


def check_m(m, x: Array) -> Array:
    """Candidate mean: shape ``(d,)`` matching ``x``, values in [0, 1]."""
    m = _as_float(m, "m")
    if m.shape != (x.shape[1],):
        raise ValueError(f"m must have shape (d,) = ({x.shape[1]},) to match x, got {m.shape}.")
    return check_unit(m, "m").astype(x.dtype)


def check_alpha(alpha):
    """Level strictly inside (0, 1)."""
    msg = "alpha must lie strictly inside (0, 1)"
    if _concrete(alpha):
        a = float(np.asarray(alpha))
        if not (0.0 < a < 1.0):
            raise ValueError(f"{msg}, got {a}.")
        return a
    return eqx.error_if(alpha, ~((alpha > 0) & (alpha < 1)), msg + ".")


def check_weights(weights, d: int, dtype) -> Array:
    """Simplex weights of shape ``(d,)``; ``None`` means 1/d."""
    if weights is None:
        return jnp.full((d,), 1.0 / d, dtype)
    w = _as_float(weights, "weights")
    if w.shape != (d,):
        raise ValueError(f"weights must have shape (d,) = ({d},), got {w.shape}.")
    msg = "weights must be nonnegative and sum to 1"
    if _concrete(w):
        arr = np.asarray(w, dtype=np.float64)
        if (arr < 0).any() or abs(arr.sum() - 1) > 1e-8 or not np.isfinite(arr).all():
            raise ValueError(f"{msg}, got {arr.tolist()} (sum {arr.sum()}).")
    bad = jnp.any(w < 0) | (jnp.abs(jnp.sum(w) - 1) > 1e-8)
    w = eqx.error_if(w, bad, msg + ".")
    return w.astype(dtype)
