"""Mixture-target velocities, the bimodal obstruction and flow-matching training."""

import functools as ft

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import scipy.stats

from jaxgen.core import adamw_cosine, fit
from jaxgen.flows import (
    AbstractVelocityField,
    GaussianStraightProcess,
    LinearInterpolant,
    MixtureInterpolantVelocity,
    MLPVelocityField,
    flow_matching_loss,
    mixture_quantiles_1d,
    one_step_obstruction_w1,
)


def test_one_component_mixture_equals_gaussian_field(getkey):
    m0, m1 = jnp.array([0.5, -1.0]), jnp.array([2.0, 1.0])
    s0, s1 = jnp.array([[1.0, 0.3], [0.3, 0.5]]), jnp.array([[2.0, -0.4], [-0.4, 0.7]])
    process = GaussianStraightProcess(m0, s0, m1, s1)
    mixture = process.interpolant().gaussian_velocity(m0, s0, m1, s1)
    xs, ts = jr.normal(getkey(), (16, 2)), jr.uniform(getkey(), (16,), maxval=0.99)
    both = eqx.filter_jit(lambda a, b: (jax.vmap(a)(ts, xs), jax.vmap(b)(ts, xs)))
    np.testing.assert_allclose(*both(mixture, process.velocity), atol=1e-12)


def test_mixture_velocity_is_weighted_by_responsibilities():
    # Far from one mode, the field is that of the other component alone.
    field = MixtureInterpolantVelocity(
        jnp.zeros(1),
        jnp.ones((1, 1)),
        jnp.array([0.5, 0.5]),
        jnp.array([[-5.0], [5.0]]),
        jnp.full((2, 1, 1), 0.09),
    )
    single = LinearInterpolant().gaussian_velocity(
        jnp.zeros(1), jnp.ones((1, 1)), jnp.array([5.0]), jnp.array([[0.09]])
    )
    x, t = jnp.array([4.0]), 0.8
    call = eqx.filter_jit(lambda f: f(t, x))
    np.testing.assert_allclose(call(field), call(single), rtol=1e-8)


def test_mixture_quantiles_against_scipy():
    levels = jnp.linspace(0.01, 0.99, 33)
    w, mu, sd = np.array([0.3, 0.7]), np.array([-1.0, 2.0]), np.array([0.5, 1.0])
    q = mixture_quantiles_1d(levels, jnp.asarray(w), jnp.asarray(mu), jnp.asarray(sd))
    cdf = (w[None] * scipy.stats.norm.cdf((np.asarray(q)[:, None] - mu) / sd)).sum(-1)
    np.testing.assert_allclose(cdf, levels, atol=1e-12)


# Reference table (computed independently in float64), W1 after Euler steps.
@pytest.mark.parametrize(
    ("mu", "process", "steps", "expected"),
    [
        (0.0, "linear", 1, 0.239),
        (0.0, "straight", 1, 0.0),
        (1.0, "linear", 1, 1.000),
        (1.0, "straight", 1, 0.761),
        (3.0, "linear", 1, 3.000),
        (3.0, "straight", 1, 2.761),
        pytest.param(1.0, "linear", 4, 0.168, marks=pytest.mark.slow),  # twin: (3, straight, 4)
        (3.0, "straight", 4, 0.321),
    ],
)
def test_obstruction_table(mu, process, steps, expected):
    # 2000 midpoint quantiles (the default is 20000): every entry moves by < 1e-4 (measured),
    # far inside the table's 0.01; shares its compiled program with the next test.
    w1 = one_step_obstruction_w1(mu, process=process, num_steps=steps, num_quantiles=2000)
    assert abs(float(w1) - expected) < 0.01


def test_obstruction_error_grows_with_separation():
    seps = [0.5, 1.0, 2.0, 3.0]
    errs = [float(one_step_obstruction_w1(m, process="straight", num_quantiles=2000)) for m in seps]
    assert all(b > a for a, b in zip(errs, errs[1:], strict=False))
    assert errs[-1] > 0.75 * seps[-1]


def test_obstruction_bad_input():
    with pytest.raises(ValueError, match="`process` must be"):
        one_step_obstruction_w1(1.0, process="curved")
    with pytest.raises(ValueError, match="`num_quantiles`"):
        one_step_obstruction_w1(1.0, num_quantiles=1)


def _pairs_sampler(process, batch_size):
    chol0 = jnp.linalg.cholesky(process.cov0)
    chol1 = jnp.linalg.cholesky(process.cov1)

    def sample(key):
        k0, k1 = jr.split(key)
        x0 = process.m0[None, :] + jr.normal(k0, (batch_size, process.dim)) @ chol0.T
        x1 = process.m1[None, :] + jr.normal(k1, (batch_size, process.dim)) @ chol1.T
        return x0, x1

    return jax.jit(sample)


