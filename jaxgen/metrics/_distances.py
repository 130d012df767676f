"""Sample- and closed-form distances between distributions.

All functions are pure, take one pair of samples (rows are points) and are jit/vmap-compatible.
"""

import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from ..core import kernel_gram, mmd2_from_grams, psd_sqrt
from ..core.checks import check_covariance, check_finite, check_floating, check_positive


def _check_samples(x: Array, y: Array, *, same_size: bool = False) -> tuple[Array, Array]:
    """Shapes and dtypes at trace time; finite entries as a value check."""
    x, y = check_floating(x, "x"), check_floating(y, "y")
    if x.ndim != 2 or y.ndim != 2:
        raise ValueError(
            f"`x` and `y` must be 2-D (num_samples, dim), got shapes {x.shape} and {y.shape}."
        )
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"`x` and `y` disagree on dim: {x.shape[1]} vs {y.shape[1]}.")
    if x.shape[0] < 2 or y.shape[0] < 2:
        raise ValueError(
            f"need at least 2 samples on each side, got {x.shape[0]} and {y.shape[0]}."
        )
    if same_size and x.shape[0] != y.shape[0]:
        raise ValueError(
            f"`x` and `y` must have the same number of samples, got {x.shape[0]} and {y.shape[0]}."
        )
    return check_finite(x, "x"), check_finite(y, "y")


def sorted_projections(
    key: PRNGKeyArray, x: Float[Array, "n dim"], y: Float[Array, "n dim"], num_projections: int
) -> tuple[Float[Array, "n P"], Float[Array, "n P"]]:
    r"""The sorted projections $\theta_p^\top x_{(i)}$, $\theta_p^\top y_{(i)}$ on ``P`` directions
    drawn uniformly on the sphere: the monotone 1-D couplings behind the sliced distances
    (`sliced_w1`, `sliced_w2`).
    """
    if not isinstance(num_projections, int) or num_projections < 1:
        raise ValueError(f"`num_projections` must be an int >= 1, got {num_projections!r}.")
    theta = jr.normal(key, (num_projections, x.shape[1]), dtype=x.dtype)
    theta = theta / jnp.linalg.norm(theta, axis=-1, keepdims=True)
    return jnp.sort(x @ theta.T, axis=0), jnp.sort(y @ theta.T, axis=0)


def gaussian_w2(
    mean_a: Float[Array, " dim"],
    cov_a: Float[Array, "dim dim"],
    mean_b: Float[Array, " dim"],
    cov_b: Float[Array, "dim dim"],
) -> Float[Array, ""]:
    r"""2-Wasserstein distance between two Gaussians, in closed form.

    $W_2^2 = \|m_a - m_b\|^2 + \operatorname{tr}(S_a + S_b - 2 (S_a^{1/2} S_b S_a^{1/2})^{1/2})$.

    Returns:
        $W_2$ (not squared), a scalar. Round-off below zero is clipped, so the result is >= 0.

    References:
        Dowson & Landau (1982); Givens & Shortt (1984).
    """
    if mean_a.ndim != 1 or cov_a.shape != (mean_a.shape[0],) * 2:
        raise ValueError(
            f"`mean_a` (dim,) and `cov_a` (dim, dim) expected, got {mean_a.shape} "
            f"and {cov_a.shape}."
        )
    if mean_b.shape != mean_a.shape or cov_b.shape != cov_a.shape:
        raise ValueError(
            f"second Gaussian has shapes {mean_b.shape}, {cov_b.shape}; expected "
            f"{mean_a.shape}, {cov_a.shape}."
        )
    dim = mean_a.shape[0]
    mean_a = check_finite(check_floating(mean_a, "mean_a"), "mean_a")
    mean_b = check_finite(check_floating(mean_b, "mean_b"), "mean_b")
    cov_a = check_covariance(cov_a, "cov_a", dim)
    cov_b = check_covariance(cov_b, "cov_b", dim)
    root_a = psd_sqrt(cov_a)
    cross = psd_sqrt(root_a @ cov_b @ root_a)
    sq = jnp.sum((mean_a - mean_b) ** 2) + jnp.trace(cov_a + cov_b - 2.0 * cross)
    return jnp.sqrt(jnp.clip(sq, 0.0))


