"""Delayed-acceptance HMC: the flow screens, the exact likelihood decides (Christen and Fox 2005).

The end-to-end check uses an OU path with unknown long-run mean theta (kappa, sigma known) and a
flat prior: the exact transition is Gaussian and linear in theta, so the exact posterior is
Gaussian in closed form. The surrogate is the exact likelihood with theta shifted by 1.5
posterior sd, tempered by 0.5 and with a 0.5-nat wiggle sin(3 z) (z = theta in posterior-sd units
around the posterior mean) that no polynomial error model removes: a deliberately biased,
over-wide surrogate. Alone it misses the posterior by 1.5 sd and is 1.4x too wide; corrected, it
must agree within the Monte-Carlo tolerance.
"""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.pde import (
    OrnsteinUhlenbeck,
    delayed_acceptance_hmc,
    exact_path_loglik,
    run_delayed_acceptance,
)
from jaxgen.pde._inference import _delayed_acceptance_log_ratio

OU = OrnsteinUhlenbeck(1)
KAPPA, SIGMA, THETA, DELTA, N_OBS = 1.0, 0.5, 0.3, 1.0, 200
SHIFT_SD, TEMPER, WIGGLE = 1.5, 0.5, 0.5


@pytest.fixture(scope="module")
def ou_problem():
    e = np.exp(-KAPPA * DELTA)
    v = SIGMA**2 * (1 - e**2) / (2 * KAPPA)
    rng = np.random.default_rng(3)
    xs = np.empty(N_OBS + 1)
    xs[0] = THETA
    for k in range(N_OBS):
        xs[k + 1] = THETA + (xs[k] - THETA) * e + np.sqrt(v) * rng.standard_normal()
    # x_{k+1} - e x_k = theta (1 - e) + N(0, v): a flat prior gives a Gaussian posterior.
    y = xs[1:] - e * xs[:-1]
    mean, sd = y.mean() / (1 - e), np.sqrt(v / N_OBS) / (1 - e)
    path = jnp.asarray(xs)[:, None]

    def exact(u):
        return exact_path_loglik(OU, path, jnp.stack([KAPPA, SIGMA, u[0]]), DELTA)

    def surrogate(u):
        return TEMPER * exact(u + SHIFT_SD * sd) + WIGGLE * jnp.sin(3 * (u[0] - mean) / sd)

    return exact, surrogate, mean, sd


def _summary(run):
    draws = np.asarray(run.samples[..., 0]).ravel()
    return draws.mean(), draws.std(), float(run.ess[0])


def test_corrected_chain_matches_closed_form_posterior(ou_problem):
    exact, surrogate, mean, sd = ou_problem
    init = jnp.array([0.0])
    kw = dict(num_warmup=200, num_samples=600, num_chains=2)
    corrected = run_delayed_acceptance(jr.key(0), surrogate, exact, init, **kw)
    m, s, ess = _summary(corrected)
    # Monte-Carlo tolerance: 4 standard errors of a mean (sd / sqrt(ESS)) and of an sd
    # (sd / sqrt(2 ESS)); ESS >= 200 keeps these at <= 0.28 and <= 0.2 posterior sd.
    assert ess >= 200, ess
    assert float(jnp.max(corrected.rhat)) < 1.05
    assert abs(m - mean) / sd <= 4 / np.sqrt(ess), (m, mean, sd, ess)
    assert abs(s / sd - 1) <= 4 / np.sqrt(2 * ess), (s, sd, ess)
    # The surrogate's own posterior, by quadrature on a fine grid (1-D): it sits SHIFT_SD sd
    # low and ~1/sqrt(TEMPER) too wide, outside the tolerance above.
    grid = mean + sd * jnp.linspace(-12.0, 12.0, 4001)
    logp = jax.vmap(lambda u: surrogate(u[None]))(grid)
    p = np.exp(np.asarray(logp - logp.max()))
    p /= p.sum()
    m0 = float(np.sum(p * grid))
    s0 = float(np.sqrt(np.sum(p * (np.asarray(grid) - m0) ** 2)))
    assert (mean - m0) / sd > 4 / np.sqrt(ess) + 1.0, (m0, mean, sd)
    assert abs(s0 / sd - 1) > 4 / np.sqrt(2 * ess), (s0, sd)
    # The exact stage rejects some screened proposals (the wiggle the error model cannot fit).
    assert 0.2 < float(jnp.mean(corrected.acceptance)) < 0.95


