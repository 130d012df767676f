"""One-dimensional betting wealth processes with predictable bets (pure, jit/vmap-able).

Everything acts on ONE coordinate: ``x`` of shape ``(T,)`` in [0, 1]; vmap for coordinates.
All wealth is computed in log space, ``log K_t(m) = sum_{s<=t} log1p(lambda_s (x_s - m))``.

References:
    Waudby-Smith, Ramdas. Estimating means of bounded random variables by betting. JRSSB 2024.
    arXiv 2010.09686.
    Cutkosky, Orabona. Black-box reductions for parameter-free online learning in Banach spaces.
    COLT 2018. arXiv 1802.06293.
"""

import functools
import math

import jax
import jax.lax as lax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from ..core.checks import check_in_interval
from ._checks import check_unit, check_x

BETS = ("hedged", "agrapa", "ons")
# The ONS step constant 2 / (2 - log 3) of Cutkosky & Orabona (2018).
_ONS_STEP = 2.0 / (2.0 - math.log(3.0))


def plugin_stats(x: Float[Array, " T"]) -> tuple[Float[Array, " T"], Float[Array, " T"]]:
    """Predictable plug-in mean and variance: entry ``s-1`` holds the statistics used at step s.

    mu_hat_t = (1/2 + sum_{i<=t} x_i)/(t+1), sigma2_hat_t = (1/4 + sum_{i<=t}(x_i -
    mu_hat_i)^2)/(t+1),
    mu_hat_0 = 1/2, sigma2_hat_0 = 1/4 (one pseudo-observation, as in WSR and ``confseq``).

    Returns:
        ``(mu_prev, sigma2_prev)``, each ``(T,)``: ``mu_hat_{s-1}`` and ``sigma2_hat_{s-1}`` for
        s = 1..T.
    """
    return _plugin_stats(check_x(x, ndim=1))


def _plugin_stats(x: Array) -> tuple[Array, Array]:
    # The body of `plugin_stats` without its checks (called inside the bisections).
    n = jnp.arange(1, x.shape[0] + 1, dtype=x.dtype)
    mu = (0.5 + jnp.cumsum(x)) / (n + 1)
    sigma2 = (0.25 + jnp.cumsum((x - mu) ** 2)) / (n + 1)
    half = jnp.full((1,), 0.5, x.dtype)
    mu_prev = jnp.concatenate([half, mu[:-1]])
    sigma2_prev = jnp.concatenate([half * half, sigma2[:-1]])
    return mu_prev, sigma2_prev


def prpl_bets(
    x: Float[Array, " T"], alpha_b: Float[Array, ""] | float, c: float = 0.5
) -> Float[Array, " T"]:
    """Predictable plug-in (PrPl) bets, truncated at ``c``; independent of the candidate mean.

    lambda_s = min( sqrt(2 log(2/alpha_b) / (sigma2_hat_{s-1} s log(1+s))), c ).

    With ``c < 1`` every factor ``1 +- lambda_s (x_s - m) >= 1 - c > 0`` for all m in [0, 1], so the
    hedged wealth built on these bets is convex in m (the exact mode of the 1-D CS computation).

    References:
        Waudby-Smith, Ramdas (2024), section 4 (PrPl-EB bets).
    """
    x = check_x(x, ndim=1)
    alpha_b = check_in_interval(alpha_b, "alpha_b", 0.0, 1.0, closed=(False, False))
    return _prpl_bets(x, alpha_b, c)


def _prpl_bets(x: Array, alpha_b: Array | float, c: float = 0.5) -> Array:
    # The body of `prpl_bets` without its checks.
    _, sigma2_prev = _plugin_stats(x)
    s = jnp.arange(1, x.shape[0] + 1, dtype=x.dtype)
    lam = jnp.sqrt(2 * jnp.log(2 / alpha_b) / (sigma2_prev * s * jnp.log1p(s)))
    return jnp.minimum(lam, c)