def w1_1d(x: Float[Array, " n"], y: Float[Array, " n"]) -> Float[Array, ""]:
    r"""1-Wasserstein distance between two 1-D empirical measures of equal size.

    $W_1 = \frac1n \sum_i |x_{(i)} - y_{(i)}|$ with sorted samples (the monotone coupling).
    """
    if x.ndim != 1 or y.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"`x` and `y` must be 1-D of equal length, got {x.shape} and {y.shape}.")
    if x.shape[0] < 1:
        raise ValueError("`x` and `y` must hold at least one sample each, got 0.")
    x = check_finite(check_floating(x, "x"), "x")
    y = check_finite(check_floating(y, "y"), "y")
    return jnp.mean(jnp.abs(jnp.sort(x) - jnp.sort(y)))


def _pairwise_sq(x: Array, y: Array) -> Array:
    sq = jnp.sum(x**2, -1)[:, None] + jnp.sum(y**2, -1)[None, :] - 2.0 * x @ y.T
    return jnp.clip(sq, 0.0)


def mmd_unbiased(
    x: Float[Array, "n dim"],
    y: Float[Array, "m dim"],
    bandwidths: Float[Array, " K"] | tuple[float, ...] = (0.5, 1.0, 2.0, 4.0),
) -> Float[Array, ""]:
    r"""Unbiased estimate of the squared MMD with a sum of RBF kernels.

    $k(a, b) = \sum_h \exp(-\|a-b\|^2 / (2h^2))$; the U-statistic drops the diagonal terms, so the
    estimate can be slightly negative when the two laws agree.

    Args:
        x: samples of the first law, shape (n, dim).
        y: samples of the second law, shape (m, dim).
        bandwidths: kernel length scales h (same unit as the data).

    Returns:
        $\widehat{\mathrm{MMD}}^2_u$, a scalar.

    References:
        Gretton et al., A Kernel Two-Sample Test, JMLR 2012 (eq. 3).
    """
    x, y = _check_samples(x, y)
    h = jnp.asarray(bandwidths)
    if h.ndim != 1 or h.shape[0] < 1:
        raise ValueError(f"`bandwidths` must be a non-empty 1-D sequence, got shape {h.shape}.")
    # Cast after the check so that integer bandwidths are not truncated and 0.5 stays 0.5.
    h = check_positive(h.astype(x.dtype), "bandwidths")

    # The Gram/U-statistic core lives in jaxgen.core (shared with jaxgen.deconvolution).
    return mmd2_from_grams(kernel_gram(x, x, h), kernel_gram(y, y, h), kernel_gram(x, y, h))


def energy_distance(x: Float[Array, "n dim"], y: Float[Array, "m dim"]) -> Float[Array, ""]:
    r"""Squared energy distance $2E\|X-Y\| - E\|X-X'\| - E\|Y-Y'\|$ (U-statistics within samples).

    References:
        Székely & Rizzo, Energy statistics, J. Stat. Plann. Inference 2013.
    """
    x, y = _check_samples(x, y)

    def dist(a: Array, b: Array) -> Array:
        # sqrt at 0 has an infinite derivative: guard the diagonal for grad-safety.
        sq = _pairwise_sq(a, b)
        safe = jnp.where(sq > 0, sq, 1.0)
        return jnp.where(sq > 0, jnp.sqrt(safe), 0.0)

    n, m = x.shape[0], y.shape[0]
    return (
        2.0 * jnp.mean(dist(x, y))
        - jnp.sum(dist(x, x)) / (n * (n - 1))
        - jnp.sum(dist(y, y)) / (m * (m - 1))
    )


