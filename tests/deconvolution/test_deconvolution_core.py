"""convMMD deconvolution: kernels, noise, priors, losses and fitting."""

import functools as ft
import math

import chex
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import scipy.stats as st
from jax.flatten_util import ravel_pytree

from jaxgen.core import kernel_gram, mmd2_unbiased
from jaxgen.data import laplace_mixture_1d, laplace_mixture_1d_density
from jaxgen.deconvolution import (
    FlowPrior,
    GaussianMixture,
    NoiseModel,
    convmmd_loss,
    convmmd_loss_gmm_closed,
    convmmd_loss_gmm_marginal,
    fit_convmmd,
    gaussian_conv_kernel,
    init_gaussian_mixture,
    quantile_bandwidths,
)
from jaxgen.flows import SplineAutoregressive, rq_spline
from jaxgen.metrics import ise_1d, mmd_unbiased

GAUSS, LAPLACE = NoiseModel("gaussian"), NoiseModel("laplace")


def _gmm2():
    return GaussianMixture(
        jnp.array([0.3, 0.7]), jnp.array([[-1.0], [1.5]]), jnp.array([[[0.25]], [[0.64]]])
    )


# ---------------------------------------------------------------- kernels and U-statistic


def test_core_ustat_matches_metrics_and_numpy(getkey):
    x, y = jr.normal(getkey(), (7, 2)), jr.normal(getkey(), (9, 2)) + 0.3
    h = jnp.array([0.5, 2.0])

    @jax.jit  # one program, not op-by-op dispatch
    def stats(x, y, h):
        return (
            mmd_unbiased(x, y, (0.5, 2.0)),
            mmd2_unbiased(x, y, h),
            kernel_gram(x, y, h, kernel="laplace"),
        )

    summed, mean, gram = stats(x, y, h)
    # mmd_unbiased (sum of kernels) is H times the mean-over-bandwidths statistic.
    chex.assert_trees_all_close(summed, 2 * mean)
    xn, yn = np.asarray(x), np.asarray(y)
    l1 = np.abs(xn[:, None] - yn[None]).sum(-1)
    ref = sum(np.exp(-l1 / hh) for hh in (0.5, 2.0))
    chex.assert_trees_all_close(gram, ref, rtol=1e-12)


@ft.partial(jax.jit, static_argnums=1)
def _check1_mc_and_closed(key, d):
    z, z2 = jnp.full((1, d), 0.3), jnp.full((1, d), -0.4)
    h, s = 0.8, 0.5
    e1, e2 = jr.normal(key, (2, 1_000_000, d)) * s
    mc = jnp.mean(jnp.exp(-jnp.sum((z + e1 - z2 - e2) ** 2, -1) / (2 * h**2)))
    return mc, gaussian_conv_kernel(z, z2, h, s)[0, 0]


@pytest.mark.parametrize("d", [1, 2])
def test_check1_noise_smoothed_kernel(d):
    mc, closed = _check1_mc_and_closed(jr.key(d), d)
    assert abs(float(mc / closed) - 1) <= 5e-3


@ft.partial(jax.jit, static_argnums=2)
def _replicates(keys, shift, b):
    def one(k):
        k1, k2, k3 = jr.split(k, 3)
        x = jr.normal(k1, (b, 1)) + 0.5 * jr.normal(k2, (b, 1))
        y = shift + jr.normal(k3, (b, 1)) + 0.5 * jr.normal(jr.fold_in(k3, 1), (b, 1))
        return mmd2_unbiased(x, y, jnp.array([1.0]))

    return jax.lax.map(one, keys, batch_size=50)


def _mmd2_gaussians(mu, var, h):
    # N(0, var) vs N(mu, var), Gaussian kernel: E k(X,X') = (h²/(h²+2var))^{1/2}, etc.
    same = math.sqrt(h**2 / (h**2 + 2 * var))
    cross = same * math.exp(-(mu**2) / (2 * (h**2 + 2 * var)))
    return 2 * same - 2 * cross


@pytest.mark.parametrize("reps, b", [pytest.param(2000, 200, marks=pytest.mark.slow), (300, 64)])
def test_check2_unbiasedness(reps, b):
    keys = jr.split(jr.key(2), reps)
    var = 1.0 + 0.25
    for shift, target in ((0.5, _mmd2_gaussians(0.5, var, 1.0)), (0.0, 0.0)):
        vals = np.asarray(_replicates(keys, shift, b))
        se = vals.std(ddof=1) / math.sqrt(reps)
        assert abs(vals.mean() - target) <= 3 * se, (shift, vals.mean(), target, se)
        if shift == 0.0:
            assert (vals < 0).any()  # negative estimates are normal, never clipped