def agrapa_bets(
    x: Float[Array, " T"], m: Float[Array, " M"], c: float = 0.5
) -> Float[Array, "M T"]:
    """AGRAPA bets lambda_s(m) = (mu_hat_{s-1} - m)/(sigma2_hat_{s-1} + (mu_hat_{s-1} - m)^2).

    Clipped to [-c/(1-m), c/m], so every factor is >= 1 - c. The bet depends on m: use grid mode.

    References:
        Waudby-Smith, Ramdas (2024), section 5.1 (approximate GRAPA).
    """
    return _agrapa_bets(check_x(x, ndim=1), check_unit(m, "m"), c)


def _agrapa_bets(x: Array, m: Array, c: float = 0.5) -> Array:
    # The body of `agrapa_bets` without its checks (called at every bisection step).
    mu_prev, sigma2_prev = _plugin_stats(x)
    diff = mu_prev[None, :] - m[:, None]
    lam = diff / (sigma2_prev[None, :] + diff**2)
    lo = -c / (1 - m[:, None])
    hi = c / m[:, None]
    return jnp.clip(lam, lo, hi)


def ons_bets(x: Float[Array, " T"], m: Float[Array, " M"]) -> Float[Array, "M T"]:
    """Online-Newton-step bets in [-1/2, 1/2] on the payoff g_s = x_s - m (a ``lax.scan`` over T).

    z_s = -g_s/(1 + v_s g_s), A_s = 1 + sum_{i<=s} z_i^2,
    v_{s+1} = clip(v_s - 2/(2 - log 3) z_s/A_s, -1/2, 1/2), v_1 = 0.

    References:
        Cutkosky, Orabona (2018), Algorithm 1 (ONS betting).
    """
    return _ons_bets(check_x(x, ndim=1), check_unit(m, "m"))


def _ons_bets(x: Array, m: Array) -> Array:
    # The body of `ons_bets` without its checks (called at every bisection step).
    def step(carry, xs):
        v, a = carry
        g = xs - m
        z = -g / (1 + v * g)
        a = a + z * z
        v_next = jnp.clip(v - _ONS_STEP * z / a, -0.5, 0.5)
        return (v_next, a), v

    init = (jnp.zeros_like(m), jnp.ones_like(m))
    _, vs = lax.scan(step, init, x)
    return vs.T


def _masked_log1p(prod: Float[Array, "*s T"], mask: Bool[Array, " T"] | None) -> Array:
    terms = jnp.log1p(prod)
    return terms if mask is None else jnp.where(mask, terms, 0.0)


def hedged_log_wealth_at(
    x: Float[Array, " T"],
    lam: Float[Array, " T"],
    m: Float[Array, ""],
    mask: Bool[Array, " T"] | None = None,
    theta: float = 0.5,
) -> Float[Array, ""]:
    """log(theta K^+_t(m) + (1 - theta) K^-_t(m)) at the final (or masked) time, one m."""
    lp = jnp.sum(_masked_log1p(lam * (x - m), mask))
    lm = jnp.sum(_masked_log1p(-lam * (x - m), mask))
    return jnp.logaddexp(math.log(theta) + lp, math.log1p(-theta) + lm)


def hedged_log_wealth_path(
    x: Float[Array, " T"], lam: Float[Array, " T"], m: Float[Array, " M"], theta: float = 0.5
) -> Float[Array, "M T"]:
    """Cumulative hedged log-wealth paths on candidate means ``m``."""
    g = x[None, :] - m[:, None]
    lp = jnp.cumsum(jnp.log1p(lam[None, :] * g), axis=1)
    lm = jnp.cumsum(jnp.log1p(-lam[None, :] * g), axis=1)
    return jnp.logaddexp(math.log(theta) + lp, math.log1p(-theta) + lm)


