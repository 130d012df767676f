import sys

import jax.random as jr
import numpy as np
import pytest

from jaxgen.data import (
    MissingDataError,
    extract_patches,
    load_digits,
    load_sample_images,
    load_skimage_grey,
)


def test_load_digits_shapes():
    pytest.importorskip("sklearn")
    images, labels = load_digits()
    assert images.shape == (1797, 8, 8) and images.dtype == np.float64
    assert labels.shape == (1797,) and set(np.unique(labels)) == set(range(10))
    assert 0 <= images.min() and images.max() <= 16


def test_load_sample_images():
    pytest.importorskip("sklearn")
    pytest.importorskip("PIL")
    rgb = load_sample_images()
    assert [im.shape for im in rgb] == [(427, 640, 3)] * 2 and rgb[0].dtype == np.uint8
    grey = load_sample_images(grey=True)
    np.testing.assert_allclose(grey[1], rgb[1].mean(axis=-1) / 255.0)


def test_load_skimage_grey():
    pytest.importorskip("skimage")
    camera = load_skimage_grey("camera")
    assert camera.shape == (512, 512) and 0 <= camera.min() and camera.max() <= 1
    assert load_skimage_grey("coins").shape == (303, 384)
    assert load_skimage_grey("astronaut").shape == (512, 512)
    with pytest.raises(ValueError, match="`name` must be one of"):
        load_skimage_grey("kidney")


def test_missing_package_raises(monkeypatch):
    monkeypatch.setitem(sys.modules, "skimage.data", None)
    with pytest.raises(MissingDataError, match="scikit-image"):
        load_skimage_grey("camera")


def test_extract_patches_are_image_windows():
    image = np.arange(20 * 30, dtype=float).reshape(20, 30)
    P = extract_patches(jr.key(0), image, 4, num=50)
    assert P.shape == (50, 4, 4)
    for p in P[:5]:
        r, c = divmod(int(p[0, 0]), 30)
        np.testing.assert_array_equal(p, image[r : r + 4, c : c + 4])
    np.testing.assert_array_equal(P, extract_patches(jr.key(0), image, 4, num=50))
    with pytest.raises(ValueError, match="`image` must be 2-D"):
        extract_patches(jr.key(0), np.zeros((3, 4, 5)), 2, num=1)
    with pytest.raises(ValueError, match="`size` must be in"):
        extract_patches(jr.key(0), image, 21, num=1)
    with pytest.raises(ValueError, match="`num` must be >= 1"):
        extract_patches(jr.key(0), image, 2, num=0)
