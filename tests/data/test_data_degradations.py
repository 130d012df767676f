"""SR degradations (splitmeanflow_sr §2.7, check 8): exact identities, scipy oracle, noise sd."""

import functools as ft

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import scipy.ndimage

from jaxgen.data import (
    SR_IMAGES,
    area_downsample,
    blur_radius,
    degrade,
    degrade_mean,
    gaussian_blur,
    gaussian_kernel_1d,
    load_sr_patches,
    upsample,
)

# One compiled program per configuration, shared by the tests of this module.
degrade_x2 = jax.jit(ft.partial(degrade, scale=2))
degrade_clean = jax.jit(
    ft.partial(degrade, scale=2, blur_range=(0, 0), noise_range=(0, 0), clip=None)
)


@pytest.fixture(scope="module")
def hr():
    return jr.uniform(jr.key(1), (4, 8, 6, 3), jnp.float64, -1.0, 1.0)


@jax.jit
def _check8(key, x):
    lr = degrade_clean(key, x)
    up2, up3 = upsample(lr, (8, 6), "nearest"), upsample(lr, (12, 9, 3), "nearest")
    grey = upsample(lr[..., 0], (8, 6), "nearest")
    return (
        lr,
        area_downsample(x, 2),
        up2,
        area_downsample(up2, 2),
        up3,
        area_downsample(up3, 3),
        (area_downsample(grey, 2)),
    )


def test_check8_clean_degrade_then_nearest_up_then_area_down_is_identity(hr):
    lr, down, up2, back2, up3, back3, back_grey = _check8(jr.key(0), hr[0])
    np.testing.assert_array_equal(lr, down)  # blur and noise off: exactly the area mean
    for scale, up, back in ((2, up2, back2), (3, up3, back3)):
        np.testing.assert_array_equal(up, np.repeat(np.repeat(lr, scale, 0), scale, 1))
        np.testing.assert_allclose(back, lr, rtol=0, atol=1e-12)
    np.testing.assert_allclose(back_grey, lr[..., 0], rtol=0, atol=1e-12)


@jax.jit
def _blurs(x):
    sigmas = jnp.array([0.2, 0.7, 1.0, 2.5, 0.0])
    kernels = jax.vmap(gaussian_kernel_1d, (0, None))(sigmas, blur_radius(2.5, (64, 64)))
    return kernels, gaussian_blur(jnp.full_like(x, 0.3), 0.9), gaussian_blur(x, 0.7)


