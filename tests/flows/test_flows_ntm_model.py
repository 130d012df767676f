"""NTM model: transporters, exact likelihood, sampling, denoising, ELBO.

Time convention: t = 1 is noise. The exact Gaussian NTM below (data N(m, v) per coordinate,
`ExactGaussianPredictor` + `IdentityTransporter`) has a closed-form trajectory density.
"""

import functools as ft

import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxgen.core import adamw_cosine, fit
from jaxgen.flows import (
    NTM,
    AbstractGaussianPredictor,
    Denoiser,
    IdentityTransporter,
    LinearInterpolant,
    MLPPredictor,
    PosteriorResidualPredictor,
    TarFlowTransporter,
    TransformerPredictor,
    denoiser_loss,
    denoiser_targets,
    forward_trajectory,
    mean_alignment_loss,
    ntm_elbo,
    ntm_loss,
    ntm_schedule,
    reverse_posterior_coeffs,
    trajectory_covariance,
    trajectory_score_denoise,
)

L, C = 3, 2


def perturb(module, key, scale=0.3):
    """Add N(0, scale^2) to every inexact array (random weights for likelihood checks).

    numpy draws seeded from ``key``: jax draws (and a ravel/unravel) compile once per shape.
    """
    rng = np.random.default_rng(np.asarray(jr.key_data(key)))
    params, static = eqx.partition(module, eqx.is_inexact_array)
    noisy = jax.tree.map(
        lambda a: jnp.asarray(np.asarray(a) + scale * rng.normal(size=a.shape), a.dtype), params
    )
    return eqx.combine(noisy, static)


class ExactGaussianPredictor(AbstractGaussianPredictor):
    """True p(x_s | x_t) for data N(mean, var) per coordinate."""

    mean: float
    var: float
    seq_len: int = eqx.field(static=True)
    channels: int = eqx.field(static=True)
    num_classes: int = eqx.field(static=True, default=0)

    def __call__(self, u_t, t, s, y, T):
        marg = (1 - t) ** 2 * self.var + t**2
        post_mean = self.mean + (1 - t) * self.var * (u_t - (1 - t) * self.mean) / marg
        post_var = self.var * t**2 / marg
        a, b, c = reverse_posterior_coeffs(t, s)
        log_sigma = 0.5 * jnp.log(c**2 + b**2 * post_var)
        return a * u_t + b * post_mean, jnp.broadcast_to(log_sigma, u_t.shape)


GAUSS_MEAN, GAUSS_VAR = 0.4, 0.3**2


@pytest.fixture(scope="module")
def models():
    key = jr.key(3)
    k = jr.split(key, 6)
    made = TarFlowTransporter(L, C, conditioner="made", width=8, depth=2, zero_init=False, key=k[0])
    pred = perturb(MLPPredictor(L, C, width=16, depth=2, num_classes=3, key=k[2]), k[3], 0.1)
    return {"made": made, "pred": pred, "ntm": NTM(made, pred)}


@pytest.fixture(scope="module")
def transporters(models):
    """Both conditioners; the transformer one is built (and compiled) only by slow tests."""

    def get(kind):
        if kind == "made":
            return models["made"]
        return TarFlowTransporter(
            L, C, conditioner=kind, width=8, depth=1, num_heads=2, zero_init=False, key=jr.key(7)
        )

    return get


# The transformer conditioner repeats the MADE checks with a costlier compile: slow, with the
# MADE case as its fast twin.
KINDS = ["made", pytest.param("transformer", marks=pytest.mark.slow)]


# Shared compiled programs (same shapes in every test that uses them: one compile each).
batched_traj = jax.jit(jax.vmap(forward_trajectory, in_axes=(0, 0, None)))


@eqx.filter_jit
def batched_nll(model, xs, ts, labels):
    return jax.vmap(model.trajectory_nll, in_axes=(0, None, 0))(xs, ts, labels)


@pytest.fixture(scope="module")
def traj():
    ts = ntm_schedule(3, L, 0.02)
    x0 = jr.uniform(jr.key(4), (L, C), minval=-1, maxval=1)
    return forward_trajectory(jr.key(5), x0, ts), ts


# ------------------------------------------------------------------------------------------
# Transporters


