"""Kernel Gram matrices and the unbiased MMD U-statistic, shared by metrics and deconvolution.

Translation-invariant kernels with a set of bandwidths h_1..h_H:

- ``"gaussian"``: k_h(a, b) = exp(-||a - b||_2^2 / (2 h^2));
- ``"laplace"``: k_h(a, b) = exp(-||a - b||_1 / h) (the L1 Laplace kernel).

`kernel_gram` sums the H kernels; since the U-statistic is linear in the kernel, the mean over
bandwidths of H U-statistics is the U-statistic of the summed Gram divided by H.
"""

import jax.numpy as jnp
from jaxtyping import Array, Float

from .checks import check_floating, check_positive

KERNELS = ("gaussian", "laplace")


def check_kernel(kernel: str) -> str:
    """Return ``kernel`` or raise a `ValueError` listing the known names."""
    if kernel not in KERNELS:
        raise ValueError(f"`kernel` must be one of {KERNELS}, got {kernel!r}.")
    return kernel


def pairwise_sq_dists(x: Float[Array, "n dim"], y: Float[Array, "m dim"]) -> Float[Array, "n m"]:
    """Squared Euclidean distances ||x_i - y_j||^2 (Gram expansion, round-off clipped at 0)."""
    sq = jnp.sum(x**2, -1)[:, None] + jnp.sum(y**2, -1)[None, :] - 2.0 * x @ y.T
    return jnp.clip(sq, 0.0)


def kernel_gram(
    x: Float[Array, "n dim"],
    y: Float[Array, "m dim"],
    bandwidths: Float[Array, " H"],
    *,
    kernel: str = "gaussian",
) -> Float[Array, "n m"]:
    r"""Gram matrix $\sum_h k_h(x_i, y_j)$ of the summed kernel over the bandwidths.

    Args:
        x: points (n, dim).
        y: points (m, dim).
        bandwidths: kernel length scales h (H,), in the unit of the data.
        kernel: ``"gaussian"`` (squared L2) or ``"laplace"`` (L1 distance).

    Returns:
        The (n, m) Gram matrix, summed (not averaged) over the H bandwidths.
    """
    check_kernel(kernel)
    x, y = check_floating(x, "x"), check_floating(y, "y")
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"`x` and `y` must be (n, dim) and (m, dim), got {x.shape}, {y.shape}.")
    h = jnp.asarray(bandwidths)
    if h.ndim != 1 or h.shape[0] < 1:
        raise ValueError(f"`bandwidths` must be a non-empty 1-D array, got shape {h.shape}.")
    # Cast after the check: integer data must not truncate 0.5 to 0.
    h = check_positive(h.astype(x.dtype), "bandwidths")
    if kernel == "gaussian":
        sq = pairwise_sq_dists(x, y)
        return jnp.sum(jnp.exp(-sq[..., None] / (2.0 * h**2)[None, None, :]), -1)
    l1 = jnp.sum(jnp.abs(x[:, None, :] - y[None, :, :]), -1)
    return jnp.sum(jnp.exp(-l1[..., None] / h[None, None, :]), -1)


def mmd2_from_grams(
    kxx: Float[Array, "n n"], kyy: Float[Array, "m m"], kxy: Float[Array, "n m"]
) -> Float[Array, ""]:
    r"""Unbiased MMD² U-statistic from the three Gram matrices (diagonals of kxx, kyy dropped).

    $\frac{1}{n(n-1)}\sum_{i\neq i'} k(x_i,x_{i'}) + \frac{1}{m(m-1)}\sum_{j\neq j'} k(y_j,y_{j'})
    - \frac{2}{nm}\sum_{i,j} k(x_i,y_j)$ (Gretton et al. 2012, eq. 3). It may be negative.
    """
    for name, k in (("kxx", kxx), ("kyy", kyy)):
        if k.ndim != 2 or k.shape[0] != k.shape[1] or k.shape[0] < 2:
            raise ValueError(
                f"`{name}` must be a square (n, n) Gram matrix, n >= 2, got {k.shape}."
            )
    n, m = kxx.shape[0], kyy.shape[0]
    if kxy.shape != (n, m):
        raise ValueError(f"`kxy` must have shape ({n}, {m}), got {kxy.shape}.")
    sum_xx = (jnp.sum(kxx) - jnp.trace(kxx)) / (n * (n - 1))
    sum_yy = (jnp.sum(kyy) - jnp.trace(kyy)) / (m * (m - 1))
    return sum_xx + sum_yy - 2.0 * jnp.mean(kxy)


def mmd2_unbiased(
    x: Float[Array, "n dim"],
    y: Float[Array, "m dim"],
    bandwidths: Float[Array, " H"],
    *,
    kernel: str = "gaussian",
) -> Float[Array, ""]:
    r"""Unbiased MMD² between samples ``x`` and ``y``, averaged over the bandwidths.

    The mean over h of the U-statistic of `mmd2_from_grams` with kernel k_h. The data-data
    term is kept (it makes the value an unbiased estimate of the population MMD², which can be
    negative at finite samples); nothing is clipped.

    Args:
        x: samples of the first law (n >= 2, dim).
        y: samples of the second law (m >= 2, dim).
        bandwidths: non-empty (H,) positive length scales.
        kernel: ``"gaussian"`` or ``"laplace"`` (see `kernel_gram`).

    Returns:
        The scalar estimate.

    References:
        Gretton, Borgwardt, Rasch, Schölkopf, Smola, A Kernel Two-Sample Test, JMLR 13 (2012).
    """
    x, y = check_floating(x, "x"), check_floating(y, "y")
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"`x` and `y` must be (n, dim) and (m, dim), got {x.shape}, {y.shape}.")
    if x.shape[0] < 2 or y.shape[0] < 2:
        raise ValueError(f"need at least 2 rows in `x` and `y`, got {x.shape[0]}, {y.shape[0]}.")
    h = jnp.asarray(bandwidths)
    if h.ndim != 1 or h.shape[0] < 1:
        raise ValueError(f"`bandwidths` must be a non-empty 1-D array, got shape {h.shape}.")
    grams = (
        kernel_gram(x, x, h, kernel=kernel),
        kernel_gram(y, y, h, kernel=kernel),
        kernel_gram(x, y, h, kernel=kernel),
    )
    return mmd2_from_grams(*grams) / h.shape[0]