def test_surrogate_exact_up_to_a_constant_always_accepted(ou_problem):
    exact, _, mean, sd = ou_problem
    res = jax.jit(
        lambda k: delayed_acceptance_hmc(
            k,
            lambda u: exact(u) - 17.0,
            exact,
            jnp.array([mean]),
            num_samples=50,
            step_size=0.8 * sd,
            inverse_mass_matrix=jnp.array([sd**2]),
        )
    )(jr.key(1))
    assert float(res.acceptance) == 1.0
    assert 0.5 < float(res.surrogate_acceptance) <= 1.0
    np.testing.assert_allclose(res.log_weight, 17.0, rtol=1e-12)
    np.testing.assert_allclose(res.exact_log_density, jax.vmap(exact)(res.samples), rtol=1e-12)


@pytest.mark.parametrize("m", [1, 3])
def test_acceptance_step_detailed_balance_finite_states(m):
    # Finite state space: the first stage is m Metropolis steps (uniform proposal) reversible
    # for pi~; with the second-stage ratio the full kernel must be reversible for pi.
    rng = np.random.default_rng(m)
    n = 6
    log_pi, log_sur = rng.normal(size=n), rng.normal(size=n)
    q = np.full((n, n), 1.0 / n)
    k1 = q * np.minimum(1.0, np.exp(log_sur[None, :] - log_sur[:, None]))
    np.fill_diagonal(k1, 0.0)
    np.fill_diagonal(k1, 1.0 - k1.sum(1))
    k_sur = np.linalg.matrix_power(k1, m)
    log_a = np.asarray(
        jax.vmap(jax.vmap(_delayed_acceptance_log_ratio, (0, 0, None, None)), (None, None, 0, 0))(
            log_pi, log_sur, log_pi, log_sur
        )
    )  # [x, y]
    pi = np.exp(log_pi) / np.exp(log_pi).sum()

    def kernel(accept):
        t = k_sur * accept
        np.fill_diagonal(t, 0.0)
        np.fill_diagonal(t, 1.0 - t.sum(1))
        return t

    t = kernel(np.minimum(1.0, np.exp(log_a)))
    flow = pi[:, None] * t
    np.testing.assert_allclose(flow, flow.T, atol=1e-14)
    np.testing.assert_allclose(pi @ t, pi, atol=1e-14)
    # Control: accepting with the plain ratio pi(y)/pi(x) (forgetting the surrogate screen)
    # breaks detailed balance, so the check above can fail.
    naive = kernel(np.minimum(1.0, np.exp(log_pi[None, :] - log_pi[:, None])))
    assert np.max(np.abs(pi[:, None] * naive - (pi[:, None] * naive).T)) > 1e-3
    # NaN (undefined density at the proposal) rejects.
    assert _delayed_acceptance_log_ratio(jnp.nan, 0.0, 0.0, 0.0) == -jnp.inf


def test_bad_input():
    f = lambda u: -0.5 * jnp.sum(u**2)  # noqa: E731
    ok = dict(num_samples=3, step_size=0.5, inverse_mass_matrix=jnp.ones(2))
    x0 = jnp.zeros(2)
    with pytest.raises(TypeError, match="key"):  # the annotation or check_key
        delayed_acceptance_hmc(0, f, f, x0, **ok)
    with pytest.raises(ValueError, match=r"`init` must have shape \(p,\)"):
        delayed_acceptance_hmc(jr.key(0), f, f, jnp.zeros((2, 2)), **ok)
    with pytest.raises(ValueError, match=r"`inverse_mass_matrix` must have shape \(2\)"):
        delayed_acceptance_hmc(jr.key(0), f, f, x0, **{**ok, "inverse_mass_matrix": jnp.ones(3)})
    with pytest.raises(ValueError, match="`step_size` must be finite and > 0"):
        delayed_acceptance_hmc(jr.key(0), f, f, x0, **{**ok, "step_size": -1.0})
    with pytest.raises(ValueError, match="`step_jitter` must be a float in"):
        delayed_acceptance_hmc(jr.key(0), f, f, x0, **ok, step_jitter=1.0)
    with pytest.raises(ValueError, match="`num_surrogate_steps` must be an int >= 1"):
        delayed_acceptance_hmc(jr.key(0), f, f, x0, **ok, num_surrogate_steps=0)
    with pytest.raises(TypeError, match="exact_logdensity_fn"):
        delayed_acceptance_hmc(jr.key(0), f, None, x0, **ok)
    with pytest.raises(ValueError, match=r"`logdensity_fn\(init\)` must be finite"):
        delayed_acceptance_hmc(jr.key(0), f, lambda u: jnp.log(u[0]), x0, **ok)
