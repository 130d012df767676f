r"""Synthetic super-resolution degradations and RGB patches of the offline photographs.

The degradation model (a small, synthetic stand-in for Real-ESRGAN's pipeline) maps an HR image
$x$ of shape (H, W, C) to an LR image of shape (H/s, W/s, C):

$$ y = \operatorname{clip}\big(A_s(k_{\sigma_b} * x) + \sigma_n \xi\big), \qquad
   \sigma_b \sim U[b_0, b_1],\ \sigma_n \sim U[n_0, n_1],\ \xi \sim N(0, I), $$

with $k_\sigma$ a normalised Gaussian blur (separable, reflect padding) and $A_s$ the area
(block-mean) downsampling by the integer factor $s$. Its noise-free mean for a fixed blur,
$x \mapsto A_s(k_\sigma * x)$, is `degrade_mean` (the operator of LR-consistency metrics).

Images are single examples (H, W, C) or (H, W); batch with `jax.vmap` (over keys and images).
"""

import functools as ft
import math
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ..core.checks import check_nonnegative, check_positive_int
from ._common import require_module
from ._images import load_sample_images

UPSAMPLE_METHODS = ("bicubic", "bilinear", "nearest")

# (low, high) of Python numbers; ints are welcome ((0, 0) switches a stage off).
Range = Sequence[float | int]

# Held-out photographs: the test split never shares an image with the train split.
SR_IMAGES: dict[str, tuple[str, ...]] = {
    "train": ("china", "astronaut", "chelsea", "rocket", "brick", "grass"),
    "test": ("flower", "coffee", "gravel"),
}


# ----------------------------------------------------------------------------------------------
# argument checks (trace time)


def _check_image(name: str, x: Array) -> Array:
    x = jnp.asarray(x)
    if x.ndim not in (2, 3):
        raise ValueError(f"`{name}` must have shape (H, W, C) or (H, W), got shape {x.shape}.")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"`{name}` must be a floating array, got dtype {x.dtype}.")
    return x


def _check_scale(scale: int) -> int:
    if isinstance(scale, bool) or not isinstance(scale, int | np.integer):
        raise TypeError(
            f"`scale` must be a Python int >= 1, got {scale!r} ({type(scale).__name__})."
        )
    if scale < 1:
        raise ValueError(f"`scale` must be an int >= 1, got {scale}.")
    return int(scale)


def _check_divisible(name: str, shape: tuple[int, ...], scale: int) -> None:
    if shape[0] % scale or shape[1] % scale:
        raise ValueError(
            f"H and W of `{name}` must be divisible by `scale`={scale}, got H x W = "
            f"{shape[0]} x {shape[1]}."
        )


def _pair(name: str, value: Range) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"`{name}` must be a pair of Python numbers or None, got {value!r}."
        ) from err
    return lo, hi


def _check_range(name: str, value: Range) -> tuple[float, float]:
    lo, hi = _pair(name, value)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo < 0 or hi < lo:
        raise ValueError(f"`{name}` must satisfy 0 <= low <= high (finite), got {(lo, hi)}.")
    return lo, hi


def _check_sigma(blur_sigma: float | int, name: str = "blur_sigma") -> float:
    try:
        sigma = float(blur_sigma)
    except (TypeError, jax.errors.ConcretizationTypeError) as err:
        raise TypeError(
            f"`{name}` must be a concrete Python number (it fixes the kernel size), "
            f"got {blur_sigma!r}."
        ) from err
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"`{name}` must be a finite number >= 0, got {sigma}.")
    return sigma


# ----------------------------------------------------------------------------------------------
# operators


def _reflect_index(n: int, radius: int) -> np.ndarray:
    """(n, 2r+1) source indices along a length-n axis under reflect padding (``c b | a b c``)."""
    j = np.arange(n)[:, None] + np.arange(-radius, radius + 1)[None, :]
    j = np.where(j < 0, -j, j)
    return np.where(j > n - 1, 2 * (n - 1) - j, j)


def blur_radius(sigma_max: float | int, shape: tuple[int, ...]) -> int:
    """Half-width of the blur kernel: ``ceil(3 sigma_max)``, at least 1, at most ``min(H, W) - 1``.

    The cap keeps reflect padding well defined on tiny images (e.g. 8 x 8 digits); the kernel is
    renormalised after truncation, so it always sums to 1.
    """
    return max(1, min(math.ceil(3.0 * sigma_max), min(shape[0], shape[1]) - 1))


