"""Sampleable sieve priors for convMMD: Gaussian mixtures and spline flows.

Both expose ``sample(key, num) -> (num, dim)`` (reparameterised in their continuous
parameters) and ``log_prob(z (m, dim)) -> (m,)``.
"""

import abc
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from ..flows import SplineAutoregressive
from ._noise import check_observations, check_scales, noise_covariances, small_inv_logdet


def _inv_softplus(y: Array) -> Array:
    return y + jnp.log(-jnp.expm1(-y))


@eqx.filter_jit
def _unconstrained(
    weights: Array, means: Array, covs: Array, min_scale: float
) -> tuple[Array, Array, Array]:
    """(logits, means, chol_raw) of `GaussianMixture` from checked constrained parameters.

    One compiled program per shape (a dozen small ops dispatched one by one otherwise).
    """
    d = means.shape[1]
    weights = eqx.error_if(
        weights,
        jnp.any(weights < 0)
        | (jnp.abs(jnp.sum(weights) - 1.0) > max(1e-6, 100 * float(jnp.finfo(weights.dtype).eps))),
        "`weights` must be non-negative and sum to 1.",
    )
    sym = 0.5 * (covs + jnp.swapaxes(covs, -1, -2))
    chol = jnp.linalg.cholesky(sym)
    chol = eqx.error_if(
        chol,
        ~jnp.all(jnp.isfinite(chol)) | ~jnp.allclose(sym, covs, rtol=1e-6, atol=1e-12),
        "`covs` must be symmetric positive definite.",
    )
    diag = jnp.diagonal(chol, axis1=-2, axis2=-1)
    raw_diag = _inv_softplus(jnp.clip(diag - min_scale, 1e-6))
    eye = jnp.eye(d, dtype=bool)
    chol_raw = jnp.where(eye[None], raw_diag[:, None, :] * eye[None], jnp.tril(chol, -1))
    return jnp.log(jnp.clip(weights, 1e-30)), means, chol_raw


class AbstractPrior(eqx.Module):
    """The prior (sieve) slot: a distribution on ``R^dim`` that is sampled with pathwise gradients.

    Subclasses give ``sample(key, num) -> (num, dim)`` (differentiable in the parameters: the
    convMMD losses and `fit_convmmd` need nothing else) and ``log_prob(z) -> (m,)`` (used by
    `posterior_mean_snis`; raise ``NotImplementedError`` if there is none).
    """

    @abc.abstractmethod
    def sample(self, key: PRNGKeyArray, num: int) -> Float[Array, "num dim"]:
        """``num`` draws, pathwise differentiable in the parameters."""

    @abc.abstractmethod
    def log_prob(self, z: Float[Array, "m dim"]) -> Float[Array, " m"]:
        """Log density of every row of ``z``."""


