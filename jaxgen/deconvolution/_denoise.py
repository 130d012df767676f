r"""Empirical-Bayes denoisers: posterior means E[Z | X = x] under a fitted prior.

$\hat z(x) = \int z\, q(z) f_\varepsilon(x - z)\,dz / \int q(z) f_\varepsilon(x - z)\,dz$
for each observation with its own noise scale.
"""

import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from ..core.checks import check_module
from ._noise import (
    AbstractNoiseModel,
    check_observations,
    check_scales,
    noise_covariances,
    small_inv_logdet,
)
from ._priors import AbstractPrior, GaussianMixture


@eqx.filter_jit
def posterior_mean_gmm(
    gmm: GaussianMixture, x: Float[Array, "n dim"], scales: Float[Array, "n ..."]
) -> Float[Array, "n dim"]:
    r"""Closed-form posterior mean under a Gaussian-mixture prior and Gaussian noise.

    The posterior of Z given X = x (noise N(0, Sigma)) is a Gaussian mixture with weights
    $\propto w_k N(x; \mu_k, S_k + \Sigma)$ and means $\mu_k + S_k (S_k + \Sigma)^{-1}(x - \mu_k)$;
    the result is their weighted mean (equal to Tweedie's formula).

    Args:
        gmm: the prior.
        x: observations (n >= 2, dim).
        scales: Gaussian noise scales, (n, dim) sds or (n, dim, dim) Cholesky factors.

    Returns:
        (n, dim) posterior means.

    References:
        Efron, Tweedie's formula and selection bias, JASA 2011.
    """
    if not isinstance(gmm, GaussianMixture):
        raise TypeError(f"`gmm` must be a GaussianMixture, got {type(gmm).__name__}.")
    x = check_observations(x)
    sig = noise_covariances(check_scales(scales, x.shape, "gaussian").astype(x.dtype))
    s = gmm.covs
    cov = s[None] + sig[:, None]  # (n, K, d, d)
    inv, log_det = small_inv_logdet(cov)
    diff = x[:, None, :] - gmm.means[None]
    sol = jnp.einsum("nkij,nkj->nki", inv, diff)  # C^{-1}(x - mu)
    log_r = jax.nn.log_softmax(gmm.logits)[None] - 0.5 * jnp.sum(diff * sol, -1) - 0.5 * log_det
    resp = jax.nn.softmax(log_r, -1)  # (n, K)
    means = gmm.means[None] + jnp.einsum("kij,nkj->nki", s, sol)
    return jnp.einsum("nk,nki->ni", resp, means)


def tweedie(
    log_marginal_fn: Callable[[Array, Array], Array],
    x: Float[Array, "n dim"],
    cov: Float[Array, "n dim dim"],
) -> Float[Array, "n dim"]:
    r"""Tweedie's formula $\hat z = x + \Sigma_x \nabla_x \log p_X(x)$ for Gaussian noise.

    Args:
        log_marginal_fn: ``(x_i (dim,), cov_i (dim, dim)) -> log p_X(x_i)``, the log-density
            of the prior convolved with N(0, cov_i) (e.g. ``GaussianMixture.convolved_log_prob``
            on one row).
        x: observations (n, dim).
        cov: noise covariances (n, dim, dim).

    Returns:
        (n, dim) posterior means.
    """
    if x.ndim != 2 or cov.shape != (*x.shape, x.shape[1]):
        raise ValueError(
            f"`x` (n, dim) and `cov` (n, dim, dim) expected, got {x.shape}, {cov.shape}."
        )
    score = jax.vmap(jax.grad(log_marginal_fn))(x, cov)
    return x + jnp.einsum("nij,nj->ni", cov, score)


def _diag_normal_logpdf(z: Array, mean: Array, var: Array) -> Array:
    return -0.5 * jnp.sum((z - mean[None]) ** 2 / var[None] + jnp.log(2 * math.pi * var)[None], -1)