def gaussian_kernel_1d(sigma: Float[Array, ""], radius: int) -> Float[Array, " K"]:
    r"""Normalised 1-D Gaussian kernel $k_i \propto e^{-i^2 / 2\sigma^2}$, $|i| \le$ ``radius``.

    ``sigma`` may be traced (it is random in `degrade`); ``sigma = 0`` gives the identity kernel
    (a unit impulse) exactly, not 0/0.

    Raises:
        ValueError: for a negative ``radius``; ``sigma`` must be finite and >= 0 (a value check).
    """
    radius = check_positive_int(radius, "radius", minimum=0)
    return _gaussian_kernel_1d(check_nonnegative(sigma, "sigma"), radius)


def _gaussian_kernel_1d(sigma: Array, radius: int) -> Array:
    # The body of `gaussian_kernel_1d` without its checks (`degrade` draws a valid sigma).
    sigma = jnp.asarray(sigma)
    offsets = jnp.arange(-radius, radius + 1, dtype=sigma.dtype)
    safe = jnp.where(sigma > 0, sigma, jnp.ones_like(sigma))
    weights = jnp.exp(-(offsets**2) / (2.0 * safe**2))
    weights = weights / jnp.sum(weights)
    impulse = (offsets == 0).astype(sigma.dtype)
    return jnp.where(sigma > 0, weights, impulse)


def _blur(x: Float[Array, "H W C"], sigma: Float[Array, ""], radius: int) -> Float[Array, "H W C"]:
    """Separable Gaussian blur with reflect padding, as two gathers and two weighted sums."""
    kernel = _gaussian_kernel_1d(jnp.asarray(sigma, x.dtype), radius)
    rows = _reflect_index(x.shape[0], radius)
    cols = _reflect_index(x.shape[1], radius)
    x = jnp.einsum("k,hkwc->hwc", kernel, x[rows])
    return jnp.einsum("k,hwkc->hwc", kernel, x[:, cols])


def gaussian_blur(
    x: Float[Array, "H W *C"], sigma: float | int, *, radius: int | None = None
) -> Float[Array, "H W *C"]:
    """Gaussian blur of one image with a normalised, truncated, separable kernel.

    Args:
        x: image (H, W, C) or (H, W).
        sigma: blur sd in pixels (>= 0; 0 returns ``x`` exactly).
        radius: kernel half-width; default `blur_radius` (``ceil(3 sigma)``, capped by the image).

    Returns:
        The blurred image, same shape and dtype; reflect padding (``d c b | a b c d | c b a``).
    """
    x = _check_image("x", x)
    sigma = _check_sigma(sigma, "sigma")
    if sigma == 0:
        return x
    if radius is None:
        radius = blur_radius(sigma, x.shape)
    if not 1 <= radius <= min(x.shape[:2]) - 1:
        raise ValueError(f"`radius` must be in [1, min(H, W) - 1], got {radius} for {x.shape}.")
    grey = x.ndim == 2
    out = _blur(x[..., None] if grey else x, jnp.asarray(sigma, x.dtype), radius)
    return out[..., 0] if grey else out


def area_downsample(x: Float[Array, "H W *C"], scale: int) -> Float[Array, "h w *C"]:
    r"""Area (block-mean) downsampling: $y_{ij} = s^{-2} \sum_{a, b < s} x_{si + a,\, sj + b}$.

    Args:
        x: image (H, W, C) or (H, W), H and W divisible by ``scale``.
        scale: integer factor s >= 1.

    Returns:
        (H/s, W/s, C) or (H/s, W/s). It is the adjoint-up-to-s² of nearest upsampling and its
        left inverse: ``area_downsample(upsample(y, ..., "nearest"), s) == y``.
    """
    x = _check_image("x", x)
    scale = _check_scale(scale)
    _check_divisible("x", x.shape, scale)
    h, w = x.shape[0] // scale, x.shape[1] // scale
    return jnp.mean(x.reshape((h, scale, w, scale) + x.shape[2:]), axis=(1, 3))


