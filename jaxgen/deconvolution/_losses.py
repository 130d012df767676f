r"""Convolutional MMD losses: the unbiased MMD² between data and simulated noisy model draws.

For a batch of observations X_1..X_b with noise scales and m = b model draws
X~_j = Z~_j + eps~_j, Z~_j ~ q_theta, eps~_j ~ F_j (draw j carries observation j's scale):

$\widehat{\mathrm{MMD}}^2_u = \frac{1}{b(b-1)}\sum_{i\ne i'} k(X_i,X_{i'})
 + \frac{1}{m(m-1)}\sum_{j\ne j'} k(\tilde X_j,\tilde X_{j'})
 - \frac{2}{bm}\sum_{i,j} k(X_i,\tilde X_j)$   (unbiased estimate),

averaged over a fixed set of bandwidths. The data term does not depend on theta; it is kept so
that the value is an unbiased estimate of MMD²(P_X, Q_X), which may be negative.

References:
    Vashistha, Phillips, Sarkar, Farahi, Convolutional Maximum Mean Discrepancy for Inference
    in Noisy Data (arXiv 2604.12022); Vashistha, Sarkar, Farahi, Nonparametric Deconvolution
    and Denoising using Simulation Based Inference (arXiv 2606.21907).
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from ..core import check_kernel, kernel_gram, mmd2_from_grams, pairwise_sq_dists
from ..core.checks import check_module, check_nonnegative, check_positive, check_tuple
from ._noise import (
    AbstractNoiseModel,
    GaussianNoise,
    check_observations,
    check_scales,
    noise_covariances,
    small_inv_logdet,
)
from ._priors import AbstractPrior, GaussianMixture


def check_bandwidths(bandwidths: Array, dtype: jnp.dtype) -> Array:
    """A non-empty 1-D array of finite positive bandwidths (values via `eqx.error_if`)."""
    h = jnp.asarray(bandwidths, dtype=dtype)
    if h.ndim != 1 or h.shape[0] < 1:
        raise ValueError(f"`bandwidths` must be a non-empty 1-D array, got shape {h.shape}.")
    return eqx.error_if(
        h, ~jnp.all(jnp.isfinite(h) & (h > 0)), "`bandwidths` must be finite and > 0."
    )


def _check_noise(noise: AbstractNoiseModel) -> AbstractNoiseModel:
    return check_module(noise, AbstractNoiseModel, "noise")


def gaussian_conv_kernel(
    z: Float[Array, "n dim"],
    z2: Float[Array, "m dim"],
    bandwidth: float | Float[Array, ""],
    noise_sd: float | Float[Array, ""],
) -> Float[Array, "n m"]:
    r"""Noise-smoothed Gaussian kernel k_eps(z, z') = E k(z + eps, z' + eps'), in closed form.

    For k(a, b) = exp(-||a - b||² / (2h²)) and iid eps, eps' ~ N(0, s² I) (closed form):
    $k_\varepsilon(z, z') = (h^2/(h^2 + 2s^2))^{d/2}\exp(-\|z - z'\|^2 / (2(h^2 + 2s^2)))$.

    Returns:
        The (n, m) matrix of k_eps(z_i, z2_j).
    """
    if z.ndim != 2 or z2.ndim != 2 or z.shape[1] != z2.shape[1]:
        raise ValueError(f"`z` and `z2` must be (n, dim), (m, dim), got {z.shape}, {z2.shape}.")
    bandwidth = check_positive(jnp.asarray(bandwidth, z.dtype), "bandwidth")
    noise_sd = check_nonnegative(jnp.asarray(noise_sd, z.dtype), "noise_sd")
    v = bandwidth**2 + 2.0 * noise_sd**2
    d = z.shape[1]
    return (bandwidth**2 / v) ** (d / 2) * jnp.exp(-pairwise_sq_dists(z, z2) / (2.0 * v))


def quantile_bandwidths(
    x: Float[Array, "n dim"],
    y: Float[Array, "m dim"],
    quantiles: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
) -> Float[Array, " H"]:
    r"""Bandwidth set of the convMMD code, computed once before training.

    Pool the observations ``x`` (n of them) and simulated noisy model draws ``y``; take the
    ``quantiles`` of the pairwise Euclidean distances above 1e-5 and multiply each by
    $1 / (\log_{10}(2n)\sqrt{d})$ (the paper code's heuristic). Pass at most ~2000 rows of each.

    Returns:
        (H,) bandwidths, one per quantile.
    """
    x, y = check_observations(x, "x"), check_observations(y, "y")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"`x` and `y` disagree on dim: {x.shape[1]} vs {y.shape[1]}.")
    q = jnp.asarray(quantiles, dtype=x.dtype)
    if q.ndim != 1 or q.shape[0] < 1:
        raise ValueError(f"`quantiles` must be a non-empty sequence, got {quantiles!r}.")
    pool = jnp.concatenate([x, y], 0)
    dist = jnp.sqrt(pairwise_sq_dists(pool, pool))
    upper = jnp.triu(jnp.ones(dist.shape, dtype=bool), 1) & (dist > 1e-5)
    qs = jnp.nanquantile(jnp.where(upper, dist, jnp.nan), q)
    return qs / (math.log10(2 * x.shape[0]) * math.sqrt(x.shape[1]))


def _unpack(batch: tuple[Array, Array]) -> tuple[Array, Array]:
    """``batch = (x, scales)``, the form `jaxgen.core.fit` passes (see `fit_convmmd`)."""
    return check_tuple(batch, 2, "batch", layout="(x, scales)")


def _prepare(x: Array, scales: Array, noise: AbstractNoiseModel, bandwidths: Array, kernel: str):
    x = check_observations(x)
    scales = check_scales(scales, x.shape, noise)
    check_kernel(kernel)
    return x, scales.astype(x.dtype), check_bandwidths(bandwidths, x.dtype)


@eqx.filter_jit  # one program per shape/noise/kernel: direct calls do not dispatch op by op
def convmmd_loss(
    prior: AbstractPrior,
    batch: tuple[Float[Array, "b dim"], Float[Array, "b ..."]],
    key: PRNGKeyArray,
    *,
    noise: AbstractNoiseModel,
    bandwidths: Float[Array, " H"],
    kernel: str = "gaussian",
) -> Float[Array, ""]:
    r"""Sampling convMMD loss: unbiased MMD² between x and b simulated noisy prior draws.

    Draw j of the batch is $G_\theta(u_j) + \varepsilon_j$ with $\varepsilon_j$ drawn at
    ``scales[j]`` (the batch's own scales). Gradients are pathwise through ``prior.sample``:
    a `GaussianMixture` samples discrete labels, so its weights get no gradient here (use
    `convmmd_loss_gmm_marginal` or `convmmd_loss_gmm_closed`). The form ``(prior, batch, key,
    *, options)`` plugs into `jaxgen.core.fit` through ``functools.partial(convmmd_loss,
    noise=..., bandwidths=...)``; `fit_convmmd` does this.

    Args:
        prior: an `AbstractPrior`; only ``sample(key, num) -> (num, dim)`` is used.
        batch: the pair ``(x, scales)``: observations (b >= 2, dim) and their noise scales,
            (b, dim) sds or (b, dim, dim) Cholesky factors.
        key: PRNG key for the model draws and the simulated noise.
        noise: the known `AbstractNoiseModel`.
        bandwidths: (H,) fixed kernel bandwidths (see `quantile_bandwidths`).
        kernel: ``"gaussian"`` or ``"laplace"`` (L1).

    Returns:
        The mean over bandwidths of the U-statistic (may be negative).
    """
    check_module(prior, AbstractPrior, "prior")
    noise = _check_noise(noise)
    x, scales = _unpack(batch)
    x, scales, h = _prepare(x, scales, noise, bandwidths, kernel)
    zkey, ekey = jr.split(key)
    sim = prior.sample(zkey, x.shape[0]) + noise.sample(ekey, scales)
    grams = (
        kernel_gram(x, x, h, kernel=kernel),
        kernel_gram(sim, sim, h, kernel=kernel),
        kernel_gram(x, sim, h, kernel=kernel),
    )
    return mmd2_from_grams(*grams) / h.shape[0]


@eqx.filter_jit  # one program per shape/noise/kernel: direct calls do not dispatch op by op
def convmmd_loss_gmm_marginal(
    gmm: GaussianMixture,
    batch: tuple[Float[Array, "b dim"], Float[Array, "b ..."]],
    key: PRNGKeyArray,
    *,
    noise: AbstractNoiseModel,
    bandwidths: Float[Array, " H"],
    kernel: str = "gaussian",
) -> Float[Array, ""]:
    r"""ConvMMD loss of a Gaussian mixture with the component labels marginalised.

    With $s_{jk} = \mu_k + L_k u_j + \varepsilon_j$ for every draw j and component k,
    the model-model term is $\sum_{j\ne j'}\sum_{k,k'} w_k w_{k'} k(s_{jk}, s_{j'k'})/(m(m-1))$
    and the cross term $2\sum_{i,j,k} w_k k(X_i, s_{jk})/(bm)$: an unbiased estimate of the same
    population loss as `convmmd_loss`, with exact gradients in the weights. Cost O(b²K²).

    Args: as `convmmd_loss`, with a `GaussianMixture` prior.

    Returns:
        The mean over bandwidths of the U-statistic.
    """
    if not isinstance(gmm, GaussianMixture):
        raise TypeError(f"`gmm` must be a GaussianMixture, got {type(gmm).__name__}.")
    noise = _check_noise(noise)
    x, scales = _unpack(batch)
    x, scales, h = _prepare(x, scales, noise, bandwidths, kernel)
    b, d = x.shape
    k = gmm.num_components
    ukey, ekey = jr.split(key)
    u = jr.normal(ukey, (b, d), dtype=x.dtype)
    sim = gmm.component_draws(u) + noise.sample(ekey, scales)[:, None, :]  # (m, K, d)
    w = gmm.weights
    flat = sim.reshape(b * k, d)
    kss = kernel_gram(flat, flat, h, kernel=kernel).reshape(b, k, b, k)
    off = 1.0 - jnp.eye(b, dtype=x.dtype)
    model = jnp.einsum("jkJl,k,l,jJ->", kss, w, w, off) / (b * (b - 1))
    cross = jnp.einsum("ijk,k->", kernel_gram(x, flat, h, kernel=kernel).reshape(b, b, k), w)
    kxx = kernel_gram(x, x, h, kernel=kernel)
    data = (jnp.sum(kxx) - jnp.trace(kxx)) / (b * (b - 1))
    return (data + model - 2.0 * cross / (b * b)) / h.shape[0]


def _gauss_expect(delta: Array, cov: Array, h2: Array) -> Array:
    r"""E exp(-||D||²/(2h²)) for D ~ N(delta, V): det(I + V/h²)^{-1/2} exp(-½ δᵀ(h²I+V)⁻¹δ)."""
    d = delta.shape[-1]
    mat = cov + h2 * jnp.eye(d, dtype=cov.dtype).reshape((1,) * (cov.ndim - 2) + (d, d))
    inv, log_det = small_inv_logdet(mat)
    quad = jnp.einsum("...i,...ij,...j->...", delta, inv, delta)
    return jnp.exp(-0.5 * (log_det - d * jnp.log(h2)) - 0.5 * quad)


@eqx.filter_jit  # one program per shape/noise/kernel: direct calls do not dispatch op by op
def convmmd_loss_gmm_closed(
    gmm: GaussianMixture,
    batch: tuple[Float[Array, "b dim"], Float[Array, "b ..."]],
    key: PRNGKeyArray | None = None,
    *,
    bandwidths: Float[Array, " H"],
) -> Float[Array, ""]:
    r"""Exact expectation of `convmmd_loss` over model draws (Gaussian kernel, Gaussian noise).

    Draw j is distributed as $\sum_k w_k N(\mu_k, S_k + \Sigma_j)$ (its noise has observation
    j's covariance). With $g_h(\delta, V) = \det(I + V/h^2)^{-1/2}\exp(-\tfrac12\delta^\top
    (h^2 I + V)^{-1}\delta)$ (= E exp(-||D||²/2h²), D ~ N(δ, V)),:

    - model-model: $\frac{1}{b(b-1)}\sum_{j\ne j'}\sum_{k,k'} w_k w_{k'}
      g_h(\mu_k - \mu_{k'}, S_k + S_{k'} + \Sigma_j + \Sigma_{j'})$;
    - cross: $\frac{2}{b^2}\sum_{i,j}\sum_k w_k g_h(X_i - \mu_k, S_k + \Sigma_j)$, summed over
      all (i, j) with the noise of draw j (not Sigma_i: that is what the sampled loss simulates);
    - the data term of `convmmd_loss` unchanged.

    No Monte Carlo noise; cost O(b² K² d³).

    Args:
        gmm: the `GaussianMixture` prior.
        batch: the pair ``(x, scales)``: observations (b >= 2, dim) and their Gaussian noise
            scales, (b, dim) sds or (b, dim, dim) Cholesky factors.
        key: unused (the value is deterministic); accepted so that the loss has the form
            ``(model, batch, key, *, options)`` of `jaxgen.core.fit`.
        bandwidths: (H,) fixed Gaussian-kernel bandwidths.

    Returns:
        The mean over bandwidths of the expected U-statistic.
    """
    if not isinstance(gmm, GaussianMixture):
        raise TypeError(f"`gmm` must be a GaussianMixture, got {type(gmm).__name__}.")
    del key  # deterministic
    x, scales = _unpack(batch)
    x, scales, h = _prepare(x, scales, GaussianNoise(), bandwidths, "gaussian")
    b, d = x.shape
    w, mu, s = gmm.weights, gmm.means, gmm.covs
    sig = noise_covariances(scales)  # (b, d, d)
    kxx = kernel_gram(x, x, h)
    data = (jnp.sum(kxx) - jnp.trace(kxx)) / (b * (b - 1))
    off = 1.0 - jnp.eye(b, dtype=x.dtype)
    # Pairs of draws only enter through Sigma_j + Sigma_j' (b² of them), pairs of components
    # through mu_k - mu_k' and S_k + S_k'.
    dmu = mu[:, None, :] - mu[None, :, :]  # (K, K, d)
    ss = s[:, None] + s[None, :]  # (K, K, d, d)
    sig2 = sig[:, None] + sig[None, :]  # (b, b, d, d)
    xm = x[:, None, :] - mu[None]  # (b, K, d)

    def one_bandwidth(hh: Array) -> Array:
        h2 = hh**2
        gmm_mm = jax.vmap(
            lambda v: jnp.einsum("kl,k,l->", _gauss_expect(dmu, ss + v[None, None], h2), w, w)
        )(sig2.reshape(b * b, d, d)).reshape(b, b)
        model = jnp.sum(gmm_mm * off) / (b * (b - 1))
        # cross: sum over j of g(X_i - mu_k, S_k + Sigma_j), then over i and k with w_k.
        cross = jax.vmap(
            lambda sj: jnp.einsum(
                "ik,k->",
                _gauss_expect(xm, jnp.broadcast_to(s[None] + sj[None, None], (b, *s.shape)), h2),
                w,
            )
        )(sig)
        return model - 2.0 * jnp.sum(cross) / (b * b)

    return data / h.shape[0] + jnp.mean(jax.lax.map(one_bandwidth, h))