@eqx.filter_jit
def transporter_checks(tr, x, t, T):
    """Everything the transporter tests read, in one compiled program per transporter.

    (u, logdet) = f(x, t), f^-1(u), the Jacobian of x -> u, the Jacobian of each block, and
    f^-1(x). ``t`` and ``T`` are arrays so one program serves every level (Python floats would be
    static under filter_jit: one compile per value).
    """
    u, logdet = tr.forward(x, t, T)
    jac = jax.jacobian(lambda x: tr.forward(x, t, T)[0])(x)
    block_jacs = [jax.jacobian(lambda x, b=b: b.forward(x, t, T)[0])(x) for b in tr.blocks]
    return u, logdet, tr.inverse(u, t, T), jac, block_jacs, tr.inverse(x, t, T)


@pytest.mark.parametrize("kind", KINDS)
def test_transporter_inverse_and_logdet(transporters, kind, getkey):
    tr = transporters(kind)
    x = jr.normal(getkey(), (L, C))
    u, logdet, x_back, jac, _, _ = transporter_checks(tr, x, jnp.array(0.4), jnp.array(3.0))
    assert jnp.max(jnp.abs(u - x)) > 1e-2  # random weights: not the identity
    np.testing.assert_allclose(x_back, x, atol=1e-10)
    sign, ref = jnp.linalg.slogdet(jac.reshape(L * C, L * C))
    assert sign == 1
    np.testing.assert_allclose(logdet, ref, atol=1e-8)


@pytest.mark.parametrize("kind", KINDS)
def test_transporter_blocks_are_strictly_causal(transporters, kind, getkey):
    """Block 0 reads tokens in order, block 1 reversed: token n sees only earlier tokens."""
    x = jr.normal(getkey(), (L, C))
    _, _, _, _, block_jacs, _ = transporter_checks(
        transporters(kind), x, jnp.array(0.3), jnp.array(3.0)
    )
    for i, jac in enumerate(block_jacs):  # each (L, C, L, C)
        for n in range(L):
            for m in range(L):
                later = m > n if i % 2 == 0 else m < n
                if later:
                    np.testing.assert_array_equal(jac[n, :, m, :], 0.0)
                if m == n:  # diagonal block: elementwise scale, no mixing of channels
                    np.testing.assert_array_equal(jac[n, :, n, :] * (1 - jnp.eye(C)), 0.0)


@pytest.mark.parametrize("kind", KINDS)
def test_zero_init_and_noise_level_are_identity(transporters, kind, getkey):
    x = jr.normal(getkey(), (L, C))
    zero = TarFlowTransporter(L, C, conditioner=kind, width=8, depth=1, key=getkey())
    u, logdet = eqx.filter_jit(zero.forward)(x, 0.3, 4)
    np.testing.assert_array_equal(u, x)
    assert logdet == 0.0
    # t = 1: identity (the transporter's program from the tests above, at another level)
    u, logdet, _, _, _, x_inv = transporter_checks(
        transporters(kind), x, jnp.array(1.0), jnp.array(4.0)
    )
    np.testing.assert_array_equal(u, x)
    assert logdet == 0.0
    np.testing.assert_array_equal(x_inv, x)


def _float32_inverse_error(tr, key):
    seq_len, channels = tr.seq_len, tr.channels
    tr = jax.tree.map(lambda a: a.astype(jnp.float32) if eqx.is_inexact_array(a) else a, tr)
    x = jr.uniform(key, (seq_len, channels), jnp.float32, -1, 1)
    u, logdet = eqx.filter_jit(tr.forward)(x, jnp.float32(0.05), 4)
    assert u.dtype == logdet.dtype == jnp.float32
    assert float(jnp.max(jnp.abs(eqx.filter_jit(tr.inverse)(u, jnp.float32(0.05), 4) - x))) < 1e-4


@pytest.mark.slow
def test_float32_inverse_error_on_data_shape(getkey):
    """Digits-sized state (16 tokens of 2x2 patches) in float32: inverse error < 1e-4."""
    tr = TarFlowTransporter(16, 4, width=64, depth=2, zero_init=False, key=getkey())
    _float32_inverse_error(tr, getkey())


def test_float32_inverse_error(models, getkey):
    """Fast twin of the digits-sized check: the module's transporter cast to float32 keeps float32
    and inverts to < 1e-4 (no new weights to draw: the draws compile a sampler per shape).
    """
    _float32_inverse_error(models["made"], getkey())


# ------------------------------------------------------------------------------------------
# The likelihood


