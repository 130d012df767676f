"""The ODE/SDE layer against closed forms; jit/vmap/grad; bad input."""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.core import solve_ode, solve_sde


def decay(t, y, args):
    return -args * y


@eqx.filter_jit
def decay_at(y0, rate, ts):
    return solve_ode(decay, y0, ts=ts, args=rate, rtol=1e-10, atol=1e-10).ys


def test_solve_ode_adaptive_matches_exponential():
    ts = jnp.array([0.25, 0.5, 1.0])
    ys = decay_at(jnp.array([1.0, 2.0]), 1.5, ts)
    np.testing.assert_allclose(
        ys, np.exp(-1.5 * np.asarray(ts))[:, None] * np.array([1.0, 2.0]), rtol=1e-8
    )


def test_solve_ode_fixed_euler_steps_are_exact_recursion():
    # k Euler steps of y' = -y give (1 - 1/k)^k exactly.
    sol = solve_ode(decay, jnp.array(1.0), args=1.0, solver=dfx.Euler(), steps=4)
    np.testing.assert_allclose(sol.ys[-1], (1 - 0.25) ** 4, rtol=1e-12)
    assert int(sol.stats["num_steps"]) == 4


def test_solve_ode_pytree_state_harmonic_oscillator():
    field = lambda t, y, args: {"q": y["p"], "p": -y["q"]}  # noqa: E731
    sol = solve_ode(
        field, {"q": jnp.array(1.0), "p": jnp.array(0.0)}, t1=np.pi / 2, rtol=1e-10, atol=1e-10
    )
    np.testing.assert_allclose(sol.ys["q"][-1], 0.0, atol=1e-8)
    np.testing.assert_allclose(sol.ys["p"][-1], -1.0, atol=1e-8)


def test_solve_ode_jit_vmap_grad():
    ts = jnp.array([1.0])
    y0s = jnp.array([[1.0], [2.0], [3.0]])
    batched = jax.vmap(decay_at, in_axes=(0, None, None))(y0s, 0.7, ts)
    looped = jnp.stack([decay_at(y, 0.7, ts) for y in y0s])
    np.testing.assert_allclose(batched, looped, rtol=1e-12)
    eager = solve_ode(decay, y0s[0], ts=ts, args=0.7, rtol=1e-10, atol=1e-10).ys
    np.testing.assert_allclose(eager, looped[0], rtol=1e-12)
    # d/d rate of exp(-rate) at t = 1 is -exp(-rate).
    grad = jax.grad(lambda r: decay_at(jnp.array(1.0), r, ts)[0])(0.7)
    np.testing.assert_allclose(grad, -np.exp(-0.7), rtol=1e-6)


def test_solve_ode_traced_end_time_under_jit_and_vmap():
    # t1 may be traced: one compiled solve serves every horizon, y(t1) = exp(-t1).
    at = jax.jit(jax.vmap(lambda t1: solve_ode(decay, jnp.array(1.0), t1=t1, args=1.0).ys[-1]))
    t1s = jnp.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(at(t1s), np.exp(-np.asarray(t1s)), rtol=1e-4)


def test_solve_ode_bad_input():
    with pytest.raises(ValueError, match="`t1` must be greater than `t0`"):
        solve_ode(decay, jnp.array(1.0), t0=1.0, t1=1.0, args=1.0)
    with pytest.raises(ValueError, match="`steps` must be >= 1"):
        solve_ode(decay, jnp.array(1.0), steps=0, args=1.0)
    with pytest.raises(TypeError, match="steps"):
        solve_ode(decay, jnp.array(1.0), steps=2.5, args=1.0)
    with pytest.raises(ValueError, match="`ts` must be a non-empty 1-D"):
        solve_ode(decay, jnp.array(1.0), ts=jnp.ones((0,)), args=1.0)
    with pytest.raises(Exception, match="`ts` must be strictly increasing"):
        solve_ode(decay, jnp.array(1.0), ts=jnp.array([0.5, 0.2]), args=1.0)
    with pytest.raises(Exception, match=r"`ts` must lie inside \[t0, t1\]"):
        solve_ode(decay, jnp.array(1.0), ts=jnp.array([0.5, 2.0]), args=1.0)


def ou_drift(t, y, args):
    return -y


def ou_diffusion(t, y, args):
    return jnp.full_like(y, 0.5)


@eqx.filter_jit
def ou_endpoints(keys, y0):
    return jax.vmap(lambda k: solve_sde(ou_drift, ou_diffusion, y0, key=k, steps=50).ys[-1])(keys)


def test_solve_sde_ou_moments_within_standard_errors(getkey):
    # dY = -Y dt + 0.5 dW: mean y0 e^{-1}, variance (1 - e^{-2}) / 8 at t = 1 (Euler bias ~1%).
    n = 4000
    ends = ou_endpoints(jr.split(getkey(), n), jnp.array([1.0, -2.0]))
    mean_exact = np.array([1.0, -2.0]) * np.exp(-1.0)
    var_exact = (1 - np.exp(-2.0)) / 8
    se = np.sqrt(var_exact / n)
    euler_bias = 0.02 * np.abs(mean_exact)  # (1 - 1/50)^50 vs e^{-1}
    assert np.all(np.abs(np.mean(ends, 0) - mean_exact) < 5 * se + euler_bias)
    np.testing.assert_allclose(np.var(ends, 0), var_exact, rtol=0.1)


def test_solve_sde_matrix_noise_and_reproducible(getkey):
    key = getkey()
    matrix = lambda t, y, args: jnp.array([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])  # noqa: E731
    zero = lambda t, y, args: jnp.zeros(2)  # noqa: E731
    a = solve_sde(zero, matrix, jnp.zeros(2), key=key, steps=8).ys
    b = solve_sde(zero, matrix, jnp.zeros(2), key=key, steps=8).ys
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="`diffusion` must return"):
        solve_sde(zero, lambda t, y, args: jnp.zeros(3), jnp.zeros(2), key=key, steps=4)
    with pytest.raises(ValueError, match="`brownian` must be"):
        solve_sde(zero, ou_diffusion, jnp.zeros(2), key=key, steps=4, brownian="fast")