class GaussianMixture(AbstractPrior):
    r"""Gaussian mixture $q(z) = \sum_k w_k N(z; \mu_k, S_k)$ in unconstrained parameters.

    Stored as ``logits`` (w = softmax), ``means`` and ``chol_raw``: S_k = L_k L_k^T with L_k
    lower-triangular, strict lower part free and diagonal softplus(raw) + ``min_scale``
    (so every S_k is SPD whatever the parameters).

    Attributes:
        logits: (K,) mixture logits.
        means: (K, dim) component means.
        chol_raw: (K, dim, dim) raw Cholesky factors.
        min_scale: floor of the Cholesky diagonal (static).
    """

    logits: Float[Array, " K"]
    means: Float[Array, "K dim"]
    chol_raw: Float[Array, "K dim dim"]
    min_scale: float = eqx.field(static=True)

    def __init__(
        self,
        weights: Float[Array, " K"],
        means: Float[Array, "K dim"],
        covs: Float[Array, "K dim dim"],
        *,
        min_scale: float = 1e-3,
    ):
        """Build from constrained parameters.

        Args:
            weights: (K,) non-negative, summing to 1 (checked to max(1e-6, 100 eps) via
                `eqx.error_if`).
            means: (K, dim).
            covs: (K, dim, dim) symmetric positive definite.
            min_scale: floor of the Cholesky diagonal, > 0 (same unit as z).
        """
        weights, means, covs = jnp.asarray(weights), jnp.asarray(means), jnp.asarray(covs)
        if weights.ndim != 1 or means.ndim != 2 or means.shape[0] != weights.shape[0]:
            raise ValueError(
                f"`weights` (K,) and `means` (K, dim) expected, got {weights.shape}, {means.shape}."
            )
        k, d = means.shape
        if covs.shape != (k, d, d):
            raise ValueError(f"`covs` must have shape {(k, d, d)}, got {covs.shape}.")
        if not min_scale > 0:
            raise ValueError(f"`min_scale` must be > 0, got {min_scale}.")
        self.logits, self.means, self.chol_raw = _unconstrained(
            weights, means, covs, float(min_scale)
        )
        self.min_scale = float(min_scale)

    @property
    def num_components(self) -> int:
        """K."""
        return self.means.shape[0]

    @property
    def dim(self) -> int:
        """Dimension of z."""
        return self.means.shape[1]

    @property
    def weights(self) -> Float[Array, " K"]:
        """Mixture weights w = softmax(logits)."""
        return jax.nn.softmax(self.logits)

    @property
    def chol(self) -> Float[Array, "K dim dim"]:
        """Cholesky factors L_k (lower-triangular, diagonal >= min_scale)."""
        d = self.dim
        diag = jax.nn.softplus(jnp.diagonal(self.chol_raw, axis1=-2, axis2=-1)) + self.min_scale
        return jnp.tril(self.chol_raw, -1) + diag[:, :, None] * jnp.eye(d, dtype=diag.dtype)[None]

    @property
    def covs(self) -> Float[Array, "K dim dim"]:
        """Component covariances S_k = L_k L_k^T."""
        chol = self.chol
        return chol @ jnp.swapaxes(chol, -1, -2)

    def component_draws(self, u: Float[Array, "m dim"]) -> Float[Array, "m K dim"]:
        """mu_k + L_k u_j for every draw j and component k (pathwise in means and factors)."""
        if u.ndim != 2 or u.shape[1] != self.dim:
            raise ValueError(f"`u` must be (m, {self.dim}), got shape {u.shape}.")
        return self.means[None, :, :] + jnp.einsum("kij,mj->mki", self.chol, u)

    def sample(self, key: PRNGKeyArray, num: int) -> Float[Array, "num dim"]:
        """``num`` draws: labels ~ Categorical(w), z = mu_k + L_k u (pathwise in mu, L only)."""
        lkey, ukey = jr.split(key)
        labels = jr.categorical(lkey, self.logits, shape=(num,))
        u = jr.normal(ukey, (num, self.dim), dtype=self.means.dtype)
        draws = self.component_draws(u)
        return jnp.take_along_axis(draws, labels[:, None, None], axis=1)[:, 0, :]

    @eqx.filter_jit
    def log_prob(self, z: Float[Array, "m dim"]) -> Float[Array, " m"]:
        """Log q(z) for each row of z (one triangular inverse per component)."""
        if z.ndim != 2 or z.shape[1] != self.dim:
            raise ValueError(f"`z` must be (m, {self.dim}), got shape {z.shape}.")
        chol = self.chol
        eye = jnp.broadcast_to(jnp.eye(self.dim, dtype=chol.dtype), chol.shape)
        inv_chol = jax.scipy.linalg.solve_triangular(chol, eye, lower=True)  # (K, d, d)
        sol = jnp.einsum("kij,mkj->mki", inv_chol, z[:, None, :] - self.means[None])
        log_det = jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), -1)
        log_n = -0.5 * jnp.sum(sol**2, -1) - log_det[None] - 0.5 * self.dim * math.log(2 * math.pi)
        return jax.nn.logsumexp(log_n + jax.nn.log_softmax(self.logits)[None], axis=-1)

    @eqx.filter_jit
    def convolved_log_prob(
        self, x: Float[Array, "m dim"], noise_covs: Float[Array, "m dim dim"]
    ) -> Float[Array, " m"]:
        r"""Log of $(q * N(0, \Sigma_i))(x_i) = \log \sum_k w_k N(x_i; \mu_k, S_k + \Sigma_i)$."""
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"`x` must be (m, {self.dim}), got shape {x.shape}.")
        if noise_covs.shape != (x.shape[0], self.dim, self.dim):
            raise ValueError(
                f"`noise_covs` must be {(x.shape[0], self.dim, self.dim)}, got {noise_covs.shape}."
            )
        cov = self.covs[None] + noise_covs[:, None]  # (m, K, d, d)
        inv, log_det = small_inv_logdet(cov)
        diff = x[:, None, :] - self.means[None]
        quad = jnp.einsum("mki,mkij,mkj->mk", diff, inv, diff)
        log_n = -0.5 * (quad + log_det) - 0.5 * self.dim * math.log(2 * math.pi)
        return jax.nn.logsumexp(log_n + jax.nn.log_softmax(self.logits)[None], axis=-1)


