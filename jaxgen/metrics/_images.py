r"""Full-reference image metrics (PSNR, SSIM), LR consistency and sample diversity.

Every function takes ONE image (H, W) or (H, W, C) (or one set of samples) and returns a scalar;
batch with `jax.vmap`. Conventions follow scikit-image (``skimage.metrics``) so that results can
be compared to it to round-off:

- `psnr` = ``peak_signal_noise_ratio(x, y, data_range=...)``;
- `ssim` = ``structural_similarity(x, y, data_range=..., win_size=win, channel_axis=-1)`` with
  its defaults (uniform window, K1 = 0.01, K2 = 0.03, sample covariances, mean over the valid
  region, then over channels).
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float


def _check_pair(x: Array, y: Array, x_name: str = "x", y_name: str = "y") -> tuple[Array, Array]:
    x, y = jnp.asarray(x), jnp.asarray(y)
    if x.ndim not in (2, 3):
        raise ValueError(
            f"`{x_name}` must be one image (H, W) or (H, W, C) (use jax.vmap for batches), "
            f"got shape {x.shape}."
        )
    if x.shape != y.shape:
        raise ValueError(
            f"`{x_name}` and `{y_name}` must have the same shape, got {x.shape} and {y.shape}."
        )
    for name, a in ((x_name, x), (y_name, y)):
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"`{name}` must be a floating array, got dtype {a.dtype}.")
    return x, y


def _check_data_range(data_range: ArrayLike, like: Array) -> Array:
    if isinstance(data_range, int | float) and not data_range > 0:
        raise ValueError(f"`data_range` must be > 0, got {data_range}.")
    dr = jnp.asarray(data_range, dtype=like.dtype)
    if dr.ndim != 0:
        raise ValueError(f"`data_range` must be a scalar, got shape {dr.shape}.")
    return eqx.error_if(dr, ~(dr > 0), "`data_range` must be > 0.")


def psnr(
    x: Float[Array, "H W *C"], y: Float[Array, "H W *C"], data_range: ArrayLike
) -> Float[Array, ""]:
    r"""Peak signal-to-noise ratio in dB: $10 \log_{10}(R^2 / \mathrm{MSE}(x, y))$.

    Symmetric in ``x`` and ``y``; equals scikit-image's ``peak_signal_noise_ratio``.

    Args:
        x: image (H, W) or (H, W, C).
        y: image of the same shape.
        data_range: R, the span of possible values (2 for images in [-1, 1]); > 0.

    Returns:
        Scalar PSNR. Identical images give ``+inf`` (MSE = 0), as in scikit-image.
    """
    x, y = _check_pair(x, y)
    dr = _check_data_range(data_range, x)
    mse = jnp.mean((x - y) ** 2)
    return 10.0 * jnp.log10(dr**2 / mse)


def _box_mean(a: Array, win: int) -> Array:
    """Mean over every full ``win`` x ``win`` window, per channel: shape (H-w+1, W-w+1, C)."""
    total = jax.lax.reduce_window(a, 0.0, jax.lax.add, (win, win, 1), (1, 1, 1), "VALID")
    return total / win**2


def ssim(
    x: Float[Array, "H W *C"],
    y: Float[Array, "H W *C"],
    data_range: ArrayLike,
    win: int = 7,
    *,
    k1: float = 0.01,
    k2: float = 0.03,
) -> Float[Array, ""]:
    r"""Mean structural similarity (Wang et al., 2004) with scikit-image's default conventions.

    For every ``win`` x ``win`` window (uniform weights) fully inside the image, with local means
    $\mu$, sample variances/covariance $\sigma$ (factor $N/(N-1)$, $N$ = ``win``²),
    $C_1 = (k_1 R)^2$, $C_2 = (k_2 R)^2$:

    $$ S = \frac{(2\mu_x\mu_y + C_1)(2\sigma_{xy} + C_2)}
               {(\mu_x^2 + \mu_y^2 + C_1)(\sigma_x^2 + \sigma_y^2 + C_2)}, $$

    averaged over windows (scikit-image crops ``(win - 1) // 2`` pixels per side, which keeps
    exactly the full windows) and then over channels. Equal to
    ``skimage.metrics.structural_similarity(x, y, data_range=R, win_size=win, channel_axis=-1)``
    (no ``channel_axis`` for (H, W)). `piq.ssim` differs (11 x 11 Gaussian window, population
    covariances, downsampling of large images), so it is not a reference for this function.

    Args:
        x: image (H, W) or (H, W, C).
        y: image of the same shape.
        data_range: R, the span of possible values; > 0.
        win: odd window side, 3 <= win <= min(H, W).
        k1: luminance constant.
        k2: contrast constant.

    Returns:
        Scalar mean SSIM (1 for identical images).

    References:
        Wang, Bovik, Sheikh & Simoncelli, "Image quality assessment: from error visibility to
        structural similarity", IEEE TIP 13(4), 2004.
    """
    x, y = _check_pair(x, y)
    if isinstance(win, bool) or not isinstance(win, int) or win < 3 or win % 2 == 0:
        raise ValueError(f"`win` must be an odd int >= 3, got {win!r}.")
    if win > min(x.shape[:2]):
        raise ValueError(f"`win`={win} is larger than the image (H, W) = {x.shape[:2]}.")
    dr = _check_data_range(data_range, x)
    if x.ndim == 2:
        x, y = x[..., None], y[..., None]
    n = win**2
    cov_norm = n / (n - 1.0)
    mx, my = _box_mean(x, win), _box_mean(y, win)
    vx = cov_norm * (_box_mean(x * x, win) - mx * mx)
    vy = cov_norm * (_box_mean(y * y, win) - my * my)
    vxy = cov_norm * (_box_mean(x * y, win) - mx * my)
    c1, c2 = (k1 * dr) ** 2, (k2 * dr) ** 2
    s = ((2 * mx * my + c1) * (2 * vxy + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
    return jnp.mean(jnp.mean(s, axis=(0, 1)))


def _area_mean(x: Array, scale: int) -> Array:
    h, w = x.shape[0] // scale, x.shape[1] // scale
    return jnp.mean(x.reshape((h, scale, w, scale) + x.shape[2:]), axis=(1, 3))


def lr_consistency_psnr(
    sr: Float[Array, "H W *C"],
    lr: Float[Array, "h w *C"],
    *,
    scale: int,
    data_range: ArrayLike = 2.0,
    degrade: Callable[[Array], Array] | None = None,
) -> Float[Array, ""]:
    r"""PSNR between the LR image and the deterministic degradation of the SR output.

    $\mathrm{PSNR}(D(\hat x), y)$ where $D$ defaults to blur-free area downsampling by ``scale``
    (block means; the same as ``jaxgen.data.degrade_mean(sr, scale=scale)``). High values mean
    the SR image is consistent with its input; pass ``degrade=functools.partial(
    jaxgen.data.degrade_mean, scale=s, blur_sigma=b)`` to include a known blur.

    Args:
        sr: SR image (H, W) or (H, W, C), H and W divisible by ``scale``.
        lr: the LR image (H/scale, W/scale[, C]).
        scale: integer factor >= 1.
        data_range: R of `psnr` (2 for [-1, 1] images).
        degrade: optional deterministic map from ``sr`` to an image of ``lr``'s shape.

    Returns:
        Scalar PSNR in dB (``+inf`` if exactly consistent).
    """
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise ValueError(f"`scale` must be an int >= 1, got {scale!r}.")
    sr, lr = jnp.asarray(sr), jnp.asarray(lr)
    if sr.ndim not in (2, 3):
        raise ValueError(f"`sr` must be one image (H, W) or (H, W, C), got shape {sr.shape}.")
    expected = (sr.shape[0] // scale, sr.shape[1] // scale) + sr.shape[2:]
    if sr.shape[0] % scale or sr.shape[1] % scale or lr.shape != expected:
        raise ValueError(
            f"`sr` {sr.shape} and `lr` {lr.shape} do not match `scale`={scale}: expected H and W "
            f"divisible by scale and lr of shape {expected}."
        )
    down = _area_mean(sr, scale) if degrade is None else degrade(sr)
    return psnr(down, lr, data_range)


def sample_diversity(samples: Float[Array, "K ..."]) -> Float[Array, ""]:
    r"""Mean over coordinates of the standard deviation across K samples (ddof = 0).

    $\frac{1}{P}\sum_p \sqrt{\frac1K \sum_k (x_{kp} - \bar x_p)^2}$ for samples (K, ...) drawn
    with K different seeds for one input. Deviations are taken from the first sample before the
    std is formed, so K identical samples give exactly 0 (no round-off from the mean).

    Args:
        samples: array (K, ...) with K >= 1.

    Returns:
        Scalar, >= 0.
    """
    samples = jnp.asarray(samples)
    if samples.ndim < 1 or samples.shape[0] < 1:
        raise ValueError(f"`samples` must have shape (K, ...) with K >= 1, got {samples.shape}.")
    if not jnp.issubdtype(samples.dtype, jnp.floating):
        raise TypeError(f"`samples` must be a floating array, got dtype {samples.dtype}.")
    centred = samples - samples[:1]
    return jnp.mean(jnp.std(centred, axis=0))


__all__ = ["lr_consistency_psnr", "psnr", "sample_diversity", "ssim"]
