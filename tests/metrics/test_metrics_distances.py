"""Metrics against scipy / numpy oracles and known values."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import scipy.stats

from jaxgen.metrics import (
    empirical_gaussian_w2,
    energy_distance,
    gaussian_w2,
    mmd_unbiased,
    sliced_w2,
    w1_1d,
)
from tests.reference.gaussian_numpy import gaussian_w2 as gaussian_w2_numpy, random_spd


def test_gaussian_w2_against_scipy_sqrtm():
    rng = np.random.default_rng(0)
    sa, sb = random_spd(rng, 3), random_spd(rng, 3)
    ma, mb = rng.normal(size=3), rng.normal(size=3)
    ours = gaussian_w2(jnp.asarray(ma), jnp.asarray(sa), jnp.asarray(mb), jnp.asarray(sb))
    np.testing.assert_allclose(ours, gaussian_w2_numpy(ma, sa, mb, sb), rtol=1e-8)
    np.testing.assert_allclose(
        gaussian_w2(jnp.asarray(ma), jnp.asarray(sa), jnp.asarray(ma), jnp.asarray(sa)),
        0.0,
        atol=1e-6,
    )


def test_w1_and_sliced_w2_in_one_dimension(getkey):
    x, y = jr.normal(getkey(), (200,)), 1.0 + 2.0 * jr.normal(getkey(), (200,))
    np.testing.assert_allclose(w1_1d(x, y), scipy.stats.wasserstein_distance(x, y), rtol=1e-8)
    w2_sorted = np.sqrt(np.mean((np.sort(x) - np.sort(y)) ** 2))
    np.testing.assert_allclose(sliced_w2(getkey(), x[:, None], y[:, None], 4), w2_sorted, rtol=1e-8)


def numpy_energy(x, y):
    d = lambda a, b: np.linalg.norm(a[:, None] - b[None], axis=-1)  # noqa: E731
    n, m = len(x), len(y)
    return 2 * d(x, y).mean() - d(x, x).sum() / (n * (n - 1)) - d(y, y).sum() / (m * (m - 1))


def numpy_mmd(x, y, hs):
    k = lambda a, b: sum(np.exp(-((a[:, None] - b[None]) ** 2).sum(-1) / (2 * h * h)) for h in hs)  # noqa: E731
    n, m = len(x), len(y)
    kxx, kyy = k(x, x), k(y, y)
    return (
        (kxx.sum() - np.trace(kxx)) / (n * (n - 1))
        + (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
        - 2 * k(x, y).mean()
    )


def test_energy_and_mmd_against_numpy(getkey):
    x, y = jr.normal(getkey(), (40, 2)), jr.normal(getkey(), (30, 2)) + 0.5
    np.testing.assert_allclose(
        energy_distance(x, y), numpy_energy(np.asarray(x), np.asarray(y)), rtol=1e-8
    )
    np.testing.assert_allclose(
        mmd_unbiased(x, y, (0.5, 2.0)),
        numpy_mmd(np.asarray(x), np.asarray(y), (0.5, 2.0)),
        rtol=1e-8,
    )
    grad = jax.jit(jax.grad(lambda a: energy_distance(a, y)))(x)
    assert np.all(np.isfinite(grad))


def test_sample_metrics_separate_equal_from_different_laws(getkey):
    x, y = jr.normal(getkey(), (400, 2)), jr.normal(getkey(), (400, 2))
    shifted = y + 1.0
    assert abs(float(mmd_unbiased(x, y))) < 0.01 < float(mmd_unbiased(x, shifted))
    assert float(energy_distance(x, y)) < 0.05 < float(energy_distance(x, shifted))
    w2 = empirical_gaussian_w2(shifted, jnp.ones(2), jnp.eye(2))
    assert float(w2) < 0.2


def test_metrics_bad_input():
    with pytest.raises(TypeError, match="parameter 'y'"):  # the jaxtyping hook sees it first
        mmd_unbiased(jnp.zeros((4, 2)), jnp.zeros((4, 3)))
    with pytest.raises(TypeError, match="parameter 'y'"):
        sliced_w2(jr.key(0), jnp.zeros((4, 2)), jnp.zeros((5, 2)))
    with pytest.raises(ValueError, match="at least 2 samples"):
        energy_distance(jnp.zeros((1, 2)), jnp.zeros((4, 2)))


def test_feature_frechet_distance_against_numpy():
    from jaxgen.metrics import feature_frechet_distance

    rng = np.random.default_rng(3)
    a = rng.normal(size=(200, 4))
    b = rng.normal(size=(150, 4)) @ rng.normal(size=(4, 4)) + 0.5
    ma, mb = a.mean(0), b.mean(0)
    sa, sb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    expected = gaussian_w2_numpy(ma, sa, mb, sb) ** 2
    ours = jax.jit(feature_frechet_distance)(jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_allclose(ours, expected, rtol=1e-8)
    np.testing.assert_allclose(
        feature_frechet_distance(jnp.asarray(a), jnp.asarray(a)), 0.0, atol=1e-8
    )
    with pytest.raises((TypeError, ValueError), match="feats_b|feature size"):
        feature_frechet_distance(jnp.zeros((4, 3)), jnp.zeros((4, 2)))
    with pytest.raises(ValueError, match="`feats_b` must have shape"):
        feature_frechet_distance(jnp.zeros((4, 3)), jnp.zeros((1, 3)))