# ---------------------------------------------------------------- noise models


def test_noise_log_density_charfn_and_samples(getkey):
    s = jnp.array([[0.5, 1.0], [2.0, 0.3]])
    r = jr.normal(getkey(), (2, 2))
    ref_g = st.norm.logpdf(np.asarray(r), scale=np.asarray(s)).sum(-1)
    ref_l = st.laplace.logpdf(np.asarray(r), scale=np.asarray(s) / math.sqrt(2)).sum(-1)
    chex.assert_trees_all_close(GAUSS.log_density(r, s), ref_g, rtol=1e-12)
    chex.assert_trees_all_close(LAPLACE.log_density(r, s), ref_l, rtol=1e-12)
    chol = jnp.array([[[1.0, 0.0], [0.5, 0.7]], [[0.3, 0.0], [-0.2, 1.2]]])
    cov = chol @ jnp.swapaxes(chol, -1, -2)
    ref_f = [
        st.multivariate_normal(cov=np.asarray(c)).logpdf(np.asarray(ri))
        for c, ri in zip(cov, r, strict=True)
    ]
    chex.assert_trees_all_close(GAUSS.log_density(r, chol), np.array(ref_f), rtol=1e-10)
    # sample: per-row scales (empirical sd of many rows with one scale), charfn vs MC.
    big = jnp.broadcast_to(jnp.array([[0.4, 1.3]]), (200_000, 2))
    t = jnp.array([[0.7, -1.1]])

    @eqx.filter_jit
    def sample_moments(noise, key):
        e = noise.sample(key, big)
        return jnp.std(e, 0), jnp.mean(jnp.cos(e @ t[0])), noise.charfn(t, big[:1])[0, 0]

    for noise in (GAUSS, LAPLACE):
        sd, mc, cf = sample_moments(noise, getkey())
        chex.assert_trees_all_close(sd, jnp.array([0.4, 1.3]), rtol=1e-2)
        assert abs(float(mc - cf)) < 5e-3
    full_cov = jax.jit(
        lambda k: jnp.cov(GAUSS.sample(k, jnp.broadcast_to(chol[0], (200_000, 2, 2))).T)
    )
    chex.assert_trees_all_close(full_cov(getkey()), cov[0], atol=2e-2)


