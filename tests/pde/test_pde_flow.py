import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.pde import (
    CoxIngersollRoss,
    OrnsteinUhlenbeck,
    ThetaPath,
    TransitionFlow,
    box_inverse,
    box_transform,
    cir_condition_sampler,
    euler_path_loglik,
    exact_log_transition,
    exact_path_loglik,
    fit_spacetime,
    flow_at,
    flow_parameters,
    integrate_ng,
    ng_velocity,
    run_nuts,
    sample_cir_exact,
    surrogate_path_loglik,
)

OU = OrnsteinUhlenbeck(1)
OU_LAM = jnp.array([1.0, 0.5, 0.3])
OU_X0 = jnp.array([-0.4])
DELTA = 1.0


def _ou_condition(key):
    del key
    return OU_X0, OU_LAM


@pytest.fixture(scope="module")
def ou_ng():
    # One fixed condition, kappa * Delta = 1: the exact law is in the flow's class (affine in zeta).
    flow = TransitionFlow(
        OU,
        jnp.array([-1.0, 0.5, 0.2, -1.0]),
        jnp.array([1.0, 2.0, 1.0, 1.0]),
        num_units=2,
        width=4,
        depth=1,
        key=jr.key(0),
    )
    # Tsit5: 32 steps give a max log-density error ~1e-5 at t = Delta; Bosh3 (the default) needs
    # ~64 steps for ~1e-3 (third order), the same cost as here.
    path = integrate_ng(
        jr.key(1),
        flow,
        _ou_condition,
        DELTA,
        num_steps=32,
        num_colloc=128,
        num_saves=2,
        solver=dfx.Tsit5(),
    )
    return flow, path


@eqx.filter_jit
def _kl(flow, t, x0, lam, model, grid):
    le = jax.vmap(lambda x: exact_log_transition(model, t, x[None], x0, lam))(grid)
    lf = jax.vmap(lambda x: flow.log_density(t, x[None], x0, lam))(grid)
    w = jnp.gradient(grid)
    return jnp.sum(w * jnp.exp(le) * (le - lf)), jnp.sum(w * jnp.exp(lf))


@eqx.filter_jit
def _cir_flow_checks(flow, t, x, x0, lam, key):
    """log p at x, mass by the trapezoid rule in y = log x (spectrally accurate for this smooth,
    fast-decaying integrand), log p on the y grid, and 8 draws: one compile for both flows."""
    ys = jnp.linspace(-14.0, 1.0, 1500)
    logp = jax.vmap(lambda y: flow.log_density(t, jnp.exp(y)[None], x0, lam))(ys)
    mass = jnp.sum(jnp.exp(logp + ys)) * (ys[1] - ys[0])
    return flow.log_density(t, x, x0, lam), mass, logp, flow.sample(key, t, x0, lam, 8)


def test_identity_init_is_reference_and_normalised(getkey):
    cir = CoxIngersollRoss()
    _, lo, hi = cir_condition_sampler()
    flow = TransitionFlow(cir, lo, hi, num_units=2, width=4, depth=1, key=getkey())
    x0, lam = jnp.array([0.05]), jnp.array([2.0, 0.06, 0.2])
    t, x = jnp.asarray(0.1), jnp.array([0.04])
    # Reference: y = log x Gaussian with frozen Itô coefficients, plus log|d log x / dx|.
    by = (2.0 * (0.06 - 0.05) - 0.5 * 0.04) / 0.05  # b / v - sigma^2 / (2 v)
    sd = np.sqrt(0.1 * 0.04 / 0.05)
    ref = (
        -0.5 * ((np.log(0.04) - np.log(0.05) - 0.1 * by) / sd) ** 2
        - np.log(sd)
        - 0.5 * np.log(2 * np.pi)
        - np.log(0.04)
    )
    logp0, mass0, grid0, _ = _cir_flow_checks(flow, t, x, x0, lam, getkey())
    np.testing.assert_allclose(logp0, ref, rtol=1e-10)
    np.testing.assert_allclose(mass0, 1.0, atol=1e-8)
    # A random (non-identity) theta keeps the mass at one.
    theta, unravel = flow_parameters(flow)
    moved = unravel(theta + 0.3 * jr.normal(getkey(), theta.shape))
    _, mass, grid, draws = _cir_flow_checks(moved, t, x, x0, lam, getkey())
    assert jnp.max(jnp.abs(grid - grid0)) > 1e-2
    np.testing.assert_allclose(mass, 1.0, atol=1e-5)
    assert draws.shape == (8, 1) and jnp.all(draws > 0)


