"""Straight-line flows between Gaussian endpoints: closed forms, exactness, contrast, errors."""

import chex
import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxgen.core import solve_ode
from jaxgen.flows import (
    GaussianStraightProcess,
    LinearInterpolant,
    euler_pushforward,
    material_acceleration,
    matrix_geometric_mean,
    straightness,
)
from jaxgen.metrics import gaussian_w2
from tests.reference.gaussian_numpy import geometric_mean, random_spd


def make_process(dim, seed=1):
    rng = np.random.default_rng(seed)
    s0, s1 = random_spd(rng, dim), random_spd(rng, dim)
    m0, m1 = rng.normal(size=dim), rng.normal(size=dim)
    assert np.linalg.norm(s0 @ s1 - s1 @ s0) > 0.1  # non-commuting: the hard case
    return GaussianStraightProcess(m0, s0, m1, s1), (m0, s0, m1, s1)


@pytest.mark.parametrize("dim", [1, 2, 3, 5])
def test_geometric_mean_against_pencil_oracle(dim):
    rng = np.random.default_rng(dim)
    s0, s1 = random_spd(rng, dim), random_spd(rng, dim)
    p = np.asarray(jax.jit(matrix_geometric_mean)(s0, s1))  # eager: test_..._special_cases
    np.testing.assert_allclose(p, geometric_mean(s0, s1), atol=1e-10)
    np.testing.assert_allclose(p @ np.linalg.solve(s0, p), s1, atol=1e-10)
    np.testing.assert_allclose(p, p.T, atol=1e-12)


def test_geometric_mean_special_cases():
    s1 = jnp.array([[2.0, 0.5], [0.5, 1.0]])
    root = matrix_geometric_mean(jnp.eye(2), s1)
    np.testing.assert_allclose(root @ root, s1, atol=1e-12)
    # Eager once (above, every op compiled on its own); the scalar case jitted (eagerly it would
    # compile the same ~25 ops again for the 1x1 shapes).
    p = jax.jit(matrix_geometric_mean)(jnp.array([[4.0]]), jnp.array([[9.0]]))
    np.testing.assert_allclose(p, [[6.0]], atol=1e-12)


@pytest.mark.parametrize(
    "dim", [pytest.param(2, marks=pytest.mark.slow), 3, pytest.param(4, marks=pytest.mark.slow)]
)
def test_zero_material_acceleration_and_nonzero_for_linear(dim, getkey):
    process, (m0, s0, m1, s1) = make_process(dim)
    linear = LinearInterpolant().gaussian_velocity(m0, s0, m1, s1)
    rng = np.random.default_rng(dim)  # numpy draws: no sampler compiled per shape
    ts, xs = rng.uniform(0.01, 0.99, 64), 2.0 * rng.normal(size=(64, dim))

    @jax.jit  # both fields in one compiled program
    def accelerations(ts, xs):
        acc = lambda v: jax.vmap(lambda t, x: material_acceleration(v, t, x))(ts, xs)  # noqa: E731
        return acc(process.velocity), acc(linear)

    acc, acc_lin = accelerations(ts, xs)
    assert float(jnp.max(jnp.abs(acc))) < 1e-9
    assert float(jnp.max(jnp.abs(acc_lin))) > 0.1


@pytest.mark.parametrize(  # one step: also test_transport_map_pushes_gaussian_exactly
    "num_steps",
    [pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow), 7],
)
def test_euler_steps_equal_transport_map(num_steps, getkey):
    process, _ = make_process(3)
    xs = jr.normal(getkey(), (16, 3))

    @jax.jit  # the pushforward and the closed-form reference in one program (eager: op by op)
    def push_and_map(xs):
        push = jax.vmap(lambda x: euler_pushforward(process.velocity, x, num_steps))
        return push(xs), jax.vmap(process.transport_map)(xs)

    pushed, mapped = push_and_map(xs)
    np.testing.assert_allclose(pushed, mapped, atol=1e-12)


def test_adaptive_solve_agrees_with_flow_map(getkey):
    process, _ = make_process(3)
    x = jr.normal(getkey(), (3,))
    ts = jnp.array([0.25, 0.5, 1.0])
    sol = solve_ode(process.velocity, x, ts=ts, rtol=1e-10, atol=1e-10)  # default: Tsit5
    # eagerly the references would compile op by op
    expected, mapped = jax.jit(
        lambda x: (jax.vmap(process.flow_map, (0, None))(ts, x), process.transport_map(x))
    )(x)
    np.testing.assert_allclose(sol.ys, expected, atol=1e-8)
    # fast twin of test_tsit5_path_matches_one_euler_step: the path ends at T(x)
    np.testing.assert_allclose(sol.ys[-1], mapped, atol=1e-8)


