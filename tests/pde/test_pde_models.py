import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import scipy.stats as st
from jax.test_util import check_grads

from jaxgen.pde import (
    CoxIngersollRoss,
    Heston,
    OrnsteinUhlenbeck,
    exact_log_transition,
    log_ncx2_pdf,
    sample_cir_exact,
    simulate_path,
)

CIR = CoxIngersollRoss()
LAM = jnp.array([2.0, 0.06, jnp.sqrt(2 * 2.0 * 0.06 / 4.0)])  # nu = 4
_ncx2 = jax.jit(jax.vmap(log_ncx2_pdf))


def test_log_ncx2_matches_scipy():
    worst = 0.0
    for df in (2.4, 7.0, 40.0):
        for nc in (0.1, 3.0, 80.0, 2000.0, 1e5):
            y = st.ncx2.ppf(np.linspace(1e-4, 1 - 1e-4, 40), df, nc)
            ref = st.ncx2.logpdf(y, df, nc)
            got = _ncx2(jnp.asarray(y), jnp.full(40, df), jnp.full(40, nc))
            worst = max(worst, float(np.max(np.abs(got - ref) / np.maximum(1, np.abs(ref)))))
    assert worst < 1e-8


def test_log_ncx2_grads():
    f = jax.jit(lambda y, df, nc: log_ncx2_pdf(y, df, nc))
    check_grads(f, (jnp.asarray(5.0), jnp.asarray(3.0), jnp.asarray(4.0)), order=1, modes=["rev"])
    with pytest.raises(ValueError, match="n_terms"):
        log_ncx2_pdf(1.0, 2.0, 1.0, n_terms=5)


def test_cir_density_normalised_and_mean():
    x0 = jnp.array([0.03])
    grid = jnp.exp(jnp.linspace(jnp.log(1e-6), jnp.log(1.0), 6000))
    logp = jax.jit(jax.vmap(lambda x: exact_log_transition(CIR, 0.25, x[None], x0, LAM)))(grid)
    w = jnp.gradient(grid)
    p = jnp.exp(logp)
    np.testing.assert_allclose(jnp.sum(w * p), 1.0, atol=1e-5)
    mean = 0.06 + (0.03 - 0.06) * np.exp(-0.5)
    np.testing.assert_allclose(jnp.sum(w * p * grid), mean, rtol=1e-5)


def test_ou_density_matches_scipy():
    ou = OrnsteinUhlenbeck(1)
    lam = jnp.array([1.5, 0.4, 0.2])
    t, x0, x = 0.7, 1.0, 0.3
    m = 0.2 + (x0 - 0.2) * np.exp(-1.5 * t)
    v = 0.16 * (1 - np.exp(-3 * t)) / 3
    np.testing.assert_allclose(
        exact_log_transition(ou, t, jnp.array([x]), jnp.array([x0]), lam),
        st.norm.logpdf(x, m, np.sqrt(v)),
        rtol=1e-12,
    )


def test_exact_cir_sampler_moments(getkey):
    keys = jr.split(getkey(), 4000)
    paths = jax.jit(jax.vmap(lambda k: sample_cir_exact(k, 0.03, LAM, 0.25, 2)))(keys)
    x1 = np.asarray(paths[:, 2, 0])
    kappa, theta, sigma = 2.0, 0.06, float(LAM[2])
    e = np.exp(-kappa * 0.5)
    mean = theta + (0.03 - theta) * e
    var = 0.03 * sigma**2 * e * (1 - e) / kappa + theta * sigma**2 * (1 - e) ** 2 / (2 * kappa)
    assert abs(x1.mean() - mean) < 5 * np.sqrt(var / x1.size)
    assert abs(x1.var() / var - 1) < 5 * np.sqrt(2 / x1.size)
    assert np.all(x1 > 0)


def test_simulate_path_euler_cir_moments(getkey):
    keys = jr.split(getkey(), 400)
    paths = jax.jit(
        jax.vmap(lambda k: simulate_path(k, CIR, jnp.array([0.03]), LAM, 0.25, 2, substeps=4))
    )(keys)
    x1 = np.asarray(paths[:, -1, 0])
    mean = 0.06 + (0.03 - 0.06) * np.exp(-1.0)
    assert paths.shape == (400, 3, 1)
    assert np.all(x1 >= 0)
    assert abs(x1.mean() - mean) < 5 * x1.std() / np.sqrt(x1.size)


@pytest.mark.slow
def test_simulate_path_euler_heston_moments(getkey):
    keys = jr.split(getkey(), 1000)
    hes, lam_h = Heston(), jnp.array([0.05, 2.0, 0.04, 0.3, -0.5])
    hp = jax.jit(
        jax.vmap(
            lambda k: simulate_path(k, hes, jnp.array([0.0, 0.06]), lam_h, 0.5, 1, substeps=40)
        )
    )(keys)
    s, v = np.asarray(hp[:, -1, 0]), np.asarray(hp[:, -1, 1])
    ev = 0.04 + 0.02 * np.exp(-1.0)
    es = 0.05 * 0.5 - 0.5 * (0.04 * 0.5 + 0.02 * (1 - np.exp(-1.0)) / 2.0)
    assert abs(v.mean() - ev) < 5 * v.std() / np.sqrt(v.size)
    assert abs(s.mean() - es) < 5 * s.std() / np.sqrt(s.size)


def test_bad_inputs_raise():
    x0 = jnp.array([0.05])
    with pytest.raises(Exception, match="Feller"):
        exact_log_transition(CIR, 0.25, x0, x0, jnp.array([0.5, 0.01, 0.5]))
    with pytest.raises(Exception, match="> 0"):
        exact_log_transition(CIR, 0.25, jnp.array([-0.01]), x0, LAM)
    with pytest.raises(Exception, match="positive time step"):
        exact_log_transition(CIR, 0.0, x0, x0, LAM)
    with pytest.raises(ValueError, match="`lam` must have shape"):
        exact_log_transition(CIR, 0.25, x0, x0, LAM[:2])
    with pytest.raises(ValueError, match="trailing state axis"):
        CIR.check_state(jnp.ones(2))
    with pytest.raises(TypeError, match="no closed-form"):
        exact_log_transition(
            Heston(), 0.25, jnp.ones(2), jnp.ones(2), jnp.array([0.0, 2.0, 0.04, 0.3, -0.5])
        )
    with pytest.raises(Exception, match="kappa, theta, sigma > 0"):
        CoxIngersollRoss(require_feller=False).check_params(jnp.array([-1.0, 0.1, 0.1]))
    with pytest.raises(Exception, match="kappa > 0 and sigma > 0"):
        OrnsteinUhlenbeck(1).check_params(jnp.array([-1.0, 0.1, 0.1]))
    with pytest.raises(Exception, match="Heston needs"):
        Heston().check_params(jnp.array([0.0, 2.0, 0.04, 0.3, -1.5]))
    with pytest.raises(ValueError, match="`corr` must have shape"):
        OrnsteinUhlenbeck(2, corr=jnp.eye(3))
    with pytest.raises(ValueError, match="`n_obs`"):
        sample_cir_exact(jr.key(0), 0.05, LAM, 0.25, 0)
    with pytest.raises(ValueError, match="`delta` must be a positive"):
        simulate_path(jr.key(0), CIR, x0, LAM, -1.0, 3)
    # No silent NaN: a Feller-violating set is an error even under jit.
    f = eqx.filter_jit(lambda lam: exact_log_transition(CIR, 0.25, x0, x0, lam))
    with pytest.raises(Exception, match="Feller"):
        f(jnp.array([0.5, 0.01, 0.5]))
