"""Image metrics vs scikit-image (float64, 1e-6; splitmeanflow_sr check 8) and piq (PSNR only)."""

import functools as ft

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.data import area_downsample, degrade_mean, upsample
from jaxgen.metrics import lr_consistency_psnr, psnr, sample_diversity, ssim

# (shape, data_range, win): grey and colour, non-square, the smallest and the default window.
CASES = [((9, 12), 1.0, 7), ((10, 8, 3), 2.0, 7), ((16, 11, 2), 255.0, 3)]

_ssim = jax.jit(ssim, static_argnums=3)
_psnr = jax.jit(psnr)


def _pair(key, shape, data_range):
    """An image and a noisy, slightly rescaled copy (so SSIM is well inside (0, 1))."""
    kx, ky = jr.split(key)
    x = jr.uniform(kx, shape, jnp.float64, 0.0, data_range)
    y = 0.8 * x + 0.1 * data_range * (1.0 + jr.normal(ky, shape, jnp.float64))
    return x, y


@pytest.mark.parametrize("shape, data_range, win", CASES)
def test_psnr_ssim_equal_scikit_image(shape, data_range, win):
    metrics = pytest.importorskip("skimage.metrics")
    x, y = _pair(jr.key(sum(shape)), shape, data_range)
    xn, yn = np.asarray(x), np.asarray(y)
    channel = {} if len(shape) == 2 else {"channel_axis": -1}
    ref_ssim = metrics.structural_similarity(xn, yn, data_range=data_range, win_size=win, **channel)
    ref_psnr = metrics.peak_signal_noise_ratio(xn, yn, data_range=data_range)
    np.testing.assert_allclose(_ssim(x, y, data_range, win), ref_ssim, rtol=0, atol=1e-6)
    np.testing.assert_allclose(_psnr(x, y, data_range), ref_psnr, rtol=0, atol=1e-6)
    assert abs(float(_ssim(x, y, data_range, win)) - ref_ssim) < 1e-12  # in fact to round-off


@pytest.mark.slow  # importing torch costs ~4 CPU-s; the scikit-image test above is the fast twin
def test_psnr_equals_piq_when_mse_is_not_tiny():
    """piq.psnr is 10 log10(1 / (MSE / R^2 + 1e-8)) on (N, C, H, W) in [0, R]: equal to ours
    within 1e-6 dB as long as MSE / R^2 >= 0.05 (the eps shifts it by 4.3e-8 R^2 / MSE dB).
    piq.ssim is not compared: 11 x 11 Gaussian window, population covariances."""
    piq = pytest.importorskip("piq")
    torch = pytest.importorskip("torch")
    x = jr.uniform(jr.key(3), (2, 10, 8, 3), jnp.float64)
    y = jr.uniform(jr.key(4), (2, 10, 8, 3), jnp.float64)
    ours = jax.vmap(psnr, (0, 0, None))(x, y, 1.0)
    to_torch = lambda a: torch.from_numpy(np.asarray(a).transpose(0, 3, 1, 2).copy())  # noqa: E731
    ref = piq.psnr(to_torch(x), to_torch(y), data_range=1.0, reduction="none").numpy()
    assert np.all(np.mean((np.asarray(x) - np.asarray(y)) ** 2, axis=(1, 2, 3)) > 0.05)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-6)


def test_identical_images_eager_jit_vmap_loop():
    x, y = _pair(jr.key(5), (3, 8, 8, 3), 2.0)
    assert psnr(x[0], x[0], 2.0) == jnp.inf  # documented: +inf, as scikit-image
    np.testing.assert_allclose(_ssim(x[0], x[0], 2.0, 7), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ssim(x[0], y[0], 2.0), _ssim(x[0], y[0], 2.0, 7), rtol=1e-12)
    batched = jax.jit(jax.vmap(lambda a, b: (psnr(a, b, 2.0), ssim(a, b, 2.0))))(x, y)
    loop = [(_psnr(a, b, 2.0), _ssim(a, b, 2.0, 7)) for a, b in zip(x, y, strict=True)]
    np.testing.assert_allclose(batched, np.asarray(loop).T, rtol=1e-12)
    grads = jax.jit(jax.grad(lambda a: ssim(a, y[0], 2.0) + psnr(a, y[0], 2.0)))(x[0])
    assert grads.shape == x[0].shape and bool(jnp.all(jnp.isfinite(grads)))


@jax.jit
def _lr_psnrs(sr, lr):
    blurred = ft.partial(degrade_mean, scale=2, blur_sigma=0.5)
    return (
        lr_consistency_psnr(sr, lr, scale=2),
        psnr(area_downsample(sr, 2), lr, 2.0),
        lr_consistency_psnr(upsample(lr, (8, 6), "nearest"), lr, scale=2),
        lr_consistency_psnr(sr, lr, scale=2, degrade=blurred),
        psnr(blurred(sr), lr, 2.0),
    )


def test_lr_consistency_psnr():
    sr, lr = _pair(jr.key(6), (8, 6, 3), 1.0)[0], jr.uniform(jr.key(7), (4, 3, 3))
    default, by_hand, exact, blurred, blurred_by_hand = _lr_psnrs(sr, lr)
    np.testing.assert_allclose(default, by_hand, rtol=1e-12)  # default operator: the area mean
    assert exact == jnp.inf  # the nearest upsampling of lr is exactly consistent with it
    np.testing.assert_allclose(blurred, blurred_by_hand, rtol=1e-12)


def test_sample_diversity():
    x = jr.normal(jr.key(8), (5, 4, 4, 3)) * 0.1 + 0.3
    repeated = jnp.broadcast_to(x[:1], x.shape)
    assert sample_diversity(repeated) == 0.0  # exactly, not round-off
    assert sample_diversity(x[:1]) == 0.0
    ref = np.asarray(x).std(axis=0, ddof=0).mean()
    np.testing.assert_allclose(sample_diversity(x), ref, rtol=1e-12)


IMG = jnp.zeros((8, 8, 3))
BAD = [
    (lambda: psnr(IMG, IMG, 0.0), ValueError, "`data_range` must be > 0"),
    (lambda: ssim(IMG, IMG, -1.0), ValueError, "`data_range` must be > 0"),
    (lambda: psnr(IMG, IMG[:4], 2.0), (ValueError, TypeError), "same shape|H"),
    (lambda: psnr(jnp.zeros((2, 8, 8, 3)), jnp.zeros((2, 8, 8, 3)), 2.0), ValueError, "jax.vmap"),
    (lambda: ssim(IMG, IMG, 2.0, 6), ValueError, "`win` must be an odd int >= 3"),
    (lambda: ssim(IMG, IMG, 2.0, 1), ValueError, "`win` must be an odd int >= 3"),
    (lambda: ssim(IMG, IMG, 2.0, 9), ValueError, "larger than the image"),
    (lambda: lr_consistency_psnr(IMG, IMG[:3, :3], scale=2), ValueError, "do not match `scale`"),
    (lambda: lr_consistency_psnr(IMG[:7], IMG[:3, :3], scale=2), ValueError, "divisible"),
    (lambda: sample_diversity(jnp.zeros((0, 3))), ValueError, "K >= 1"),
]


@pytest.mark.parametrize("call, exc, match", BAD)
def test_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_traced_data_range_is_checked_at_run_time():
    with pytest.raises(Exception, match="`data_range` must be > 0"):
        _psnr(IMG, IMG + 1.0, jnp.asarray(-2.0))