def test_bad_inputs_raise():
    x = jnp.zeros((4, 1))
    h = jnp.array([1.0])
    gmm = _gmm2()
    with pytest.raises(ValueError, match="kind"):
        NoiseModel("cauchy")
    with pytest.raises(ValueError, match="scales"):
        convmmd_loss(gmm, (x, jnp.ones((4, 2))), jr.key(0), noise=GAUSS, bandwidths=h)
    with pytest.raises(ValueError, match="Gaussian noise only"):
        convmmd_loss(gmm, (x, jnp.ones((4, 1, 1))), jr.key(0), noise=LAPLACE, bandwidths=h)
    with pytest.raises(ValueError, match="at least 2 rows"):
        convmmd_loss(gmm, (x[:1], jnp.ones((1, 1))), jr.key(0), noise=GAUSS, bandwidths=h)
    with pytest.raises(ValueError, match="non-empty"):
        convmmd_loss(gmm, (x, jnp.ones((4, 1))), jr.key(0), noise=GAUSS, bandwidths=jnp.ones(0))
    with pytest.raises(ValueError, match="kernel"):
        convmmd_loss(gmm, (x, jnp.ones((4, 1))), jr.key(0), noise=GAUSS, bandwidths=h, kernel="x")
    # the batch is the pair fit passes, (x, scales): a wrong structure is named as such (ours,
    # or under the test suite's jaxtyping hook, its message on the `tuple[...]` annotation)
    with pytest.raises(TypeError, match=r"`batch` must be a tuple \(x, scales\)|parameter 'batch'"):
        convmmd_loss(gmm, x, jr.key(0), noise=GAUSS, bandwidths=h)
    with pytest.raises(TypeError, match=r"got a tuple of 3 entries|parameter 'batch'"):
        convmmd_loss_gmm_closed(gmm, (x, jnp.ones((4, 1)), h), bandwidths=h)
    with pytest.raises(TypeError, match=r"`data` must be a tuple \(x, scales\)|parameter 'data'"):
        fit_convmmd(gmm, x, key=jr.key(0), noise=GAUSS, num_steps=1, batch_size=2)
    with pytest.raises(TypeError, match="NoiseModel"):
        convmmd_loss(gmm, (x, jnp.ones((4, 1))), jr.key(0), noise="gaussian", bandwidths=h)
    with pytest.raises(ValueError, match="loss"):
        fit_convmmd(
            gmm,
            (x, jnp.ones((4, 1))),
            key=jr.key(0),
            noise=GAUSS,
            loss="exact",
            num_steps=1,
            batch_size=2,
            learning_rate=1e-3,
        )
    bad = [
        (
            lambda: convmmd_loss(
                gmm,
                (x, -jnp.ones((4, 1))),
                jr.key(0),
                noise=GAUSS,
                bandwidths=h,
            ),
            "scales",
        ),
        (
            lambda: convmmd_loss(
                gmm,
                (x.at[0, 0].set(jnp.nan), jnp.ones((4, 1))),
                jr.key(0),
                noise=GAUSS,
                bandwidths=h,
            ),
            "NaN",
        ),
        (
            lambda: convmmd_loss(
                gmm,
                (x, jnp.ones((4, 1))),
                jr.key(0),
                noise=GAUSS,
                bandwidths=-h,
            ),
            "bandwidths",
        ),
        (
            lambda: GaussianMixture(jnp.array([0.5, 0.6]), jnp.zeros((2, 1)), jnp.ones((2, 1, 1))),
            "weights",
        ),
        (
            lambda: GaussianMixture(jnp.array([-0.5, 1.5]), jnp.zeros((2, 1)), jnp.ones((2, 1, 1))),
            "weights",
        ),
        (
            lambda: GaussianMixture(jnp.array([0.5, 0.5]), jnp.zeros((2, 1)), -jnp.ones((2, 1, 1))),
            "positive definite",
        ),
    ]
    for fn, match in bad:
        with pytest.raises(Exception, match=match):
            jax.block_until_ready(fn())


# ---------------------------------------------------------------- priors and splines


def test_gmm_log_prob_sample_and_roundtrip(getkey):
    gmm = _gmm2()
    chex.assert_trees_all_close(gmm.weights, jnp.array([0.3, 0.7]), rtol=1e-10)
    chex.assert_trees_all_close(gmm.covs, jnp.array([[[0.25]], [[0.64]]]), rtol=1e-8)
    z = jnp.linspace(-3, 4, 5)[:, None]
    ref = np.log(0.3 * st.norm.pdf(z, -1, 0.5) + 0.7 * st.norm.pdf(z, 1.5, 0.8))[:, 0]
    chex.assert_trees_all_close(gmm.log_prob(z), ref, rtol=1e-10)
    draws = eqx.filter_jit(lambda g, k: g.sample(k, 50_000))(gmm, getkey())
    assert abs(float(jnp.mean(draws)) - (0.3 * -1 + 0.7 * 1.5)) < 0.02
    assert gmm.component_draws(jnp.zeros((3, 1))).shape == (3, 2, 1)


def test_init_gaussian_mixture_deconvolves(getkey):
    x = jnp.concatenate(
        [jr.normal(getkey(), (300, 1)) * 1.1 - 3, jr.normal(getkey(), (300, 1)) * 1.1 + 3]
    )
    g = init_gaussian_mixture(getkey(), x, 2, jnp.full((600, 1), 1.0), covariance="deconvolved")
    chex.assert_trees_all_close(jnp.sort(g.means[:, 0]), jnp.array([-3.0, 3.0]), atol=0.2)
    chex.assert_trees_all_close(g.covs[:, 0, 0], jnp.full(2, 0.21), atol=0.15)


@eqx.filter_jit  # one compiled program per model structure
def _perturb(model, key, scale=0.5):
    params, static = eqx.partition(model, eqx.is_inexact_array)
    flat, unravel = ravel_pytree(params)
    return eqx.combine(unravel(flat + scale * jr.normal(key, flat.shape)), static)