def test_identity_transporter_reduces_to_gaussian_nll(models, traj):
    """Sum of diagonal-Gaussian NLLs written out by hand."""
    xs, ts = traj
    model = NTM(IdentityTransporter(), models["pred"])
    y = jnp.array(2)
    nll = eqx.filter_jit(model.trajectory_nll)(xs, ts, y)
    xs, ts = np.asarray(xs), np.asarray(ts)  # numpy indexing: no eager slice compiles
    ref = 0.5 * np.sum(xs[-1] ** 2) + 0.5 * xs[-1].size * np.log(2 * np.pi)
    predictor = eqx.filter_jit(lambda *a: models["pred"](*a, 3))  # eager: one compile per op
    for k in range(1, len(ts)):
        mu, log_sigma = predictor(xs[k], ts[k], ts[k - 1], y)
        mu, sd = np.asarray(mu), np.exp(np.asarray(log_sigma))
        ref += np.sum(0.5 * ((xs[k - 1] - mu) / sd) ** 2 + np.log(sd * np.sqrt(2 * np.pi)))
    np.testing.assert_allclose(nll, ref, rtol=1e-10)


def test_step_density_is_normalised(getkey):
    """int p(x_s | x_t) dx_s = 1 on a fine grid (2 tokens, random weights)."""
    # The training test's sizes: their weight draws (a sampler compiled per shape) are shared.
    tr = TarFlowTransporter(2, 1, width=16, depth=1, zero_init=False, key=getkey())
    pred = perturb(MLPPredictor(2, 1, width=32, depth=2, key=getkey()), getkey(), 0.05)
    model = NTM(perturb(tr, getkey(), 0.2), pred)
    # The trapezoid rule on a smooth, fast-decaying density converges exponentially in 1/h:
    # measured |mass - 1| < 1e-14 at 101, 151 and 301 points per axis (tolerance 1e-5).
    grid = jnp.linspace(-5, 5, 151)
    pts = jnp.stack(jnp.meshgrid(grid, grid, indexing="ij"), axis=-1).reshape(-1, 2, 1)

    weights = jnp.full(151, grid[1] - grid[0]).at[jnp.array([0, -1])].multiply(0.5)

    @jax.jit
    def mass(x_t):
        logp = jax.vmap(lambda x: model.step_log_prob(x, x_t, 0.3, 0.6, None, 4))(pts)
        return weights @ jnp.exp(logp).reshape(151, 151) @ weights

    for x_t in (jnp.zeros((2, 1)), jnp.array([[0.8], [-0.5]])):
        np.testing.assert_allclose(mass(x_t), 1.0, atol=1e-5)


@pytest.mark.slow
def test_trajectory_nll_eager_equals_jit(models, traj):
    """Eager (op by op: one small compile per primitive and shape) against jit."""
    xs, ts = traj
    y = jnp.array(1)
    eager = models["ntm"].trajectory_nll(xs, ts, y)
    np.testing.assert_allclose(eqx.filter_jit(models["ntm"].trajectory_nll)(xs, ts, y), eager)


def test_trajectory_nll_jit_vmap(models, traj, getkey):
    """vmap == loop of the jitted NLL (eager == jit: the slow twin above, and the closed forms)."""
    xs, ts = traj
    model = models["ntm"]
    nll = eqx.filter_jit(model.trajectory_nll)
    keys = jr.split(getkey(), 3)
    batch = batched_traj(keys, jr.normal(getkey(), (3, L, C)), ts)
    labels = jnp.array([0, 1, 3])
    batched = batched_nll(model, batch, ts, labels)
    loop = [nll(b, ts, lab) for b, lab in zip(batch, labels, strict=True)]
    np.testing.assert_allclose(batched, loop, rtol=1e-12)


def test_trajectory_nll_check_grads(models, traj):
    xs, ts = traj
    nll = jax.jit(lambda x: models["ntm"].trajectory_nll(x, ts, jnp.array(1)))
    check_grads(nll, (xs,), order=1, modes=["rev"])


@pytest.mark.slow
def test_sample_eager_equals_jit(models, traj, getkey):
    _, ts = traj
    model = models["ntm"]
    key, y = getkey(), jnp.array(0)
    x0, u_traj = model.sample(key, ts, y, cfg_scale=1.5)
    x0_jit, u_jit = eqx.filter_jit(model.sample)(key, ts, y, cfg_scale=jnp.array(1.5))
    np.testing.assert_allclose(x0_jit, x0, rtol=1e-12)
    np.testing.assert_allclose(u_jit, u_traj, rtol=1e-12)


