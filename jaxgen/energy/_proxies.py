"""Model-only proxies of three human-alignment probes. They are NOT alignment scores:
the paper's benchmarks need human psychophysics that no offline package ships.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ..core.checks import (
    check_finite,
    check_floating,
    check_in_interval,
    check_key,
    check_labels,
    check_nonnegative,
    check_positive_int,
)


def _rank(x: Array) -> Array:
    return jnp.argsort(jnp.argsort(x)).astype(x.dtype)


def cue_conflict_shape_bias(
    key: PRNGKeyArray,
    predict: Callable[[Array], Array],
    images: Float[Array, "N H W"],
    labels: Int[Array, " N"],
    *,
    low_pass: Callable[[Array], Array],
    gain: float = 1.0,
    num_pairs: int = 1000,
) -> Float[Array, ""]:
    """Shape bias on synthetic cue-conflict stimuli ``low(A) + gain (B - low(B))``.

    ``low_pass`` maps images ``(n, H, W)`` to their low-pass "shape" (e.g. a Gaussian blur of
    sd 1 px: ``lambda x: jaxgen.data.corrupt(key, x, "blur", 1.0)``); ``B - low(B)`` is the
    high-frequency "texture" of an image of another class. ``predict`` maps a flat image to
    logits. Returns ``n_shape / (n_shape + n_texture)`` over pairs with different labels.

    Raises:
        ValueError: ``images`` outside ``[-1, 1]`` or NaN, labels outside the ``C`` classes of
            ``predict``, ``gain`` not finite and >= 0 (value checks: an ``EquinoxRuntimeError``
            under `jax.jit`), ``num_pairs`` < 1.
    """
    images = check_floating(images, "images")
    if images.ndim != 3 or images.shape[0] < 1 or jnp.shape(labels) != images.shape[:1]:
        raise ValueError(
            f"`images` (N, H, W) with N >= 1 and `labels` (N,) expected, got {images.shape} and "
            f"{jnp.shape(labels)}."
        )
    num_pairs = check_positive_int(num_pairs, "num_pairs")
    key = check_key(key)
    images = check_in_interval(images, "images", -1.0, 1.0)
    gain = check_nonnegative(gain, "gain")
    num_classes = jax.eval_shape(predict, images[0].reshape(-1)).shape[-1]
    labels = check_labels(labels, "labels", num_classes)
    ka, kb = jr.split(key)
    a = jr.randint(ka, (num_pairs,), 0, images.shape[0])
    b = jr.randint(kb, (num_pairs,), 0, images.shape[0])
    A, B = images[a], images[b]
    low_a, low_b = low_pass(A), low_pass(B)
    S = jnp.clip(low_a + gain * (B - low_b), -1.0, 1.0)
    pred = jnp.argmax(jax.vmap(predict)(S.reshape(num_pairs, -1)), axis=-1)
    differ = labels[a] != labels[b]
    shape = jnp.sum(differ & (pred == labels[a]))
    texture = jnp.sum(differ & (pred == labels[b]))
    return shape / jnp.maximum(shape + texture, 1)


def saliency_diagnostic_correlation(
    log_prob: Callable[[Array, Array], Array],
    images: Float[Array, "N D"],
    labels: Int[Array, " N"],
    diagnostic: Float[Array, "C D"],
) -> Float[Array, ""]:
    """Spearman correlation, averaged over classes, between the model's mean ``|grad_x log p(y|x)|``
    over images of class y and a class-diagnostic pixel map (e.g. ``|w_y|`` of a logistic fit).

    ``log_prob(x, y)`` maps one flat image and a label to ``log p(y | x)``.

    Raises:
        ValueError: mismatched shapes; non-finite ``images`` or ``diagnostic``, labels outside
            the ``C`` rows of ``diagnostic`` (value checks: an ``EquinoxRuntimeError`` under
            `jax.jit`).
    """
    images, diagnostic = check_floating(images, "images"), check_floating(diagnostic, "diagnostic")
    if images.ndim != 2 or images.shape[0] < 1 or jnp.shape(labels) != images.shape[:1]:
        raise ValueError(
            f"`images` (N, D) with N >= 1 and `labels` (N,) expected, got {images.shape} and "
            f"{jnp.shape(labels)}."
        )
    if diagnostic.ndim != 2 or diagnostic.shape[1] != images.shape[1]:
        raise ValueError(
            f"`diagnostic` must have shape (C, {images.shape[1]}), got {diagnostic.shape}."
        )
    images, diagnostic = check_finite(images, "images"), check_finite(diagnostic, "diagnostic")
    labels = check_labels(labels, "labels", diagnostic.shape[0])
    grads = jnp.abs(jax.vmap(jax.grad(log_prob))(images, labels))
    out = []
    for c in range(diagnostic.shape[0]):
        m = labels == c
        mean_map = jnp.sum(jnp.where(m[:, None], grads, 0.0), 0) / jnp.maximum(jnp.sum(m), 1)
        r1, r2 = _rank(mean_map), _rank(diagnostic[c])
        out.append(jnp.corrcoef(r1, r2)[0, 1])
    return jnp.mean(jnp.stack(out))


def distortion_ordering(
    key: PRNGKeyArray,
    features: Callable[[Array], Array],
    images: Float[Array, "N D"],
    levels: tuple[float, float] = (0.1, 0.4),
) -> Float[Array, ""]:
    """Fraction of images whose feature distance to a mild distortion (noise sd ``levels[0]``)
    is below that to a strong one (``levels[1]``): a model-only perceptual-ordering proxy.

    Raises:
        ValueError: ``levels`` not ``0 <= mild < strong`` (finite); ``images`` not ``(N, D)``
            with ``N >= 1``, or outside ``[-1, 1]`` or NaN (a value check: an
            ``EquinoxRuntimeError`` under `jax.jit`).
    """
    if len(levels) != 2 or not 0 <= levels[0] < levels[1] < float("inf"):
        raise ValueError(f"`levels` must be noise sds 0 <= mild < strong (finite), got {levels}.")
    images = check_floating(images, "images")
    if images.ndim != 2 or images.shape[0] < 1:
        raise ValueError(f"`images` must have shape (N, D) with N >= 1, got {images.shape}.")
    key = check_key(key)
    images = check_in_interval(images, "images", -1.0, 1.0)
    k1, k2 = jr.split(key)
    f = jax.vmap(features)
    base = f(images)
    mild = f(jnp.clip(images + levels[0] * jr.normal(k1, images.shape), -1, 1))
    strong = f(jnp.clip(images + levels[1] * jr.normal(k2, images.shape), -1, 1))
    d1 = jnp.linalg.norm(mild - base, axis=-1)
    d2 = jnp.linalg.norm(strong - base, axis=-1)
    return jnp.mean((d1 < d2).astype(base.dtype))
