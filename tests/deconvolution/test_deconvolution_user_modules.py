"""A user's own equinox modules in the prior slot (`AbstractPrior`) and the noise slot
(`AbstractNoiseModel`): the convMMD loss, `fit_convmmd` and the SNIS denoiser take them like
the built-ins."""

import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.deconvolution import (
    AbstractNoiseModel,
    AbstractPrior,
    GaussianNoise,
    NoiseModel,
    convmmd_loss,
    fit_convmmd,
    posterior_mean_snis,
)

SQRT3 = math.sqrt(3.0)


class NormalPrior(AbstractPrior):
    """``z = mu + exp(log_s) u``, ``u ~ N(0, I)``."""

    mu: jax.Array
    log_s: jax.Array

    def sample(self, key, num):
        u = jr.normal(key, (num, self.mu.shape[0]))
        return self.mu[None, :] + jnp.exp(self.log_s)[None, :] * u

    def log_prob(self, z):
        u = (z - self.mu[None, :]) * jnp.exp(-self.log_s)[None, :]
        return jnp.sum(-0.5 * u**2 - self.log_s[None, :] - 0.5 * math.log(2 * math.pi), -1)


class UniformNoise(AbstractNoiseModel):
    """Independent U(-sqrt(3) s, sqrt(3) s) coordinates (sd s)."""

    kind: ClassVar[str] = "uniform"
    factor_scales: ClassVar[bool] = False

    def sample(self, key, scales):
        return SQRT3 * scales * jr.uniform(key, scales.shape, scales.dtype, -1.0, 1.0)

    def log_density(self, residuals, scales):
        inside = jnp.all(jnp.abs(residuals) <= SQRT3 * scales, -1)
        return jnp.where(inside, -jnp.sum(jnp.log(2 * SQRT3 * scales), -1), -jnp.inf)

    def charfn(self, t, scales):
        a = SQRT3 * scales[:, None, :] * t[None, :, :]
        return jnp.prod(jnp.sinc(a / jnp.pi), -1)


class SdGaussian(AbstractNoiseModel):
    """The built-in Gaussian noise written by a user (sds only)."""

    kind: ClassVar[str] = "sd_gaussian"
    factor_scales: ClassVar[bool] = False

    def sample(self, key, scales):
        return jr.normal(key, scales.shape, scales.dtype) * scales

    def log_density(self, residuals, scales):
        u = residuals / scales
        return jnp.sum(-0.5 * u**2 - jnp.log(scales) - 0.5 * math.log(2 * math.pi), -1)

    def charfn(self, t, scales):
        return jnp.exp(-0.5 * jnp.sum((scales[:, None, :] * t[None, :, :]) ** 2, -1))


def _data(n=256):
    kz, ke = jr.split(jr.key(0))
    z = 2.0 + 0.5 * jr.normal(kz, (n, 1))
    s = jnp.full((n, 1), 0.5)
    return z + UniformNoise().sample(ke, s), s


def test_user_noise_matches_the_builtin():
    x, s = _data(64)
    prior = NormalPrior(jnp.array([1.0]), jnp.array([0.0]))
    h = jnp.array([0.5, 1.0])
    ours = convmmd_loss(prior, (x, s), jr.key(1), noise=SdGaussian(), bandwidths=h)
    builtin = convmmd_loss(prior, (x, s), jr.key(1), noise=GaussianNoise(), bandwidths=h)
    np.testing.assert_allclose(ours, builtin, rtol=1e-6)
    assert isinstance(NoiseModel("gaussian"), GaussianNoise)  # the `kind=` path still works


def test_user_prior_and_noise_fit_and_denoise():
    x, s = _data()
    prior0 = NormalPrior(jnp.array([0.0]), jnp.array([0.0]))
    res = fit_convmmd(
        prior0,
        (x, s),
        key=jr.key(2),
        noise=UniformNoise(),
        num_steps=60,
        batch_size=64,
        learning_rate=0.15,
        progress=False,
    )
    assert isinstance(res.model, NormalPrior) and np.all(np.isfinite(res.losses))
    assert abs(float(res.model.mu[0]) - 2.0) < 0.4  # from 0 to the true mean 2 (2.13 measured)
    means, ses = posterior_mean_snis(
        jr.key(3), res.model, x[:8], s[:8], noise=UniformNoise(), num_samples=128
    )
    assert means.shape == (8, 1) and np.all(np.isfinite(means)) and np.all(np.isfinite(ses))
    # each posterior mean lies inside the noise window around its observation
    assert np.all(np.abs(np.asarray(means - x[:8])) <= SQRT3 * 0.5 + 1e-6)


def test_slots_reject_non_conforming_modules():
    x, s = _data(8)
    prior = NormalPrior(jnp.array([0.0]), jnp.array([0.0]))

    class Plain(eqx.Module):
        def sample(self, key, n):
            return jnp.zeros((n, 1))

    h = jnp.array([1.0])
    with pytest.raises(TypeError, match=r"noise[\s\S]*AbstractNoiseModel"):
        convmmd_loss(prior, (x, s), jr.key(0), noise=Plain(), bandwidths=h)
    with pytest.raises(TypeError, match=r"prior[\s\S]*AbstractPrior"):
        convmmd_loss(Plain(), (x, s), jr.key(0), noise=GaussianNoise(), bandwidths=h)
