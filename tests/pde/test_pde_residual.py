import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.pde import (
    CoxIngersollRoss,
    exact_log_transition,
    fp_log_residual,
    fp_log_rhs,
    Heston,
    OrnsteinUhlenbeck,
)

CIR = CoxIngersollRoss()
CIR_LAM = jnp.array([1.5, 0.06, 0.2])
OU2 = OrnsteinUhlenbeck(2, corr=jnp.array([[1.0, 0.6], [0.6, 1.0]]))
OU2_LAM = jnp.array([0.8, 0.5, 0.3, -0.2])


def _residual_fn(model, lam, x0, logp=None, shift=0.0):
    if logp is None:
        def logp(t, x):
            return exact_log_transition(model, t, x, x0, lam)

    def perturbed(t, x):
        return logp(t, x) + shift * jnp.sum(x**2) * t

    return jax.jit(jax.vmap(lambda t, x: fp_log_residual(
        perturbed, t, x, lambda y: model.drift(y, lam), lambda y: model.diffusion(y, lam))))


def _tol(model, lam, x0, t, x):
    dt = jax.vmap(jax.grad(lambda s, y: exact_log_transition(model, s, y, x0, lam)))(t, x)
    return 1e-7 * (1 + jnp.abs(dt))


@pytest.mark.parametrize("which", ["ou1", "ou2", "cir"])
def test_exact_density_has_zero_residual_perturbed_does_not(which, getkey):
    if which == "cir":
        model, lam, x0 = CIR, CIR_LAM, jnp.array([0.05])
        x = jr.uniform(getkey(), (200, 1), minval=0.005, maxval=0.2)
    elif which == "ou1":
        model, lam, x0 = OrnsteinUhlenbeck(1), jnp.array([1.2, 0.4, 0.3]), jnp.array([-0.5])
        x = jr.normal(getkey(), (200, 1))
    else:
        model, lam, x0 = OU2, OU2_LAM, jnp.array([1.0, 0.0])
        x = jr.normal(getkey(), (200, 2))
    t = jr.uniform(getkey(), (200,), minval=0.02, maxval=2.0)
    res = _residual_fn(model, lam, x0)(t, x)
    assert jnp.all(jnp.abs(res) <= _tol(model, lam, x0, t, x))
    bad = _residual_fn(model, lam, x0, shift=0.5)(t, x)
    assert jnp.median(jnp.abs(bad)) > 1e-3


def test_each_term_of_the_operator_matters(getkey):
    # A wrong diffusion (sigma * 1.01) or drift (kappa * 1.01) breaks the zero residual.
    x0, x = jnp.array([0.05]), jr.uniform(getkey(), (50, 1), minval=0.02, maxval=0.1)
    t = jnp.full((50,), 0.3)

    def logp(s, y):
        return exact_log_transition(CIR, s, y, x0, CIR_LAM)

    for lam in (CIR_LAM * jnp.array([1.01, 1, 1]), CIR_LAM * jnp.array([1, 1, 1.01])):
        res = jax.vmap(lambda s, y, lam=lam: fp_log_residual(
            logp, s, y, lambda v: CIR.drift(v, lam), lambda v: CIR.diffusion(v, lam)))(t, x)
        assert jnp.max(jnp.abs(res)) > 1e-3


def test_p_form_equals_p_times_log_form():
    # p-form FP operator by direct autodiff of p = exp(l) for a non-Gaussian l, Heston coefficients.
    model, lam = Heston(), jnp.array([0.05, 2.0, 0.04, 0.3, -0.5])

    def logp(t, x):
        return -(x[0] - 0.1 * t) ** 2 / (0.3 + t) + 2.0 * jnp.log(x[1]) - x[1] / (0.05 + t) + jnp.sin(x[0] * x[1])

    def p(t, x):
        return jnp.exp(logp(t, x))

    def fp_p(t, x):
        flux = lambda y: model.drift(y, lam) * p(t, y)  # noqa: E731
        diff = lambda y: model.diffusion(y, lam) * p(t, y)  # noqa: E731
        div_flux = jnp.trace(jax.jacfwd(flux)(x))
        hess = jax.jacfwd(jax.jacfwd(diff))(x)  # [i, j, k, l]
        return -div_flux + 0.5 * jnp.einsum("ijij->", hess)

    for x in (jnp.array([0.2, 0.05]), jnp.array([-0.3, 0.1])):
        t = jnp.asarray(0.4)
        lhs = p(t, x) * fp_log_rhs(logp, t, x, lambda y: model.drift(y, lam),
                                   lambda y: model.diffusion(y, lam))
        np.testing.assert_allclose(lhs, fp_p(t, x), rtol=1e-8)


def test_residual_eager_equals_jit_and_checks_shapes():
    def logp(t, x):
        return exact_log_transition(CIR, t, x, jnp.array([0.05]), CIR_LAM)

    args = (jnp.asarray(0.2), jnp.array([0.07]), lambda y: CIR.drift(y, CIR_LAM),
            lambda y: CIR.diffusion(y, CIR_LAM))
    eager = fp_log_residual(logp, *args)
    jitted = eqx.filter_jit(fp_log_residual)(logp, *args)
    np.testing.assert_allclose(eager, jitted, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="drift"):
        fp_log_rhs(logp, 0.2, jnp.array([0.1]), lambda y: jnp.ones(2), args[3])
    with pytest.raises(ValueError, match="diffusion"):
        fp_log_rhs(logp, 0.2, jnp.array([0.1]), args[2], lambda y: jnp.ones(1))
