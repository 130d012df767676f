"""A fixed feature network for 8x8 digits, shipped with its weights, and the digits-FD on it.

A Fréchet distance in a feature space is comparable only under one feature map (Heusel et al.
2017 fix Inception-v3 for FID). For the scikit-learn digits jaxgen ships one: a small CNN
trained once on the ``seed=0`` training split of `jaxgen.data.digits_split` by
``tools/train_digits_features.py``, whose weights are package data. Every digits-FD in jaxgen
(the normalizing-trajectory and SplitMeanFlow benchmarks) is `digits_fd` on it, so the numbers
can be compared with each other and with a user's.
"""

import functools as ft
import importlib.resources

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ._distances import feature_frechet_distance

#: The package-data file holding the trained weights (`eqx.tree_serialise_leaves`).
DIGITS_FEATURES_FILE = "digits_features.eqx"


class DigitsFeatureNet(eqx.Module):
    """conv3x3(16)-SiLU-conv3x3/2(32)-SiLU-Linear(64)-SiLU (features)-Linear(10) (logits).

    Acts on one image ``(8, 8)`` (or flat ``(64,)``) scaled as ``pixel / 8 - 1`` in ``[-1, 1]``
    (`jaxgen.data.digits_split`). About 38k parameters.
    """

    conv1: eqx.nn.Conv2d
    conv2: eqx.nn.Conv2d
    hidden: eqx.nn.Linear
    head: eqx.nn.Linear

    def __init__(self, *, key: PRNGKeyArray):
        """Random initialisation (the trained weights come from `digits_feature_net`)."""
        k1, k2, k3, k4 = jr.split(key, 4)
        self.conv1 = eqx.nn.Conv2d(1, 16, 3, padding=1, key=k1)
        self.conv2 = eqx.nn.Conv2d(16, 32, 3, stride=2, padding=1, key=k2)
        self.hidden = eqx.nn.Linear(32 * 4 * 4, 64, key=k3)
        self.head = eqx.nn.Linear(64, 10, key=k4)

    def features(self, image: Float[Array, "8 8"] | Float[Array, " 64"]) -> Float[Array, " 64"]:
        """The 64-d penultimate features of one image."""
        h = jnp.reshape(image, (1, 8, 8))
        h = jax.nn.silu(self.conv2(jax.nn.silu(self.conv1(h))))
        return jax.nn.silu(self.hidden(h.reshape(-1)))

    def __call__(self, image: Float[Array, "8 8"] | Float[Array, " 64"]) -> Float[Array, " 10"]:
        """Class logits of one image."""
        return self.head(self.features(image))


@ft.cache
def digits_feature_net() -> DigitsFeatureNet:
    """The trained `DigitsFeatureNet` (loaded once from the package data; safe to call first
    inside `jax.jit`: the weights are loaded as concrete arrays, never as tracers).
    """
    ref = importlib.resources.files("jaxgen.metrics").joinpath("_data", DIGITS_FEATURES_FILE)
    with jax.ensure_compile_time_eval():
        template = jax.tree_util.tree_map(  # the weights are float32 on disk, whatever x64 says
            lambda x: x.astype(jnp.float32) if eqx.is_inexact_array(x) else x,
            DigitsFeatureNet(key=jr.key(0)),
        )
        with ref.open("rb") as f:
            return eqx.tree_deserialise_leaves(f, template)


def _images(x: ArrayLike, name: str) -> Array:
    x = jnp.asarray(x)
    if x.ndim == 2 and x.shape[1] == 64:
        x = x.reshape(-1, 8, 8)
    if x.ndim != 3 or x.shape[1:] != (8, 8):
        raise ValueError(f"`{name}` must be digits of shape (n, 8, 8) or (n, 64), got {x.shape}.")
    if x.shape[0] < 2:
        raise ValueError(f"`{name}` needs at least 2 images, got {x.shape[0]}.")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"`{name}` must be floating (pixel / 8 - 1 in [-1, 1]), got {x.dtype}.")
    return x.astype(jnp.float32)


@eqx.filter_jit
def _features(net: DigitsFeatureNet, x: Array) -> Array:
    return jax.vmap(net.features)(x)


def digits_features(x: ArrayLike) -> Float[Array, "n 64"]:
    """Features of the shipped digits network for images ``(n, 8, 8)`` or ``(n, 64)``.

    Args:
        x: images scaled as ``pixel / 8 - 1`` (`jaxgen.data.digits_split`).

    Returns:
        ``(n, 64)`` float32 features.
    """
    return _features(digits_feature_net(), _images(x, "x"))


@eqx.filter_jit
def _logits(net: DigitsFeatureNet, x: Array) -> Array:
    return jax.vmap(net)(x)


def digits_logits(x: ArrayLike) -> Float[Array, "n 10"]:
    """Class logits of the shipped digits network (to classify generated digits)."""
    return _logits(digits_feature_net(), _images(x, "x"))


def digits_fd(x: ArrayLike, y: ArrayLike) -> Float[Array, ""]:
    r"""The digits-FD: `feature_frechet_distance` of two image sets in the shipped feature space.

    $\|\mu_x - \mu_y\|^2 + \operatorname{tr}(S_x + S_y - 2 (S_x^{1/2} S_y S_x^{1/2})^{1/2})$ over
    the 64-d features of `digits_feature_net` (FID's formula on a digits network). As for FID,
    the value is biased upwards for small sets: compare sets of equal sizes.

    Args:
        x, y: images ``(n, 8, 8)`` / ``(m, 8, 8)`` (or flat ``(n, 64)``) scaled as
            ``pixel / 8 - 1``.

    Returns:
        The squared Fréchet distance, a float32 scalar.

    References:
        Heusel et al., GANs trained by a two time-scale update rule converge to a local Nash
        equilibrium, NeurIPS 2017 (FID).
    """
    fx = _features(digits_feature_net(), _images(x, "x"))
    fy = _features(digits_feature_net(), _images(y, "y"))
    dtype = jnp.result_type(float)  # float64 when x64 is on
    return feature_frechet_distance(fx.astype(dtype), fy.astype(dtype))