def init_gaussian_mixture(
    key: PRNGKeyArray,
    x: Float[Array, "n dim"],
    num_components: int,
    scales: Float[Array, "n ..."],
    *,
    num_iters: int = 20,
    min_scale: float = 1e-3,
    covariance: str = "shrunk",
) -> GaussianMixture:
    r"""Moment initialisation of a `GaussianMixture` prior from noisy observations.

    k-means++ seeding and ``num_iters`` Lloyd steps on x; each component gets its cluster's
    share and mean. Its covariance, with :math:`W_k` the cluster covariance of x and
    :math:`\bar\Sigma = (1/n)\sum_i \Sigma_i` the mean noise covariance:

    - ``"shrunk"`` (default): :math:`\rho W_k`, with the global deconvolution ratio
      :math:`\rho = \mathrm{tr}(\mathrm{Cov}(x) - \bar\Sigma) / \mathrm{tr}\,\mathrm{Cov}(x)`
      (clipped to [0.05, 1]; K = 1 gives the deconvolved total covariance in 1-D).
    - ``"deconvolved"`` (the direct subtraction): :math:`W_k - \bar\Sigma`, eigenvalues floored at
      :math:`(0.05\,\mathrm{sd}(x))^2`.

    Why the default is not ``"deconvolved"``: when K exceeds the number of latent modes,
    k-means cuts a mode into slabs narrower than the noise, :math:`W_k - \bar\Sigma` is
    negative and every component starts at the floor: a comb of spikes. The convolved data
    cannot tell a comb from a smooth density (deconvolution is ill-posed exactly there), so
    the MMD fit barely moves it: on the 1-D Laplace-mixture latent (n = 4000, K = 8, Laplace
    noise), ISE of the fitted density after 250 / 1000 steps is 0.17 / 0.084 from
    ``"deconvolved"`` and 0.015 / 0.0098 from ``"shrunk"`` (naive KDE of x: 0.041).
    Use ``"deconvolved"`` when K matches well-separated clusters.

    Args:
        key: PRNG key (k-means++ seeding).
        x: observations (n >= 2, dim).
        num_components: K >= 1 (at most n).
        scales: per-observation noise sds (n, dim) or Cholesky factors (n, dim, dim).
        num_iters: Lloyd iterations.
        min_scale: passed to `GaussianMixture`.
        covariance: ``"shrunk"`` or ``"deconvolved"`` (above).

    Returns:
        The initial `GaussianMixture`.
    """
    x = check_observations(x)
    n, d = x.shape
    if not isinstance(num_components, int) or not 1 <= num_components <= n:
        raise ValueError(f"`num_components` must be an int in [1, {n}], got {num_components!r}.")
    if covariance not in ("shrunk", "deconvolved"):
        raise ValueError(f"`covariance` must be 'shrunk' or 'deconvolved', got {covariance!r}.")
    scales = check_scales(scales, x.shape, "gaussian")
    shrunk = jnp.asarray(covariance == "shrunk")  # traced: both options share one program
    return _init_gaussian_mixture(key, x, scales, num_components, num_iters, min_scale, shrunk)


@eqx.filter_jit
def _init_gaussian_mixture(
    key: PRNGKeyArray,
    x: Array,
    scales: Array,
    k: int,
    num_iters: int,
    min_scale: float,
    shrunk: Array,
) -> GaussianMixture:
    """`init_gaussian_mixture` after its checks, one compiled program per shape."""
    n, d = x.shape
    keys = jr.split(key, k)
    centres = jnp.zeros((k, d), x.dtype).at[0].set(x[jr.randint(keys[0], (), 0, n)])

    def seed(i: Array, centres: Array) -> Array:
        sq = jnp.sum((x[:, None, :] - centres[None]) ** 2, -1)
        sq = jnp.where(jnp.arange(k)[None, :] < i, sq, jnp.inf)
        dmin = jnp.min(sq, -1)
        idx = jr.categorical(keys[i], jnp.log(dmin + 1e-30))
        return centres.at[i].set(x[idx])

    centres = jax.lax.fori_loop(1, k, seed, centres)

    def lloyd(_: Array, centres: Array) -> Array:
        resp = jax.nn.one_hot(jnp.argmin(jnp.sum((x[:, None] - centres[None]) ** 2, -1), -1), k)
        counts = jnp.sum(resp, 0)
        new = resp.T @ x / jnp.clip(counts, 1.0)[:, None]
        return jnp.where(counts[:, None] > 0, new, centres)

    centres = jax.lax.fori_loop(0, num_iters, lloyd, centres)
    resp = jax.nn.one_hot(jnp.argmin(jnp.sum((x[:, None] - centres[None]) ** 2, -1), -1), k)
    counts = jnp.sum(resp, 0)
    weights = (counts + 1.0) / (n + k)
    diff = x[:, None, :] - centres[None]
    cluster_cov = jnp.einsum("nk,nki,nkj->kij", resp, diff, diff)
    cluster_cov = cluster_cov / jnp.clip(counts, 1.0)[:, None, None]
    mean_noise = jnp.mean(noise_covariances(scales), 0)
    total = jnp.trace(jnp.atleast_2d(jnp.cov(x, rowvar=False)))
    ratio = jnp.clip((total - jnp.trace(mean_noise)) / total, 0.05, 1.0)
    target = jnp.where(shrunk, ratio * cluster_cov, cluster_cov - mean_noise[None])
    floor = (0.05 * jnp.std(x, 0).mean()) ** 2 + min_scale**2
    evals, evecs = jnp.linalg.eigh(target)
    covs = (evecs * jnp.maximum(evals, floor)[:, None, :]) @ jnp.swapaxes(evecs, -1, -2)
    covs = 0.5 * (covs + jnp.swapaxes(covs, -1, -2))
    return GaussianMixture(weights, centres, covs, min_scale=min_scale)