@eqx.filter_jit
def _spline_checks(bij, flow, keys, u, p, ts, grid):
    """Every quantity of the spline test in ONE compiled program (both models perturbed inside
    it): one compile instead of five."""
    bij = _perturb(bij, keys[0])
    z, logdet = bij.transform_and_log_det(u)
    jac = jax.jacobian(lambda v: bij.transform_and_log_det(v)[0])(u)
    back, inv_logdet = bij.inverse_and_log_det(z)
    spline = ft.partial(rq_spline, p, num_bins=8, tail_bound=5.0)
    log_slope = jnp.log(jax.vmap(jax.grad(lambda t: spline(t)[0]))(ts))
    spline_logdet = jax.vmap(spline)(ts)[1]
    flow = _perturb(flow, keys[1], 0.3)
    mass = jnp.trapezoid(jnp.exp(flow.log_prob(grid)), grid[:, 0])
    return logdet, back, inv_logdet, jac, spline_logdet, log_slope, mass


def test_spline_bijection_inverse_logdet_and_flow_density(getkey):
    bij, k_bij = SplineAutoregressive(3, key=getkey()), getkey()
    u = jr.normal(getkey(), (3,)) * 2
    p = jr.normal(getkey(), (23,))
    ts = jnp.array([-7.0, -2.0, 0.1, 4.9])
    flow = FlowPrior(1, key=getkey(), loc=jnp.array([0.5]), scale=jnp.array([2.0]))
    keys = jnp.stack([k_bij, getkey()])
    grid = jnp.linspace(-20, 20, 8001)[:, None]
    logdet, back, inv_logdet, jac, spline_logdet, log_slope, mass = _spline_checks(
        bij, flow, keys, u, p, ts, grid
    )
    chex.assert_trees_all_close(back, u, atol=1e-9)
    chex.assert_trees_all_close(logdet, jnp.linalg.slogdet(jac)[1], rtol=1e-9)
    chex.assert_trees_all_close(inv_logdet, -logdet, rtol=1e-9)
    chex.assert_trees_all_close(spline_logdet, log_slope, rtol=1e-9)
    assert abs(float(mass) - 1) < 1e-3


# ---------------------------------------------------------------- losses (check 3), jit/vmap/grad


@pytest.fixture(scope="module")
def loss_setup():
    key = jr.key(3)
    x = jr.normal(key, (24, 1)) * 1.5 + 0.5
    s = jr.uniform(jr.fold_in(key, 1), (24, 1), minval=0.3, maxval=1.0)
    return x, s, jnp.array([0.7, 1.5])


@pytest.fixture(scope="module")
def closed_value_and_grad(loss_setup):
    """The closed-form loss of `_gmm2` as a function of its flat parameters, value and gradient
    in ONE compiled program shared by check 3 and the gradient check."""
    x, s, h = loss_setup
    params, static = eqx.partition(_gmm2(), eqx.is_inexact_array)
    flat, unravel = ravel_pytree(params)
    fn = jax.jit(
        jax.value_and_grad(
            lambda f: convmmd_loss_gmm_closed(eqx.combine(unravel(f), static), (x, s), bandwidths=h)
        )
    )
    return fn, flat


def test_check3_gmm_losses_agree(loss_setup, closed_value_and_grad):
    x, s, h = loss_setup
    gmm = _gmm2()
    keys = jr.split(jr.key(4), 400)
    samp = jax.jit(jax.vmap(lambda k: convmmd_loss(gmm, (x, s), k, noise=GAUSS, bandwidths=h)))
    marg = jax.jit(
        jax.vmap(lambda k: convmmd_loss_gmm_marginal(gmm, (x, s), k, noise=GAUSS, bandwidths=h))
    )
    fn, flat = closed_value_and_grad
    closed = float(fn(flat)[0])
    for vals in (np.asarray(samp(keys)), np.asarray(marg(keys))):
        se = vals.std(ddof=1) / math.sqrt(len(vals))
        assert abs(vals.mean() - closed) <= 3 * se, (vals.mean(), closed, se)


