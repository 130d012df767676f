"""Baselines: Bonferroni of predictable-mixture empirical-Bernstein CSs; the sub-Gaussian ball.

References:
    Waudby-Smith, Ramdas. Estimating means of bounded random variables by betting. JRSSB 2024,
    Theorem 2 (PrPl-EB).
    Howard, Ramdas, McAuliffe, Sekhon. Time-uniform, nonparametric, nonasymptotic confidence
    sequences. Ann. Stat. 2021 (normal-mixture boundary).
"""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ._betting import _plugin_stats
from ._checks import check_alpha, check_weights, check_x


def _predmix_lower_path(y: Float[Array, " T"], alpha_side, compat: bool) -> Float[Array, " T"]:
    """Lower PrPl-EB CS at every t for the mean of y in [0, 1], level alpha_side (one side)."""
    T = y.shape[0]
    s = jnp.arange(1, T + 1, dtype=y.dtype)
    mu_prev, sigma2_prev = _plugin_stats(y)
    log_term = jnp.log(1 / alpha_side)
    lam = jnp.minimum(jnp.sqrt(2 * log_term / (sigma2_prev * s * jnp.log1p(s))), 0.5)
    if compat:  # confseq: v uses the plain running mean, starting at 0
        plain = jnp.cumsum(y) / s
        mu_prev = jnp.concatenate([jnp.zeros((1,), y.dtype), plain[:-1]])
    v = (y - mu_prev) ** 2
    psi = -jnp.log1p(-lam) - lam
    sum_lam = jnp.cumsum(lam)
    centre = jnp.cumsum(lam * y) / sum_lam
    margin = (log_term + jnp.cumsum(v * psi)) / sum_lam
    return jnp.clip(centre - margin, 0.0, None)


def predmix_eb_path(
    x: Float[Array, "T d"], alpha_b: Float[Array, " d"], compat: bool = False
) -> tuple[Float[Array, "T d"], Float[Array, "T d"]]:
    """Per-coordinate two-sided PrPl-EB CS at level alpha_b[j] (alpha_b[j]/2 per side), all t."""
    lo = jax.vmap(lambda y, a: _predmix_lower_path(y, a / 2, compat), out_axes=1)(x.T, alpha_b)
    hi = 1 - jax.vmap(lambda y, a: _predmix_lower_path(y, a / 2, compat), out_axes=1)(
        1 - x.T, alpha_b
    )
    return lo, jnp.clip(hi, None, 1.0)


def predmix_eb_bounds(x, alpha_b, mask, compat: bool):
    """The PrPl-EB Bonferroni box at the last unmasked time."""
    lo, hi = predmix_eb_path(x, alpha_b, compat)
    idx = jnp.sum(mask) - 1
    return lo[idx], hi[idx]


def predmix_eb_bonferroni(
    x: Float[Array, "T d"],
    alpha: float = 0.05,
    *,
    weights: Float[Array, " d"] | None = None,
    confseq_compat: bool = False,
) -> Float[Array, "T d 2"]:
    """Bonferroni box of predictable-mixture empirical-Bernstein CSs, at every time t.

    Coordinate j at level alpha w_j (alpha w_j / 2 per side):
    lower_t = sum_s lambda_s x_s / sum_s lambda_s - (log(2/(alpha w_j)) + sum_s v_s psi_E(lambda_s))
    / sum_s lambda_s, psi_E(l) = -log(1-l) - l, v_s = (x_s - mu_hat_{s-1})^2,
    lambda_s = min(sqrt(2 log(2/(alpha w_j)) / (sigma2_hat_{s-1} s log(1+s))), 1/2); the upper
    bound is the same construction on 1 - x.

    Returns:
        ``(T, d, 2)``: ``[..., 0]`` lower, ``[..., 1]`` upper.

    References:
        Waudby-Smith, Ramdas (2024), Theorem 2.
    """
    x = check_x(x)
    alpha = check_alpha(alpha)
    w = check_weights(weights, x.shape[1], x.dtype)
    return _predmix_jit(x, alpha * w, confseq_compat)


@functools.partial(jax.jit, static_argnames=("compat",))
def _predmix_jit(x, alpha_b, compat: bool):
    lo, hi = predmix_eb_path(x, alpha_b, compat)
    return jnp.stack([lo, hi], axis=-1)


def subgaussian_ball_path(
    x: Float[Array, "T d"], alpha, rho=None
) -> tuple[Float[Array, "T d"], Float[Array, " T"]]:
    """Centres (running means) and radii of the sub-Gaussian mixture ball at every t."""
    T, d = x.shape
    sigma2 = d / 4.0
    rho = 100.0 * sigma2 if rho is None else rho
    s = jnp.arange(1, T + 1, dtype=x.dtype)
    centre = jnp.cumsum(x, axis=0) / s[:, None]
    radius = (
        jnp.sqrt(
            2 * (rho + sigma2 * s) * (jnp.log(1 / alpha) + (d / 2) * jnp.log1p(sigma2 * s / rho))
        )
        / s
    )
    return centre, radius


def subgaussian_ball_params(x, alpha, mask, rho):
    """Centre and radius of the ball at the last unmasked time."""
    centre, radius = subgaussian_ball_path(x, alpha, rho)
    idx = jnp.sum(mask) - 1
    return centre[idx], radius[idx]


def subgaussian_ball(
    x: Float[Array, "T d"], alpha: float = 0.05, *, rho: float | None = None
) -> tuple[Float[Array, "T d"], Float[Array, " T"]]:
    """Sub-Gaussian normal-mixture ball for the mean of x in [0, 1]^d, at every time t.

    For any unit-free direction u, u.(X - mu) has range <= ||u||_1 <= sqrt(d) ||u||_2, so X is
    sigma^2 = d/4 sub-Gaussian in every direction whatever the dependence. With prior precision
    rho (default 100 sigma^2) the Robbins normal mixture gives
    C_t = {m : ||mean_t - m||_2 <= (1/t) sqrt(2 (rho + sigma^2 t)(log(1/alpha) + (d/2)
    log(1 + sigma^2 t / rho)))}.

    Returns:
        ``(centre, radius)`` of shapes ``(T, d)`` and ``(T,)``.

    References:
        Howard et al. (2021); Chugg, Wang, Ramdas. Time-uniform confidence spheres. arXiv
        2311.08168.
    """
    x = check_x(x)
    alpha = check_alpha(alpha)
    return _ball_jit(x, alpha, rho)


_ball_jit = jax.jit(subgaussian_ball_path)
