"""The 1-D betting confidence sequence ``betting_cs``."""

import functools as ft

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ._betting import _check_bet, _plugin_stats, _prpl_bets, hedged_log_wealth_at
from ._checks import check_alpha, check_x
from ._intervals import cs_exact, wealth_min_lower_bound


@ft.partial(jax.jit, static_argnames=("bet", "grid_size", "compat"))
def _grid_cs(x, alpha, bet: str, grid_size: int, compat: bool):
    """Grid-mode CS path as one ``lax.scan`` over t carrying the wealth on the grid.

    The wealth is carried in linear space: only the comparison K_t(m) < 1/alpha is needed, and a
    factor that overflows to +inf (or underflows to 0) gives the same verdict as the exact value,
    because every factor is positive (no inf * 0). This keeps the (B+1)-vector in cache and avoids
    a (B+1, T) matrix of logarithms, which is what makes the path cheap.
    """
    grid = jnp.arange(grid_size + 1, dtype=x.dtype) / grid_size
    step_size = grid[1] - grid[0]
    level = 1 / alpha
    mu_prev, sigma2_prev = _plugin_stats(x)
    # m-independent PrPl bets (T,); the compat mode truncates them per grid point inside the
    # step (0.5/m, 0.5/(1-m)) instead of materialising two (T, B+1) bet matrices (3x faster).
    lam = _prpl_bets(x, alpha, c=jnp.inf if compat else 0.5)
    cap_p, cap_m = 0.5 / grid, 0.5 / (1 - grid)
    ons_step = 2.0 / (2.0 - jnp.log(3.0))

    def step(carry, xs):
        t, xt = xs
        g = xt - grid
        if bet == "hedged":
            kp, km = carry
            lam_p = jnp.minimum(lam[t], cap_p) if compat else lam[t]
            lam_m = jnp.minimum(lam[t], cap_m) if compat else lam[t]
            kp = kp * (1 + lam_p * g)
            km = km * (1 - lam_m * g)
            carry = (kp, km)
            wealth = jnp.maximum(kp, km) / 2 if compat else (kp + km) / 2
        elif bet == "agrapa":
            (k,) = carry
            diff = mu_prev[t] - grid
            lam_t = jnp.clip(diff / (sigma2_prev[t] + diff**2), -0.5 / (1 - grid), 0.5 / grid)
            k = k * (1 + lam_t * g)
            carry = (k,)
            wealth = k
        else:  # ons
            k, v, a = carry
            k = k * (1 + v * g)
            z = -g / (1 + v * g)
            a = a + z * z
            v = jnp.clip(v - ons_step * z / a, -0.5, 0.5)
            carry = (k, v, a)
            wealth = k
        acc = wealth < level
        lo = jnp.min(jnp.where(acc, grid, jnp.inf))
        hi = jnp.max(jnp.where(acc, grid, -jnp.inf))
        none = ~jnp.any(acc)
        lo = jnp.where(none, 0.0, jnp.clip(lo - step_size, 0.0, 1.0))
        hi = jnp.where(none, 1.0, jnp.clip(hi + step_size, 0.0, 1.0))
        return carry, (lo, hi)

    ones = jnp.ones_like(grid)
    if bet == "hedged":
        init = (ones, ones)
    elif bet == "agrapa":
        init = (ones,)
    else:
        init = (ones, jnp.zeros_like(grid), ones)
    _, (lo, hi) = jax.lax.scan(step, init, (jnp.arange(x.shape[0]), x))
    return lo.astype(x.dtype), hi.astype(x.dtype)


@jax.jit
def _exact_cs(x, alpha):
    lam = _prpl_bets(x, alpha)
    level = -jnp.log(alpha)
    steps = jnp.arange(x.shape[0])

    def at_time(t):
        mask = steps <= t
        f = lambda m: hedged_log_wealth_at(x, lam, m, mask)  # noqa: E731
        _, c = wealth_min_lower_bound(f, x.dtype)
        lo, hi, _ = cs_exact(f, level, c)
        return lo, hi

    return jax.lax.map(at_time, steps)


def betting_cs(
    x: Float[Array, " T"],
    alpha: float = 0.05,
    *,
    bet: str = "hedged",
    grid_size: int | None = 1000,
    running_intersection: bool = False,
    confseq_compat: bool = False,
) -> tuple[Float[Array, " T"], Float[Array, " T"]]:
    """Time-uniform 1-D betting confidence sequence for the mean of x in [0, 1].

    C_t = {m : K_t(m) < 1/alpha}, with K_t(m) = prod_{s<=t}(1 + lambda_s (x_s - m)) a nonnegative
    martingale at m = mu (Ville's inequality gives P(exists t: mu not in C_t) <= alpha).

    Args:
        x: observations in [0, 1], shape ``(T,)``.
        alpha: level in (0, 1).
        bet: ``"hedged"`` (PrPl bets truncated at 1/2, wealth (K^+ + K^-)/2, convex in m),
            ``"agrapa"`` or ``"ons"`` (m-dependent bets).
        grid_size: B, the grid m_i = i/B of grid mode (``confseq`` convention: accepted points
            widened by one step, [0, 1] when none is accepted). ``None`` selects exact mode
            (golden section + bisection; ``bet="hedged"`` only; O(T^2)).
        running_intersection: intersect C_1..C_t (still a valid CS). Off by default.
        confseq_compat: reproduce ``confseq.betting.hedged_cs`` (m-dependent truncation 0.5/m and
            0.5/(1-m), max of the two processes). Grid mode and ``bet="hedged"`` only.

    Returns:
        ``(lower, upper)``, each ``(T,)``.

    References:
        Waudby-Smith, Ramdas. Estimating means of bounded random variables by betting. JRSSB 2024.
    """
    _check_bet(bet)
    x = check_x(x, ndim=1)
    alpha = jnp.asarray(check_alpha(alpha), x.dtype)
    if confseq_compat and (bet != "hedged" or grid_size is None):
        raise ValueError(
            "confseq_compat=True needs bet='hedged' and a grid_size, "
            f"got bet={bet!r}, grid_size={grid_size!r}."
        )
    if grid_size is None:
        if bet != "hedged":
            raise ValueError(
                f"exact mode (grid_size=None) needs m-independent bets (bet='hedged'), got {bet!r}."
            )
        lo, hi = _exact_cs(x, alpha)
    else:
        if not isinstance(grid_size, int) or grid_size < 2:
            raise ValueError(f"grid_size must be an int >= 2 or None, got {grid_size!r}.")
        lo, hi = _grid_cs(x, alpha, bet, grid_size, confseq_compat)
    if running_intersection:
        lo, hi = jax.lax.cummax(lo), jax.lax.cummin(hi)
    return lo, hi