@eqx.filter_jit
def posterior_mean_snis(
    key: PRNGKeyArray,
    prior: AbstractPrior,
    x: Float[Array, "n dim"],
    scales: Float[Array, "n ..."],
    *,
    noise: AbstractNoiseModel,
    num_samples: int = 8192,
    batch_size: int | None = 64,
) -> tuple[Float[Array, "n dim"], Float[Array, "n dim"]]:
    r"""Posterior means by self-normalised importance sampling with a defensive mixture.

    Per observation x: pilot draws from $r = \tfrac12 q + \tfrac12 \ell_x$, where
    $\ell_x(z) = f_\varepsilon(x - z)$ is the likelihood as a density in z (sampled as
    x - eps); their weighted mean m and diagonal variance v give bridge Gaussians
    a = N(m, v) and a_wide = N(m, 4v). The final ``num_samples`` draws come from
    $\tfrac18 q + \tfrac18\ell_x + \tfrac38 a + \tfrac38 a_{wide}$ (stratified, so the
    mixture density is the proposal), with weights $q(z)\ell_x(z) / r(z)$ in log space: no
    underflow, and the $\ell_x$ component keeps the weights bounded when the prior is much
    narrower or wider than the noise. Prior draws are shared across observations. Weights
    never underflow to NaN; under strong prior-data conflict (an observation many prior and
    noise sds from the prior's bulk) the proposal misses the posterior and the estimate, while
    finite, can be biased with an optimistic ``mcse``.

    Args:
        prior: an `AbstractPrior` (``sample(key, num)`` and ``log_prob(z)``, a black box).
        x: observations (n >= 2, dim).
        scales: per-observation noise scales.
        key: PRNG key.
        noise: the known `AbstractNoiseModel`.
        num_samples: S, draws per observation (a multiple of 8, >= 128).
        batch_size: observations processed at once (memory bound), or ``None`` for all.

    Returns:
        (mean, mcse), both (n, dim): the SNIS estimate and its delta-method Monte Carlo
        standard error $\sqrt{\sum_s \bar w_s^2 (z_s - \hat z)^2}$.
    """
    check_module(prior, AbstractPrior, "prior")
    check_module(noise, AbstractNoiseModel, "noise")
    if not isinstance(num_samples, int) or num_samples < 128 or num_samples % 8:
        raise ValueError(f"`num_samples` must be a multiple of 8 >= 128, got {num_samples!r}.")
    x = check_observations(x)
    scales = check_scales(scales, x.shape, noise).astype(x.dtype)
    n, d = x.shape
    s8 = num_samples // 8
    n_pilot = max(num_samples // 8, 64)
    qkey, okey = jr.split(key)
    zq = prior.sample(qkey, s8 + n_pilot).astype(x.dtype)
    logq_zq = prior.log_prob(zq)
    zq_final, zq_pilot = zq[:s8], zq[s8:]
    lq_final, lq_pilot = logq_zq[:s8], logq_zq[s8:]

    def one(args: tuple[Array, Array, Array]) -> tuple[Array, Array]:
        xi, si, ki = args
        k1, k2, k3, k4 = jr.split(ki, 4)

        def log_lik(z: Array) -> Array:
            rep = jnp.broadcast_to(si, (z.shape[0], *si.shape))
            return noise.log_density(xi[None] - z, rep)

        def lik_draws(k: Array, num: int) -> Array:
            return xi[None] - noise.sample(k, jnp.broadcast_to(si, (num, *si.shape)))

        # Pilot: r = q/2 + l/2.
        zl = lik_draws(k1, n_pilot)
        zp = jnp.concatenate([zq_pilot, zl])
        lq = jnp.concatenate([lq_pilot, prior.log_prob(zl)])
        ll = log_lik(zp)
        lw = lq + ll - jnp.logaddexp(lq, ll)
        w = jax.nn.softmax(lw)
        m = jnp.sum(w[:, None] * zp, 0)
        v = jnp.sum(w[:, None] * (zp - m[None]) ** 2, 0)
        v = jnp.maximum(v, 1e-6 * jnp.mean(v) + jnp.finfo(x.dtype).tiny)
        # Final: q/8 + l/8 + 3a/8 + 3a_wide/8.
        n_a = 3 * s8
        za = m[None] + jnp.sqrt(v)[None] * jr.normal(k2, (n_a, d), dtype=x.dtype)
        zw = m[None] + 2.0 * jnp.sqrt(v)[None] * jr.normal(k3, (n_a, d), dtype=x.dtype)
        zl = lik_draws(k4, s8)
        own = jnp.concatenate([zl, za, zw])
        z = jnp.concatenate([zq_final, own])
        lq = jnp.concatenate([lq_final, prior.log_prob(own)])
        ll = log_lik(z)
        log_r = jax.nn.logsumexp(
            jnp.stack(
                [
                    math.log(1 / 8) + lq,
                    math.log(1 / 8) + ll,
                    math.log(3 / 8) + _diag_normal_logpdf(z, m, v),
                    math.log(3 / 8) + _diag_normal_logpdf(z, m, 4.0 * v),
                ]
            ),
            axis=0,
        )
        w = jax.nn.softmax(lq + ll - log_r)
        mean = jnp.sum(w[:, None] * z, 0)
        mcse = jnp.sqrt(jnp.sum(w[:, None] ** 2 * (z - mean[None]) ** 2, 0))
        return mean, mcse

    keys = jr.split(okey, n)
    return jax.lax.map(one, (x, scales, keys), batch_size=batch_size)
