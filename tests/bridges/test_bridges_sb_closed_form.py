"""Closed-form checks of the Schrödinger-bridge family (Bunne et al., arXiv 2202.05722)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.bridges import (
    BrownianReference,
    DoobDrift,
    OUReference,
    QuadraticLogPotential,
    doob_drift,
    follmer_drift_gaussian,
    follmer_marginal_gaussian,
    gauss_hermite,
    gaussian_eot_cross_cov,
    gaussian_sb_coupling,
    gaussian_sb_marginal,
    gaussian_sb_potential_ou,
    log_h,
    log_terminal_density,
    quadratic_terminal_law,
    sample_bridge,
)
from jaxgen.core import solve_sde

MU1, S1 = jnp.array([1.2]), jnp.array([[0.16]])  # 1-D target N(1.2, 0.4^2)
GH80 = gauss_hermite(1, 80)


def _sinkhorn_grid_cross_cov(a_var, b_var, mu1, eps, nx=241, ny=161, iters=1500):
    """numpy oracle: Sinkhorn on grids (scaling form), cost |x - y|^2 / 2, regularisation eps."""
    x = np.linspace(-7 * np.sqrt(a_var), 7 * np.sqrt(a_var), nx)
    y = np.linspace(mu1 - 7 * np.sqrt(b_var), mu1 + 7 * np.sqrt(b_var), ny)
    a = np.exp(-0.5 * x**2 / a_var)
    b = np.exp(-0.5 * (y - mu1) ** 2 / b_var)
    a, b = a / a.sum(), b / b.sum()
    K = np.exp(-0.5 * (x[:, None] - y[None, :]) ** 2 / eps)
    u, v = np.ones(nx), np.ones(ny)
    for _ in range(iters):
        u = a / (K @ v)
        v = b / (K.T @ u)
    plan = u[:, None] * K * v[None, :]
    mx, my = plan.sum(1) @ x, plan.sum(0) @ y
    return float(np.sum(plan * (x[:, None] - mx) * (y[None, :] - my)))


def test_eot_cross_cov_matches_sinkhorn_grid():
    closed = gaussian_eot_cross_cov(jnp.eye(1), jnp.array([[0.25]]), 0.7)
    np.testing.assert_allclose(closed[0, 0], 0.2603278, atol=1e-7)  # precomputed in float64
    oracle = _sinkhorn_grid_cross_cov(1.0, 0.25, 1.5, 0.7)
    np.testing.assert_allclose(closed[0, 0], oracle, atol=1e-4)


@eqx.filter_jit
def _eot_case(key):
    d, eps = 3, 0.8
    ka, kb = jr.split(key)
    ma, mb = jr.normal(ka, (d, d)), jr.normal(kb, (d, d))
    A, B = ma @ ma.T + 0.5 * jnp.eye(d), mb @ mb.T + 0.5 * jnp.eye(d)
    C = gaussian_eot_cross_cov(A, B, eps)
    K = B - C.T @ jnp.linalg.solve(A, C)  # Var(Y | X)
    joint = jnp.block([[A, C], [C.T, B]])
    return eps * C.T, K @ A, jnp.linalg.eigvalsh(joint).min()


def test_eot_factorisation_and_psd(getkey):
    lhs, rhs, min_eig = _eot_case(getkey())
    np.testing.assert_allclose(lhs, rhs, atol=1e-10)
    assert float(min_eig) > 0


@eqx.filter_jit
def _heat_case(x):
    ref = OUReference(2, b=0.7, m=jnp.array([0.3, -0.2]), Sigma=jnp.array([[1.5, 0.3], [0.3, 0.8]]))
    psi = QuadraticLogPotential(jnp.array([[0.9, -0.2], [-0.2, 0.4]]), jnp.array([0.5, -1.0]))
    gh = gauss_hermite(2, 30)
    return (
        psi.log_heat(ref, x, 0.6),
        log_h(psi, ref, x, 0.4, 1.0, gh),
        psi.log_heat(ref, x, 0.0),
        psi(x),
    )


def test_ou_transition_heat_of_exp_quadratic():
    closed, quad, at_zero, direct = _heat_case(jnp.array([0.4, 1.1]))
    np.testing.assert_allclose(quad, closed, rtol=1e-10)
    np.testing.assert_allclose(at_zero, direct, rtol=1e-12)


@pytest.mark.slow
def test_ou_transition_simulated(getkey):
    ref = OUReference(2, b=1.0, m=jnp.array([0.5, 0.0]), Sigma=jnp.array([[2.0, 0.5], [0.5, 1.0]]))
    x0, tau, n, steps = jnp.array([1.0, -0.5]), 0.5, 4000, 100
    root = jnp.linalg.cholesky(ref.Sigma)

    @jax.jit
    def simulate(keys):
        def one(k):
            sol = solve_sde(
                lambda t, y, a: ref.drift(y),
                lambda t, y, a: root,
                x0,
                key=k,
                t1=tau,
                steps=steps,
                brownian="unsafe",
            )
            return sol.ys[-1]

        return jax.vmap(one)(keys)

    xs = simulate(jr.split(getkey(), n))
    mean, cov = ref.mean(x0, tau), ref.cov(tau)
    se = jnp.sqrt(jnp.diagonal(cov) / n)
    bias = 1.0 * (1.0 / steps)  # Euler O(dt)
    assert jnp.all(jnp.abs(xs.mean(0) - mean) < 5 * se + bias * 0.1)
    emp = jnp.cov(xs.T)
    se_cov = jnp.sqrt((cov**2 + jnp.outer(jnp.diagonal(cov), jnp.diagonal(cov))) / n)
    assert jnp.all(jnp.abs(emp - cov) < 5 * se_cov + 0.01)


@eqx.filter_jit
def _closed_1d_case(ys):
    ref, T = OUReference(1), 0.5
    psi = gaussian_sb_potential_ou(MU1, S1, ref, T)
    logp = jax.vmap(lambda y: log_terminal_density(psi, ref, y, T, outer=GH80, inner=GH80))(ys)
    drift = doob_drift(psi, ref, T, GH80)
    x = jnp.array([0.3])
    jitted = eqx.filter_jit(lambda d: d(0.1, x, None))(drift)  # the drift module under jit
    return psi, logp, jitted, drift(0.1, x, None)


def test_closed_form_potential_reproduces_target_1d():
    ys = jnp.linspace(0.0, 2.4, 9)[:, None]
    psi, logp, _, _ = _closed_1d_case(ys)
    np.testing.assert_allclose(psi.Lambda[0, 0], 5.482545, atol=2e-6)
    np.testing.assert_allclose(psi.eta[0], 8.477427, atol=2e-6)
    ratio = jnp.exp(logp - jax.scipy.stats.norm.logpdf(ys[:, 0], 1.2, 0.4))
    np.testing.assert_allclose(ratio, 1.0, atol=1e-5)


@pytest.mark.slow
def test_closed_form_potential_reproduces_target_2d():
    ref, T = OUReference(2), 1.0
    mu, S = jnp.array([1.0, -0.5]), jnp.array([[0.5, 0.2], [0.2, 0.3]])
    psi = gaussian_sb_potential_ou(mu, S, ref, T)
    gh = gauss_hermite(2, 40)
    ys = mu[None, :] + jnp.array([[0.0, 0.0], [0.5, -0.3], [-0.6, 0.2]])
    f = jax.jit(jax.vmap(lambda y: log_terminal_density(psi, ref, y, T, outer=gh, inner=gh)))
    target = jax.vmap(lambda y: jax.scipy.stats.multivariate_normal.logpdf(y, mu, S))(ys)
    np.testing.assert_allclose(jnp.exp(f(ys) - target), 1.0, atol=1e-4)
    # Independent exact route: the joint quadratic form of (X_0, X_T).
    m_hat, S_hat = quadratic_terminal_law(psi, ref, T)
    np.testing.assert_allclose(m_hat, mu, rtol=1e-10)
    np.testing.assert_allclose(S_hat, S, rtol=1e-10)
    # Coupling marginals and the SB marginal at the endpoints.
    mean, cov = gaussian_sb_coupling(mu, S, ref, T)
    np.testing.assert_allclose(cov[:2, :2], jnp.eye(2), atol=1e-12)
    m_T, c_T = gaussian_sb_marginal(mu, S, ref, T, T)
    np.testing.assert_allclose(m_T, mu, atol=1e-12)
    np.testing.assert_allclose(c_T, S, atol=1e-12)


@eqx.filter_jit
def _potentials_over_T(Ts):
    ref = OUReference(1)
    return jax.vmap(lambda T: gaussian_sb_potential_ou(MU1, S1, ref, T))(Ts)


def test_large_horizon_limit():
    lam_inf, eta_inf = 1 / 0.16 - 1.0, 1.2 / 0.16
    Ts = jnp.array([0.5, 1.0, 2.0, 3.0])
    psis = _potentials_over_T(Ts)
    for i, T in enumerate(np.asarray(Ts)):
        bound = 2 * np.exp(-2 * T)
        assert abs(float(psis.Lambda[i, 0, 0]) - lam_inf) <= bound * lam_inf
        assert abs(float(psis.eta[i, 0]) - eta_inf) <= bound * eta_inf
    np.testing.assert_allclose(psis.Lambda[2, 0, 0], 5.2503, atol=1e-4)


@eqx.filter_jit
def _doob_case(x):
    ref, T = OUReference(2, b=0.8, Sigma=1.5), 1.0
    psi = QuadraticLogPotential(jnp.array([[1.0, 0.3], [0.3, 0.6]]), jnp.array([0.7, -0.4]))
    gh = gauss_hermite(2, 40)
    t = 0.35
    tau = T - t
    C, F = ref.cov(tau), ref.decay(tau)
    g = psi.eta - psi.Lambda @ ref.mean(x, tau)
    grad = F * jnp.linalg.solve(jnp.eye(2) + psi.Lambda @ C, g)  # F (I + Lambda C)^{-1} g
    expected = ref.drift(x) + ref.Sigma @ grad
    return doob_drift(psi, ref, T, gh)(t, x, None), doob_drift(psi, ref, T)(t, x, None), expected


def test_doob_drift_quadratic_matches_analytic_gradient():
    quad, closed, expected = _doob_case(jnp.array([0.3, -0.8]))
    np.testing.assert_allclose(quad, expected, rtol=1e-8)
    np.testing.assert_allclose(closed, expected, rtol=1e-10)


@eqx.filter_jit
def _simulate_closed_form(key, n, steps):
    ref, T = OUReference(1), 0.5
    psi = gaussian_sb_potential_ou(MU1, S1, ref, T)
    kx, ks = jr.split(key)
    x0 = jr.normal(kx, (n, 1))
    xs = sample_bridge(
        ks, psi, ref, T, x0, num_steps=steps, ts=jnp.array([T / 2, T]), brownian="unsafe"
    )
    return xs, gaussian_sb_marginal(MU1, S1, ref, T, T / 2)


@pytest.mark.slow  # ~8 CPU s (diffrax trace + compile); the drift itself is checked fast
def test_simulated_bridge_endpoint_and_midpoint(getkey):
    """Simulated bridge at 2000 paths and 50 Euler steps (5 SE); the 2e4-path, 200-step version is
    the slow twin."""
    n = 2000
    xs, (m_mid, c_mid) = _simulate_closed_form(getkey(), n, 50)
    end, mid = xs[:, 1, 0], xs[:, 0, 0]
    assert abs(float(end.mean()) - 1.2) < 5 * 0.4 / np.sqrt(n)
    assert abs(float(end.std()) - 0.4) < 5 * 0.4 / np.sqrt(2 * n)
    sd = float(jnp.sqrt(c_mid[0, 0]))
    assert abs(float(mid.mean()) - float(m_mid[0])) < 5 * sd / np.sqrt(n) + 0.01
    assert abs(float(mid.std()) - sd) < 5 * sd / np.sqrt(2 * n) + 0.01


@pytest.mark.slow
def test_simulated_bridge_endpoint_spec_size(getkey):
    ref, T, n = OUReference(1), 0.5, 20000
    psi = gaussian_sb_potential_ou(MU1, S1, ref, T)
    xs = sample_bridge(getkey(), psi, ref, T, jr.normal(getkey(), (n, 1)), num_steps=200)
    assert abs(float(xs.mean()) - 1.2) < 0.02
    assert abs(float(xs.std()) - 0.4) < 0.01


MU_F, S_F = jnp.array([1.0, -2.0]), jnp.array([[2.0, 0.6], [0.6, 0.5]])


def _follmer_potential():
    Sinv = jnp.linalg.inv(S_F)
    return QuadraticLogPotential(Sinv - jnp.eye(2), Sinv @ MU_F)


@eqx.filter_jit
def _follmer_case(x):
    ref, psi, gh = BrownianReference(2), _follmer_potential(), gauss_hermite(2, 40)
    t = 0.3
    return (
        follmer_drift_gaussian(t, x, MU_F, S_F),
        doob_drift(psi, ref, 1.0, gh)(t, x, None),
        doob_drift(psi, ref, 1.0)(t, x, None),
        log_terminal_density(psi, ref, x, 1.0, outer=gh, source_cov=jnp.zeros((2, 2))),
        jax.scipy.stats.multivariate_normal.logpdf(x, MU_F, S_F),
    )


def test_follmer_drift_matches_autodiff_of_log_h():
    expected, quad, closed, lp, target = _follmer_case(jnp.array([0.4, -0.9]))
    np.testing.assert_allclose(quad, expected, rtol=1e-8)
    np.testing.assert_allclose(closed, expected, rtol=1e-10)
    # log rho_1 of the Dirac-source bridge is the target density.
    np.testing.assert_allclose(lp, target, rtol=1e-10)


@pytest.mark.parametrize(
    "n,steps",
    [
        pytest.param(3000, 100, id="small", marks=pytest.mark.slow),
        pytest.param(200_000, 1000, id="large", marks=pytest.mark.slow),
    ],
)
def test_follmer_simulation(getkey, n, steps):
    ref, psi = BrownianReference(2), _follmer_potential()
    xs = sample_bridge(
        getkey(),
        psi,
        ref,
        1.0,
        jnp.zeros((n, 2)),
        num_steps=steps,
        ts=jnp.array([0.5, 1.0]),
        brownian="unsafe",
    )
    for i, t in enumerate((0.5, 1.0)):
        mean, cov = follmer_marginal_gaussian(t, MU_F, S_F)
        se = jnp.sqrt(jnp.diagonal(cov) / n)
        assert jnp.all(jnp.abs(xs[:, i].mean(0) - mean) < 5 * se + 0.01)
        emp = jnp.cov(xs[:, i].T)
        se_cov = jnp.sqrt((cov**2 + jnp.outer(jnp.diagonal(cov), jnp.diagonal(cov))) / n)
        assert jnp.all(jnp.abs(emp - cov) < 5 * se_cov + 0.01)


def test_eqx_module_drift_is_jittable():
    # The DoobDrift module passes through filter_jit as an argument (its fields are pytrees).
    _, _, jitted, direct = _closed_1d_case(jnp.linspace(0.0, 2.4, 9)[:, None])
    np.testing.assert_allclose(jitted, direct, rtol=1e-12)


def test_doob_drift_module_checks_its_horizon_like_doob_drift():
    # Built directly, the module refuses what `doob_drift` refuses (it used to accept T < 0).
    psi, ref = QuadraticLogPotential(jnp.eye(1), jnp.zeros(1)), OUReference(1)
    for T in (-0.5, 0.0, float("nan")):
        with pytest.raises(ValueError, match="`T`"):
            DoobDrift(psi, ref, T)
    with pytest.raises(Exception, match="`T`"):
        DoobDrift(psi, ref, jnp.asarray(-0.5))
    drift = DoobDrift(psi, ref, 0.5)
    np.testing.assert_allclose(drift(0.1, jnp.ones(1)), doob_drift(psi, ref, 0.5)(0.1, jnp.ones(1)))
