"""NcAE and constrained autoencoders: exactness by construction."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

from jaxgen.autoencoders import (
    BiorthoLayer,
    ConcatAE,
    ConcatCAE,
    ConstrainedAE,
    FiLMAE,
    FiLMCAE,
    MLPAutoencoder,
    NcAE,
    context_lipschitz,
    decoder_condition,
    hyperbolic_pair,
    idempotency_error,
    left_inverse_error,
    ncae_loss,
    procrustes_consistency,
    recon_rel_mse,
)
from jaxgen.core import fit, make_step, minibatches

DIMS = (32, 16, 8, 2)  # the paper-mode widths
SMALL = (12, 6, 2)  # elsewhere: the same code paths at a fraction of the compile time


@eqx.filter_jit
def _idem(model, X, C):
    return idempotency_error(model.project, X, C)


_left = eqx.filter_jit(left_inverse_error)


@eqx.filter_jit
def _idem_and_left(model, X, C):
    # both exactness metrics in one compiled program (one compile per model and dtype)
    return idempotency_error(model.project, X, C), left_inverse_error(model, X, C)


@eqx.filter_jit
def _idem_each(models, X, C):
    return {name: idempotency_error(m.project, X, C) for name, m in models.items()}


@eqx.filter_jit
def _randomise(model, key, scale=0.5):
    """Perturb every inexact array (a model far from its initialisation).

    One normal draw for all parameters (ravelled): one compiled program per model structure,
    and a cheap one (a random draw per leaf compiles a sampler per leaf).
    """
    params, static = eqx.partition(model, eqx.is_inexact_array)
    flat, unravel = ravel_pytree(params)
    return eqx.combine(unravel(flat + scale * jr.normal(key, flat.shape, flat.dtype)), static)


@eqx.filter_jit
def _to_float32(model):
    return jax.tree_util.tree_map(
        lambda v: v.astype(jnp.float32) if eqx.is_inexact_array(v) else v, model
    )


def test_activation_pair_inverse_and_slopes():
    for dtype, tol in ((jnp.float32, 1e-5), (jnp.float64, 1e-12)):
        plus, minus = hyperbolic_pair(math.pi / 8)
        u = jnp.linspace(-50, 50, 2001, dtype=dtype)
        err = jnp.max(jnp.abs(minus(plus(u)) - u) / (1 + jnp.abs(u)))
        assert float(err) <= tol and plus(u).dtype == dtype
    plus, _ = hyperbolic_pair(math.pi / 8)
    big = 1e6
    np.testing.assert_allclose(
        (plus(big + 1.0) - plus(big)), math.tan(math.pi / 4 + math.pi / 8), rtol=1e-6
    )
    np.testing.assert_allclose(
        (plus(-big) - plus(-big - 1.0)), math.tan(math.pi / 4 - math.pi / 8), rtol=1e-6
    )
    np.testing.assert_allclose(plus(0.0), 0.5946, atol=1e-4)
    with pytest.raises(ValueError, match="alpha"):
        hyperbolic_pair(math.pi / 4)


def test_biorthogonality_after_random_optimiser_steps(getkey):
    layer = BiorthoLayer(12, 4, key=getkey())
    np.testing.assert_allclose(layer.psi_T() @ layer.Phi, jnp.eye(4), atol=1e-12)
    np.testing.assert_allclose(layer.decode(jnp.zeros(4)), jnp.zeros(12), atol=1e-12)

    def loss(m, batch, key):
        return jnp.sum(jnp.sin(m.Phi) * batch) + jnp.sum(m.X**2) + jnp.sum(m.b)

    opt = optax.adam(0.05)
    step = eqx.filter_jit(eqx.debug.assert_max_traces(make_step, max_traces=1))
    state = opt.init(eqx.filter(layer, eqx.is_inexact_array))
    for _ in range(100):
        layer, state, _ = step(
            layer, state, jr.normal(getkey(), (12, 4)), getkey(), loss_fn=loss, optimizer=opt
        )
    np.testing.assert_allclose(layer.psi_T() @ layer.Phi, jnp.eye(4), atol=1e-5)


@pytest.mark.parametrize(
    "mode, dims",
    [
        pytest.param("slope_shift", DIMS, marks=pytest.mark.slow, id="slope_shift-spec_widths"),
        pytest.param("slope_shift", SMALL, id="slope_shift"),
        pytest.param("angle", SMALL, id="angle"),
    ],
)
def test_ncae_exact_for_every_context(mode, dims, getkey):
    """Check 3: contexts far outside anything seen, untrained random weights, off-manifold x.

    Exactness holds by construction at any widths: the default run checks both modes at small
    widths; the widths (32, 16, 8, 2) for the paper's mode are the slow twin.
    """
    model = _randomise(NcAE(dims, 1, key=getkey(), mode=mode), getkey(), 0.3)
    C = jr.uniform(getkey(), (64, 1), minval=-10.0, maxval=10.0)
    X = 3.0 * jr.normal(getkey(), (64, dims[0]))
    idem, left = _idem_and_left(model, X, C)
    assert float(idem) <= 1e-11 and float(left) <= 1e-11, (idem, left)
    # float32: a random hyper-network on the cAE's well-conditioned initialisation (training
    # keeps cond(X Phi) small through its penalty; a random X Phi amplifies round-off by cond).
    base = NcAE(dims, 1, key=getkey(), mode=mode)
    base = eqx.tree_at(lambda m: m.hyper, base, _randomise(base.hyper, getkey(), 0.3))
    m32 = _to_float32(base)
    X32, C32 = X.astype(jnp.float32), C.astype(jnp.float32)
    idem, left = _idem_and_left(m32, X32, C32)
    assert float(idem) <= 1e-5 and float(left) <= 1e-5, (idem, left)
    assert jax.eval_shape(m32.project, X32[0], C32[0]).dtype == jnp.float32
    mods = eqx.filter_jit(model.modulation)(C[0])
    assert [s.shape for s, _ in mods] == [(w,) for w in dims[1:]]
    if mode == "slope_shift":
        assert all(float(s.min()) >= 0.05 and float(s.max()) <= 20.0 for s, _ in mods)


def test_projection_jacobian_is_a_rank_r_projection(getkey):
    """Check 4: at a point of M_c, dP_c/dx is idempotent with r unit eigenvalues."""
    model = _randomise(NcAE(SMALL, 1, key=getkey()), getkey(), 0.3)
    c = jnp.array([0.7])

    @eqx.filter_jit
    def jacobian_on_manifold(model, y, c):
        x = model.project(y, c)
        return jax.jacfwd(lambda u: model.project(u, c))(x)

    J = jacobian_on_manifold(model, jr.normal(getkey(), (12,)), c)
    np.testing.assert_allclose(J @ J, J, atol=1e-8 * float(jnp.linalg.norm(J)))
    ev = np.sort(np.abs(np.linalg.eigvals(np.asarray(J))))
    np.testing.assert_allclose(ev[-2:], 1.0, atol=1e-8)
    np.testing.assert_allclose(ev[:-2], 0.0, atol=1e-8)


def test_context_smoothness_and_geometry_metrics(getkey):
    """Check 6, plus the geometry metrics against closed forms."""
    model = _randomise(NcAE(SMALL, 1, key=getkey()), getkey(), 0.3)
    Z = jr.normal(getkey(), (16, 2))
    C = jr.uniform(getkey(), (16, 1))
    a, b = context_lipschitz(model, Z, C, 1e-2), context_lipschitz(model, Z, C, 1e-3)
    assert abs(float(a / b) - 1) < 0.1
    X = eqx.filter_jit(lambda m, z, c: jax.vmap(m.decode)(z, c))(model, Z, C)
    assert float(decoder_condition(model, X, C)) >= 1.0
    R = jnp.array([[0.0, -1.0], [1.0, 0.0]])
    np.testing.assert_allclose(procrustes_consistency(Z, 3 * Z @ R.T + 1), 0.0, atol=1e-12)
    assert float(procrustes_consistency(Z, jr.normal(getkey(), (16, 2)))) > 0.1
    np.testing.assert_allclose(recon_rel_mse(model.project, X, C), 0.0, atol=1e-20)


def test_baselines_interface_and_which_are_exact(getkey):
    X = jr.normal(getkey(), (32, 12))
    C = jr.normal(getkey(), (32, 1))
    exact = {"B4": ConstrainedAE(SMALL, key=getkey())}
    inexact = {
        "B1": MLPAutoencoder(SMALL, 1, key=getkey()),
        "B2": ConcatAE(SMALL, 1, key=getkey()),
        "B3": FiLMAE(SMALL, 1, key=getkey()),
        "B5": ConcatCAE(SMALL, 1, key=getkey()),
        "B6": FiLMCAE(SMALL, 1, key=getkey()),
    }
    # all six perturbed and evaluated in one compiled program each (not one per model)
    exact, inexact = _randomise((exact, inexact), getkey(), 0.3)
    for name, err in _idem_each(exact, X, C).items():
        assert float(err) <= 1e-11, name
    for name, err in _idem_each(inexact, X, C).items():
        assert jax.eval_shape(jax.vmap(inexact[name].project), X, C).shape == X.shape
        assert float(err) >= 1e-3, (name, float(err))


def test_training_by_fit_eager_jit_vmap_and_resume(getkey, tmp_path):
    X = jr.normal(getkey(), (256, 8))
    C = jr.uniform(getkey(), (256, 1))
    model = NcAE((8, 4, 2), 1, key=getkey())
    batches = minibatches((X, C), 64)
    opt = optax.adam(1e-2)
    eager = model.project(X[0], C[0])
    project = eqx.filter_jit(model.project)
    np.testing.assert_allclose(project(X[0], C[0]), eager, rtol=1e-12)
    loop = jnp.stack([project(x, c) for x, c in zip(X[:4], C[:4], strict=True)])  # eager == jit
    batched = eqx.filter_jit(lambda m, x, c: jax.vmap(m.project)(x, c))(model, X[:4], C[:4])
    np.testing.assert_allclose(batched, loop, rtol=1e-12)
    key = getkey()
    kw = dict(key=key, checkpoint_dir=str(tmp_path), checkpoint_every=10, progress=False)
    whole = fit(ncae_loss, model, batches, opt, num_steps=20, key=key, progress=False)
    assert whole.losses[-5:].mean() < whole.losses[:5].mean()
    fit(ncae_loss, model, batches, opt, num_steps=10, **kw)
    resumed = fit(ncae_loss, model, batches, opt, num_steps=20, **kw)
    np.testing.assert_allclose(resumed.losses, whole.losses, rtol=1e-10)


def test_bad_inputs(getkey):
    with pytest.raises(ValueError, match="non-increasing"):
        NcAE((4, 8, 2), 1, key=getkey())
    with pytest.raises(ValueError, match="`dims`"):
        ConstrainedAE((4,), key=getkey())
    with pytest.raises(ValueError, match="alpha"):
        NcAE((4, 2), 1, key=getkey(), alpha=1.0)
    with pytest.raises(ValueError, match="s_min"):
        NcAE((4, 2), 1, key=getkey(), s_min=0.0)
    with pytest.raises(ValueError, match="mode"):
        NcAE((4, 2), 1, key=getkey(), mode="gain")
    model = NcAE((4, 2), 1, key=getkey())
    with pytest.raises((ValueError, TypeError), match="x"):
        model.project(jnp.zeros(3), jnp.zeros(1))
    with pytest.raises((ValueError, TypeError), match="c"):
        model.project(jnp.zeros(4), jnp.zeros(2))
    with pytest.raises(Exception, match="NaN or inf"):
        model.project(jnp.array([0.0, jnp.nan, 0.0, 0.0]), jnp.zeros(1))


@pytest.mark.slow
def test_trained_concat_and_film_caes_are_not_idempotent():
    """Check 5: after training on pendulum manifolds, ConcatCAE and FiLMCAE fail idempotency
    (>= 1e-3) on held-out contexts while NcAE, trained the same way, stays exact."""
    from jaxgen.data import pendulum_manifold_dataset

    X, C, _ = pendulum_manifold_dataset(jr.key(0), [0.2, 1.0, 5.0], n_amp=12, n_t=12)
    Xh, Ch, _ = pendulum_manifold_dataset(jr.key(1), [0.5, 2.0], n_amp=6, n_t=6)
    batches = minibatches((jnp.asarray(X), jnp.asarray(C)), 128)
    errors = {}
    for name, cls in (("NcAE", NcAE), ("ConcatCAE", ConcatCAE), ("FiLMCAE", FiLMCAE)):
        model = cls(DIMS, 1, key=jr.key(2))
        res = fit(
            ncae_loss,
            model,
            batches,
            optax.adam(3e-3),
            num_steps=800,
            key=jr.key(3),
            progress=False,
        )
        assert res.losses[-1] < 0.5 * res.losses[0], name  # it trained
        errors[name] = float(_idem(res.model, jnp.asarray(Xh), jnp.asarray(Ch)))
    assert errors["NcAE"] <= 1e-10
    assert errors["ConcatCAE"] >= 1e-3 and errors["FiLMCAE"] >= 1e-3, errors
