import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.flows import (
    ConditionalAffineCoupling,
    ConditionalMonotoneTanh,
    ConditionalSmoothCouplingFlow,
)


def _perturb(bij, key, scale=0.5):
    # Move away from the identity initialisation so the test can fail. numpy draws seeded from
    # `key` (jax draws, and a ravel/unravel, compile once per shape: seconds of CPU).
    rng = np.random.default_rng(np.asarray(jr.key_data(key)))
    params, static = eqx.partition(bij, eqx.is_inexact_array)
    noisy = jax.tree.map(
        lambda a: jnp.asarray(np.asarray(a) + scale * rng.normal(size=a.shape), a.dtype), params
    )
    return eqx.combine(noisy, static)


@eqx.filter_jit
def _checks(bij, x, xs, c):
    """(z, logdet, inverse(z), slogdet of the autodiff Jacobian, batched z) in one compile."""
    z, logdet = bij.transform_and_log_det(x, c)
    jac = jax.jacobian(lambda y: bij.transform_and_log_det(y, c)[0])(x)
    zb, _ = jax.vmap(bij.transform_and_log_det, in_axes=(0, None))(xs, c)
    return z, logdet, bij.inverse(z, c), jnp.linalg.slogdet(jac)[1], zb


DIM, CDIM = 3, 2


def _make(kind, key):
    # One shape per kind, so that `_checks` compiles twice for the whole file.
    if kind == "tanh":
        return ConditionalMonotoneTanh(DIM, CDIM, num_units=4, width=8, depth=1, key=key)
    if kind == "smooth_flow":
        return ConditionalSmoothCouplingFlow(
            DIM, CDIM, num_blocks=2, num_units=2, width=4, depth=1, key=key
        )
    return ConditionalAffineCoupling(DIM, CDIM, width=8, depth=1, key=key)


@pytest.mark.parametrize("kind", ["tanh", "coupling", "smooth_flow"])
def test_invertible_and_log_det_matches_jacobian(kind, getkey):
    dim, cdim = DIM, CDIM
    bij = _perturb(_make(kind, getkey()), getkey())
    x, c = 2.0 * jr.normal(getkey(), (dim,)), jr.normal(getkey(), (cdim,))
    xs = jr.normal(getkey(), (3, dim))
    z, logdet, x_back, slogdet, zb = _checks(bij, x, xs, c)
    assert np.max(np.abs(np.asarray(z - x))) > 1e-2  # not the identity: the checks can fail
    np.testing.assert_allclose(x_back, x, atol=1e-10)
    np.testing.assert_allclose(logdet, slogdet, rtol=1e-10)
    # vmap == loop (eager == jit: test_eager_equals_jit)
    np.testing.assert_allclose(zb, jnp.stack([_checks(bij, v, xs, c)[0] for v in xs]), rtol=1e-12)


# Eagerly every small op compiles on its own (tanh: ~60 compiles, smooth flow: ~55, coupling:
# ~25): the coupling is the fast case, the elementwise tanh and the composed smooth flow are slow
# twins (their jitted maps keep every check of test_invertible_and_log_det_matches_jacobian).
@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("tanh", marks=pytest.mark.slow),
        "coupling",
        pytest.param("smooth_flow", marks=pytest.mark.slow),
    ],
)
def test_eager_equals_jit(kind, getkey):
    bij = _perturb(_make(kind, getkey()), getkey())
    x, c = 2.0 * jr.normal(getkey(), (DIM,)), jr.normal(getkey(), (CDIM,))
    z, logdet, _, _, _ = _checks(bij, x, jnp.stack([x, x, x]), c)
    ze, le = bij.transform_and_log_det(x, c)
    np.testing.assert_allclose(ze, z, rtol=1e-12)
    np.testing.assert_allclose(le, logdet, rtol=1e-12)


def test_identity_at_init(getkey):
    for bij in (
        _make("tanh", getkey()),
        _make("coupling", getkey()),
        _make("smooth_flow", getkey()),
    ):
        x, c = jr.normal(getkey(), (DIM,)), jr.normal(getkey(), (CDIM,))
        z, logdet, _, _, _ = _checks(bij, x, jnp.stack([x, x, x]), c)
        np.testing.assert_allclose(z, x, atol=1e-14)
        np.testing.assert_allclose(logdet, 0.0, atol=1e-14)


def test_monotone_tanh_inverse_far_out(getkey):
    bij = _perturb(_make("tanh", getkey()), getkey(), 1.0)
    c = jnp.array([0.3, -0.2])
    for x in (jnp.array([-30.0, 0.0, 50.0]), jnp.array([-3.0, 7.0, 0.5])):
        _, _, x_back, _, _ = _checks(bij, x, jnp.stack([x, x, x]), c)
        np.testing.assert_allclose(x_back, x, atol=1e-9)


def test_bijection_bad_shapes(getkey):
    bij = _make("tanh", getkey())
    with pytest.raises(ValueError, match="`x` must have shape"):
        bij.transform_and_log_det(jnp.ones(2), jnp.ones(CDIM))
    with pytest.raises(ValueError, match="`condition` must have shape"):
        bij.transform_and_log_det(jnp.ones(DIM), jnp.ones(1))
    with pytest.raises(ValueError, match="`z` must have shape"):
        bij.inverse(jnp.ones(2), jnp.ones(CDIM))
    with pytest.raises(ValueError, match="`num_units`"):
        ConditionalMonotoneTanh(2, 1, num_units=0, key=getkey())
    with pytest.raises(ValueError, match="`dim` must be an int >= 2"):
        ConditionalAffineCoupling(1, 1, key=getkey())
    with pytest.raises(ValueError, match="`split`"):
        ConditionalAffineCoupling(3, 1, split=3, key=getkey())
    cp = _make("coupling", getkey())
    with pytest.raises(ValueError, match="`x` must have shape"):
        cp.transform_and_log_det(jnp.ones(2), jnp.ones(CDIM))
    with pytest.raises(ValueError, match="`z` must have shape"):
        cp.inverse(jnp.ones(2), jnp.ones(CDIM))
    with pytest.raises(ValueError, match="`condition` must have shape"):
        cp.inverse(jnp.ones(DIM), jnp.ones(1))
    sf = _make("smooth_flow", getkey())
    with pytest.raises(ValueError, match="`x` must have shape"):
        sf.transform_and_log_det(jnp.ones(2), jnp.ones(CDIM))
    with pytest.raises(ValueError, match="`z` must have shape"):
        sf.inverse(jnp.ones(2), jnp.ones(CDIM))
    with pytest.raises(ValueError, match="`dim` must be an int >= 2 for a coupling flow"):
        ConditionalSmoothCouplingFlow(1, 1, key=getkey())
    with pytest.raises(ValueError, match="`num_blocks`"):
        ConditionalSmoothCouplingFlow(2, 1, num_blocks=0, key=getkey())
