import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
from jax.test_util import check_grads

from jaxgen.dictionary import (
    project_l1_ball,
    prox_row_l1_count,
    prox_row_l1_linf,
    soft_threshold,
)


def _brute_l1_ball(v, z):
    # min 1/2||x - v||^2 s.t. sum p <= z, -p <= x <= p (smooth QP, SLSQP)
    n = v.size
    cons = [
        {"type": "ineq", "fun": lambda w: z - w[n:].sum()},
        {"type": "ineq", "fun": lambda w: w[n:] - w[:n]},
        {"type": "ineq", "fun": lambda w: w[n:] + w[:n]},
    ]
    w0 = np.zeros(2 * n)
    out = scipy.optimize.minimize(
        lambda w: 0.5 * np.sum((w[:n] - v) ** 2),
        w0,
        constraints=cons,
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 500},
    )
    return out.x[:n]


def _brute_l1_linf(v, t1, t2):
    # min 1/2||x - v||^2 + t1 sum p + t2 s  s.t. |x_i| <= p_i, |x_i| <= s (joint brute force)
    n = v.size

    def f(w):
        return 0.5 * np.sum((w[:n] - v) ** 2) + t1 * np.sum(w[n : 2 * n]) + t2 * w[-1]

    cons = [
        {"type": "ineq", "fun": lambda w: w[n : 2 * n] - w[:n]},
        {"type": "ineq", "fun": lambda w: w[n : 2 * n] + w[:n]},
        {"type": "ineq", "fun": lambda w: w[-1] - w[:n]},
        {"type": "ineq", "fun": lambda w: w[-1] + w[:n]},
    ]
    w0 = np.concatenate([v, np.abs(v), [np.abs(v).max()]])
    out = scipy.optimize.minimize(
        f, w0, constraints=cons, method="SLSQP", options={"ftol": 1e-15, "maxiter": 1000}
    )
    return out.x[:n]


def _normal(getkey, shape):
    # numpy draws seeded from the test's keys: a `jr` draw per new shape compiles threefry
    seed = int(np.asarray(jax.random.key_data(getkey())).ravel()[-1])
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape))


_project = jax.jit(project_l1_ball)
_linf = jax.jit(prox_row_l1_linf)
_count = jax.jit(prox_row_l1_count)


def test_soft_threshold_closed_form():
    v = jnp.array([-3.0, -0.5, 0.0, 0.2, 2.0])
    np.testing.assert_allclose(soft_threshold(v, 1.0), [-2.0, 0.0, 0.0, 0.0, 1.0])
    assert soft_threshold(v.astype(jnp.float32), 1.0).dtype == jnp.float32


def test_project_l1_ball_matches_brute_force(getkey):
    for z in (0.3, 1.0, 2.5):
        v = np.asarray(_normal(getkey, (6,)))
        w = np.asarray(_project(jnp.asarray(v), z))
        assert np.abs(w).sum() <= z + 1e-9
        if np.abs(v).sum() > z:
            np.testing.assert_allclose(np.abs(w).sum(), z, rtol=1e-12)
        np.testing.assert_allclose(w, _brute_l1_ball(v, z), atol=1e-6)


def test_project_l1_ball_inside_and_zero_radius(getkey):
    v = 0.1 * _normal(getkey, (6,))
    np.testing.assert_array_equal(_project(v, 10.0), v)
    np.testing.assert_array_equal(_project(v, 0.0), jnp.zeros(6))
    np.testing.assert_array_equal(_project(jnp.zeros(6), 0.0), jnp.zeros(6))


def test_prox_l1_linf_matches_joint_brute_force(getkey):
    for t1, t2 in ((0.1, 0.5), (0.3, 2.0), (0.0, 1.0), (0.5, 0.0)):
        v = np.asarray(_normal(getkey, (5,)))
        w = np.asarray(_linf(jnp.asarray(v), t1, t2))
        np.testing.assert_allclose(w, _brute_l1_linf(v, t1, t2), atol=1e-5)

        # Prox fixed point: w = prox(w + (v - w)) trivially; check optimality of the composition:
        # the objective at w is below that at random perturbations.
        def obj(x, v=v, t1=t1, t2=t2):
            return 0.5 * np.sum((x - v) ** 2) + t1 * np.abs(x).sum() + t2 * np.abs(x).max()

        rng = np.random.default_rng(0)
        assert all(obj(w) <= obj(w + 1e-3 * rng.normal(size=5)) + 1e-12 for _ in range(50))


def test_prox_count_is_better_of_zero_and_soft(getkey):
    def row_obj(x, v, t1, t0):
        return 0.5 * np.sum((x - v) ** 2) + t1 * np.abs(x).sum() + t0 * float(np.any(x != 0))

    for t0 in (0.01, 0.5, 2.0, 5.0):
        v = np.asarray(_normal(getkey, (7,)))
        t1 = 0.3
        soft = np.sign(v) * np.maximum(np.abs(v) - t1, 0)
        best = min((np.zeros(7), soft), key=lambda x: row_obj(x, v, t1, t0))
        np.testing.assert_array_equal(np.asarray(_count(jnp.asarray(v), t1, t0)), best)


def test_prox_jit_eager_vmap_grad(getkey):
    V = _normal(getkey, (3, 6))
    # eager == jit once (on the count prox: the l1-ball sort costs many eager compiles);
    # vmap == a loop of jitted calls
    np.testing.assert_allclose(
        prox_row_l1_count(V[0], 0.2, 0.7), _count(V[0], 0.2, 0.7), rtol=1e-12
    )
    loop = jnp.stack([_linf(v, 0.2, 0.7) for v in V])
    batched = jax.jit(jax.vmap(prox_row_l1_linf, in_axes=(0, None, None)))(V, 0.2, 0.7)
    np.testing.assert_allclose(batched, loop, rtol=1e-12)
    check_grads(
        jax.jit(lambda v: prox_row_l1_linf(v, 0.2, 0.7)), (V[1],), order=1, modes=["rev"], eps=1e-6
    )


def test_prox_float32_preserved():
    v = jnp.array([1.0, -2.0, 0.5], jnp.float32)
    assert _linf(v, 0.1, 0.3).dtype == jnp.float32
    assert _count(v, 0.1, 0.3).dtype == jnp.float32


def test_bad_penalty_message():
    from jaxgen.dictionary import padl_objective

    with pytest.raises(ValueError, match="`penalty` must be one of"):
        padl_objective(
            jnp.zeros((2, 3)), jnp.zeros((2, 1)), jnp.zeros((1, 3)), 0.1, 0.1, penalty="l0"
        )