@pytest.mark.slow  # Neural Galerkin training (Tsit5 x 32 steps): ~15 s of CPU
def test_neural_galerkin_recovers_exact_ou_density(ou_ng):
    flow, path = ou_ng
    trained = flow_at(flow, path)
    grid = jnp.linspace(-4.0, 4.0, 4001)
    kl, mass = _kl(trained, DELTA, OU_X0, OU_LAM, OU, grid)
    kl_ref, _ = _kl(flow, DELTA, OU_X0, OU_LAM, OU, grid)
    assert kl < 1e-4, kl
    assert kl < 0.01 * kl_ref
    np.testing.assert_allclose(mass, 1.0, atol=1e-6)


@pytest.mark.slow  # shares the trained OU flow
def test_surrogate_path_loglik_tracks_exact(ou_ng, getkey):
    flow, path = ou_ng
    trained = flow_at(flow, path)
    xs = jnp.concatenate([OU_X0[None], OU_X0[None] + 0.3 * jr.normal(getkey(), (20, 1))])
    # Every transition starts at x0 in this unconditioned test: evaluate pairs (x0, x_k).
    pairs = jnp.stack([jnp.broadcast_to(OU_X0, (20, 1)), xs[1:]], axis=1)
    exact = jax.jit(jax.vmap(lambda p: exact_path_loglik(OU, p, OU_LAM, DELTA)))(pairs)
    sur = eqx.filter_jit(
        jax.vmap(lambda f, p: surrogate_path_loglik(f, p, OU_LAM, DELTA), in_axes=(None, 0))
    )(trained, pairs)
    np.testing.assert_allclose(sur, exact, atol=1e-4)
    with pytest.raises(ValueError, match="`xs` must be a path"):
        exact_path_loglik(OU, xs[:1], OU_LAM, DELTA)
    with pytest.raises(Exception, match="positive time step"):
        euler_path_loglik(OU, xs, OU_LAM, -1.0)


def _ou_flow():
    return TransitionFlow(
        OU,
        jnp.array([-1.0, 0.5, 0.2, -1.0]),
        jnp.array([1.0, 2.0, 1.0, 1.0]),
        num_units=2,
        width=4,
        depth=1,
        key=jr.key(0),
    )


@eqx.filter_jit
def _velocity_and_loglik(flow, t, xs, pairs):
    n = xs.shape[0]
    vel, unexplained = ng_velocity(
        flow, t, xs, jnp.broadcast_to(OU_X0, (n, 1)), jnp.broadcast_to(OU_LAM, (n, 3))
    )
    sur = jax.vmap(lambda p: surrogate_path_loglik(flow, p, OU_LAM, DELTA))(pairs)
    direct = jax.vmap(lambda p: flow.log_density(DELTA, p[1], p[0], OU_LAM))(pairs)
    return vel, unexplained, sur, direct


def test_ng_velocity_explains_exact_ou_residual_and_surrogate_loglik(getkey):
    # At init the flow is the frozen reference; for OU the exact law stays affine in zeta, so the
    # residual r lies in the tangent space of the flow: the NG velocity explains it entirely.
    flow = _ou_flow()
    xs = OU_X0[None] + 0.3 * jr.normal(getkey(), (48, 1))
    pairs = jnp.stack([xs[:-1], xs[1:]], axis=1)
    vel, unexplained, sur, direct = _velocity_and_loglik(flow, jnp.asarray(0.3), xs, pairs)
    assert jnp.max(jnp.abs(vel)) > 1e-3  # the reference is not exact at t = 0.3: theta moves
    assert unexplained < 1e-4, unexplained  # not 0: the ridge eps = 1e-6 mean diag(J^T J)
    np.testing.assert_allclose(sur, direct, rtol=1e-12)


@pytest.mark.slow  # training (compiles the NG field inside diffrax): ~10 s of CPU
def test_integrate_ng_few_steps_and_flow_at(getkey):
    # A few Euler steps only (the trained accuracy is checked by the OU test above).
    flow = _ou_flow()
    path = integrate_ng(
        getkey(),
        flow,
        _ou_condition,
        DELTA,
        num_steps=2,
        num_colloc=8,
        num_saves=2,
        solver=dfx.Euler(),
    )
    np.testing.assert_allclose(path.ts, [1e-4, 1e-2, 1.0], rtol=1e-10)
    np.testing.assert_allclose(path.thetas[0], flow_parameters(flow)[0], rtol=1e-14)
    assert jnp.all(jnp.isfinite(path.thetas))
    assert jnp.max(jnp.abs(path.thetas[-1] - path.thetas[0])) > 1e-3
    moved = flow_at(flow, ThetaPath(ts=path.ts, thetas=path.thetas))
    np.testing.assert_allclose(flow_parameters(moved)[0], path.thetas[-1], rtol=1e-14)


def test_box_transform_roundtrip_and_logdet(getkey):
    lo, hi = jnp.array([0.5, -3.0]), jnp.array([4.0, 1.0])
    u = jr.normal(getkey(), (2,))
    x, logdet = box_transform(u, lo, hi)
    np.testing.assert_allclose(box_inverse(x, lo, hi), u, rtol=1e-10)
    jac = jax.jacobian(lambda v: box_transform(v, lo, hi)[0])(u)
    np.testing.assert_allclose(logdet, jnp.linalg.slogdet(jac)[1], rtol=1e-10)
    with pytest.raises(ValueError, match="`lo` and `hi`"):
        box_transform(u, lo[:1], hi[:1])