def test_flow_matching_loss_is_minimised_by_the_exact_field(getkey):
    process = GaussianStraightProcess(
        jnp.zeros(2), jnp.eye(2), jnp.array([1.0, 0.0]), jnp.array([[2.0, 0.3], [0.3, 0.5]])
    )

    class Exact(AbstractVelocityField):
        dim: int = 2

        def __call__(self, t, x, args=None):
            return process.velocity(t, x)

    batch = _pairs_sampler(process, 4096)(getkey())
    key = getkey()
    loss = eqx.filter_jit(ft.partial(flow_matching_loss, interpolant=process.interpolant()))
    exact = loss(Exact(), batch, key)
    mlp = MLPVelocityField(2, 16, 2, key=getkey())
    assert float(exact) < float(loss(mlp, batch, key))
    with pytest.raises((TypeError, ValueError), match="batch"):
        loss(mlp, (batch[0], batch[1][:, :1]), key)


def test_flow_matching_trains_with_fit_and_compiles_once(getkey):
    process = GaussianStraightProcess(
        jnp.zeros(2), jnp.eye(2), jnp.array([2.0, -1.0]), jnp.array([[0.5, 0.1], [0.1, 0.3]])
    )
    # The loss is traced once for both runs below (a 3-step run, then 150 steps with new keys):
    # fit's compiled chunk is reused, where a separate make_step loop compiled the step again.
    loss = eqx.debug.assert_max_traces(
        ft.partial(flow_matching_loss, interpolant=LinearInterpolant()), max_traces=1
    )
    model = MLPVelocityField(2, 32, 2, key=getkey())
    optimizer = adamw_cosine(3e-3, 150)
    sampler = _pairs_sampler(process, 128)
    three = fit(loss, model, sampler, optimizer, num_steps=3, key=getkey(), progress=False)
    assert three.losses.shape == (3,) and np.all(np.isfinite(three.losses))
    result = fit(
        loss,
        model,
        sampler,
        optimizer,
        num_steps=150,
        key=getkey(),
        progress=False,
    )
    assert np.mean(result.losses[-20:]) < 0.6 * np.mean(result.losses[:10])


class _ConditionAsVelocity(AbstractVelocityField):
    """v(t, x, c) = c: exact for the linear interpolant when c = x1 - x0, whatever t."""

    dim: int = 2

    def __call__(self, t, x, args=None):
        return jnp.zeros_like(x) if args is None else args


def test_conditional_flow_matching_wiring_and_dropout(getkey):
    x0, x1 = jr.normal(getkey(), (4000, 2)), 2.0 + jr.normal(getkey(), (4000, 2))
    target = x1 - x0
    loss = jax.jit(
        ft.partial(
            flow_matching_loss, interpolant=LinearInterpolant(), time_sampler="logit_normal"
        ),
        static_argnames=(),
    )
    field = _ConditionAsVelocity()
    np.testing.assert_allclose(loss(field, (x0, x1, target), getkey()), 0.0, atol=1e-12)
    # Dropped conditions are zeros, so the loss is the dropped fraction of E|x1 - x0|^2.
    full = float(jnp.mean(jnp.sum(target**2, -1)))
    for p in (0.3, 1.0):
        dropped = ft.partial(flow_matching_loss, interpolant=LinearInterpolant(), cond_dropout=p)
        value = float(eqx.filter_jit(dropped)(field, (x0, x1, target), getkey()))
        se = float(jnp.std(jnp.sum(target**2, -1))) * np.sqrt(p * (1 - p) / 4000 + 1e-12)
        assert abs(value - p * full) <= 5 * se + 1e-9, (p, value, p * full)
    # A conditional MLP field takes its condition through `args`.
    mlp = MLPVelocityField(2, 16, 2, key=getkey(), cond_dim=3)
    assert mlp(0.5, jnp.zeros(2), jnp.ones(3)).shape == (2,)
    with pytest.raises(ValueError, match="`args` must be a \\(3,\\) vector"):
        mlp(0.5, jnp.zeros(2))
    with pytest.raises(ValueError, match="`cond_dropout` must lie"):
        flow_matching_loss(
            field, (x0, x1, target), getkey(), interpolant=LinearInterpolant(), cond_dropout=1.5
        )
    with pytest.raises(ValueError, match="`time_sampler` must be one of"):
        flow_matching_loss(
            field, (x0, x1), getkey(), interpolant=LinearInterpolant(), time_sampler="beta"
        )