def degrade_mean(
    hr: Float[Array, "H W *C"], *, scale: int, blur_sigma: float | int = 0.0
) -> Float[Array, "h w *C"]:
    """The deterministic part of `degrade` at a fixed blur: ``area_downsample(blur(hr), scale)``.

    No noise and no clipping: this is the forward operator for LR-consistency checks
    (`jaxgen.metrics.lr_consistency_psnr` uses its blur-free default, ``blur_sigma=0``).

    Args:
        hr: image (H, W, C) or (H, W), H and W divisible by ``scale``.
        scale: integer factor >= 1.
        blur_sigma: Gaussian blur sd in pixels, a concrete number >= 0 (0 = no blur, exactly).
    """
    hr = _check_image("hr", hr)
    scale = _check_scale(scale)
    _check_divisible("hr", hr.shape, scale)
    return area_downsample(gaussian_blur(hr, _check_sigma(blur_sigma)), scale)


def degrade(
    key: PRNGKeyArray,
    hr: Float[Array, "H W *C"],
    *,
    scale: int,
    blur_range: Range = (0.2, 1.0),
    noise_range: Range = (0.0, 0.05),
    clip: Range | None = (-1.0, 1.0),
) -> Float[Array, "h w *C"]:
    r"""Random HR -> LR degradation: blur, area downsample, additive noise, clip.

    $y = \operatorname{clip}(A_s(k_{\sigma_b} * x) + \sigma_n \xi)$ with
    $\sigma_b \sim U[$``blur_range``$]$, $\sigma_n \sim U[$``noise_range``$]$, $\xi \sim N(0, I)$
    (one $\sigma_b$ and one $\sigma_n$ per image). The blur kernel is a normalised Gaussian of
    half-width `blur_radius` ``(blur_range[1])`` with reflect padding; ``blur_range=(0, 0)`` and
    ``noise_range=(0, 0)`` switch the stage off exactly (an offline substitute, a jaxgen choice).

    Args:
        key: PRNG key (split into blur sd, noise sd and noise).
        hr: HR image (H, W, C) or (H, W), float, H and W divisible by ``scale``.
        scale: integer downsampling factor >= 1.
        blur_range: (low, high) blur sd in pixels, 0 <= low <= high.
        noise_range: (low, high) noise sd in image units, 0 <= low <= high.
        clip: (low, high) value range of the output, or ``None`` for no clipping.

    Returns:
        LR image (H/scale, W/scale, C) (or (H/scale, W/scale)), dtype of ``hr``.

    Raises:
        ValueError: wrong rank, H or W not divisible by ``scale``, ``scale < 1``, a negative or
            reversed range, ``clip`` low >= high; at run time (`eqx.error_if`) a non-finite ``hr``.
        TypeError: non-int ``scale``, non-float ``hr``, malformed ranges.
    """
    hr = _check_image("hr", hr)
    scale = _check_scale(scale)
    _check_divisible("hr", hr.shape, scale)
    b_lo, b_hi = _check_range("blur_range", blur_range)
    n_lo, n_hi = _check_range("noise_range", noise_range)
    if clip is not None:
        c_lo, c_hi = _pair("clip", clip)
        if not c_lo < c_hi:
            raise ValueError(f"`clip` must be (low, high) with low < high, got {clip}.")
    hr = eqx.error_if(hr, ~jnp.all(jnp.isfinite(hr)), "`hr` contains NaN or inf.")
    key_blur, key_sd, key_noise = jr.split(key, 3)
    grey = hr.ndim == 2
    x = hr[..., None] if grey else hr
    if b_hi > 0:
        sigma_b = jr.uniform(key_blur, (), x.dtype, b_lo, b_hi)
        x = _blur(x, sigma_b, blur_radius(b_hi, x.shape))
    x = area_downsample(x, scale)
    if n_hi > 0:
        sigma_n = jr.uniform(key_sd, (), x.dtype, n_lo, n_hi)
        x = x + sigma_n * jr.normal(key_noise, x.shape, x.dtype)
    if clip is not None:
        x = jnp.clip(x, c_lo, c_hi)
    return x[..., 0] if grey else x


