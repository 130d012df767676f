"""The likelihood estimators, learnable potentials, training and bad-input errors."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.bridges import (
    AbstractLogPotential,
    AtomicLogPotential,
    BoundedMLPLogPotential,
    BrownianReference,
    GMMLogPotential,
    OUReference,
    QuadraticLogPotential,
    Quadrature,
    SBNLLLoss,
    doob_drift,
    drift_ess,
    evaluate_nll,
    fit_log_potential,
    gauss_hermite,
    gaussian_kl,
    gaussian_sb_potential_ou,
    guided_drift,
    log_h,
    log_terminal_density,
    monte_carlo,
    quadratic_terminal_law,
    sample_bridge,
)

GH60 = gauss_hermite(1, 60)


class Shifted(AbstractLogPotential):
    base: AbstractLogPotential
    c: jax.Array

    def __call__(self, x):
        return self.base(x) + self.c


@eqx.filter_jit
def _make_mlp(key):
    return BoundedMLPLogPotential(1, 16, 2, key=key, init_kappa=0.3)


@pytest.fixture(scope="module")
def mlp_psi():
    return _make_mlp(jr.key(3))


@eqx.filter_jit
def _normalisation_case(psi, c):
    ref, T = OUReference(1), 1.0
    # Integrate rho_T over y with 200 GH nodes under a proposal N(0, 2^2).
    y_rule = gauss_hermite(1, 200)
    ys = 2.0 * y_rule.nodes
    shifted = Shifted(psi, c)
    logp = jax.vmap(lambda y: log_terminal_density(psi, ref, y, T, outer=GH60, inner=GH60))(ys)
    logp_s = jax.vmap(lambda y: log_terminal_density(shifted, ref, y, T, outer=GH60, inner=GH60))(
        ys[:5]
    )
    x = jnp.array([-0.3])
    drifts = (doob_drift(psi, ref, T, GH60)(0.3, x), doob_drift(shifted, ref, T, GH60)(0.3, x))
    log_prop = jax.scipy.stats.norm.logpdf(ys[:, 0], 0.0, 2.0)
    total = jnp.exp(jax.nn.logsumexp(logp - log_prop + y_rule.log_weights))
    return total, (logp[:5], logp_s), drifts


def test_normalisation_random_mlp(mlp_psi):
    total, (lp, lp_shift), (drift, drift_shift) = _normalisation_case(mlp_psi, jnp.asarray(3.7))
    np.testing.assert_allclose(total, 1.0, atol=1e-6)
    # invariance to adding a constant to psi: likelihood and drift unchanged
    np.testing.assert_allclose(lp_shift, lp, atol=1e-12)
    np.testing.assert_allclose(drift_shift, drift, atol=1e-12)


@eqx.filter_jit
def _shift_case(psi, shifted, bank, Y, k):
    ref, T = OUReference(1), 1.0
    y, x = jnp.array([0.4]), jnp.array([-0.3])
    out = []
    for outer in (GH60, bank):
        out.append(
            (
                log_terminal_density(psi, ref, y, T, outer=outer, inner=GH60),
                log_terminal_density(shifted, ref, y, T, outer=outer, inner=GH60),
            )
        )
    out.append((doob_drift(psi, ref, T, GH60)(0.3, x), doob_drift(shifted, ref, T, GH60)(0.3, x)))
    loss = SBNLLLoss(ref, T, num_sources=32, num_inner=8, penalty=0.0)
    out.append((loss(psi, Y, k), loss(shifted, Y, k)))
    return out


@pytest.mark.slow
def test_constant_shift_invariance(mlp_psi, getkey):
    shifted = Shifted(mlp_psi, jnp.asarray(3.7))
    bank, Y = jr.normal(getkey(), (64, 1)), jr.normal(getkey(), (8, 1))
    for a, b in _shift_case(mlp_psi, shifted, bank, Y, getkey()):
        np.testing.assert_allclose(a, b, atol=1e-12)


@pytest.mark.slow
def test_e1_agrees_with_e2(mlp_psi, getkey):
    ref, T, N = OUReference(1), 1.0, 4096
    bank = jr.normal(getkey(), (N, 1))
    lh = jax.vmap(lambda x: log_h(mlp_psi, ref, x, 0.0, T, GH60))(bank)
    for yv in (-0.5, 0.8):
        y = jnp.array([yv])
        e2 = log_terminal_density(mlp_psi, ref, y, T, outer=GH60, inner=GH60)
        e1 = log_terminal_density(mlp_psi, ref, y, T, outer=bank, inner=GH60)
        # SE of log(mean r_i) ~ sd(r) / (mean(r) sqrt(N)), r_i = q_T(y | x_i) / h(x_i, 0).
        r = jnp.exp(
            jax.scipy.stats.norm.logpdf(y[0], ref.decay(T) * bank[:, 0], jnp.sqrt(ref.cov(T)[0, 0]))
            - lh
        )
        se = jnp.std(r) / (jnp.mean(r) * jnp.sqrt(N))
        assert abs(float(e1 - e2)) < 3 * float(se)


@eqx.filter_jit
def _gmm_case(x):
    ref, T = OUReference(2, b=0.5, Sigma=1.3), 1.0
    chol = jnp.stack([jnp.array([[0.5, 0.0], [0.2, 0.4]]), jnp.array([[0.3, 0.0], [-0.1, 0.6]])])
    gmm = GMMLogPotential(jnp.array([0.2, -0.4]), jnp.array([[1.0, 0.0], [-1.0, 0.5]]), chol)
    gh = gauss_hermite(2, 40)
    atoms = AtomicLogPotential(gmm.log_alpha, gmm.mu)
    point_mass = GMMLogPotential(gmm.log_alpha, gmm.mu, jnp.zeros_like(chol))
    return (
        log_h(gmm, ref, x, 0.4, T),
        log_h(gmm, ref, x, 0.4, T, gh),
        log_h(atoms, ref, x, 0.4, T),
        log_h(point_mass, ref, x, 0.4, T),
    )


def test_gmm_and_atomic_closed_forms():
    closed, quad, atom, point = _gmm_case(jnp.array([0.3, -0.2]))
    np.testing.assert_allclose(closed, quad, rtol=1e-5)  # 40-node GH on narrow components
    np.testing.assert_allclose(atom, point, rtol=1e-10)


@eqx.filter_jit
def _guided_case(x, key):
    ref, T = OUReference(2), 1.0
    psi = QuadraticLogPotential(0.5 * jnp.eye(2), jnp.array([0.3, -0.1]))
    doob = doob_drift(psi, ref, T)
    full = guided_drift(lambda t, x, a: ref.drift(x), ref.Sigma, doob.grad_log_h)
    diag = guided_drift(lambda t, x, a: ref.drift(x), jnp.diagonal(ref.Sigma), doob.grad_log_h)
    call = guided_drift(lambda t, x, a: ref.drift(x), lambda t, x, a: ref.Sigma, doob.grad_log_h)
    drifts = [f(0.5, x, None) for f in (full, diag, call)]
    ess = drift_ess(psi, ref, x, 0.5, T, monte_carlo(key, 2, 64))
    return drifts, doob(0.5, x, None), ess


def test_guided_drift_and_ess():
    drifts, doob, ess = _guided_case(jnp.array([0.2, 0.7]), jr.key(0))
    for f in drifts:
        np.testing.assert_allclose(f, doob, rtol=1e-12)
    assert 0.0 < float(ess) <= 1.0


@pytest.mark.slow
def test_fit_quadratic_recovers_gaussian(getkey):
    ref, T = OUReference(1), 1.0
    Y = 1.2 + 0.4 * jr.normal(getkey(), (2000, 1))
    psi0 = QuadraticLogPotential(jnp.zeros((1, 1)), jnp.zeros(1))
    res = fit_log_potential(
        psi0,
        Y,
        key=getkey(),
        ref=ref,
        T=T,
        num_steps=300,
        batch_size=256,
        num_sources=256,
        learning_rate=2e-1,  # the quadratic needs Lambda ~ 4.5 from 0: 5e-2 stops at KL 0.11
        progress=False,
    )
    assert res.losses.shape == (300,) and np.all(np.isfinite(res.losses))
    m_hat, S_hat = quadratic_terminal_law(res.model, ref, T)
    kl = gaussian_kl(jnp.array([1.2]), jnp.array([[0.16]]), m_hat, S_hat)
    assert float(kl) < 0.01
    nll = evaluate_nll(getkey(), res.model, Y, ref=ref, T=T, num_sources=512)
    exact = -jnp.mean(jax.scipy.stats.norm.logpdf(Y[:, 0], m_hat[0], jnp.sqrt(S_hat[0, 0])))
    np.testing.assert_allclose(nll, exact, atol=0.02)


def test_fit_log_potential_steps():
    # The quadratic class (closed-form h): the cheapest program through `core.fit`.
    ref, T = OUReference(1), 1.0
    Y = 1.2 + 0.4 * jr.normal(jr.key(1), (32, 1))
    psi0 = QuadraticLogPotential(jnp.zeros((1, 1)), jnp.zeros(1))
    res = fit_log_potential(
        psi0,
        Y,
        key=jr.key(2),
        ref=ref,
        T=T,
        num_steps=20,
        batch_size=16,
        num_sources=16,
        learning_rate=5e-2,
        progress=False,
    )
    assert res.losses.shape == (20,) and np.all(np.isfinite(res.losses))
    assert float(np.mean(res.losses[-5:])) < float(np.mean(res.losses[:5]))  # it learns


@pytest.mark.slow
def test_mlp_training_step(getkey):
    ref, T = OUReference(2), 1.0
    psi = BoundedMLPLogPotential(2, 8, 1, key=getkey(), ref=ref)
    Y = jr.normal(getkey(), (32, 2)) + 1.0
    res = fit_log_potential(
        psi,
        Y,
        key=getkey(),
        ref=ref,
        T=T,
        num_steps=3,
        batch_size=8,
        num_sources=8,
        num_inner=4,
        progress=False,
    )
    assert np.all(np.isfinite(res.losses))
    assert float(res.model(jnp.array([50.0, 0.0]))) < 0  # quadratic confinement


@pytest.mark.slow
def test_mlp_potential_samples(getkey):
    ref, T = OUReference(2), 1.0
    psi = BoundedMLPLogPotential(2, 8, 1, key=getkey(), ref=ref)
    X = sample_bridge(
        getkey(),
        psi,
        ref,
        T,
        jr.normal(getkey(), (4, 2)),
        num_steps=5,
        quad=monte_carlo(getkey(), 2, 4),
    )
    assert X.shape == (4, 2) and bool(jnp.all(jnp.isfinite(X)))


@eqx.filter_jit
def _f32_case(b, Sigma, Lam, eta, x):
    ref = OUReference(1, b=b, Sigma=Sigma)
    psi = QuadraticLogPotential(Lam, eta)
    return log_h(psi, ref, x, 0.2, 1.0, gauss_hermite(1, 8, jnp.float32))


def test_float32_dtype_preserved():
    out = _f32_case(
        jnp.float32(1.0),
        jnp.float32(2.0),
        jnp.ones((1, 1), jnp.float32),
        jnp.ones(1, jnp.float32),
        jnp.ones(1, jnp.float32),
    )
    assert out.dtype == jnp.float32


def test_bad_inputs():
    with pytest.raises(ValueError, match="`b` must be finite and > 0"):
        OUReference(1, b=0.0)
    with pytest.raises(ValueError, match="`Sigma` must be finite and > 0"):
        OUReference(1, Sigma=-1.0)
    with pytest.raises(ValueError, match="`Sigma` must be a scalar or"):
        OUReference(2, Sigma=jnp.eye(3))
    with pytest.raises(ValueError, match="`m` must have shape"):
        OUReference(2, m=jnp.zeros(3))
    with pytest.raises(ValueError, match="`sigma` must be finite and > 0"):
        BrownianReference(1, sigma=0.0)
    with pytest.raises(ValueError, match="`dim` must be an int"):
        OUReference(0)
    with pytest.raises(Exception, match="`b` must be finite and > 0"):
        eqx.filter_jit(lambda b: OUReference(1, b=b).b)(jnp.asarray(-1.0))
    ref = OUReference(1)
    psi = QuadraticLogPotential(jnp.ones((1, 1)), jnp.zeros(1))
    # shape-only module: the type checks need no weights (and no compile)
    mlp = eqx.filter_eval_shape(lambda key: BoundedMLPLogPotential(1, 4, 1, key=key), jr.key(0))
    for call in (
        lambda: log_h(psi, ref, jnp.zeros(1), 0.0, -1.0),
        lambda: doob_drift(psi, ref, 0.0),
        lambda: log_terminal_density(psi, ref, jnp.zeros(1), 0.0, outer=GH60),
        lambda: sample_bridge(jr.key(0), psi, ref, -1.0, jnp.zeros((2, 1))),
    ):
        with pytest.raises(ValueError, match="horizon"):
            call()
    with pytest.raises(ValueError, match="`T` must be finite and > 0"):
        SBNLLLoss(ref, 0.0)
    with pytest.raises(TypeError, match="no closed-form heat transform"):
        log_h(mlp, ref, jnp.zeros(1), 0.0, 1.0)
    with pytest.raises(TypeError, match="no closed-form heat transform"):
        doob_drift(mlp, ref, 1.0)
    with pytest.raises(ValueError, match="`x` must have shape"):
        log_h(psi, ref, jnp.zeros(2), 0.0, 1.0)
    with pytest.raises(ValueError, match="`y` must have shape"):
        log_terminal_density(psi, ref, jnp.zeros(2), 1.0, outer=GH60)
    with pytest.raises(TypeError):  # the jaxtyping hook rejects the (N, 3) bank first
        log_terminal_density(psi, ref, jnp.zeros(1), 1.0, outer=jnp.zeros((4, 3)))
    with pytest.raises(ValueError, match="`quad` has dim"):
        log_h(psi, ref, jnp.zeros(1), 0.0, 1.0, gauss_hermite(2, 3))
    with pytest.raises(ValueError, match="`Y` must be a 2-D array"):
        fit_log_potential(psi, jnp.zeros(5), key=jr.key(0), ref=ref, T=1.0)
    with pytest.raises(ValueError, match="`Y` must have 1 columns"):
        fit_log_potential(psi, jnp.zeros((5, 2)), key=jr.key(0), ref=ref, T=1.0)
    with pytest.raises(ValueError, match="`Y` has non-finite values"):
        fit_log_potential(psi, jnp.array([[0.0], [jnp.nan]]), key=jr.key(0), ref=ref, T=1.0)
    with pytest.raises(ValueError, match="`x0` must be a 2-D array"):
        sample_bridge(jr.key(0), psi, ref, 1.0, jnp.zeros(3))
    with pytest.raises(TypeError):  # jaxtyping hook: `T` must be a Python float
        sample_bridge(jr.key(0), psi, ref, jnp.asarray(1.0), jnp.zeros((2, 1)))
    with pytest.raises(ValueError, match="`batch_size` must be an int"):
        fit_log_potential(psi, jnp.zeros((5, 1)), key=jr.key(0), ref=ref, T=1.0, batch_size=0)
    with pytest.raises(ValueError, match="`num_inner` must be even"):
        SBNLLLoss(ref, 1.0, num_inner=3)
    with pytest.raises(ValueError, match="`num_sources` must be an int"):
        SBNLLLoss(ref, 1.0, num_sources=1)
    with pytest.raises(ValueError, match="nodes"):
        gauss_hermite(8, 10)
    with pytest.raises(ValueError, match="`n_per_dim` must be"):
        gauss_hermite(1, 0)
    with pytest.raises(ValueError, match="antithetic"):
        monte_carlo(jr.key(0), 1, 3)
    with pytest.raises(ValueError, match="`nodes` must be"):
        Quadrature(jnp.zeros((3, 1)), jnp.zeros(2))
    # Mismatched K: the jaxtyping hook (" K" vs "K dim") rejects these before the ValueError.
    with pytest.raises(TypeError):
        GMMLogPotential(jnp.zeros(2), jnp.zeros((3, 1)), jnp.zeros((3, 1, 1)))
    with pytest.raises(TypeError):
        AtomicLogPotential(jnp.zeros(2), jnp.zeros((3, 1)))
    with pytest.raises(TypeError):  # jaxtyping: Lambda (dim, dim) vs eta (dim,)
        QuadraticLogPotential(jnp.ones((2, 2)), jnp.zeros(1))
    with pytest.raises(ValueError, match="`diffusion_matrix` must be"):
        guided_drift(lambda t, x, a: x, jnp.zeros((1, 1, 1)), lambda t, x, a: x)
    with pytest.raises(TypeError, match="parameter 'drift'"):  # the jaxtyping hook comes first
        guided_drift(None, jnp.eye(1), lambda t, x, a: x)
    with pytest.raises(ValueError, match="`bound` must be > 0"):
        BoundedMLPLogPotential(1, 4, 1, bound=0.0, key=jr.key(0))
    with pytest.raises(TypeError):  # jaxtyping: mu_star (dim,) vs S_star (dim, dim)
        gaussian_sb_potential_ou(jnp.zeros(1), jnp.eye(2), ref, 1.0)
    with pytest.raises(ValueError, match="`mu_star` must have shape"):  # ref.dim = 1
        gaussian_sb_potential_ou(jnp.zeros(2), jnp.eye(2), ref, 1.0)


def test_error_if_on_traced_nonfinite_samples():
    from jaxgen.bridges import check_samples

    f = eqx.filter_jit(lambda y: check_samples(y, 1))
    with pytest.raises(Exception, match="non-finite"):
        f(jnp.array([[jnp.inf]]))


class _Opaque(AbstractLogPotential):
    """A closed-form potential hidden behind the Monte Carlo ``h`` path."""

    base: AbstractLogPotential

    def __call__(self, x):
        return self.base(x)


def test_default_num_inner_bias(getkey):
    # With a peaked e^psi, log h from M Monte Carlo nodes is biased low (Jensen) and so is the
    # loss; with M = 8 training exploited this (benchmark ring-8 at d = 8 learned nothing). The
    # default M must keep the bias under 0.05 nats, measured against the exact h (M = 16, the
    # old default, gives ~0.08; M = 8 ~0.3-0.6).
    ref, T, d = OUReference(2), 3.0, 2
    quad = QuadraticLogPotential(4.0 * jnp.eye(d), jnp.zeros(d))
    Y = jr.normal(getkey(), (16, d))
    keys = jr.split(getkey(), 128)

    @eqx.filter_jit
    def mean_loss(loss, psi):
        return jnp.mean(jax.vmap(lambda k: loss(psi, Y, k))(keys))

    exact = mean_loss(SBNLLLoss(ref, T, num_sources=64, penalty=0.0), quad)
    bias8 = exact - mean_loss(
        SBNLLLoss(ref, T, num_sources=64, num_inner=8, penalty=0.0), _Opaque(quad)
    )
    bias_default = exact - mean_loss(SBNLLLoss(ref, T, num_sources=64, penalty=0.0), _Opaque(quad))
    assert bias8 > 0.1, bias8
    assert abs(bias_default) < 0.05, (bias_default, bias8)
