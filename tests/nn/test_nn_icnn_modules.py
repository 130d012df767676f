"""ICNN / ReLUPlusNet / ReLUNet: shapes, depth convention, transformations, constraints, errors."""

import chex
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest
from jax.test_util import check_grads

from jaxgen.core import make_step
from jaxgen.nn import (
    ICNN,
    BoxSampler,
    ReLUNet,
    ReLUPlusNet,
    center_biases,
    check_constraints,
    fit_on_box,
    icnn_max_exact,
    max_n,
    nonneg_projection,
    project_nonneg,
    squared_error_loss,
)

CLASSES = [ReLUNet, ReLUPlusNet, ICNN]
# ICNN is the default-run case; ReLUNet and ReLUPlusNet keep fast tests elsewhere (convexity,
# monotonicity, corner floor), so their copies of the generic module tests run with -m slow.
CLASSES_FAST_ICNN = [
    pytest.param(ReLUNet, marks=pytest.mark.slow),
    pytest.param(ReLUPlusNet, marks=pytest.mark.slow),
    ICNN,
]


# Test data come from numpy (a `jr.normal` per new shape costs a threefry compile); models share
# a few architectures so their compiled initialisers and calls are reused across tests.
ARCH = (3, (5, 4, 2))


def _data(seed, shape, low=None, high=None):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) if low is None else rng.uniform(low, high, shape)
    return jnp.asarray(x)


_batched = eqx.filter_jit(lambda m, x: jax.vmap(m)(x))


def _min_constrained(model):
    ws, w = model.effective_weights()
    return min([float(jnp.min(v)) for v in ws] + [float(jnp.min(w))])


@pytest.mark.parametrize("cls", CLASSES_FAST_ICNN)
def test_depth_convention_shapes_dtype(cls, getkey):
    model = cls(*ARCH, key=getkey())
    assert model.n_hidden == 3 and model.depth == 4
    x = _data(0, (3,))
    assert model(x).shape == ()
    m32 = cls(3, [4], key=getkey(), dtype=jnp.float32)
    assert m32(x.astype(jnp.float32)).dtype == jnp.float32
    assert m32.depth == 2


@pytest.mark.parametrize("cls", CLASSES_FAST_ICNN)
def test_eager_jit_vmap_grad(cls, getkey):
    model = cls(*ARCH, key=getkey())
    xs = _data(1, (5, 3))
    eager = jnp.stack([model(x) for x in xs])
    batched = eqx.filter_jit(jax.vmap(model))(xs)
    chex.assert_trees_all_close(batched, eager, rtol=1e-12, atol=1e-12)
    chex.assert_trees_all_close(eqx.filter_jit(model)(xs[0]), model(xs[0]), rtol=1e-12)
    # piecewise linear: finite differences agree away from kinks (random point, small eps)
    check_grads(jax.jit(lambda x: model(x)), (xs[0],), order=1, modes=["rev"], eps=1e-6)


def test_softplus_weights_positive_and_init_scale(getkey):
    model = ICNN(3, (16,) * 3, key=getkey())  # the architectures of test_nn_icnn_checks
    assert _min_constrained(model) > 0
    xs = _data(2, (256, 4), -1.0, 1.0)
    out = _batched(model, xs[:, :3])
    assert float(jnp.std(out)) < 10.0  # mean-1/fan_in init keeps activations O(1) with depth
    plus = ReLUPlusNet(4, (16,) * 3, key=getkey())
    assert float(jnp.max(jnp.abs(_batched(plus, xs)))) < 10.0
    # the init rule: effective non-negative entries exp(0.5 N(0,1)) / fan_in, He-normal skips
    eff = np.concatenate([np.ravel(v) for v in model.effective_weights()[0]]) * 16
    np.testing.assert_allclose(np.mean(np.log(eff)), 0.0, atol=0.07)  # 512 entries: 3 se
    np.testing.assert_allclose(np.std(np.log(eff)), 0.5, atol=0.05)
    np.testing.assert_allclose(np.std(np.asarray(model.A[0])), np.sqrt(2 / 3), rtol=0.15)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [ICNN, ReLUPlusNet])