@eqx.filter_jit
def one_euler_step_moments(field, m0, s0, m1, s1):
    """One Euler step is affine: its pushforward of N(m0, S0) is N(T(m0), J S0 J^T) exactly.

    Returns (J, W2 of that pushforward to N(m1, S1)): one compiled program (the step, its
    Jacobian and the W2 used to compile one by one).
    """
    step = lambda x: euler_pushforward(field, x, 1)  # noqa: E731
    jac, mean = jax.jacrev(lambda x: (step(x), step(x)), has_aux=True)(m0)
    return jac, gaussian_w2(mean, jac @ s0 @ jac.T, m1, s1)


@pytest.mark.parametrize("dim", [3, pytest.param(4, marks=pytest.mark.slow)])
def test_transport_map_pushes_gaussian_exactly(dim):
    # dim 3 shares make_process(3)'s matrices and the moments program's shapes with the
    # linear-interpolant test below; dim 4 (a separate compile) is the slow twin.
    process, (m0, s0, m1, s1) = make_process(dim)
    a = process.transport_matrix
    np.testing.assert_allclose(a @ s0 @ a.T, s1, atol=1e-10)
    _, w2 = one_euler_step_moments(process.velocity, *map(jnp.asarray, (m0, s0, m1, s1)))
    assert float(w2) < 1e-6


def test_linear_interpolant_one_step_collapses_to_the_mean():
    _, (m0, s0, m1, s1) = make_process(3)
    linear = LinearInterpolant().gaussian_velocity(m0, s0, m1, s1)
    jac, w2 = one_euler_step_moments(linear, *map(jnp.asarray, (m0, s0, m1, s1)))
    np.testing.assert_allclose(jac, 0.0, atol=1e-12)
    np.testing.assert_allclose(w2, np.sqrt(np.trace(s1)), rtol=1e-10)


@pytest.mark.parametrize("t", [0.0, 0.3, 0.7, 0.99])
def test_marginal_covariance_formula(t):
    process, (m0, s0, m1, s1) = make_process(3)
    p = np.asarray(process.noise_cov)
    mean, cov = process.marginal(t)
    expected = (1 - t) ** 2 * s0 + t**2 * s1 + 2 * t * (1 - t) * p
    np.testing.assert_allclose(cov, expected, atol=1e-12)
    np.testing.assert_allclose(mean, (1 - t) * m0 + t * m1, atol=1e-12)


N_SAMPLES, T_SAMPLES = 20_000, 0.4


@pytest.fixture(scope="module")
def samples():
    """(process, xs, pathwise velocities, v(xs)): n draws at t = 0.4, one compiled program
    shared by the two Monte-Carlo tests below.
    """
    process, _ = make_process(2)

    @eqx.filter_jit
    def draw(process, key):
        keys = jr.split(key, N_SAMPLES)
        xs, targets = jax.vmap(process.sample, in_axes=(0, None))(keys, T_SAMPLES)
        return xs, targets, jax.vmap(process.velocity, in_axes=(None, 0))(T_SAMPLES, xs)

    return (process, *draw(process, jr.key(11)))


def test_sampled_marginals_match_closed_form(samples):
    process, xs, _, _ = samples
    n, t = N_SAMPLES, T_SAMPLES
    mean, cov = process.marginal(t)
    sem = np.sqrt(np.diag(cov) / n)
    assert np.all(np.abs(np.mean(xs, 0) - mean) < 5 * sem)
    # Var of a sample covariance entry: (S_ii S_jj + S_ij^2) / n for Gaussians.
    emp = np.cov(np.asarray(xs).T)
    se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / n)
    assert np.all(np.abs(emp - cov) < 5 * se)


def test_velocity_is_conditional_expectation_of_pathwise_velocity(samples):
    _, xs, targets, velocities = samples
    n = N_SAMPLES
    residual = np.asarray(targets) - np.asarray(velocities)  # numpy: no eager op compiles
    xs = np.asarray(xs)
    # E[Xdot - v(X) | X] = 0: the residual is mean-zero and uncorrelated with X.
    centred = xs - np.mean(xs, 0, keepdims=True)
    for j in range(2):
        r = np.asarray(residual[:, j])
        assert abs(r.mean()) < 5 * r.std() / np.sqrt(n)
        for i in range(2):
            prod = np.asarray(centred[:, i]) * r
            assert abs(prod.mean()) < 5 * prod.std() / np.sqrt(n)


