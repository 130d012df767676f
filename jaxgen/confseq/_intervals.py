"""1-D confidence sets from a wealth function: exact mode (convex wealth) and grid mode.

Exact mode needs a log-wealth ``f(m)`` that is unimodal on [0, 1] (true for the hedged wealth with
m-independent bets, which is convex in m). Grid mode works for any bets (``confseq`` convention).

References:
    Waudby-Smith, Ramdas. Estimating means of bounded random variables by betting. JRSSB 2024.
"""

import math
from collections.abc import Callable

import jax
import jax.lax as lax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from ..core.checks import check_finite, check_in_interval
from ._checks import check_unit

_INVPHI = (math.sqrt(5.0) - 1.0) / 2.0
GOLDEN_STEPS = 60  # 0.618^60 ~ 3e-13 <= the 1e-12 target tolerance
BISECT_STEPS = 60

LogWealthFn = Callable[[Float[Array, ""]], Float[Array, ""]]


def golden_min(
    f: LogWealthFn, lo: Float[Array, ""], hi: Float[Array, ""], num_steps: int = GOLDEN_STEPS
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Golden-section search for the minimiser of a unimodal ``f`` on [lo, hi].

    Returns:
        ``(a, b)``: the final bracket, which always contains the minimiser.
    """
    x1 = hi - _INVPHI * (hi - lo)
    x2 = lo + _INVPHI * (hi - lo)

    def body(_, st):
        a, b, x1, x2, f1, f2 = st
        left = f1 < f2  # the minimiser lies in [a, x2]
        a_n = jnp.where(left, a, x1)
        b_n = jnp.where(left, x2, b)
        new = jnp.where(left, b_n - _INVPHI * (b_n - a_n), a_n + _INVPHI * (b_n - a_n))
        fn = f(new)
        x1_n = jnp.where(left, new, x2)
        x2_n = jnp.where(left, x1, new)
        f1_n = jnp.where(left, fn, f2)
        f2_n = jnp.where(left, f1, fn)
        return a_n, b_n, x1_n, x2_n, f1_n, f2_n

    st = (lo, hi, x1, x2, f(x1), f(x2))
    a, b, *_ = lax.fori_loop(0, num_steps, body, st)
    return a, b


def wealth_min_lower_bound(f: LogWealthFn, dtype) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """A certified lower bound on ``log min_m K(m)`` over [0, 1] and the (approximate) argmin.

    Golden section brackets the minimiser m* in [a, b]; with c = (a+b)/2 and K convex,
    K(m*) >= K(c) - |K'(c)| (b - a), i.e. log Kmin >= f(c) + log(1 - |f'(c)| (b - a)). A plain
    minimum of evaluated values would OVERestimate Kmin and make the box too small (unsafe).
    """
    zero, one = jnp.zeros((), dtype), jnp.ones((), dtype)
    a, b = golden_min(f, zero, one)
    c = 0.5 * (a + b)
    fc, dfc = jax.value_and_grad(f)(c)
    slack = jnp.minimum(jnp.abs(dfc) * (b - a), 0.5)
    return fc + jnp.log1p(-slack), c


def _bisect(f: LogWealthFn, inside, outside, level, num_steps: int = BISECT_STEPS):
    """Bisection keeping f(inside) < level <= f(outside); returns the outside end (conservative)."""

    def body(_, st):
        i, o = st
        mid = 0.5 * (i + o)
        ok = f(mid) < level
        return jnp.where(ok, mid, i), jnp.where(ok, o, mid)

    _, o = lax.fori_loop(0, num_steps, body, (inside, outside))
    return o


def cs_exact(
    f: LogWealthFn, level: Float[Array, ""], center: Float[Array, ""]
) -> tuple[Float[Array, ""], Float[Array, ""], Bool[Array, ""]]:
    """{m in [0, 1] : f(m) < level} for a unimodal ``f`` minimised at ``center``.

    Bisection on [0, center] and [center, 1] (60 steps each); endpoints are rounded outwards, so
    the returned interval contains the exact set. If f(0) < level then lower = 0 (same at 1).

    Returns:
        ``(lower, upper, empty)``; when empty, lower = upper = center.

    ``level`` must be finite and ``center`` lie in [0, 1] (value checks).
    """
    level = check_finite(level, "level")
    center = check_unit(center, "center")
    return _cs_exact(f, level, center)


def _cs_exact(f: LogWealthFn, level: Array, center: Array) -> tuple[Array, Array, Array]:
    # The body of `cs_exact` without its checks (one call per coordinate in the regions).
    zero, one = jnp.zeros_like(center), jnp.ones_like(center)
    empty = ~(f(center) < level)
    lo = jnp.where(f(zero) < level, zero, _bisect(f, center, zero, level))
    hi = jnp.where(f(one) < level, one, _bisect(f, center, one, level))
    return jnp.where(empty, center, lo), jnp.where(empty, center, hi), empty


def cs_grid(
    log_wealth_on_grid: Float[Array, " B"], grid: Float[Array, " B"], level: Float[Array, ""]
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Grid-mode CS (``confseq`` convention): accepted points widened by one grid step.

    Accept grid points with log-wealth < level; return [smallest - step, largest + step] clipped
    to [0, 1]; if no point is accepted, return [0, 1] (conservative).

    Args:
        log_wealth_on_grid: log-wealth at each grid point, shape ``(B,)``; ``-inf`` (zero
            wealth) is allowed, NaN and ``+inf`` are refused.
        grid: equally spaced candidate means in [0, 1], shape ``(B,)`` with ``B >= 2``.
        level: the threshold ``log(1 / alpha)`` (finite).
    """
    log_wealth_on_grid, grid = jnp.asarray(log_wealth_on_grid), jnp.asarray(grid)
    if grid.ndim != 1 or grid.shape[0] < 2:
        raise ValueError(f"`grid` must have shape (B,) with B >= 2, got {grid.shape}.")
    if log_wealth_on_grid.shape != grid.shape:
        raise ValueError(
            f"`log_wealth_on_grid` must have the shape of `grid` {grid.shape}, "
            f"got {log_wealth_on_grid.shape}."
        )
    grid = check_unit(grid, "grid")
    level = check_finite(level, "level")
    log_wealth_on_grid = check_in_interval(
        log_wealth_on_grid, "log_wealth_on_grid", -math.inf, math.inf, closed=(True, False)
    )
    return _cs_grid(log_wealth_on_grid, grid, level)


def _cs_grid(log_wealth_on_grid: Array, grid: Array, level: Array) -> tuple[Array, Array]:
    # The body of `cs_grid` without its checks (one call per coordinate in the regions).
    lo, hi = cs_grid_path(log_wealth_on_grid[:, None], grid, level)
    return lo[0], hi[0]


def cs_grid_path(
    log_wealth: Float[Array, "B T"], grid: Float[Array, " B"], level: Float[Array, ""]
) -> tuple[Float[Array, " T"], Float[Array, " T"]]:
    """``cs_grid`` applied at every time of cumulative log-wealth paths on the grid."""
    n = grid.shape[0]
    step = grid[1] - grid[0]
    acc = log_wealth < level
    first = jnp.argmax(acc, axis=0)
    last = n - 1 - jnp.argmax(acc[::-1], axis=0)
    anyacc = jnp.any(acc, axis=0)
    lo = jnp.where(anyacc, jnp.clip(grid[first] - step, 0, 1), 0.0)
    hi = jnp.where(anyacc, jnp.clip(grid[last] + step, 0, 1), 1.0)
    return lo.astype(grid.dtype), hi.astype(grid.dtype)
