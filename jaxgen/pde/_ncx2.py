"""Log-density of the noncentral chi-square law in JAX (Poisson mixture, strided window)."""

import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln
from jaxtyping import Array, ArrayLike, Float

from ..core.checks import check_nonnegative, check_positive


def log_chi2_pdf(
    y: Float[ArrayLike, "*shape"], df: Float[ArrayLike, "*shape"]
) -> Float[Array, "*shape"]:
    """Log of the chi-square density with ``df`` degrees of freedom at ``y > 0`` (broadcasts).

    ``y`` and ``df`` must be finite and > 0 (value checks).
    """
    return _log_chi2_pdf(check_positive(y, "y"), check_positive(df, "df"))


def _log_chi2_pdf(y: ArrayLike, df: ArrayLike) -> Array:
    # The body of `log_chi2_pdf` (the terms of the noncentral sum).
    y, df = jnp.asarray(y), jnp.asarray(df)
    k = 0.5 * df
    return (k - 1) * jnp.log(y) - 0.5 * y - k * jnp.log(2.0) - gammaln(k)


def log_ncx2_pdf(
    y: Float[ArrayLike, ""],
    df: Float[ArrayLike, ""],
    nc: Float[ArrayLike, ""],
    n_terms: int = 201,
) -> Float[Array, ""]:
    r"""Log of the noncentral chi-square density ncχ²(df, nc) at ``y > 0``.

    Poisson mixture: p(y) = sum_j Pois(j; nc/2) χ²(y; df + 2j). The summand is log-concave in j
    with its mode near j* = (-k + sqrt(k² + 2 nc y)) / 2 (k = df/2) and width
    s = (1/j* + 1/(j* + k))^{-1/2}. The sum is taken over a static window of ``n_terms``
    nodes centred at j*, with integer stride h = ceil(12 s / (n_terms // 2)) so the window
    covers ±12 s. For h > 1 the strided sum h sum_m f(j0 + m h) of the smooth (lgamma)
    continuation equals the integer sum up to O(exp(-2π² s²/h²)) (Poisson summation), i.e.
    to machine precision since h <= s/3 whenever h > 1. So small and very large ``nc``
    (10^5, small time steps) are handled by the same jittable formula. The window position is
    not differentiated (it is a quadrature choice); gradients in ``y``, ``df``, ``nc`` are exact.

    Args:
        y: point, > 0.
        df: degrees of freedom, > 0.
        nc: noncentrality, > 0.
        n_terms: static number of summation nodes (odd, >= 41).

    Returns:
        The log-density (scalar).

    References:
        Johnson, Kotz and Balakrishnan, Continuous Univariate Distributions vol. 2, ch. 29.
    """
    if not isinstance(n_terms, int) or n_terms < 41:
        raise ValueError(f"`n_terms` must be an int >= 41, got {n_terms!r}.")
    y, df = check_positive(y, "y"), check_positive(df, "df")
    nc = check_nonnegative(nc, "nc")
    return _log_ncx2_pdf(y, df, nc, n_terms)


def _log_ncx2_pdf(y: ArrayLike, df: ArrayLike, nc: ArrayLike, n_terms: int = 201) -> Array:
    # The body of `log_ncx2_pdf` (the CIR transition density calls it on checked arguments).
    y, df, nc = jnp.asarray(y), jnp.asarray(df), jnp.asarray(nc)
    dtype = jnp.result_type(y, df, nc, 1.0)
    y, df, nc = y.astype(dtype), df.astype(dtype), nc.astype(dtype)
    half = n_terms // 2
    k = 0.5 * df
    lam = 0.5 * nc
    ys, ks, lams = jax.lax.stop_gradient((y, k, lam))
    jstar = 0.5 * (-ks + jnp.sqrt(ks**2 + 2.0 * lams * ys))
    jstar = jnp.maximum(jstar, 0.0)
    width = 1.0 / jnp.sqrt(1.0 / (jstar + 1.0) + 1.0 / (jstar + ks + 1.0))
    stride = jnp.maximum(1.0, jnp.ceil(12.0 * width / half))
    start = jnp.maximum(0.0, jnp.floor(jstar) - half * stride)
    j = start + stride * jnp.arange(n_terms, dtype=dtype)
    log_pois = j * jnp.log(lam) - lam - gammaln(j + 1.0)
    log_terms = log_pois + _log_chi2_pdf(jnp.broadcast_to(y, j.shape), df + 2.0 * j)
    return jax.nn.logsumexp(log_terms) + jnp.log(stride)
