import warnings

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxgen.confseq import agrapa_bets, betting_cs, log_wealth, ons_bets, plugin_stats, prpl_bets

from ._peer import import_confseq

T = 80


@pytest.fixture(scope="module")
def x1():
    return jnp.asarray(np.random.default_rng(1).beta(2.0, 5.0, T))


def test_plugin_stats_are_predictable(x1):
    mu, s2 = plugin_stats(x1)
    assert mu[0] == 0.5 and s2[0] == 0.25
    # entry s-1 must not depend on x_s: change x at step 10, stats up to index 10 unchanged
    x2 = x1.at[10].set(1.0 - x1[10])
    mu2, s22 = plugin_stats(x2)
    np.testing.assert_array_equal(mu[:11], mu2[:11])
    np.testing.assert_array_equal(s2[:11], s22[:11])
    assert mu[11] != mu2[11]
    # closed form of mu_hat_t
    t = 5
    np.testing.assert_allclose(mu[t], (0.5 + x1[:t].sum()) / (t + 1), rtol=1e-12)


def test_bets_ranges(x1):
    m = jnp.array([0.0, 1e-9, 0.3, 1 - 1e-9, 1.0])
    lam = prpl_bets(x1, 0.05)
    assert jnp.all((lam > 0) & (lam <= 0.5))
    a = agrapa_bets(x1, m)
    o = ons_bets(x1, m)
    assert a.shape == o.shape == (5, T)
    assert jnp.all(jnp.abs(o) <= 0.5)
    # every factor stays >= 1 - c = 1/2 for x in [0, 1]
    xs = jnp.array([0.0, 1.0])
    for lam_m in (a, o):
        for xv in xs:
            fac = 1 + jnp.where(jnp.isfinite(lam_m), lam_m, 0.0) * (xv - m[:, None])
            assert jnp.all(fac >= 0.5 - 1e-12)


@pytest.mark.parametrize("bet", ["hedged", "agrapa", "ons"])
def test_log_wealth_finite_at_extremes(bet):
    x = jnp.tile(jnp.array([[0.0, 1.0], [1.0, 0.0]]), (20, 1))
    for mv in (0.0, 1e-12, 1 - 1e-12, 1.0):
        lw = log_wealth(x, jnp.array([mv, 1 - mv]), bet=bet)
        assert lw.shape == (40, 2)
        assert jnp.all(jnp.isfinite(lw)), (bet, mv)


def test_log_wealth_closed_form_and_martingale(x1):
    x = jnp.stack([x1, 1 - x1], axis=1)
    m = jnp.array([0.3, 0.6])
    lw = log_wealth(x, m, alpha=0.1)
    lam = prpl_bets(x1, 0.1 / 2)
    kp = jnp.cumprod(1 + lam * (x1 - 0.3))
    km = jnp.cumprod(1 - lam * (x1 - 0.3))
    np.testing.assert_allclose(lw[:, 0], jnp.log(0.5 * kp + 0.5 * km), rtol=1e-10, atol=1e-13)
    # jit == eager, vmap over candidate means == loop
    np.testing.assert_allclose(jax.jit(log_wealth)(x, m), lw, rtol=1e-12)
    ms = jnp.array([[0.2, 0.4], [0.5, 0.5], [0.7, 0.1]])
    batched = jax.jit(jax.vmap(lambda mm: log_wealth(x, mm)))(ms)
    for i in range(3):
        np.testing.assert_allclose(batched[i], log_wealth(x, ms[i]), rtol=1e-12)
    check_grads(jax.jit(lambda mm: log_wealth(x, mm)[-1]), (m,), order=1, modes=["rev"])


def test_betting_cs_grid_vs_exact_and_truth():
    x = jnp.asarray(np.random.default_rng(2).beta(8.0, 8.0, 60))
    lo_g, hi_g = betting_cs(x, 0.05, grid_size=200)
    lo_e, hi_e = betting_cs(x, 0.05, grid_size=None)
    step = 1 / 200
    # grid endpoints are within one grid step outside the exact ones
    assert jnp.all(lo_g <= lo_e + 1e-12) and jnp.all(hi_g >= hi_e - 1e-12)
    assert jnp.all(lo_e - lo_g <= 2 * step + 1e-12) and jnp.all(hi_g - hi_e <= 2 * step + 1e-12)
    lo_r, hi_r = betting_cs(x, 0.05, grid_size=200, running_intersection=True)
    np.testing.assert_allclose(lo_r, jax.lax.cummax(lo_g))
    assert jnp.all(hi_r <= hi_g)


def _check_compat(seeds):
    cs = import_confseq()
    for i in seeds:
        x = np.random.default_rng(10 + i).beta(2.0 + i, 3.0, 500)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lo, hi = cs.betting.hedged_cs(x, 0.05, breaks=1000, running_intersection=False)
        mlo, mhi = betting_cs(jnp.asarray(x), 0.05, confseq_compat=True)
        np.testing.assert_allclose(mlo, lo, atol=2e-3)
        np.testing.assert_allclose(mhi, hi, atol=2e-3)


def test_betting_cs_matches_confseq_compat():
    _check_compat(range(2))


@pytest.mark.slow
def test_betting_cs_matches_confseq_compat_spec_scale():
    """The same check in full: 5 Beta samples of length 500."""
    _check_compat(range(5))


@pytest.mark.parametrize("bet", ["agrapa", "ons"])
def test_grid_bets_cs_contains_mean(bet):
    x = jr.bernoulli(jr.key(3), 0.3, (200,)).astype(jnp.float64)
    lo, hi = betting_cs(x, 0.05, bet=bet, grid_size=100)
    assert jnp.all((lo <= 0.3) & (hi >= 0.3))
    assert hi[-1] - lo[-1] < 0.35