def test_losses_eager_jit_vmap_grad(loss_setup, closed_value_and_grad):
    x, s, h = loss_setup
    gmm = _gmm2()
    keys = jr.split(jr.key(5), 3)

    def marg(g, k):
        return convmmd_loss_gmm_marginal(
            g,
            (x, s),
            k,
            noise=LAPLACE,
            bandwidths=h,
            kernel="laplace",
        )

    loop = jnp.stack([marg(gmm, k) for k in keys])  # direct calls, one key at a time
    # values and weight gradients of the three keys in one compiled vmap: vmap == loop
    vals, grads = eqx.filter_jit(
        lambda g, ks: jax.vmap(eqx.filter_value_and_grad(marg), in_axes=(None, 0))(g, ks)
    )(gmm, keys)
    chex.assert_trees_all_close(vals, loop, rtol=1e-10)
    assert float(jnp.abs(grads.logits[0]).sum()) > 0  # weights get exact gradients
    # reverse-mode gradient of the closed form against a central difference along a random
    # direction (what `check_grads(order=1, modes=["rev"])` does, with its float64 eps and
    # tolerances), every evaluation through the one compiled value-and-grad program
    fn, flat = closed_value_and_grad
    v = jr.normal(jr.key(6), flat.shape)
    v = v / jnp.linalg.norm(v)
    eps = 1e-4
    numeric = (fn(flat + eps * v)[0] - fn(flat - eps * v)[0]) / (2 * eps)
    np.testing.assert_allclose(jnp.dot(fn(flat)[1], v), numeric, atol=1e-5, rtol=1e-5)


def test_quantile_bandwidths(getkey):
    x, y = jr.normal(getkey(), (50, 2)), jr.normal(getkey(), (50, 2))
    h = jax.jit(quantile_bandwidths)(x, y)
    pool = np.concatenate([x, y])
    dist = np.sqrt(((pool[:, None] - pool[None]) ** 2).sum(-1))[np.triu_indices(100, 1)]
    ref = np.quantile(dist, np.arange(1, 10) / 10) / (math.log10(100) * math.sqrt(2))
    chex.assert_trees_all_close(h, ref, rtol=1e-10)


def test_fit_convmmd_recovers(getkey):
    """Fast twin of check 6: a 2-component latent through Gaussian noise, closed-form loss."""
    n = 600

    @jax.jit
    def data(key):
        k1, k2, k3, k4 = jr.split(key, 4)
        comp = jr.bernoulli(k1, 0.5, (n, 1))
        z = jnp.where(comp, -2 + 0.5 * jr.normal(k2, (n, 1)), 2 + jr.normal(k3, (n, 1)))
        return z + GAUSS.sample(k4, jnp.ones((n, 1)))

    x, s = data(getkey()), jnp.ones((n, 1))
    init = init_gaussian_mixture(getkey(), x, 2, s)
    h = jnp.array([0.5, 1.0, 2.0])
    res = fit_convmmd(
        init,
        (x, s),
        key=getkey(),
        noise=GAUSS,
        loss="closed",
        bandwidths=h,
        num_steps=150,
        batch_size=32,
        learning_rate=3e-2,
        progress=False,
    )
    g = res.model
    order = jnp.argsort(g.means[:, 0])
    chex.assert_trees_all_close(g.means[order, 0], jnp.array([-2.0, 2.0]), atol=0.35)
    chex.assert_trees_all_close(jnp.sqrt(g.covs[order, 0, 0]), jnp.array([0.5, 1.0]), atol=0.35)
    assert res.losses.shape == (150,) and np.all(np.isfinite(res.losses))


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_init_gaussian_mixture_more_components_than_modes_is_not_a_comb(noise):
    """K = 8 on a two-mode latent: k-means cuts each mode into slabs narrower than the noise.

    Subtracting the noise covariance per cluster (``"deconvolved"``) floors every component
    (a comb of spikes, init ISE 0.17-0.21 here); the default keeps the slabs' width shrunk by
    the global deconvolution ratio (ISE 0.025-0.05). Naive KDE of x: about 0.04.
    """
    x, _, s = laplace_mixture_1d(jr.key(70), 600, noise=noise)
    grid = jnp.linspace(-8.0, 10.0, 1000)
    truth = laplace_mixture_1d_density(grid)
    ise = {
        cov: float(
            ise_1d(
                jnp.exp(
                    init_gaussian_mixture(jr.key(71), x, 8, s, covariance=cov).log_prob(
                        grid[:, None]
                    )
                ),
                truth,
                grid,
            )
        )
        for cov in ("shrunk", "deconvolved")
    }
    assert ise["shrunk"] <= 0.35 * ise["deconvolved"]
    assert ise["shrunk"] <= 0.06
    with pytest.raises(ValueError, match="covariance"):
        init_gaussian_mixture(jr.key(71), x, 8, s, covariance="cluster")
