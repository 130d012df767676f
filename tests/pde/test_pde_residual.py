import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.pde import (
    CoxIngersollRoss,
    Heston,
    OrnsteinUhlenbeck,
    exact_log_transition,
    fp_log_residual,
    fp_log_rhs,
)

CIR = CoxIngersollRoss()
CIR_LAM = jnp.array([1.5, 0.06, 0.2])
OU1 = OrnsteinUhlenbeck(1)
OU2 = OrnsteinUhlenbeck(2, corr=jnp.array([[1.0, 0.6], [0.6, 1.0]]))
OU2_LAM = jnp.array([0.8, 0.5, 0.3, -0.2])


@eqx.filter_jit
def _residuals(model, lam_density, lam_operator, x0, shift, t, x):
    """R of l + shift |x|² t (exact l with lam_density, operator with lam_operator), and d_t l.

    One compile per model: the exact case (shift = 0, same lam), the perturbed density and the
    perturbed operator all reuse it.
    """

    def logp(s, y):
        return exact_log_transition(model, s, y, x0, lam_density) + shift * jnp.sum(y**2) * s

    def one(s, y):
        res = fp_log_residual(
            logp,
            s,
            y,
            lambda v: model.drift(v, lam_operator),
            lambda v: model.diffusion(v, lam_operator),
        )
        return res, jax.grad(logp)(s, y)

    return jax.vmap(one)(t, x)


def _case(which, getkey):
    if which == "cir":
        model, lam, x0 = CIR, CIR_LAM, jnp.array([0.05])
        x = jr.uniform(getkey(), (200, 1), minval=0.005, maxval=0.2)
    elif which == "ou1":
        model, lam, x0 = OU1, jnp.array([1.2, 0.4, 0.3]), jnp.array([-0.5])
        x = jr.normal(getkey(), (200, 1))
    else:
        model, lam, x0 = OU2, OU2_LAM, jnp.array([1.0, 0.0])
        x = jr.normal(getkey(), (200, 2))
    t = jr.uniform(getkey(), (200,), minval=0.02, maxval=2.0)
    return model, lam, x0, t, x


# ou1 is slow: ou2 (correlated constant a) covers the OU terms in the default run.
@pytest.mark.parametrize("which", [pytest.param("ou1", marks=pytest.mark.slow), "ou2", "cir"])
def test_exact_density_has_zero_residual_perturbed_does_not(which, getkey):
    model, lam, x0, t, x = _case(which, getkey)
    res, dl_dt = _residuals(model, lam, lam, x0, jnp.asarray(0.0), t, x)
    assert jnp.all(jnp.abs(res) <= 1e-7 * (1 + jnp.abs(dl_dt)))  # exact to roundoff
    bad, _ = _residuals(model, lam, lam, x0, jnp.asarray(0.5), t, x)
    assert jnp.median(jnp.abs(bad)) > 1e-3


def test_each_term_of_the_operator_matters(getkey):
    # A wrong drift (kappa * 1.01) or diffusion (sigma * 1.01) breaks the zero residual.
    model, lam, x0, t, x = _case("cir", getkey)
    for scale in (jnp.array([1.01, 1, 1]), jnp.array([1, 1, 1.01])):
        res, _ = _residuals(model, lam, lam * scale, x0, jnp.asarray(0.0), t, x)
        assert jnp.max(jnp.abs(res)) > 1e-3


HESTON, HESTON_LAM = Heston(), jnp.array([0.05, 2.0, 0.04, 0.3, -0.5])


def _heston_logp(t, x):
    # A non-Gaussian log-density with a cross term, positive in v.
    return (
        -((x[0] - 0.1 * t) ** 2) / (0.3 + t)
        + 2.0 * jnp.log(x[1])
        - x[1] / (0.05 + t)
        + jnp.sin(x[0] * x[1])
    )


@jax.jit
def _p_form_check(t, x):
    model, lam = HESTON, HESTON_LAM

    def p(s, y):
        return jnp.exp(_heston_logp(s, y))

    flux = lambda y: model.drift(y, lam) * p(t, y)  # noqa: E731
    diff = lambda y: model.diffusion(y, lam) * p(t, y)  # noqa: E731
    div_flux = jnp.trace(jax.jacfwd(flux)(x))
    hess = jax.jacfwd(jax.jacfwd(diff))(x)  # [i, j, k, l] = d_k d_l (a_ij p)
    direct = -div_flux + 0.5 * jnp.einsum("ijij->", hess)
    via_log = p(t, x) * fp_log_rhs(
        _heston_logp, t, x, lambda y: model.drift(y, lam), lambda y: model.diffusion(y, lam)
    )
    return via_log, direct


def test_p_form_equals_p_times_log_form():
    # p-form FP operator by direct autodiff of p = exp(l), Heston coefficients.
    for x in (jnp.array([0.2, 0.05]), jnp.array([-0.3, 0.1])):
        via_log, direct = _p_form_check(jnp.asarray(0.4), x)
        assert abs(float(direct)) > 1e-3
        np.testing.assert_allclose(via_log, direct, rtol=1e-8)


def test_residual_eager_equals_jit_and_checks_shapes():
    lam, x0 = jnp.array([1.2, 0.4, 0.3]), jnp.array([-0.5])

    def logp(t, x):  # a Gaussian-like l that is not the OU density: the residual is not zero
        return -0.5 * (x[0] - x0[0] * jnp.exp(-t)) ** 2 / (0.1 + t) + 0.3 * t * x[0] ** 3

    args = (
        jnp.asarray(0.2),
        jnp.array([0.7]),
        lambda y: OU1.drift(y, lam),
        lambda y: OU1.diffusion(y, lam),
    )
    eager = fp_log_residual(logp, *args)
    jitted = eqx.filter_jit(fp_log_residual)(logp, *args)
    assert abs(float(eager)) > 1e-3
    np.testing.assert_allclose(eager, jitted, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="drift"):
        fp_log_rhs(logp, 0.2, jnp.array([0.1]), lambda y: jnp.ones(2), args[3])
    with pytest.raises(ValueError, match="diffusion"):
        fp_log_rhs(logp, 0.2, jnp.array([0.1]), args[2], lambda y: jnp.ones(1))
    with pytest.raises(TypeError, match="parameter 'x'"):  # the jaxtyping hook comes first
        fp_log_rhs(logp, 0.2, jnp.ones((2, 1)), args[2], args[3])
