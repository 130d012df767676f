"""NTM closed forms: schedule, forward chain, posterior, covariance, CFG.

Time convention: t = 1 is noise, x_t = (1 - t) x0 + t eps.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.flows import (
    forward_trajectory,
    gaussian_cfg,
    ntm_schedule,
    reverse_posterior_coeffs,
    trajectory_covariance,
)

# Shifted 4-step schedule, L_seq = 64, t_min = 0.02, and its posterior coefficients.
SPEC_TS = [0.02, 0.3473, 0.6148, 0.8272, 1.0]
SPEC_ABC = [
    (0.0, 0.1728, 0.8272),
    (0.2477, 0.3424, 0.5796),
    (0.1883, 0.5802, 0.3274),
    (0.0022, 0.9786, 0.0200),
]


def bayes_posterior_numpy(t, s):
    """q(x_s | x_t, x0) by the product of N(x_s; (1-s) x0, s^2) and N(x_t; alpha x_s, sigma^2)."""
    alpha = (1 - t) / (1 - s)
    var_kernel = t**2 - alpha**2 * s**2
    precision = 1 / s**2 + alpha**2 / var_kernel
    return alpha / var_kernel / precision, (1 - s) / s**2 / precision, np.sqrt(1 / precision)


def test_schedule_matches_spec_values():
    ts = ntm_schedule(4, 64, 0.02)
    np.testing.assert_allclose(ts, SPEC_TS, atol=6e-5)
    assert ts[-1] == 1.0 and ts.dtype == jnp.float64
    # T = 1 is (t_min, 1); the shift mu grows with the sequence length (later levels noisier)
    np.testing.assert_array_equal(ntm_schedule(1, 16, 0.0), [0.0, 1.0])
    assert ntm_schedule(4, 1024, 0.0)[1] > ntm_schedule(4, 64, 0.0)[1]
    # traced t_min (sampled per example in ntm_loss)
    np.testing.assert_allclose(jax.jit(lambda t: ntm_schedule(4, 64, t))(0.02), ts)


@pytest.mark.parametrize("pair", range(4))
def test_posterior_coefficients(pair):
    ts = np.asarray(ntm_schedule(4, 64, 0.02))
    t, s = ts[4 - pair], ts[3 - pair]
    a, b, c = reverse_posterior_coeffs(t, s)
    np.testing.assert_allclose([a, b, c], SPEC_ABC[pair], atol=6e-5)
    if t < 1:
        np.testing.assert_allclose([a, b, c], bayes_posterior_numpy(t, s), rtol=1e-12)


def test_posterior_against_bayes_and_limits():
    rng = np.random.default_rng(0)
    coeffs = jax.jit(jax.vmap(reverse_posterior_coeffs))
    s = rng.uniform(0.01, 0.9, 64)
    t = s + (1 - s) * rng.uniform(0.05, 0.95, 64)
    np.testing.assert_allclose(
        np.stack(coeffs(t, s)), np.stack(bayes_posterior_numpy(t, s)), rtol=1e-12
    )
    a, b, c = reverse_posterior_coeffs(1.0, 0.3)  # t = 1: the noise level forgets x_t
    np.testing.assert_allclose([a, b, c], [0.0, 0.7, 0.3], atol=1e-15)
    a, b, c = reverse_posterior_coeffs(0.5, 0.5 - 1e-9)  # s -> t
    np.testing.assert_allclose([a, b, c], [1.0, 0.0, 0.0], atol=1e-4)


@pytest.fixture(scope="module")
def chain_samples():
    ts = jnp.asarray(SPEC_TS)
    x0 = jnp.array([0.7])
    keys = jr.split(jr.key(1), 20000)
    xs = jax.jit(jax.vmap(lambda k: forward_trajectory(k, x0, ts)))(keys)
    return np.asarray(ts), float(x0[0]), np.asarray(xs[..., 0])


def test_forward_chain_marginals_and_covariance(chain_samples):
    """Marginals N((1 - t) x0, t^2) and covariance S within 5 SE."""
    ts, x0, xs = chain_samples
    n = xs.shape[0]
    np.testing.assert_array_less(np.abs(xs.mean(0) - (1 - ts) * x0), 5 * ts / np.sqrt(n) + 1e-12)
    s_true = np.asarray(trajectory_covariance(jnp.asarray(ts)))
    np.testing.assert_allclose(np.diag(s_true), ts**2, rtol=1e-14)
    se = np.sqrt((np.outer(np.diag(s_true), np.diag(s_true)) + s_true**2) / n)
    emp = np.cov(xs.T)
    assert np.all(np.abs(emp - s_true) < 5 * se + 1e-6)
    assert np.all(s_true[-1, :-1] == 0) and s_true[-1, -1] == 1  # t = 1 forgets the past


def test_posterior_regression_monte_carlo(getkey):
    """Least squares of x_s on (x_t, x0) recovers (A, B) and the residual sd C."""
    t, s, n = 0.8272, 0.6148, 20000
    ts = jnp.array([s, t, 1.0])
    x0 = jr.normal(getkey(), (n, 1))
    xs = jax.jit(jax.vmap(forward_trajectory, in_axes=(0, 0, None)))(jr.split(getkey(), n), x0, ts)
    design = np.column_stack([np.asarray(xs[:, 1, 0]), np.asarray(x0[:, 0])])
    coef, *_ = np.linalg.lstsq(design, np.asarray(xs[:, 0, 0]), rcond=None)
    resid = np.asarray(xs[:, 0, 0]) - design @ coef
    a, b, c = (float(v) for v in reverse_posterior_coeffs(t, s))
    se_coef = np.sqrt(np.diag(np.linalg.inv(design.T @ design))) * c
    np.testing.assert_array_less(np.abs(coef - [a, b]), 5 * se_coef)
    assert abs(resid.std() - c) < 5 * c / np.sqrt(2 * n)


@pytest.mark.parametrize("w", [0.5, 1.0, 3.0])
def test_gaussian_cfg_is_the_normalised_product(w):
    """CFG: N(mu, sigma) is proportional to p_c^{1+w} / p_u^w (s <= 1), exactly."""
    mu_c, sig_c, mu_u, sig_u = 0.3, 0.5, -0.4, 0.8
    mu, sig = gaussian_cfg(mu_c, sig_c, mu_u, sig_u, w)
    x = np.linspace(-6, 6, 4001)

    def log_n(x, m, sd):
        return -0.5 * ((x - m) / sd) ** 2 - np.log(sd) - 0.5 * np.log(2 * np.pi)

    log_prod = (1 + w) * log_n(x, mu_c, sig_c) - w * log_n(x, mu_u, sig_u)
    gap = log_n(x, float(mu), float(sig)) - log_prod  # a constant (the log normaliser)
    assert np.ptp(gap) < 1e-10
    dens = np.exp(log_prod - log_prod.max())
    mass = np.trapezoid(dens, x)
    np.testing.assert_allclose(np.trapezoid(dens * x, x) / mass, mu, atol=1e-10)


def test_gaussian_cfg_zero_weight_and_clip():
    mu_c, sig_c = jnp.array([0.1, 2.0]), jnp.array([0.3, 1.5])
    mu, sig = gaussian_cfg(mu_c, sig_c, jnp.array([1.0, -1.0]), jnp.array([0.5, 1.0]), 0.0)
    np.testing.assert_array_equal(mu, mu_c)
    np.testing.assert_array_equal(sig, sig_c)
    # sig_c > sig_u: s clipped to 1, the precision stays positive: sigma = sig_c, mean extrapolated
    mu, sig = gaussian_cfg(0.0, 2.0, 1.0, 1.0, 2.0)
    np.testing.assert_allclose([mu, sig], [-2.0, 2.0], rtol=1e-14)


def test_closed_forms_jit_vmap_dtype(getkey):
    ts = ntm_schedule(3, 16, 0.01)
    x0 = jr.normal(getkey(), (5, 2, 3))
    keys = jr.split(getkey(), 5)
    batched = jax.jit(jax.vmap(forward_trajectory, in_axes=(0, 0, None)))(keys, x0, ts)
    single = jax.jit(forward_trajectory)
    loop = np.stack([single(k, x, ts) for k, x in zip(keys, x0, strict=True)])
    np.testing.assert_allclose(forward_trajectory(keys[0], x0[0], ts), loop[0], rtol=1e-14)
    np.testing.assert_allclose(batched, loop, rtol=1e-12, atol=1e-14)
    assert batched.shape == (5, 4, 2, 3)
    # float32 in, float32 out
    out = forward_trajectory(keys[0], x0[0].astype(jnp.float32), ts.astype(jnp.float32))
    assert out.dtype == jnp.float32
    mu, sig = gaussian_cfg(*(jnp.ones(2, jnp.float32) for _ in range(4)), 1.0)
    assert mu.dtype == sig.dtype == jnp.float32
    np.testing.assert_allclose(jax.jit(trajectory_covariance)(ts), trajectory_covariance(ts))


def test_closed_form_errors(getkey):
    with pytest.raises(ValueError, match="num_steps"):
        ntm_schedule(0, 64, 0.0)
    with pytest.raises(ValueError, match="t_min"):
        ntm_schedule(4, 64, 0.5)  # t_min >= t_1
    with pytest.raises(ValueError, match="t_min"):
        ntm_schedule(4, 64, -0.1)
    with pytest.raises(ValueError, match="s < t"):
        reverse_posterior_coeffs(0.3, 0.5)
    with pytest.raises(ValueError, match="s < t"):
        reverse_posterior_coeffs(1.0, 1.0)  # s = 1
    with pytest.raises(eqx.EquinoxRuntimeError, match="s < t"):
        eqx.filter_jit(reverse_posterior_coeffs)(jnp.array(0.3), jnp.array(0.5))
    x0 = jnp.zeros(2)
    for bad, msg in (
        ([0.0, 0.6, 0.4, 1.0], "increasing"),
        ([0.0, 0.4, 0.9], "end at"),
        ([-0.1, 0.4, 1.0], "t_min"),
        ([0.0, jnp.nan, 1.0], "finite"),
    ):
        with pytest.raises(eqx.EquinoxRuntimeError, match=msg):
            forward_trajectory(getkey(), x0, jnp.asarray(bad))
    with pytest.raises((ValueError, TypeError)):  # the annotation or the shape check
        trajectory_covariance(jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="w"):
        gaussian_cfg(0.0, 1.0, 0.0, 1.0, -1.0)
    with pytest.raises(ValueError, match="`sig_c` must be finite and > 0"):
        gaussian_cfg(0.0, 0.0, 0.0, 1.0, 1.0)
    # An infinite scale is refused too (it clipped the ratio to 0: a plausible Gaussian).
    with pytest.raises(eqx.EquinoxRuntimeError, match="`sig_u` must be finite and > 0"):
        eqx.filter_jit(gaussian_cfg)(0.0, 1.0, 0.0, jnp.array(jnp.inf), 1.0)
    with pytest.raises(eqx.EquinoxRuntimeError, match="w"):
        eqx.filter_jit(gaussian_cfg)(0.0, 1.0, 0.0, 1.0, jnp.array(-1.0))
