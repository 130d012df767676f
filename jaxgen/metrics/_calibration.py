"""Calibration of probabilistic classifiers: expected calibration error, Brier score, NLL."""

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from ..core.checks import check_labels, check_probabilities


def _check(probs: ArrayLike, labels: ArrayLike) -> tuple[Array, Array]:
    probs, labels = jnp.asarray(probs), jnp.asarray(labels)
    if probs.ndim != 2 or labels.shape != (probs.shape[0],):
        raise ValueError(
            f"`probs` (N, C) and `labels` (N,) expected, got {probs.shape} and {labels.shape}."
        )
    if probs.shape[0] < 1:
        raise ValueError(f"`probs` must hold N >= 1 rows, got shape {probs.shape}.")
    probs = check_probabilities(probs, "probs", axis=1)
    return probs, check_labels(labels, "labels", probs.shape[1])


def expected_calibration_error(
    probs: Float[ArrayLike, "N C"], labels: Int[ArrayLike, " N"], num_bins: int = 15
) -> Float[Array, ""]:
    """ECE with ``num_bins`` equal-width confidence bins on (0, 1] (Guo et al. 2017).

    ``sum_m |B_m|/N |acc(B_m) - conf(B_m)|`` with conf the max probability; a confidence c falls
    in bin ``ceil(c M) - 1`` (right-closed bins, as netcal's).
    """
    if not isinstance(num_bins, int) or num_bins < 1:
        raise ValueError(f"`num_bins` must be an int >= 1, got {num_bins!r}.")
    probs, labels = _check(probs, labels)
    conf = jnp.max(probs, axis=1)
    correct = (jnp.argmax(probs, axis=1) == labels).astype(probs.dtype)
    bins = jnp.clip(jnp.ceil(conf * num_bins).astype(jnp.int32) - 1, 0, num_bins - 1)
    acc = jnp.zeros(num_bins, probs.dtype).at[bins].add(correct)
    cf = jnp.zeros(num_bins, probs.dtype).at[bins].add(conf)
    # |B_m| |mean acc - mean conf| = |sum of correct - sum of conf| within bin m
    return jnp.sum(jnp.abs(acc - cf)) / probs.shape[0]


def brier_score(probs: Float[ArrayLike, "N C"], labels: Int[ArrayLike, " N"]) -> Float[Array, ""]:
    """Mean over samples of ``sum_c (p_c - 1[c = y])^2``."""
    probs, labels = _check(probs, labels)
    onehot = jnp.eye(probs.shape[1], dtype=probs.dtype)[labels]
    return jnp.mean(jnp.sum((probs - onehot) ** 2, axis=1))


def classification_nll(
    probs: Float[ArrayLike, "N C"], labels: Int[ArrayLike, " N"], eps: float = 1e-12
) -> Float[Array, ""]:
    """Mean negative log-probability of the true label (nats); probabilities floored at ``eps``."""
    probs, labels = _check(probs, labels)
    p = jnp.take_along_axis(probs, labels[:, None], axis=1)[:, 0]
    return -jnp.mean(jnp.log(jnp.maximum(p, eps)))