def test_projection_after_each_optax_update_is_exact(cls, getkey):
    """Check 6: every step of Adam chained with nonneg_projection lands on W >= 0 exactly.
    (Fast version: test_nn_icnn_checks.py::test_corner_floor_after_training, project case.)"""
    model = cls(3, (8, 8), key=getkey(), mode="project")
    opt = optax.chain(optax.adam(0.3), nonneg_projection())
    state = opt.init(eqx.filter(model, eqx.is_inexact_array))
    sampler = BoxSampler(max_n, 3, 64)
    step = eqx.filter_jit(make_step)
    zeros = 0
    for i in range(15):
        model, state, _ = step(
            model,
            state,
            sampler(jr.fold_in(getkey(), i)),
            getkey(),
            loss_fn=squared_error_loss,
            optimizer=opt,
        )
        assert _min_constrained(model) >= 0.0
        ws, w = model.effective_weights()
        zeros += sum(int(jnp.sum(v == 0)) for v in (*ws, w))
    assert zeros > 0  # the projection was active (exact zeros appear)


@eqx.filter_jit
def _overshoot(model):
    params = eqx.filter(model, eqx.is_inexact_array)
    push = jax.tree_util.tree_map(lambda v: -2.0 * jnp.abs(v) - 1.0, params)
    proj = nonneg_projection()
    upd, _ = proj.update(push, proj.init(params), params)
    return eqx.apply_updates(model, upd), eqx.apply_updates(model, push)


def test_project_nonneg_and_check_constraints(getkey):
    model = ICNN(2, (3, 3), key=getkey(), mode="project")
    bad = eqx.tree_at(lambda m: m.w_raw, model, -jnp.ones(3))
    with pytest.raises(Exception, match="constrained .* weight is negative"):
        jax.block_until_ready(jax.jit(lambda m: check_constraints(m).w_raw)(bad))
    fixed = project_nonneg(bad)
    assert float(jnp.min(fixed.w_raw)) == 0.0
    # the optax transformation: an update overshooting below 0 lands exactly on 0
    landed, pushed = _overshoot(model)
    assert all(bool(jnp.all(v == 0.0)) for v in (*landed.W_raw, landed.w_raw))
    chex.assert_trees_all_close(landed.A, pushed.A)  # free weights move unprojected
    chex.assert_trees_all_close(check_constraints(fixed).w_raw, fixed.w_raw)
    # softplus modules are left alone
    soft = ICNN(2, (3,), key=getkey())
    assert project_nonneg(soft) is not None
    chex.assert_trees_all_close(project_nonneg(soft).w_raw, soft.w_raw)


def test_from_weights_roundtrip_and_nonconvex_rejected():
    A = [np.array([[1.0, -1.0]]), np.array([[0.5, 0.5]])]
    b = [np.zeros(1), np.zeros(1)]
    W = [np.array([[-0.5]])]
    with pytest.raises(ValueError, match=r"`W\[0\]` has negative entries"):
        ICNN.from_weights(A, b, W, np.ones(1), np.zeros(2))
    with pytest.raises(ValueError, match="`w` has negative entries"):
        ICNN.from_weights(A, b, [np.ones((1, 1))], -np.ones(1), np.zeros(2))
    proj = ICNN.from_weights(A, b, W, np.ones(1), np.zeros(2), project=True)
    assert float(proj.W_raw[0][0, 0]) == 0.0
    with pytest.raises(ValueError, match="cannot represent"):
        ICNN.from_weights(A, b, [np.zeros((1, 1))], np.ones(1), np.zeros(2), mode="softplus")
    soft = ICNN.from_weights(A, b, [np.full((1, 1), 0.3)], np.ones(1), np.zeros(2), mode="softplus")
    chex.assert_trees_all_close(soft.effective_weights()[0][0], jnp.full((1, 1), 0.3), rtol=1e-12)
    with pytest.raises(ValueError, match=r"`weights\[1\]` has negative entries"):
        ReLUPlusNet.from_weights(
            [np.ones((2, 2)), -np.ones((1, 2))], [np.zeros(2), np.zeros(1)], np.ones(1)
        )
    with pytest.raises(ValueError, match=r"`a` must have shape \(2,\)"):
        ICNN.from_weights(A, b, [np.ones((1, 1))], np.ones(1), np.zeros(3))
    with pytest.raises(ValueError, match="L-1 hidden matrices"):
        ICNN.from_weights(A, b, [], np.ones(1), np.zeros(2))
    with pytest.raises(ValueError, match="must be non-empty and of equal length"):
        ReLUNet.from_weights([np.ones((2, 2))], [], np.ones(2))
    with pytest.raises(ValueError, match="must be non-empty and of"):
        ReLUPlusNet.from_weights([], [], np.ones(2))
    with pytest.raises(ValueError, match="must be 2-D"):
        ReLUNet.from_weights([np.ones(2)], [np.zeros(2)], np.ones(2))
    with pytest.raises(ValueError, match="must be 2-D"):
        ReLUPlusNet.from_weights([np.ones(2)], [np.zeros(2)], np.ones(2))
    with pytest.raises(ValueError, match="common n"):
        ICNN.from_weights(
            [np.ones((1, 2)), np.ones((1, 3))], b, [np.ones((1, 1))], np.ones(1), np.zeros(2)
        )


