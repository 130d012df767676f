"""Time-uniform coverage by simulation: P(exists t <= T: mu outside C_t) <= alpha (+ 3 MC s.e.)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import ndtri

from jaxgen.confseq import excluded_path


def simulate(kind, rng, R, T, d):
    mu = np.linspace(0.2, 0.8, d)
    if kind == "bernoulli":
        x = (rng.uniform(size=(R, T, d)) < mu).astype(float)
    elif kind == "beta":  # Beta(8, 8) shifted to mean mu and clipped (clipping moves the mean
        # only when mu +- 0.5 leaves [0, 1], which Beta(8, 8) mass essentially never reaches)
        x = np.clip(rng.beta(8.0, 8.0, size=(R, T, d)) + mu - 0.5, 0.0, 1.0)
    else:  # correlated Bernoulli, Gaussian copula with rho = 0.5
        cov = 0.5 * np.ones((d, d)) + 0.5 * np.eye(d)
        z = rng.multivariate_normal(np.zeros(d), cov, size=(R, T))
        x = (z < ndtri(mu)).astype(float)
    return jnp.asarray(x), jnp.asarray(mu)


def miscoverage(x, mu, kind):
    ex = jax.vmap(lambda xr: jnp.any(excluded_path(xr, mu, 0.05, kind=kind)))(x)
    return float(jnp.mean(ex))


@pytest.mark.parametrize("dist", ["bernoulli", "beta", "correlated"])
def test_coverage_fast(dist):
    R, T, d = 200, 150, 3
    x, mu = simulate(dist, np.random.default_rng(0), R, T, d)
    tol = 0.05 + 3 * np.sqrt(0.05 * 0.95 / R)
    for kind in ("portfolio", "max_wealth"):
        assert miscoverage(x, mu, kind) <= tol, kind
    # the portfolio wealth dominates the max-wealth one, so P misses at least as often as B
    assert miscoverage(x, mu, "portfolio") >= miscoverage(x, mu, "max_wealth")


def test_coverage_detects_leakage():
    # a "bet" that peeks at x_s (non-predictable) must break coverage: the test can fail
    R, T, d = 200, 150, 1
    x, mu = simulate("bernoulli", np.random.default_rng(1), R, T, d)

    def leaky(xr):
        g = xr[:, 0] - mu[0]
        lw = jnp.cumsum(jnp.log1p(0.5 * jnp.sign(g) * g))
        return jnp.any(lw >= jnp.log(20.0))

    assert float(jnp.mean(jax.vmap(leaky)(x))) > 0.5


@pytest.mark.slow
@pytest.mark.parametrize("dist", ["bernoulli", "beta", "correlated"])
@pytest.mark.parametrize("d", [1, 5, 20])
def test_coverage_paper_scale(dist, d):
    R, T = 2000, 1000
    x, mu = simulate(dist, np.random.default_rng(d), R, T, d)
    tol = 0.05 + 3 * np.sqrt(0.05 * 0.95 / R)
    for kind in ("portfolio", "max_wealth", "predmix_eb", "subgaussian_ball"):
        ex = jax.lax.map(
            lambda xr, kind=kind: jnp.any(excluded_path(xr, mu, 0.05, kind=kind)),
            x,
            batch_size=100,
        )
        assert float(jnp.mean(ex)) <= tol, kind
