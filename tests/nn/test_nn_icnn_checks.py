"""Shape checkers and the paper's guarantees."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

from jaxgen.core import make_step
from jaxgen.nn import (
    ICNN,
    BoxSampler,
    ReLUNet,
    ReLUPlusNet,
    convexity_gap,
    corner_floor,
    corner_points,
    fit_on_box,
    icnn_max_exact,
    max_n,
    monotonicity_gap,
    nonneg_projection,
    project_nonneg,
    relu_max_tree,
    squared_error_loss,
    sup_error,
    supermodularity_gap,
)


def _data(seed, shape, low=None, high=None):
    # numpy draws: a `jr` draw per new shape would cost a threefry compile
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) if low is None else rng.uniform(low, high, shape)
    return jnp.asarray(x)


@eqx.filter_jit
def _convexity(model, x, y):
    return convexity_gap(model, x, y), jax.vmap(model)(0.5 * (x + y))


@eqx.filter_jit
def _order_gaps(model, x, y):
    return supermodularity_gap(model, x, y), monotonicity_gap(model, x, y)


@pytest.mark.parametrize(
    "seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)]
)
def test_random_icnn_is_convex_and_relu_net_is_not(seed):
    km, kr = jr.split(jr.key(seed))
    x = _data(10 * seed, (10_000, 3))
    y = _data(10 * seed + 1, (10_000, 3))
    icnn = ICNN(3, (16, 16, 16), key=km)
    gap, fm = _convexity(icnn, x, y)
    assert bool(jnp.all(gap <= 1e-5 * (1 + jnp.abs(fm))))
    relu = ReLUNet(3, (16, 16, 16), key=kr)
    gap_relu = _convexity(relu, x, y)[0]
    assert float(jnp.max(gap_relu)) > 1e-3  # the check can fail: it catches non-convexity


@pytest.mark.parametrize("mode", ["softplus", pytest.param("project", marks=pytest.mark.slow)])
def test_random_relu_plus_is_monotone_supermodular(mode, getkey):
    n = 4
    model = ReLUPlusNet(n, (16, 16, 16), key=getkey(), mode=mode)
    x = _data(5, (10_000, n), 0.0, 1.0)
    y = _data(6, (10_000, n), 0.0, 1.0)
    sup_gap, mono_gap = _order_gaps(model, x, y)
    assert float(jnp.min(sup_gap)) >= -1e-5
    assert float(jnp.min(mono_gap)) >= -1e-5
    # coordinatewise steps
    delta = 0.05 * jnp.eye(n)
    f = jax.jit(jax.vmap(model))
    steps = jnp.concatenate([x[:2000]] + [x[:2000] + delta[i][None, :] for i in range(n)])
    fs = f(steps).reshape(n + 1, 2000)
    assert float(jnp.min(fs[1:] - fs[:1])) >= -1e-5
    # and the checkers do catch a non-monotone, submodular function (MAX_n)
    assert float(jnp.min(_max_gaps(x, y)[0])) < -0.1
    assert float(jnp.min(_max_gaps(x, y)[1])) < -0.1


def _neg_max(z):
    return -max_n(z)


@jax.jit
def _max_gaps(x, y):
    return supermodularity_gap(max_n, x, y), monotonicity_gap(_neg_max, x, y)


CORNER_CASES = [
    (1, "project", 150),
    pytest.param(2, "softplus", 500, marks=pytest.mark.slow),
    pytest.param(3, "softplus", 500, marks=pytest.mark.slow),
]


def _train_projected_every_step(model, n, steps, key):
    """Check 6 on the way: Adam chained with `nonneg_projection`, one jitted step, feasibility
    asserted after every update (exact zeros from a clipping update: see
    test_nn_icnn_modules.py::test_project_nonneg_and_check_constraints)."""
    opt = optax.chain(optax.adam(1e-2), nonneg_projection())
    state = opt.init(eqx.filter(model, eqx.is_inexact_array))
    sampler = BoxSampler(max_n, n, 128, low=0.0, high=1.0)
    step = eqx.filter_jit(make_step)
    losses = []
    for i in range(steps):
        model, state, loss = step(
            model,
            state,
            sampler(jr.fold_in(key, i)),
            key,
            loss_fn=squared_error_loss,
            optimizer=opt,
        )
        ws, w = model.effective_weights()
        mins = [float(jnp.min(v)) for v in (*ws, w)]
        assert min(mins) >= 0.0, f"step {i}: a constrained weight is negative"
        losses.append(float(loss))
    return model, losses


@pytest.mark.parametrize("n_hidden, mode, steps", CORNER_CASES)
def test_corner_floor_after_training(n_hidden, mode, steps, getkey):
    """Check 5: no ReLU+ net (depth 2-4) gets within 1/4 of MAX_n at the corners after fitting.
    The fast case trains with projection after each optax update (check 6); the slow ones train
    softplus nets through `fit_on_box`."""
    n = 3
    assert float(corner_floor(relu_max_tree(n), n)) <= 1e-12  # unconstrained: floor is 0
    assert float(corner_floor(icnn_max_exact(n), n)) <= 1e-12
    model = ReLUPlusNet(n, (16,) * n_hidden, key=getkey(), mode=mode)
    if mode == "project":
        model, losses = _train_projected_every_step(model, n, steps, getkey())
    else:
        res = fit_on_box(
            model,
            max_n,
            key=getkey(),
            num_steps=steps,
            batch_size=128,
            optimizer=optax.adam(1e-2),
            low=0.0,
            high=1.0,
        )
        model, losses = res.model, [float(v) for v in res.losses]
    assert losses[-1] < losses[0]  # it did train
    assert float(corner_floor(model, n)) >= 0.25 - 1e-4
    assert float(corner_floor(model, n, low=-1.0, high=1.0)) >= 0.5 - 1e-4
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
    leaves = [v + 0.01 * jr.normal(k, v.shape, v.dtype) for v, k in zip(leaves, keys, strict=True)]
    model = project_nonneg(eqx.combine(jax.tree_util.tree_unflatten(treedef, leaves), static))
    res = fit_on_box(
        model, max_n, key=getkey(), num_steps=500, batch_size=256, optimizer=optax.adam(1e-3)
    )
    x = _data(7, (20_000, n), -1.0, 1.0)
    rmse = float(jnp.sqrt(jnp.mean((jax.jit(jax.vmap(res.model))(x) - max_n(x)) ** 2)))
    assert rmse <= 5e-3


def test_sup_error_finds_the_corner(getkey):
    """sup |MAX_2 - 0| on [-1,1]^2 is 1 (at (1,1) or (-1,-1)); ascent reaches it."""
    val = sup_error(
        getkey(),
        lambda x: jnp.max(x),
        lambda x: jnp.zeros((), x.dtype),
        2,
        num_samples=64,
        num_starts=8,
        num_ascent=60,
    )
    np.testing.assert_allclose(float(val), 1.0, atol=1e-9)
    with pytest.raises(ValueError, match="`num_samples` must be an int >= 8"):
        sup_error(getkey(), max_n, max_n, 2, num_samples=4, num_starts=8)
    # the jaxtyping hook (TypeError) may answer before our ValueError; both name the argument
    with pytest.raises((TypeError, ValueError), match="x"):
        convexity_gap(max_n, jnp.ones(3), jnp.ones(3))
    with pytest.raises((TypeError, ValueError), match="y"):
        supermodularity_gap(max_n, jnp.ones((2, 3)), jnp.ones((3, 3)))