def compat_log_wealth_path(
    x: Float[Array, " T"], alpha: Float[Array, ""] | float, m: Float[Array, " M"]
) -> Float[Array, "M T"]:
    """``confseq.betting.hedged_cs`` conventions: m-dependent truncation, max-combination.

    lambda^+ = min(lambda, 0.5/m), lambda^- = min(lambda, 0.5/(1-m)), wealth max(K^+/2, K^-/2).
    The max is a valid CS but not a martingale: never average it in a portfolio.
    """
    lam = _prpl_bets(x, alpha, c=jnp.inf)
    g = x[None, :] - m[:, None]
    lam_p = jnp.minimum(lam[None, :], 0.5 / m[:, None])
    lam_m = jnp.minimum(lam[None, :], 0.5 / (1 - m[:, None]))
    lp = jnp.cumsum(jnp.log1p(lam_p * g), axis=1)
    lm = jnp.cumsum(jnp.log1p(-lam_m * g), axis=1)
    return jnp.maximum(lp, lm) + math.log(0.5)


def grid_log_wealth_path(
    x: Float[Array, " T"], m: Float[Array, " M"], bet: str, alpha_b: Float[Array, ""] | float
) -> Float[Array, "M T"]:
    """Cumulative log-wealth paths of one coordinate on candidate means ``m`` for any bet."""
    if bet == "hedged":
        return hedged_log_wealth_path(x, _prpl_bets(x, alpha_b), m)
    if bet == "agrapa":
        lam = _agrapa_bets(x, m)
    elif bet == "ons":
        lam = _ons_bets(x, m)
    else:
        raise ValueError(f"bet must be one of {BETS}, got {bet!r}.")
    return jnp.cumsum(jnp.log1p(lam * (x[None, :] - m[:, None])), axis=1)


def coordinate_log_wealth(
    x: Float[Array, " T"], m: Float[Array, ""], bet: str, alpha_b: Float[Array, ""] | float
) -> Float[Array, " T"]:
    """Cumulative log-wealth path of one coordinate at one candidate mean."""
    return grid_log_wealth_path(x, m[None], bet, alpha_b)[0]


def _check_bet(bet: str) -> None:
    if bet not in BETS:
        raise ValueError(f"bet must be one of {BETS}, got {bet!r}.")


def log_wealth(
    x: Float[Array, "T d"],
    m: Float[Array, " d"],
    *,
    bet: str = "hedged",
    alpha: float = 0.05,
    weights: Float[Array, " d"] | None = None,
) -> Float[Array, "T d"]:
    """Per-coordinate log-wealth paths ``log K^j_t(m_j)`` at the candidate mean ``m``.

    K^j_t(m) = prod_{s<=t} (1 + lambda^j_s (x_{s,j} - m)) with predictable bets lambda^j_s. For
    ``bet="hedged"`` (default) the wealth is theta K^+ + (1-theta) K^- with PrPl bets tuned to the
    coordinate's Bonferroni level ``alpha * w_j`` (truncated at 1/2), a nonnegative martingale at
    the
    true mean; ``"agrapa"`` and ``"ons"`` are single two-sided processes with m-dependent bets.
    Under m = mu each column is a test martingale, so ``exp`` of it is an e-process.

    Args:
        x: observations in [0, 1], shape ``(T, d)``.
        m: candidate mean, shape ``(d,)``.
        bet: ``"hedged" | "agrapa" | "ons"``.
        alpha: level the hedged bets are tuned for (ignored by the other bets).
        weights: simplex weights ``(d,)`` (default 1/d) splitting ``alpha`` across coordinates.

    Returns:
        ``(T, d)`` cumulative log-wealth.

    References:
        Waudby-Smith, Ramdas (2024); Cutkosky, Orabona (2018).
    """
    from ._checks import check_alpha, check_m, check_weights, check_x

    _check_bet(bet)
    x = check_x(x)
    m = check_m(m, x)
    alpha = check_alpha(alpha)
    w = check_weights(weights, x.shape[1], x.dtype)
    return _log_wealth_jit(x, m, alpha * w, bet)


@functools.partial(jax.jit, static_argnames=("bet",))
def _log_wealth_jit(x, m, alpha_b, bet: str):
    return jax.vmap(lambda xj, mj, aj: coordinate_log_wealth(xj, mj, bet, aj), out_axes=1)(
        x.T, m, alpha_b
    )
