"""Shape checkers and the paper's guarantees (checks 3, 4, 5, 7 of the spec)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

from jaxgen.nn import (
    ICNN,
    ReLUNet,
    ReLUPlusNet,
    convexity_gap,
    corner_floor,
    corner_points,
    fit_on_box,
    icnn_max_exact,
    max_n,
    monotonicity_gap,
    project_nonneg,
    relu_max_tree,
    sup_error,
    supermodularity_gap,
)


@eqx.filter_jit
def _gaps(model, x, y):
    f = jax.vmap(model)
    return (convexity_gap(model, x, y), supermodularity_gap(model, x, y),
            monotonicity_gap(model, x, y), f(0.5 * (x + y)))


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow),
                                  pytest.param(2, marks=pytest.mark.slow)])
def test_random_icnn_is_convex_and_relu_net_is_not(seed):
    key = jr.key(seed)
    kx, ky, km, kr = jr.split(key, 4)
    x = jr.normal(kx, (10_000, 3))
    y = jr.normal(ky, (10_000, 3))
    icnn = ICNN(3, (16, 16, 16), key=km)
    gap, _, _, fm = _gaps(icnn, x, y)
    assert bool(jnp.all(gap <= 1e-5 * (1 + jnp.abs(fm))))
    relu = ReLUNet(3, (16, 16, 16), key=kr)
    gap_relu = _gaps(relu, x, y)[0]
    assert float(jnp.max(gap_relu)) > 1e-3  # the check can fail: it catches non-convexity


@pytest.mark.parametrize("mode", ["softplus", pytest.param("project", marks=pytest.mark.slow)])
def test_random_relu_plus_is_monotone_supermodular(mode, getkey):
    n = 4
    model = ReLUPlusNet(n, (16, 16, 16), key=getkey(), mode=mode)
    x = jr.uniform(getkey(), (10_000, n))
    y = jr.uniform(getkey(), (10_000, n))
    _, sup_gap, mono_gap, _ = _gaps(model, x, y)
    assert float(jnp.min(sup_gap)) >= -1e-5
    assert float(jnp.min(mono_gap)) >= -1e-5
    # coordinatewise steps
    delta = 0.05 * jnp.eye(n)
    f = jax.jit(jax.vmap(model))
    fx = f(x[:2000])
    for i in range(n):
        assert float(jnp.min(f(x[:2000] + delta[i][None, :]) - fx)) >= -1e-5
    # and the checkers do catch a non-monotone, submodular function (MAX_n)
    assert float(jnp.min(supermodularity_gap(max_n, x, y))) < -0.1
    assert float(jnp.min(monotonicity_gap(lambda z: -max_n(z), x, y))) < -0.1


CORNER_CASES = [(1, "softplus", 150), pytest.param(2, "project", 500, marks=pytest.mark.slow),
                pytest.param(3, "softplus", 500, marks=pytest.mark.slow)]


@pytest.mark.parametrize("n_hidden, mode, steps", CORNER_CASES)
def test_corner_floor_after_training(n_hidden, mode, steps, getkey):
    """Check 5: no ReLU+ net (depth 2-4) gets within 1/4 of MAX_n at the corners after fitting."""
    n = 3
    assert float(corner_floor(relu_max_tree(n), n)) <= 1e-12  # unconstrained: floor is 0
    assert float(corner_floor(icnn_max_exact(n), n)) <= 1e-12
    model = ReLUPlusNet(n, (16,) * n_hidden, key=getkey(), mode=mode)
    res = fit_on_box(model, max_n, key=getkey(), num_steps=steps, batch_size=128,
                     optimizer=optax.adam(1e-2), low=0.0, high=1.0)
    assert res.losses[-1] < res.losses[0]  # it did train
    assert float(corner_floor(res.model, n)) >= 0.25 - 1e-4
    assert float(corner_floor(res.model, n, low=-1.0, high=1.0)) >= 0.5 - 1e-4
    with pytest.raises(ValueError, match="need `high` > `low`"):
        corner_points(3, low=1.0, high=1.0)


@pytest.mark.slow
def test_basin_of_exact_icnn(getkey):
    """Check 7: from a perturbed depth-n exact ICNN, Adam finds RMSE <= 5e-3 on MAX_4."""
    n = 4
    exact = icnn_max_exact(n)
    params, static = eqx.partition(exact, eqx.is_inexact_array)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    keys = jr.split(getkey(), len(leaves))
    leaves = [v + 0.01 * jr.normal(k, v.shape, v.dtype) for v, k in zip(leaves, keys)]
    model = project_nonneg(eqx.combine(jax.tree_util.tree_unflatten(treedef, leaves), static))
    res = fit_on_box(model, max_n, key=getkey(), num_steps=500, batch_size=256,
                     optimizer=optax.adam(1e-3))
    x = jr.uniform(getkey(), (20_000, n), minval=-1, maxval=1)
    rmse = float(jnp.sqrt(jnp.mean((jax.jit(jax.vmap(res.model))(x) - max_n(x)) ** 2)))
    assert rmse <= 5e-3


def test_sup_error_finds_the_corner(getkey):
    """sup |MAX_2 - 0| on [-1,1]^2 is 1 (at (1,1) or (-1,-1)); ascent reaches it."""
    val = sup_error(lambda x: jnp.max(x), lambda x: jnp.zeros((), x.dtype), getkey(), 2,
                    num_samples=64, num_starts=8, num_ascent=60)
    np.testing.assert_allclose(float(val), 1.0, atol=1e-9)
    with pytest.raises(ValueError, match="`num_samples` must be an int >= 8"):
        sup_error(max_n, max_n, getkey(), 2, num_samples=4, num_starts=8)
    # the jaxtyping hook (TypeError) may answer before our ValueError; both name the argument
    with pytest.raises((TypeError, ValueError), match="x"):
        convexity_gap(max_n, jnp.ones(3), jnp.ones(3))
    with pytest.raises((TypeError, ValueError), match="y"):
        supermodularity_gap(max_n, jnp.ones((2, 3)), jnp.ones((3, 3)))
