"""Selectivity guidance: exact tilt of a Gaussian, w = 0 identity, gradients; the toy task."""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxgen.core import solve_ode
from jaxgen.flows import MixtureInterpolantVelocity
from jaxgen.selectivity import (
    ClassifierGuidedVelocity,
    SelectivityObjective,
    SelectToy,
    WellLandscape,
)

MU = jnp.array([1.0, -1.0])
SIGMA = jnp.array([[1.0, 0.5], [0.5, 2.0]])
B = jnp.array([0.7, -0.3])


def _gaussian_field():
    """Exact velocity of the linear path from N(0, I) to N(MU, SIGMA) (t = 1 is data)."""
    return MixtureInterpolantVelocity(jnp.zeros(2), jnp.eye(2), jnp.ones(1), MU[None], SIGMA[None])


def _guided_push():
    """The compiled Euler push-forward (1000 steps) of the linearly tilted Gaussian field."""
    guided = ClassifierGuidedVelocity(_gaussian_field(), lambda x: B @ x, scale=1.0, t_min=1e-6)

    @jax.jit
    def push(x0):
        one = lambda x: solve_ode(guided, x, solver=dfx.Euler(), steps=1000).ys[-1]  # noqa: E731
        return jax.vmap(one)(x0)

    return push


def test_linear_objective_tilts_a_gaussian_exactly_affine():
    """Check 7, fast twin: the guided flow map pushes N(0, I) exactly to N(MU + SIGMA b, SIGMA).

    For a Gaussian base and a linear J the guided field is affine in x (the denoiser is affine
    and grad J constant), so the Euler flow map is x0 -> A x0 + c and the pushed law is exactly
    N(c, A A^T). Pushing 0 and the unit vectors gives c and A (three trajectories instead of
    10000 samples, no Monte-Carlo error); random points check the map is affine. The bounds are
    the bias allowances of the sampled check below (0.01 on the mean, 5% on the covariance);
    the Euler error at 1000 steps is about 5e-4 and 0.3%.
    """
    x0 = jnp.concatenate([jnp.zeros((1, 2)), jnp.eye(2), jr.normal(jr.key(0), (3, 2))])
    x1 = np.asarray(_guided_push()(x0))
    c, A = x1[0], (x1[1:3] - x1[0]).T
    np.testing.assert_allclose(x1[3:], np.asarray(x0[3:]) @ A.T + c, atol=1e-10)
    target_mean, target_cov = np.asarray(MU + SIGMA @ B), np.asarray(SIGMA)
    assert np.all(np.abs(c - target_mean) <= 0.01), (c, target_mean)
    rel = np.linalg.norm(A @ A.T - target_cov) / np.linalg.norm(target_cov)
    assert rel <= 0.05, rel


@pytest.mark.slow
def test_linear_objective_tilts_a_gaussian_exactly():
    """Check 7: with J(x) = b.x and w = 1 the guided flow samples N(MU + SIGMA b, SIGMA)."""
    n = 10000
    x1 = _guided_push()(jr.normal(jr.key(0), (n, 2)))
    target_mean, target_cov = MU + SIGMA @ B, SIGMA
    se = np.sqrt(np.diag(target_cov) / n)
    assert np.all(np.abs(np.asarray(jnp.mean(x1, 0) - target_mean)) <= 4 * se + 0.01)
    cov = np.cov(np.asarray(x1), rowvar=False)
    rel = np.linalg.norm(cov - np.asarray(target_cov)) / np.linalg.norm(np.asarray(target_cov))
    assert rel <= 0.05


def test_zero_scale_is_the_base_field_and_gradients(getkey):
    base = _gaussian_field()
    objective = SelectivityObjective(
        lambda x: -jnp.sum((x - 1.0) ** 2),
        lambda x: jnp.stack([x[0], -(x[1] ** 2)]),
        off_weight=0.7,
        temperature=0.3,
    )
    x = jr.normal(getkey(), (2,))
    t = 0.37
    off = ClassifierGuidedVelocity(base, objective, scale=0.0)
    assert jnp.array_equal(off(t, x), base(t, x))  # bit for bit
    # J's soft max against its definition, and its gradient against central differences
    a_off = jnp.stack([x[0], -(x[1] ** 2)])
    expected = -jnp.sum((x - 1.0) ** 2) - 0.7 * 0.3 * (jax.nn.logsumexp(a_off / 0.3) - jnp.log(2.0))
    np.testing.assert_allclose(objective(x), expected, rtol=1e-12)
    check_grads(objective, (x,), order=1, modes=("rev",), atol=1e-5, rtol=1e-5)
    # The guided field = base + w (1-t)/t * d/dx J(x + (1-t) v(t, x)), by finite differences.
    guided = ClassifierGuidedVelocity(base, objective, scale=2.0, t_min=0.05)
    denoised_j = jax.jit(lambda y: objective(y + (1 - t) * base(t, y)))  # one compile, 4 calls
    eps = 1e-6
    fd = jnp.array(
        [(denoised_j(x + eps * e) - denoised_j(x - eps * e)) / (2 * eps) for e in jnp.eye(2)]
    )
    np.testing.assert_allclose(guided(t, x), base(t, x) + 2.0 * (1 - t) / t * fd, rtol=1e-5)
    np.testing.assert_allclose(eqx.filter_jit(guided)(t, x), guided(t, x), rtol=1e-12)
    cheap = ClassifierGuidedVelocity(base, objective, scale=2.0, through_denoiser=False)
    x1_hat = x + (1 - t) * base(t, x)
    np.testing.assert_allclose(
        cheap(t, x), base(t, x) + 2.0 * (1 - t) / t * jax.grad(objective)(x1_hat), rtol=1e-12
    )
    with pytest.raises(ValueError, match="`t_min` must be > 0"):
        ClassifierGuidedVelocity(base, objective, t_min=0.0)
    with pytest.raises(ValueError, match="`temperature` must be > 0"):
        SelectivityObjective(lambda x: x[0], lambda x: x, temperature=0.0)


def test_select_toy_landscapes_and_oracle(getkey):
    toy = SelectToy.default()
    assert toy.dim == 2 and len(toy.off) == 1
    land = WellLandscape(jnp.array([[0.0, 0.0]]), jnp.array([2.0]), 0.5)
    np.testing.assert_allclose(land(jnp.array([0.5, 0.0])), 2.0 * np.exp(-0.5), rtol=1e-12)
    # the on-target and the off-target share the well at (-2, 0): equal affinity there
    a = toy.affinities(jnp.array([-2.0, 0.0]))
    np.testing.assert_allclose(a[0], a[1], rtol=1e-4)  # the other wells add ~1e-4
    x = toy.sample_prior(getkey(), 4000)
    np.testing.assert_allclose(jnp.mean(x[:, 0] > 0), 0.3, atol=0.03)
    S = toy.dock(getkey(), x)
    resid = S + 5.0 + jax.vmap(toy.affinities)(x)
    np.testing.assert_allclose(jnp.std(resid), 0.5, rtol=0.05)
    with pytest.raises((ValueError, TypeError), match="x"):
        toy.dock(getkey(), x[:, :1])
    with pytest.raises(ValueError, match="length_scale"):
        WellLandscape(jnp.zeros((1, 2)), jnp.ones(1), 0.0)