def test_blur_kernel_sums_to_one_and_matches_scipy(hr):
    kernels, const, ours = _blurs(hr[0])
    np.testing.assert_allclose(kernels.sum(-1), 1.0, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(kernels[-1], np.eye(kernels.shape[1])[kernels.shape[1] // 2])
    np.testing.assert_allclose(const, 0.3, rtol=0, atol=1e-14)  # a constant image is unchanged
    np.testing.assert_array_equal(gaussian_blur(hr[0], 0), hr[0])  # sigma 0: no blur at all
    # numpy's "reflect" padding is scipy's "mirror"; same truncation radius ceil(3 * 0.7) = 3.
    ref = scipy.ndimage.gaussian_filter(
        np.asarray(hr[0]), 0.7, mode="mirror", radius=3, axes=(0, 1)
    )
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-12)


@jax.jit
def _fixed_blur(key, x):
    fixed = degrade(key, x, scale=2, blur_range=(0.6, 0.6), noise_range=(0, 0), clip=None)
    loud, clipped = degrade(key, 3.0 * x, scale=2, clip=None), degrade(key, 3.0 * x, scale=2)
    return fixed, degrade_mean(x, scale=2, blur_sigma=0.6), degrade_mean(x, scale=2), loud, clipped


def test_random_blur_equals_deterministic_mean_and_clip(hr):
    fixed, mean_blur, mean_plain, free, clipped = _fixed_blur(jr.key(4), hr[1])
    np.testing.assert_allclose(fixed, mean_blur, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(mean_plain, area_downsample(hr[1], 2))
    assert clipped.shape == (4, 3, 3) and clipped.dtype == hr.dtype
    assert jnp.max(jnp.abs(free)) > 1.0 and jnp.max(jnp.abs(clipped)) == 1.0
    np.testing.assert_allclose(jnp.clip(free, -1, 1), clipped, rtol=0, atol=1e-15)


def _noise_only(key, x, noise_range):
    return degrade(key, x, scale=1, blur_range=(0, 0), noise_range=noise_range, clip=None)


@jax.jit
def _noises(key):
    key_range, key_fixed = jr.split(key)
    ranged = jax.vmap(ft.partial(_noise_only, noise_range=(0.02, 0.06)), (0, None))(
        jr.split(key_range, 400), jnp.zeros((16, 16, 1))
    )
    return ranged, _noise_only(key_fixed, jnp.zeros((64, 64, 3)), (0.05, 0.05))


def test_noise_sd_is_right():
    """Per-image residual sd estimates sigma_n ~ U[0.02, 0.06]; its mean over 400 images is
    0.04 within 5 standard errors (sd of U: 0.04 / sqrt(12), plus the sd estimate's own)."""
    lo, hi, num, pixels = 0.02, 0.06, 400, 256
    ranged, fixed = _noises(jr.key(5))
    sd = jnp.sqrt(jnp.mean(ranged**2, axis=(1, 2, 3)))  # the mean is known to be 0
    second_moment = (hi**2 + lo * hi + lo**2) / 3
    se = np.sqrt((hi - lo) ** 2 / 12 + second_moment / (2 * pixels)) / np.sqrt(num)
    assert abs(float(jnp.mean(sd)) - (lo + hi) / 2) < 5 * se
    assert lo * 0.75 < float(jnp.min(sd)) and float(jnp.max(sd)) < hi * 1.25
    # A fixed sd 0.05 over 12288 residuals: relative SE of the sample sd ~ 1 / sqrt(2 n).
    assert abs(float(jnp.std(fixed)) / 0.05 - 1) < 5 / np.sqrt(2 * fixed.size)


def test_degrade_eager_jit_vmap_loop(hr):
    keys = jr.split(jr.key(7), hr.shape[0])
    eager = degrade(keys[0], hr[0], scale=2)
    np.testing.assert_allclose(degrade_x2(keys[0], hr[0]), eager, rtol=1e-12, atol=1e-12)
    batched = jax.jit(jax.vmap(ft.partial(degrade, scale=2)))(keys, hr)
    loop = np.stack([degrade_x2(k, x) for k, x in zip(keys, hr, strict=True)])
    np.testing.assert_allclose(batched, loop, rtol=1e-12, atol=1e-12)
    assert not np.allclose(batched[0], batched[1])
    f32 = jax.eval_shape(degrade_x2, keys[0], jax.ShapeDtypeStruct((8, 6, 3), jnp.float32))
    assert f32.dtype == jnp.float32 and f32.shape == (4, 3, 3)


@jax.jit
def _ups(lr):
    return (
        upsample(lr, (8, 6, 3)),
        upsample(jnp.full((4, 3), 0.25), (8, 6)),
        upsample(lr, (8, 6), "bilinear"),
    )


def test_upsample_bicubic_and_grey(hr):
    lr = area_downsample(hr[0], 2)
    bicubic, const, bilinear = _ups(lr)
    assert bicubic.shape == (8, 6, 3) and bicubic.dtype == lr.dtype
    np.testing.assert_allclose(const, 0.25, rtol=0, atol=1e-14)
    assert bilinear.shape == (8, 6, 3) and not np.allclose(bilinear, bicubic)


def test_load_sr_patches_hold_out_whole_images():
    pytest.importorskip("sklearn")
    pytest.importorskip("PIL")
    pytest.importorskip("skimage")
    assert not set(SR_IMAGES["train"]) & set(SR_IMAGES["test"])
    test = load_sr_patches(64, split="test")
    assert test.shape[1:] == (64, 64, 3) and test.dtype == np.float32
    assert test.min() >= -1.0 and test.max() <= 1.0 and len(test) > 100
    few = load_sr_patches(64, split="test", max_patches=5, seed=1)
    np.testing.assert_array_equal(few, load_sr_patches(64, split="test", max_patches=5, seed=1))
    assert few.shape == (5, 64, 64, 3)
    overlapping = load_sr_patches(128, split="test", stride=64)
    assert len(overlapping) > len(load_sr_patches(128, split="test"))


KEY = jr.key(0)
IMG = jnp.zeros((8, 6, 3))
BAD = [
    (lambda: degrade(KEY, jnp.zeros((2, 8, 6, 3)), scale=2), ValueError, "shape \\(H, W, C\\)"),
    (lambda: degrade(KEY, jnp.zeros((8, 6, 3)), scale=4), ValueError, "divisible by `scale`"),
    (lambda: degrade(KEY, IMG, scale=0), ValueError, "`scale` must be an int >= 1"),
    (lambda: degrade(KEY, IMG, scale=2.0), TypeError, "scale"),
    (lambda: degrade(KEY, IMG, scale=2, blur_range=(1.0, 0.5)), ValueError, "`blur_range`"),
    (lambda: degrade(KEY, IMG, scale=2, noise_range=(-0.1, 0.1)), ValueError, "`noise_range`"),
    (lambda: degrade(KEY, IMG, scale=2, noise_range=0.1), TypeError, "noise_range"),
    (lambda: degrade(KEY, IMG, scale=2, clip=(1.0, -1.0)), ValueError, "`clip`"),
    (lambda: degrade_mean(IMG, scale=2, blur_sigma=-1.0), ValueError, "`blur_sigma`"),
    (lambda: area_downsample(IMG, 4), ValueError, "divisible by `scale`"),
    (lambda: upsample(IMG, (16, 12), "lanczos7"), ValueError, "`method` must be one of"),
    (lambda: upsample(IMG, (4, 12)), ValueError, "at least the LR size"),
    (lambda: upsample(IMG, (16, 12, 1)), ValueError, "changes the channels"),
    (lambda: load_sr_patches(64, split="val"), ValueError, "`split` must be one of"),
]


@pytest.mark.parametrize("call, exc, match", BAD)
def test_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_non_finite_hr_raises():
    with pytest.raises(Exception, match="`hr` contains NaN"):
        degrade_x2(KEY, IMG.at[0, 0, 0].set(jnp.nan))