def test_flow_bad_inputs(getkey):
    with pytest.raises(ValueError, match="`box_lo` and `box_hi` must have shape"):
        TransitionFlow(OU, jnp.zeros(2), jnp.ones(2), key=getkey())
    with pytest.raises(ValueError, match="`box_hi` must exceed"):
        TransitionFlow(OU, jnp.ones(4), jnp.zeros(4), key=getkey())
    with pytest.raises(ValueError, match="`nu` must stay >= 1"):
        cir_condition_sampler(nu=(0.5, 2.0))
    flow = TransitionFlow(
        OU,
        -jnp.ones(4),
        jnp.ones(4),
        num_units=2,
        width=4,
        depth=1,
        time_range=(0.01, 1.0),
        key=getkey(),
    )
    with pytest.raises(ValueError, match="must not take time features"):
        integrate_ng(getkey(), flow, _ou_condition, 1.0)


@pytest.mark.slow
def test_nuts_recovers_cir_parameters(getkey):
    # The (kappa, theta, sigma) box contains non-Feller sets that NUTS may visit: the exact
    # likelihood is valid there, so the model must not refuse them.
    cir = CoxIngersollRoss(require_feller=False)
    truth = jnp.array([2.0, 0.06, jnp.sqrt(2 * 2.0 * 0.06 / 4.0)])
    xs = sample_cir_exact(getkey(), 0.06, truth, 0.25, 500)
    lo, hi = jnp.array([0.2, 0.01, 0.05]), jnp.array([8.0, 0.2, 0.5])

    def logpost(u):
        lam, logdet = box_transform(u, lo, hi)
        return exact_path_loglik(cir, xs, lam, 0.25) + logdet

    res = run_nuts(
        getkey(), logpost, box_inverse(truth, lo, hi), num_warmup=200, num_samples=300, num_chains=2
    )
    lam = jax.vmap(jax.vmap(lambda u: box_transform(u, lo, hi)[0]))(res.samples).reshape(-1, 3)
    mean, sd = lam.mean(0), lam.std(0)
    assert jnp.all(jnp.abs(mean - truth) < 4 * sd)
    assert jnp.all(res.rhat < 1.05)


@pytest.mark.slow  # blackjax window adaptation + NUTS compile: ~25 s of CPU
def test_run_nuts_gaussian_target(getkey):
    # A correlated Gaussian: posterior moments are known exactly.
    mean, sd = jnp.array([1.0, -2.0]), jnp.array([0.5, 2.0])

    def logdensity(u):
        return -0.5 * jnp.sum(((u - mean) / sd) ** 2)

    res = run_nuts(
        getkey(), logdensity, jnp.zeros(2), num_warmup=150, num_samples=300, num_chains=2
    )
    draws = res.samples.reshape(-1, 2)
    assert res.samples.shape == (2, 300, 2) and res.rhat.shape == (2,)
    se = sd / jnp.sqrt(jnp.minimum(res.ess, draws.shape[0]))
    assert jnp.all(jnp.abs(draws.mean(0) - mean) < 5 * se)
    np.testing.assert_allclose(draws.std(0), sd, rtol=0.25)
    assert jnp.all(res.rhat < 1.1)
    with pytest.raises(TypeError, match="parameter 'init'"):  # the jaxtyping hook comes first
        run_nuts(getkey(), logdensity, jnp.zeros((1, 2)))
    with pytest.raises(ValueError, match="`num_chains`"):
        run_nuts(getkey(), logdensity, jnp.zeros(2), num_chains=0)


@pytest.mark.slow
def test_fit_spacetime_runs(getkey):
    # Space-time ablation on the fixed OU condition: finite losses, one per step. Its
    # convergence is NOT asserted: with 60 steps the fresh-batch loss is too noisy to drop.
    flow = TransitionFlow(
        OU,
        jnp.array([-1.0, 0.5, 0.2, -1.0]),
        jnp.array([1.0, 2.0, 1.0, 1.0]),
        num_units=2,
        width=4,
        depth=1,
        time_range=(1e-3, 1.0),
        key=getkey(),
    )
    res = fit_spacetime(
        flow, _ou_condition, key=getkey(), num_steps=60, batch_size=32, learning_rate=1e-2
    )
    losses = res.losses
    assert losses.shape == (60,) and jnp.all(jnp.isfinite(losses))
    plain = TransitionFlow(
        OU, -jnp.ones(4), jnp.ones(4), num_units=2, width=4, depth=1, key=getkey()
    )
    with pytest.raises(ValueError, match="time_range"):
        fit_spacetime(plain, _ou_condition, key=getkey())