def test_sample_jit_and_invert(models, traj, getkey):
    _, ts = traj
    model = models["ntm"]
    key, y = getkey(), jnp.array(0)

    @eqx.filter_jit  # sample, inversion and the re-forward: one compiled program
    def sample_and_invert(model, key, ts, y, cfg_scale):
        x0, u_traj = model.sample(key, ts, y, cfg_scale=cfg_scale)
        xs = model.invert_trajectory(u_traj, ts, y)
        forward = lambda x, t: model.transporter.forward(x, t, 3)[0]  # noqa: E731
        return x0, u_traj, xs, jax.vmap(forward)(xs[:-1], ts[:-1])

    x0, u_traj, xs, u_back = sample_and_invert(model, key, ts, y, jnp.array(1.5))
    assert x0.shape == (L, C) and u_traj.shape == (len(ts), L, C)
    np.testing.assert_allclose(xs[0], x0, atol=1e-12)
    np.testing.assert_array_equal(xs[-1], u_traj[-1])
    np.testing.assert_allclose(u_back, u_traj[:-1], atol=1e-10)


@pytest.mark.slow  # full-mode architecture; the MLP predictor carries the fast checks
def test_transformer_predictor_shapes(getkey, traj):
    xs, ts = traj
    pred = TransformerPredictor(L, C, width=8, depth=1, num_heads=2, num_classes=2, key=getkey())
    model = NTM(IdentityTransporter(), pred)

    @eqx.filter_jit
    def run(model, xs, ts):
        return model.predictor(xs[2], ts[2], ts[1], 2, 3), model.trajectory_nll(xs, ts, 0)

    (mu, log_sigma), nll = run(model, xs, ts)
    a, b, c = reverse_posterior_coeffs(ts[2], ts[1])
    np.testing.assert_allclose(mu, a * xs[2], rtol=1e-12)  # zero head: the x0_hat = 0 step
    np.testing.assert_allclose(log_sigma, jnp.log(c) * jnp.ones((L, C)), rtol=1e-12)
    assert jnp.isfinite(nll)


# ------------------------------------------------------------------------------------------
# Denoising, init identity and the ELBO: the exact Gaussian case


def gaussian_fm_field(dim):
    """Exact flow-matching field (jaxgen convention: noise at tau = 0) onto N(m, v I)."""
    return LinearInterpolant().gaussian_velocity(
        jnp.zeros(dim), jnp.eye(dim), GAUSS_MEAN * jnp.ones(dim), GAUSS_VAR * jnp.eye(dim)
    )


def exact_gaussian_ntm():
    return NTM(IdentityTransporter(), ExactGaussianPredictor(GAUSS_MEAN, GAUSS_VAR, 2, 1))