def sliced_w2(
    key: PRNGKeyArray,
    x: Float[Array, "n dim"],
    y: Float[Array, "n dim"],
    num_projections: int = 128,
) -> Float[Array, ""]:
    r"""Monte Carlo sliced 2-Wasserstein distance between equal-size samples.

    $SW_2^2 = E_\theta W_2^2(\theta^\top X, \theta^\top Y)$, $\theta$ uniform on the sphere; each
    1-D $W_2$ uses the sorted (monotone) coupling.

    Returns:
        $SW_2$ (not squared), a scalar.
    """
    x, y = _check_samples(x, y, same_size=True)
    px, py = sorted_projections(key, x, y, num_projections)
    return jnp.sqrt(jnp.mean((px - py) ** 2))


def empirical_gaussian_w2(
    samples: Float[Array, "n dim"], mean: Float[Array, " dim"], cov: Float[Array, "dim dim"]
) -> Float[Array, ""]:
    """`gaussian_w2` between the moment-matched Gaussian of ``samples`` and ``N(mean, cov)``."""
    if samples.ndim != 2 or samples.shape[0] < 2:
        raise ValueError(f"`samples` must be (n >= 2, dim), got {samples.shape}.")
    samples = check_finite(check_floating(samples, "samples"), "samples")
    centred = samples - jnp.mean(samples, 0, keepdims=True)
    sample_cov = centred.T @ centred / (samples.shape[0] - 1)
    return gaussian_w2(jnp.mean(samples, 0), sample_cov, mean, cov)


def feature_frechet_distance(
    feats_a: Float[Array, "n k"], feats_b: Float[Array, "m k"]
) -> Float[Array, ""]:
    r"""Fréchet distance between Gaussians fitted to two feature sets (FID-style).

    $\|\mu_a - \mu_b\|^2 + \operatorname{tr}(S_a + S_b - 2 (S_a^{1/2} S_b S_a^{1/2})^{1/2})$ with
    sample means and unbiased sample covariances: the squared `gaussian_w2`, which is what FID
    reports (Heusel et al. 2017) when the features come from an Inception network. Here the
    features come from whatever network the caller trained (e.g. a small classifier's
    penultimate layer), so values are comparable only under one feature map.

    Args:
        feats_a: features of the first sample set, shape ``(n, k)``, ``n >= 2``.
        feats_b: features of the second, shape ``(m, k)``, ``m >= 2``.

    Returns:
        The squared Fréchet (2-Wasserstein) distance between the two fitted Gaussians, >= 0.

    References:
        Heusel, Ramsauer, Unterthiner, Nessler, Hochreiter (2017), GANs trained by a two
        time-scale update rule converge to a local Nash equilibrium (FID).
    """
    for name, feats in (("feats_a", feats_a), ("feats_b", feats_b)):
        if feats.ndim != 2 or feats.shape[0] < 2:
            raise ValueError(f"`{name}` must have shape (n >= 2, k), got {feats.shape}.")
    if feats_a.shape[1] != feats_b.shape[1]:
        raise ValueError(
            f"`feats_a` and `feats_b` must share the feature size k, got {feats_a.shape[1]} "
            f"and {feats_b.shape[1]}."
        )
    feats_a = check_finite(check_floating(feats_a, "feats_a"), "feats_a")
    feats_b = check_finite(check_floating(feats_b, "feats_b"), "feats_b")

    def moments(feats: Array) -> tuple[Array, Array]:
        mean = jnp.mean(feats, axis=0)
        centred = feats - mean[None, :]
        return mean, centred.T @ centred / (feats.shape[0] - 1)

    return gaussian_w2(*moments(feats_a), *moments(feats_b)) ** 2


__all__ = [
    "energy_distance",
    "empirical_gaussian_w2",
    "feature_frechet_distance",
    "gaussian_w2",
    "mmd_unbiased",
    "sliced_w2",
    "w1_1d",
]