@pytest.mark.parametrize("cls", CLASSES)
def test_bad_sizes(cls, getkey):
    with pytest.raises(ValueError, match=r"`widths\[1\]` must be an int >= 1, got -2"):
        cls(2, (3, -2), key=getkey())
    # TypeErrors: the jaxtyping/beartype hook may answer first; both name the argument.
    with pytest.raises(TypeError, match="widths"):
        cls(2, (2.5,), key=getkey())
    with pytest.raises(TypeError, match="widths"):
        cls(2, 4, key=getkey())
    with pytest.raises(ValueError, match="non-empty sequence"):
        cls(2, (), key=getkey())
    with pytest.raises(ValueError, match="`in_size` must be an int >= 1"):
        cls(0, (3,), key=getkey())
    with pytest.raises(TypeError, match="in_size"):
        cls(2.0, (3,), key=getkey())
    model = cls(3, (4,), key=getkey())
    with pytest.raises(ValueError, match=r"`x` must have shape \(3,\)"):
        model(jnp.ones(4))


@pytest.mark.parametrize("cls", [ICNN, ReLUPlusNet])
def test_bad_mode(cls, getkey):
    with pytest.raises(ValueError, match="`mode` must be one of"):
        cls(2, (3,), key=getkey(), mode="square")


def test_nonneg_projection_needs_params():
    with pytest.raises(ValueError, match="needs `params`"):
        nonneg_projection().update({}, nonneg_projection().init({}))


@pytest.mark.slow
def test_fit_on_box_trains_and_projects(getkey):
    model = icnn_max_exact(3)
    noisy = eqx.tree_at(lambda m: m.w_raw, model, jnp.array([-0.2]))  # infeasible start
    res = fit_on_box(
        noisy, max_n, key=getkey(), num_steps=3, batch_size=16, optimizer=optax.adam(1e-3)
    )
    assert float(res.model.w_raw[0]) >= 0.0 and res.losses.shape == (3,)


def test_fit_on_box_bad_input(getkey):
    # (fast training through fit_on_box with projection: test_corner_floor_after_training)
    with pytest.raises(TypeError, match="`model` must be a jaxgen.nn network"):
        fit_on_box(lambda x: x, max_n, key=getkey(), num_steps=1, optimizer=optax.adam(1e-3))
    with pytest.raises(ValueError, match="need `high` > `low`"):
        BoxSampler(max_n, 2, 4, low=1.0, high=0.0)


def test_center_biases_zero_mean_preactivations(getkey):
    x = _data(3, (64, 3), -1.0, 1.0)
    icnn = ICNN(3, (5, 4), key=getkey())
    m = center_biases(icnn, x)
    # float64 numpy reference of the pre-activations (no eager jnp ops to compile)
    xn = np.asarray(x)
    A1, A2, b1, b2 = (np.asarray(v) for v in (*m.A, *m.b))
    W2 = np.asarray(m.effective_weights()[0][0])
    pre1 = xn @ A1.T + b1[None, :]
    pre2 = np.maximum(pre1, 0) @ W2.T + xn @ A2.T + b2[None, :]
    np.testing.assert_allclose(pre1.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(pre2.mean(0), 0.0, atol=1e-12)
    # only the free biases move: constrained weights and skips are untouched
    chex.assert_trees_all_equal(
        (m.A, m.W_raw, m.w_raw, m.a), (icnn.A, icnn.W_raw, icnn.w_raw, icnn.a)
    )
    plus = center_biases(ReLUPlusNet(3, (6, 6), key=getkey()), x)
    (W1, W2), _ = plus.effective_weights()
    h1 = xn @ np.asarray(W1).T + np.asarray(plus.biases[0])[None, :]
    h2 = np.maximum(h1, 0) @ np.asarray(W2).T + np.asarray(plus.biases[1])[None, :]
    np.testing.assert_allclose(h2.mean(0), 0.0, atol=1e-12)
    with pytest.raises(ValueError, match="`x` must have shape"):
        center_biases(icnn, jnp.zeros((8, 4)))
    with pytest.raises(TypeError, match="`model` must be"):
        center_biases(object(), x)