def test_score_denoising_is_the_posterior_mean(getkey):
    """Level-0 Tweedie output = E[x0 | whole trajectory] (closed form)."""
    model = exact_gaussian_ntm()
    ts = ntm_schedule(4, 2, 0.03)
    x0 = GAUSS_MEAN + np.sqrt(GAUSS_VAR) * jr.normal(getkey(), (2, 1))
    xs = forward_trajectory(getkey(), x0, ts)

    @eqx.filter_jit  # one program (eagerly, the covariance's small ops compile one by one)
    def denoise(model, xs, ts):
        clipped = trajectory_score_denoise(model, xs, ts, clip_percentile=50.0)
        return trajectory_score_denoise(model, xs, ts), clipped, trajectory_covariance(ts)

    den, clipped, cov = denoise(model, xs, ts)
    cov = np.asarray(cov)
    a = 1 - np.asarray(ts)
    prec = 1 / GAUSS_VAR + a @ np.linalg.solve(cov, a)
    flat = np.asarray(xs)[:, :, 0]  # (T+1, 2)
    ref = (GAUSS_MEAN / GAUSS_VAR + a @ np.linalg.solve(cov, flat)) / prec
    np.testing.assert_allclose(den[0, :, 0], ref, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(den[:, :, 0], np.broadcast_to(ref, (4, 2)), rtol=1e-8, atol=1e-10)
    assert clipped.shape == (4, 2, 1) and jnp.all(jnp.isfinite(clipped))


def test_elbo_is_exact_for_the_exact_model(getkey):
    """With the true reverse kernels the forward chain is the posterior: ELBO = log p(x_t0)."""
    model = exact_gaussian_ntm()
    ts = ntm_schedule(4, 2, 0.01)
    x_t0 = np.array([[0.1], [0.9]])  # numpy reference: no eager op compiles
    t0 = float(ts[0])
    var = (1 - t0) ** 2 * GAUSS_VAR + t0**2
    ref = np.sum(-0.5 * (x_t0 - (1 - t0) * GAUSS_MEAN) ** 2 / var - 0.5 * np.log(2 * np.pi * var))
    elbo = eqx.filter_jit(ntm_elbo)(getkey(), model, jnp.asarray(x_t0), ts, None, 3)
    np.testing.assert_allclose(elbo, ref, rtol=1e-10)


def _finetune_init(getkey):
    field = gaussian_fm_field(2)
    pred = PosteriorResidualPredictor(field, key=getkey(), width=8)
    ts = ntm_schedule(4, 2, 0.02)
    u = jr.normal(getkey(), (2, 1))

    @eqx.filter_jit  # one compiled program (eagerly, every small op compiles on its own)
    def init_and_posterior(pred, field):
        mu, log_sigma = pred(u, ts[2], ts[1], None, 4)
        a, b, c = reverse_posterior_coeffs(ts[2], ts[1])
        x0_hat = u + ts[2] * field(1 - ts[2], u.reshape(-1)).reshape(2, 1)
        return mu, log_sigma, a * u + b * x0_hat, c

    mu, log_sigma, post_mean, c = init_and_posterior(pred, field)
    np.testing.assert_array_equal(mu, post_mean)
    np.testing.assert_allclose(jnp.exp(log_sigma), c * jnp.ones((2, 1)), rtol=1e-15)
    return field, NTM(IdentityTransporter(), pred), ts, u


def test_finetune_init_is_the_fm_gaussian_posterior(getkey):
    """Fast twin of init identity: at init (mu_P, sigma_P) = (mu_post, sigma_post) exactly.

    Also: a NaN in the first level of ``xs`` (which the alignment loss does not read) is refused,
    under jit too (the check sits on the loss; one on the unread level would be dropped).
    """
    field, model, ts, u = _finetune_init(getkey)
    xs = jnp.broadcast_to(u, (ts.shape[0], *u.shape)).at[0, 0, 0].set(jnp.nan)
    with pytest.raises(eqx.EquinoxRuntimeError, match="`xs` must be finite"):
        jax.block_until_ready(eqx.filter_jit(mean_alignment_loss)(model, field, xs, ts))


@pytest.mark.slow
def test_finetune_init_is_the_fm_gaussian_sampler(getkey):
    """Init identity: zero proj_out + identity transporter = FM Gaussian-posterior sampler."""
    field, model, ts, u = _finetune_init(getkey)
    key = getkey()
    x_t0, u_traj = eqx.filter_jit(model.sample)(key, ts, None)
    noise = jr.normal(key, (5, 2, 1))
    ref = noise[0]
    for i, k in enumerate(range(4, 0, -1)):
        a, b, c = reverse_posterior_coeffs(ts[k], ts[k - 1])
        ref = a * ref + b * (ref + ts[k] * field(1 - ts[k], ref.reshape(-1)).reshape(2, 1))
        ref = ref + c * noise[i + 1]
    np.testing.assert_allclose(x_t0, ref, rtol=1e-13)
    xs = forward_trajectory(key, u, ts)
    assert eqx.filter_jit(mean_alignment_loss)(model, field, xs, ts) < 1e-25


def _sigma_loss(sigma_net, batch, key, *, base):
    model = eqx.tree_at(lambda m: m.predictor.sigma_net, base, sigma_net)
    return ntm_loss(model, batch, key, steps=(2,), t_min_range=(0.05, 0.05))


def test_exact_kernel_variance_monte_carlo(getkey):
    """Fast twin of exact kernel: for data N(m, v), the reverse kernel p(x_s | x_t) has mean
    A x_t + B E[x0 | x_t] and variance C^2 + B^2 Var(x0 | x_t) (the ExactGaussianPredictor that
    the slow check trains towards): Monte Carlo pairs from the forward chain, within 5 SE.
    """
    exact = ExactGaussianPredictor(GAUSS_MEAN, GAUSS_VAR, 1, 1)
    ts, n = np.asarray(ntm_schedule(2, 1, 0.05)), 40000
    # the float64 reference jitted (eagerly its ops compile one by one); t, s traced: one compile
    exact_jit = jax.jit(lambda x, t, s: exact(x, t, s, None, 2))
    x0 = GAUSS_MEAN + np.sqrt(GAUSS_VAR) * np.asarray(jr.normal(getkey(), (n,)))
    noise = np.asarray(jr.normal(getkey(), (2, n)))
    for k in (1, 2):
        s, t = float(ts[k - 1]), float(ts[k])
        x_s = (1 - s) * x0 + s * noise[0]
        alpha = (1 - t) / (1 - s)
        x_t = alpha * x_s + np.sqrt(t**2 - alpha**2 * s**2) * noise[1]
        mu, log_sigma = exact_jit(x_t, jnp.asarray(t), jnp.asarray(s))
        z = (x_s - np.asarray(mu)) / np.exp(np.asarray(log_sigma))
        assert abs(z.mean()) < 5 / np.sqrt(n)
        assert abs(z.var() - 1) < 5 * np.sqrt(2 / n)


@pytest.mark.slow
def test_learned_sigma_recovers_posterior_variance(getkey):
    """Exact kernel: mean fixed at mu_post (exact FM field), only delta-sigma trained; sigma_P^2
    matches C^2 + B^2 Var(x0 | x_t) within 2% (the variance gap a Gaussian step must learn).
    """
    field = gaussian_fm_field(1)
    base = NTM(IdentityTransporter(), PosteriorResidualPredictor(field, key=getkey(), width=16))

    def batches(key):
        return GAUSS_MEAN + np.sqrt(GAUSS_VAR) * jr.normal(key, (1024, 1, 1))

    loss = ft.partial(_sigma_loss, base=base)
    res = fit(
        loss,
        base.predictor.sigma_net,
        batches,
        adamw_cosine(1e-2, 600, weight_decay=0.0),
        num_steps=600,
        key=getkey(),
        progress=False,
    )
    pred = eqx.tree_at(lambda p: p.sigma_net, base.predictor, res.model)
    exact = ExactGaussianPredictor(GAUSS_MEAN, GAUSS_VAR, 1, 1)
    ts = ntm_schedule(2, 1, 0.05)
    for k in (1, 2):
        for u in (-0.5, 0.3, 1.0):
            u_t = jnp.full((1, 1), u)
            var = jnp.exp(2 * pred(u_t, ts[k], ts[k - 1], None, 2)[1])
            true = jnp.exp(2 * exact(u_t, ts[k], ts[k - 1], None, 2)[1])
            np.testing.assert_allclose(var, true, rtol=0.02)


# ------------------------------------------------------------------------------------------
# Losses, denoiser, training mechanics


@pytest.mark.parametrize("mode", ["end_to_end", pytest.param("pairwise", marks=pytest.mark.slow)])
def test_ntm_loss_multi_T_and_modes(models, getkey, mode):
    x0 = jr.uniform(getkey(), (6, L, C), minval=-1, maxval=1)
    y = jnp.array([0, 1, 2, 0, 1, 2])
    loss = ft.partial(ntm_loss, steps=(1, 2, 4), mode=mode, t_min_range=(0.005, 0.02))
    if mode == "pairwise":
        assert jnp.isfinite(eqx.filter_jit(loss)(models["ntm"], (x0, y), getkey()))
    if mode == "end_to_end":  # one T: the mean trajectory NLL per dimension, by hand
        # T = 3 and 3 examples: the reference reuses test_trajectory_nll_jit_vmap's programs.
        key = getkey()
        one_t = ft.partial(ntm_loss, steps=(3,), t_min_range=(0.01, 0.01))
        got = eqx.filter_jit(one_t)(models["ntm"], (x0[:3], y[:3]), key)
        ts = ntm_schedule(3, L, 0.01)
        keys = jr.split(jr.split(key)[1], 3)
        k_traj = jax.jit(jax.vmap(lambda k: jr.split(k, 3)[1]))(keys)
        xs = batched_traj(k_traj, x0[:3], ts)
        nll = batched_nll(models["ntm"], xs, ts, y[:3])
        np.testing.assert_allclose(got, jnp.sum(nll) / (3 * L * C), rtol=1e-10)


def _toy_batches(key):
    from jaxgen.data import sample_toy_2d

    return sample_toy_2d(key, "8gaussians", 128).reshape(128, 2, 1)


TOY_OPT = adamw_cosine(3e-3, 150)


def test_training_traces_once_resumes_and_learns(getkey, tmp_path):
    """The loss is traced once for every fit below (one compiled chunk: 3 steps, an interrupted
    and resumed run equal to an uninterrupted one, then 150 steps); fast twin of the ELBO test:
    150 steps on 8-Gaussians lower the loss by > 1 nat/dim.
    """
    model = NTM(
        TarFlowTransporter(2, 1, width=16, depth=1, key=getkey()),
        MLPPredictor(2, 1, width=32, depth=2, key=getkey()),
    )
    loss = eqx.debug.assert_max_traces(
        ft.partial(ntm_loss, steps=(4,), t_min_range=(0.005, 0.02)), max_traces=1
    )
    kwargs = dict(progress=False, steps_per_call=25)
    three = fit(loss, model, _toy_batches, TOY_OPT, num_steps=3, key=getkey(), **kwargs)
    assert np.all(np.isfinite(three.losses)) and three.losses.shape == (3,)

    key = getkey()
    kwargs.update(key=key, checkpoint_every=2)
    full = fit(
        loss,
        model,
        _toy_batches,
        TOY_OPT,
        num_steps=4,
        checkpoint_dir=str(tmp_path / "a"),
        **kwargs,
    )
    fit(
        loss,
        model,
        _toy_batches,
        TOY_OPT,
        num_steps=2,
        checkpoint_dir=str(tmp_path / "b"),
        **kwargs,
    )
    resumed = fit(
        loss,
        model,
        _toy_batches,
        TOY_OPT,
        num_steps=4,
        checkpoint_dir=str(tmp_path / "b"),
        **kwargs,
    )
    assert resumed.resumed_from == 2
    leaves_full = jax.tree.leaves(eqx.filter(full.model, eqx.is_inexact_array))
    leaves_resumed = jax.tree.leaves(eqx.filter(resumed.model, eqx.is_inexact_array))
    for a, b in zip(leaves_full, leaves_resumed, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)

    res = fit(
        loss,
        model,
        _toy_batches,
        TOY_OPT,
        num_steps=150,
        key=getkey(),
        progress=False,
        steps_per_call=25,
    )
    assert np.all(np.isfinite(res.losses))
    assert res.losses[-20:].mean() < res.losses[:20].mean() - 1.0


@eqx.filter_jit
def _targets_both_ways(key, model, x0, ts, y):
    xs = forward_trajectory(key, x0, ts)
    return (
        denoiser_targets(key, model, x0, ts, y),
        trajectory_score_denoise(model, xs, ts, y)[0],
        model.transporter.forward(xs[0], ts[0], 3)[0],
    )


def test_denoiser_init_and_loss(getkey):
    """Fast twin of the slow targets test: zero-initialised residual and the loss formula."""
    u0, target = jr.normal(getkey(), (2, 2, L, C))
    den = Denoiser(L, C, width=8, depth=1, num_classes=3, key=getkey())
    call = eqx.filter_jit(lambda d, u: d(u, 0.02, jnp.array(0)))  # eager: op by op compiles
    np.testing.assert_array_equal(call(den, u0[0]), u0[0])
    batch = (u0, jnp.full(2, 0.02), target, jnp.array([1, 2]))
    loss = eqx.filter_jit(denoiser_loss)(den, batch, getkey())
    np.testing.assert_allclose(loss, jnp.mean((u0 - target) ** 2))


@pytest.mark.slow
def test_denoiser_targets_and_loss(models, getkey):
    ts = ntm_schedule(3, L, 0.02)
    x0 = jr.normal(getkey(), (L, C))
    (u0, target), ref_target, ref_u0 = _targets_both_ways(getkey(), models["ntm"], x0, ts, 1)
    np.testing.assert_allclose(target, ref_target, rtol=1e-12)
    np.testing.assert_allclose(u0, ref_u0, rtol=1e-12)
    den = Denoiser(L, C, width=8, depth=1, num_classes=3, key=getkey())
    np.testing.assert_array_equal(den(u0, ts[0], jnp.array(0)), u0)  # zero-initialised residual
    batch = (u0[None], ts[:1], target[None], jnp.array([1]))
    np.testing.assert_allclose(denoiser_loss(den, batch, getkey()), jnp.mean((u0 - target) ** 2))


@pytest.mark.slow
def test_training_beats_gaussian_ablation(getkey):
    """ELBO test: 8-Gaussians, T = 4, 2k steps: NTM ELBO > ablation + 0.1 nats/dim and
    energy distance <= 0.5 x the ablation's.
    """
    from jaxgen.data import sample_toy_2d
    from jaxgen.metrics import energy_distance

    def batches(key):
        return sample_toy_2d(key, "8gaussians", 256).reshape(256, 2, 1)

    loss = ft.partial(ntm_loss, steps=(4,), t_min_range=(0.005, 0.02))
    kp = getkey()
    results = {}
    ts = ntm_schedule(4, 2, 0.01)
    test = sample_toy_2d(getkey(), "8gaussians", 2000).reshape(2000, 2, 1)
    x_t0 = (1 - ts[0]) * test + ts[0] * jr.normal(getkey(), test.shape)
    for name, transporter in (
        ("ntm", TarFlowTransporter(2, 1, num_blocks=4, width=64, depth=2, key=getkey())),
        ("ablation", IdentityTransporter()),
    ):
        model = NTM(transporter, MLPPredictor(2, 1, width=128, depth=3, key=kp))
        res = fit(
            loss,
            model,
            batches,
            adamw_cosine(1e-3, 2000),
            num_steps=2000,
            key=getkey(),
            progress=False,
        )
        elbo = jax.jit(jax.vmap(lambda k, x, m=res.model: ntm_elbo(k, m, x, ts)))(
            jr.split(getkey(), 2000), x_t0
        )
        samples = jax.jit(jax.vmap(lambda k, m=res.model: m.sample(k, ts)[0]))(
            jr.split(getkey(), 2000)
        )
        results[name] = (
            float(elbo.mean()) / 2,
            float(energy_distance(samples[:, :, 0], test[:, :, 0])),
        )
    assert results["ntm"][0] - results["ablation"][0] > 0.1
    assert results["ntm"][1] <= 0.5 * results["ablation"][1]


# ------------------------------------------------------------------------------------------
# Bad input


def test_bad_input(models, traj, getkey):
    xs, ts = traj
    model = models["ntm"]
    y = jnp.array(1)
    with pytest.raises((ValueError, TypeError), match="x"):
        models["made"].forward(jnp.zeros((L + 1, C)), 0.3, 3)
    with pytest.raises((ValueError, TypeError)):  # the annotation or the shape check
        model.trajectory_nll(xs[1:], ts, y)
    with pytest.raises(ValueError, match="class-conditional"):
        model.trajectory_nll(xs, ts, None)
    with pytest.raises(TypeError):  # the annotation, or check_class's "integer" message
        model.trajectory_nll(xs, ts, jnp.array(1.0))
    with pytest.raises(TypeError, match="integer"):
        models["pred"](xs[1], ts[1], ts[0], jnp.array(1.0), 3)
    with pytest.raises(eqx.EquinoxRuntimeError, match="class id"):
        model.trajectory_nll(xs, ts, jnp.array(7))
    # Both errors come before any weight is read: an abstract (shape-only) unconditional predictor
    # (a real one draws its default-width weights: a sampler compiled per new shape, ~1 s).
    uncond = NTM(IdentityTransporter(), eqx.filter_eval_shape(MLPPredictor, L, C, key=getkey()))
    with pytest.raises(ValueError, match="unconditional"):
        uncond.trajectory_nll(xs, ts, y)
    with pytest.raises(ValueError, match="cfg_scale"):
        uncond.sample(getkey(), ts, None, 1.0)
    with pytest.raises(ValueError, match="guidance weight"):
        model.sample(getkey(), ts, y, -1.0)
    with pytest.raises(eqx.EquinoxRuntimeError, match="end at"):
        model.trajectory_nll(xs, ts.at[-1].set(0.9), y)
    with pytest.raises(eqx.EquinoxRuntimeError, match="increasing"):
        model.trajectory_nll(xs, ts[::-1], y)
    with pytest.raises(ValueError, match="s < t"):
        model.step_log_prob(xs[1], xs[0], ts[1], ts[0], y, 3)
    with pytest.raises(ValueError, match="conditioner"):
        TarFlowTransporter(L, C, conditioner="coupling", key=getkey())
    batch = (jr.normal(getkey(), (3, L, C)), jnp.array([0, 1, 2]))  # 3: a compiled draw reused
    with pytest.raises(ValueError, match="mode"):
        ntm_loss(model, batch, getkey(), mode="joint")
    with pytest.raises(ValueError, match="t_min_range"):
        ntm_loss(model, batch, getkey(), t_min_range=(0.0, 0.9))
    with pytest.raises(ValueError, match="batch = \\(x0, y\\)"):
        ntm_loss(model, batch[0], getkey())
    with pytest.raises(eqx.EquinoxRuntimeError, match="NaN"):
        ntm_loss(model, (batch[0].at[0, 0, 0].set(jnp.nan), batch[1]), getkey())
    with pytest.raises(ValueError, match="num_samples"):
        ntm_elbo(getkey(), model, xs[0], ts, y, 0)
