"""Offline image loaders: scikit-learn's digits and sample images, scikit-image's grey images.

Everything returns numpy arrays (each loader's docstring states the licence); nothing is downloaded.
"""

from typing import NamedTuple

import numpy as np
from jaxtyping import PRNGKeyArray

from ._common import MissingDataError, require_module

# scikit-image images that ship inside the package (no pooch download), with their shapes.
_SKIMAGE_GREY = (
    "camera",
    "moon",
    "brick",
    "grass",
    "gravel",
    "coins",
    "text",
    "page",
    "cell",
    "clock",
    "microaneurysms",
)
_SKIMAGE_RGB = ("astronaut", "chelsea", "coffee", "rocket")
SKIMAGE_IMAGES: tuple[str, ...] = _SKIMAGE_GREY + _SKIMAGE_RGB


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The UCI optical digits shipped with scikit-learn.

    Returns:
        ``(images, labels)``: images float64 of shape (1797, 8, 8) with values in [0, 16], and
        labels int64 of shape (1797,) in 0..9.

    Raises:
        MissingDataError: scikit-learn is not installed.
    """
    datasets = require_module("sklearn.datasets", pip_name="scikit-learn")
    bunch = datasets.load_digits()
    return np.asarray(bunch.images, dtype=np.float64), np.asarray(bunch.target, dtype=np.int64)


#: Size of the held-out split of `digits_split` (20% of the 1797 digits).
DIGITS_TEST_SIZE = 360


class DigitsSplit(NamedTuple):
    """`digits_split` output: images ``(n, 8, 8)`` float32 in ``[-1, 1]``, labels int64.

    Attributes:
        x_train: 1437 training images, ``pixel / 8 - 1`` (pixels in 0..16).
        y_train: their labels in 0..9.
        x_test: 360 held-out images, same scale.
        y_test: their labels.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def digits_split(seed: int = 0) -> DigitsSplit:
    """The one train/test split and scale of the digits used across jaxgen.

    A ``numpy.random.default_rng(seed)`` permutation of `load_digits`: the last
    `DIGITS_TEST_SIZE` (360) images are held out, the first 1437 train. Pixels (0..16) are
    scaled to ``x = pixel / 8 - 1`` in ``[-1, 1]`` (float32), the input scale of
    `jaxgen.metrics.digits_features`; ``(x + 1) * 8`` recovers the integer pixels exactly.
    The digits feature network shipped with `jaxgen.metrics` was trained on the ``seed=0``
    training split, so evaluate it on that split's test images.

    Args:
        seed: seed of the permutation.

    Returns:
        `DigitsSplit` ``(x_train, y_train, x_test, y_test)``.

    Raises:
        MissingDataError: scikit-learn is not installed.
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"`seed` must be an int, got {type(seed).__name__}.")
    images, labels = load_digits()
    x = (images / 8.0 - 1.0).astype(np.float32)
    perm = np.random.default_rng(seed).permutation(len(x))
    train, test = perm[: len(x) - DIGITS_TEST_SIZE], perm[len(x) - DIGITS_TEST_SIZE :]
    return DigitsSplit(x[train], labels[train], x[test], labels[test])


def load_sample_images(*, grey: bool = False) -> list[np.ndarray]:
    """scikit-learn's two sample photographs (china.jpg, flower.jpg; CC BY 2.0).

    Args:
        grey: return the channel mean divided by 255 (float64 in [0, 1], shape (427, 640))
            instead of the uint8 RGB arrays of shape (427, 640, 3).

    Raises:
        MissingDataError: scikit-learn or pillow (needed to decode the JPEGs) is not installed.
    """
    datasets = require_module("sklearn.datasets", pip_name="scikit-learn")
    require_module("PIL", pip_name="pillow")
    images = [np.asarray(im) for im in datasets.load_sample_images().images]
    if grey:
        return [im.astype(np.float64).mean(axis=-1) / 255.0 for im in images]
    return images


def load_skimage_grey(name: str) -> np.ndarray:
    """One of scikit-image's offline images as a grey float64 array in [0, 1].

    RGB images (``astronaut``, ``chelsea``, ``coffee``, ``rocket``) are converted by the channel
    mean. The grey ones are ``camera``, ``moon``, ``brick``, ``grass``, ``gravel`` (512 x 512),
    ``coins`` (303 x 384), ``text``, ``page``, ``cell``, ``clock``, ``microaneurysms``.

    Raises:
        ValueError: ``name`` is not one of `SKIMAGE_IMAGES`.
        MissingDataError: scikit-image is not installed.
    """
    if name not in SKIMAGE_IMAGES:
        raise ValueError(
            f"`name` must be one of {SKIMAGE_IMAGES} (images that ship with "
            f"scikit-image), got {name!r}."
        )
    data = require_module("skimage.data", pip_name="scikit-image")
    image = np.asarray(getattr(data, name)()).astype(np.float64)
    if image.ndim == 3:
        image = image[..., :3].mean(axis=-1)
    return image / 255.0


def extract_patches(key: PRNGKeyArray, image: np.ndarray, size: int, *, num: int) -> np.ndarray:
    """``num`` square patches at uniformly random positions (with replacement) of a 2-D image.

    Args:
        image: a grey image of shape (H, W).
        size: the patch side; ``1 <= size <= min(H, W)``.
        key: PRNG key choosing the top-left corners.
        num: the number of patches (>= 1).

    Returns:
        Patches of shape (num, size, size), dtype of ``image``.
    """
    import jax.random as jr

    image = np.asarray(image)
    if image.ndim != 2:
        raise ValueError(f"`image` must be 2-D (H, W), got shape {image.shape}.")
    if not 1 <= size <= min(image.shape):
        raise ValueError(f"`size` must be in [1, {min(image.shape)}], got {size}.")
    if num < 1:
        raise ValueError(f"`num` must be >= 1, got {num}.")
    key_r, key_c = jr.split(key)
    rows = np.asarray(jr.randint(key_r, (num,), 0, image.shape[0] - size + 1))
    cols = np.asarray(jr.randint(key_c, (num,), 0, image.shape[1] - size + 1))
    offsets = np.arange(size)
    return image[(rows[:, None] + offsets)[:, :, None], (cols[:, None] + offsets)[:, None, :]]


__all__ = [
    "MissingDataError",
    "SKIMAGE_IMAGES",
    "extract_patches",
    "load_digits",
    "load_sample_images",
    "load_skimage_grey",
]