def upsample(
    lr: Float[Array, "h w *C"], shape: Sequence[int], method: str = "bicubic"
) -> Float[Array, "H W *C"]:
    """Resize an LR image up to ``shape`` with `jax.image.resize`.

    Args:
        lr: image (h, w, C) or (h, w).
        shape: the output (H, W) or the full output shape (H, W, C); H >= h and W >= w.
        method: ``"bicubic"`` (Keys cubic, a = -0.5), ``"bilinear"`` or ``"nearest"``. For integer
            factors ``"nearest"`` is exact pixel replication, so `area_downsample` undoes it.

    Returns:
        The upsampled image, shape ``(H, W) + lr.shape[2:]``, dtype of ``lr``.
    """
    lr = _check_image("lr", lr)
    if lr.shape[0] == 0 or lr.shape[1] == 0:
        raise ValueError(f"`lr` must have at least one pixel, got shape {lr.shape}.")
    if method not in UPSAMPLE_METHODS:
        raise ValueError(f"`method` must be one of {UPSAMPLE_METHODS}, got {method!r}.")
    shape = tuple(int(s) for s in shape)
    if len(shape) == lr.ndim and shape[2:] != lr.shape[2:]:
        raise ValueError(f"`shape` {shape} changes the channels of `lr` {lr.shape}.")
    if len(shape) not in (2, lr.ndim):
        raise ValueError(f"`shape` must be (H, W) or (H, W, C) for `lr` {lr.shape}, got {shape}.")
    if shape[0] < lr.shape[0] or shape[1] < lr.shape[1]:
        raise ValueError(f"`shape` {shape[:2]} must be at least the LR size {lr.shape[:2]}.")
    return jax.image.resize(lr, shape[:2] + lr.shape[2:], method)


# ----------------------------------------------------------------------------------------------
# offline RGB patches


@ft.cache  # decoded once per process (~10 MB for all nine photographs)
def _load_rgb(name: str) -> np.ndarray:
    if name in ("china", "flower"):
        image = load_sample_images()[("china", "flower").index(name)]
    else:
        data = require_module("skimage.data", pip_name="scikit-image")
        image = np.asarray(getattr(data, name)())
    if image.ndim == 2:  # brick, grass, gravel: grey, replicated to three channels
        image = np.repeat(image[..., None], 3, axis=-1)
    image = np.ascontiguousarray(image[..., :3])
    image.flags.writeable = False
    return image


def load_sr_patches(
    size: int = 64,
    *,
    split: str = "train",
    max_patches: int | None = None,
    stride: int | None = None,
    seed: int = 0,
    dtype: type = np.float32,
) -> np.ndarray:
    """RGB HR patches of the offline photographs for super-resolution, scaled to [-1, 1].

    Sources (no download): scikit-learn's ``china``/``flower`` and scikit-image's ``astronaut``,
    ``chelsea``, ``coffee``, ``rocket``, ``brick``, ``grass``, ``gravel`` (the last three are
    grey, replicated to RGB). Whole images are held out: ``split="train"`` uses
    ``SR_IMAGES["train"]``, ``split="test"`` ``SR_IMAGES["test"]``. Patches are cut on a regular
    grid with step ``stride`` (default ``size``: non-overlapping) and shuffled by ``seed``.

    Args:
        size: patch side in pixels (>= 1).
        split: ``"train"`` or ``"test"``.
        max_patches: keep the first ``max_patches`` after shuffling (``None`` = all).
        stride: grid step (>= 1).
        seed: numpy seed of the shuffle.
        dtype: output float dtype.

    Returns:
        Array (N, size, size, 3) of ``dtype`` with values ``uint8 / 127.5 - 1``.

    Raises:
        MissingDataError: scikit-learn, pillow or scikit-image is not installed.
    """
    if split not in SR_IMAGES:
        raise ValueError(f"`split` must be one of {tuple(SR_IMAGES)}, got {split!r}.")
    if not isinstance(size, int | np.integer) or size < 1:
        raise ValueError(f"`size` must be an int >= 1, got {size!r}.")
    stride = size if stride is None else stride
    if not isinstance(stride, int | np.integer) or stride < 1:
        raise ValueError(f"`stride` must be an int >= 1, got {stride!r}.")
    if max_patches is not None and max_patches < 1:
        raise ValueError(f"`max_patches` must be >= 1 or None, got {max_patches}.")
    patches = []
    for name in SR_IMAGES[split]:
        image = _load_rgb(name)
        for top in range(0, image.shape[0] - size + 1, stride):
            for left in range(0, image.shape[1] - size + 1, stride):
                patches.append(image[top : top + size, left : left + size])
    if not patches:
        raise ValueError(f"`size`={size} is larger than every {split} image.")
    out = np.stack(patches)
    out = out[np.random.default_rng(seed).permutation(len(out))][:max_patches]
    return (out.astype(dtype) / dtype(127.5) - dtype(1.0)).astype(dtype)


__all__ = [
    "SR_IMAGES",
    "UPSAMPLE_METHODS",
    "area_downsample",
    "blur_radius",
    "degrade",
    "degrade_mean",
    "gaussian_blur",
    "gaussian_kernel_1d",
    "load_sr_patches",
    "upsample",
]