def test_sample_path_endpoints_and_straightness(getkey):
    process, _ = make_process(2)
    path = process.sample_path(getkey(), jnp.linspace(0.0, 1.0, 5))
    assert path.shape == (5, 2)
    _, (m0, s0, m1, s1) = make_process(2)
    linear = LinearInterpolant().gaussian_velocity(m0, s0, m1, s1)
    xs = jr.normal(getkey(), (8, 2))

    @eqx.filter_jit  # both fields in one compiled program
    def both(fields, xs):
        batched = eqx.filter_vmap(straightness, in_axes=(None, 0, None))
        return [batched(field, xs, 8) for field in fields]

    exact, lin = both((process.velocity, linear), xs)
    assert float(jnp.max(exact)) < 1e-20
    assert float(jnp.mean(lin)) > 1e-2


def test_jit_vmap_grad_battery(getkey):
    process, _ = make_process(3)
    t, xs = jnp.asarray(0.3), jr.normal(getkey(), (4, 3))
    eager = process.velocity(t, xs[0])
    chex.assert_trees_all_close(eqx.filter_jit(process.velocity)(t, xs[0]), eager, rtol=1e-12)
    batched = jax.vmap(process.velocity, in_axes=(None, 0))(t, xs)
    looped = jnp.stack([process.velocity(t, x) for x in xs])
    chex.assert_trees_all_close(batched, looped, rtol=1e-12)
    check_grads(jax.jit(lambda tt, x: process.velocity(tt, x)), (t, xs[0]), order=1, modes=["rev"])


def test_float32_dtype_preserved():
    process = GaussianStraightProcess(
        jnp.zeros(2, jnp.float32),
        jnp.eye(2, dtype=jnp.float32),
        jnp.ones(2, jnp.float32),
        jnp.array([[2.0, 0.3], [0.3, 1.0]], jnp.float32),
    )
    out = process.velocity(jnp.float32(0.5), jnp.ones(2, jnp.float32))
    assert out.dtype == jnp.float32


def test_bad_input_messages():
    with pytest.raises(ValueError, match="`cov0` must be a square"):
        GaussianStraightProcess(jnp.zeros(2), jnp.ones(2), jnp.zeros(2), jnp.eye(2))
    with pytest.raises(ValueError, match="`m1` must have the shape"):
        GaussianStraightProcess(jnp.zeros(2), jnp.eye(2), jnp.zeros(3), jnp.eye(2))
    with pytest.raises(ValueError, match=r"`cov1` must have shape \(2, 2\)"):
        GaussianStraightProcess(jnp.zeros(2), jnp.eye(2), jnp.zeros(2), jnp.eye(3))
    with pytest.raises(TypeError, match="cov0"):
        matrix_geometric_mean(jnp.eye(2, dtype=jnp.int32), jnp.eye(2, dtype=jnp.int32))
    with pytest.raises(Exception, match="must be symmetric"):
        GaussianStraightProcess(
            jnp.zeros(2), jnp.array([[1.0, 0.5], [0.0, 1.0]]), jnp.zeros(2), jnp.eye(2)
        )
    with pytest.raises(Exception, match="positive definite"):
        GaussianStraightProcess(
            jnp.zeros(2), jnp.array([[1.0, 2.0], [2.0, 1.0]]), jnp.zeros(2), jnp.eye(2)
        )
    process, _ = make_process(2)
    with pytest.raises(TypeError, match="parameter 'x'"):  # jaxtyping sees it first
        process.velocity(0.5, jnp.zeros((4, 2)))
    with pytest.raises(TypeError, match="parameter 'x'"):
        material_acceleration(process.velocity, 0.5, jnp.zeros((4, 2)))


@pytest.mark.slow  # fast twin: the last assertion of test_adaptive_solve_agrees_with_flow_map
def test_tsit5_path_matches_one_euler_step(getkey):
    process, _ = make_process(3)
    x = jr.normal(getkey(), (3,))
    sol = solve_ode(process.velocity, x, solver=dfx.Tsit5(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(sol.ys[-1], process.transport_map(x), atol=1e-8)