class FlowPrior(AbstractPrior):
    r"""Normalizing-flow prior z = loc + exp(log_scale) * T(u), u ~ N(0, I).

    T chains `jaxgen.flows.SplineAutoregressive` layers with the coordinate order reversed
    between layers. ``loc``/``log_scale`` (trainable) standardise the latent so that the spline
    tail bound (in standard units) covers the data: initialise them from the data.

    Attributes:
        layers: the spline bijections, applied in order to u.
        loc: (dim,) output shift.
        log_scale: (dim,) output log-scale.
        dim: dimension.
    """

    layers: tuple[SplineAutoregressive, ...]
    loc: Float[Array, " dim"]
    log_scale: Float[Array, " dim"]
    dim: int = eqx.field(static=True)

    def __init__(
        self,
        dim: int,
        *,
        key: PRNGKeyArray,
        num_layers: int = 2,
        num_bins: int = 8,
        width: int = 32,
        depth: int = 1,
        tail_bound: float = 5.0,
        loc: Float[Array, " dim"] | None = None,
        scale: Float[Array, " dim"] | None = None,
    ):
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"`dim` must be an int >= 1, got {dim!r}.")
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"`num_layers` must be an int >= 1, got {num_layers!r}.")
        keys = jr.split(key, num_layers)
        self.layers = tuple(
            SplineAutoregressive(
                dim, num_bins=num_bins, width=width, depth=depth, tail_bound=tail_bound, key=k
            )
            for k in keys
        )
        self.dim = dim
        loc = jnp.zeros(dim) if loc is None else jnp.asarray(loc)
        scale = jnp.ones(dim) if scale is None else jnp.asarray(scale)
        if loc.shape != (dim,) or scale.shape != (dim,):
            raise ValueError(f"`loc` and `scale` must be ({dim},), got {loc.shape}, {scale.shape}.")
        scale = eqx.error_if(scale, ~jnp.all(scale > 0), "`scale` must be > 0.")
        self.loc, self.log_scale = loc, jnp.log(scale)

    def _forward(self, u: Array) -> Array:
        for i, layer in enumerate(self.layers):
            if i > 0:
                u = u[::-1]
            u, _ = layer.transform_and_log_det(u)
        if len(self.layers) % 2 == 0:
            u = u[::-1]  # an even number of reversals leaves the original order
        return self.loc + jnp.exp(self.log_scale) * u

    def _log_prob(self, z: Array) -> Array:
        u = (z - self.loc) * jnp.exp(-self.log_scale)
        total = -jnp.sum(self.log_scale)
        if len(self.layers) % 2 == 0:
            u = u[::-1]
        for i, layer in reversed(list(enumerate(self.layers))):
            u, logd = layer.inverse_and_log_det(u)
            total = total + logd
            if i > 0:
                u = u[::-1]
        return total - 0.5 * jnp.sum(u**2) - 0.5 * self.dim * math.log(2 * math.pi)

    def sample(self, key: PRNGKeyArray, num: int) -> Float[Array, "num dim"]:
        """``num`` reparameterised draws (one parallel pass through the splines)."""
        u = jr.normal(key, (num, self.dim), dtype=self.loc.dtype)
        return jax.vmap(self._forward)(u)

    @eqx.filter_jit
    def log_prob(self, z: Float[Array, "m dim"]) -> Float[Array, " m"]:
        """Log q(z) for each row (inverse splines, ``dim`` sequential passes per layer)."""
        if z.ndim != 2 or z.shape[1] != self.dim:
            raise ValueError(f"`z` must be (m, {self.dim}), got shape {z.shape}.")
        return jax.vmap(self._log_prob)(z)
