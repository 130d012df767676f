"""Time-uniform miscoverage events, evaluated cheaply at the true mean (for simulations)."""

import functools

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp
from jax.sharding import Mesh
from jaxtyping import Array, Bool, Float

from ..core import sharded_vmap
from ._baselines import predmix_eb_path, subgaussian_ball_path
from ._betting import _log_wealth_jit
from ._checks import check_alpha, check_m, check_unit, check_weights, check_x

COVERAGE_KINDS = ("bonferroni", "max_wealth", "portfolio", "predmix_eb", "subgaussian_ball")


def excluded_path(
    x: Float[Array, "T d"],
    mu: Float[Array, " d"],
    alpha: float = 0.05,
    *,
    kind: str,
    weights: Float[Array, " d"] | None = None,
    bet: str = "hedged",
) -> Bool[Array, " T"]:
    """Whether ``mu`` lies outside the region at each time t (exact, from the wealth at mu).

    For the betting kinds only the wealth at m = mu is needed: mu is outside P_t iff
    sum_j w_j K^j_t(mu_j) >= 1/alpha, and outside B_t = M_t iff max_j w_j K^j_t(mu_j) >= 1/alpha.
    Box, E_p and Box cap E_p contain P_t deterministically, so P_t's miscoverage bounds theirs.
    ``any(excluded_path(...))`` is the time-uniform miscoverage event of one run.

    Returns:
        ``(T,)`` booleans.
    """
    if kind not in COVERAGE_KINDS:
        raise ValueError(f"kind must be one of {COVERAGE_KINDS}, got {kind!r}.")
    x = check_x(x)
    mu = check_m(mu, x)
    a = check_alpha(alpha)
    w = check_weights(weights, x.shape[1], x.dtype)
    return _excluded_jit(x, mu, a, w, kind, bet)


@functools.partial(jax.jit, static_argnames=("kind", "bet"))
def _excluded_jit(x, mu, a, w, kind: str, bet: str):
    if kind in ("bonferroni", "max_wealth", "portfolio"):
        lw = _log_wealth_jit(x, mu, a * w, bet) + jnp.log(w)[None, :]
        stat = jnp.max(lw, axis=1) if kind != "portfolio" else logsumexp(lw, axis=1)
        return stat >= -jnp.log(a)
    if kind == "predmix_eb":
        lo, hi = predmix_eb_path(x, a * w)
        return jnp.any((mu[None, :] < lo) | (mu[None, :] > hi), axis=1)
    centre, radius = subgaussian_ball_path(x, a)
    return jnp.sum((centre - mu[None, :]) ** 2, axis=1) > radius**2


def miscoverage(
    x: Float[Array, "R T d"],
    mu: Float[Array, " d"],
    alpha: float = 0.05,
    *,
    kind: str,
    weights: Float[Array, " d"] | None = None,
    bet: str = "hedged",
    mesh: Mesh | None = None,
) -> Bool[Array, " R"]:
    """Time-uniform miscoverage events of ``R`` replicate runs: ``any(excluded_path(x[r]))``.

    The mean of the result estimates the confidence sequence's time-uniform miscoverage
    probability (at most ``alpha`` for a valid sequence), with Monte-Carlo standard error
    ``sqrt(p (1 - p) / R)``.

    Args:
        x: ``R`` independent runs of ``T`` observations in ``[0, 1]^d``, shape ``(R, T, d)``.
        mu: the true mean, shape ``(d,)``.
        alpha: level in (0, 1).
        kind: one of ``COVERAGE_KINDS`` (see `excluded_path`).
        weights, bet: as in `excluded_path`.
        mesh: run the replicates across the devices of this mesh (`jaxgen.core.sharded_vmap`;
            ``R`` a multiple of ``mesh.size``); the result equals the one-device run.

    Returns:
        ``(R,)`` booleans: run ``r`` excluded ``mu`` at some time.
    """
    if kind not in COVERAGE_KINDS:
        raise ValueError(f"`kind` must be one of {COVERAGE_KINDS}, got {kind!r}.")
    if jnp.ndim(x) != 3 or 0 in jnp.shape(x):
        raise ValueError(f"`x` must have shape (R, T, d) with R, T, d >= 1, got {jnp.shape(x)}.")
    x = check_unit(x, "x")
    mu = check_m(mu, x[0])
    a = check_alpha(alpha)
    w = check_weights(weights, x.shape[2], x.dtype)
    return sharded_vmap(lambda xr: jnp.any(_excluded_jit(xr, mu, a, w, kind, bet)), mesh)(x)
