"""Fitting a sieve prior by minimising convMMD with `jaxgen.core.fit`."""

import functools as ft
from typing import Unpack

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float, PRNGKeyArray

from ..core import (
    FitOptions,
    FitResult,
    adamw_cosine,
    check_fit_options,
    check_kernel,
    fit,
    minibatches,
)
from ..core.checks import check_module, check_tuple
from ._losses import (
    check_bandwidths,
    convmmd_loss,
    convmmd_loss_gmm_closed,
    convmmd_loss_gmm_marginal,
    quantile_bandwidths,
)
from ._noise import AbstractNoiseModel, check_observations, check_scales
from ._priors import AbstractPrior, GaussianMixture

LOSSES = ("sample", "marginal", "closed")


class ConvMMDResult(FitResult):
    """What `fit_convmmd` returns: `jaxgen.core.FitResult` (``model`` is the fitted prior) plus
    the kernel bandwidths.

    Attributes:
        bandwidths: the fixed kernel bandwidths used, (H,).
    """

    bandwidths: Float[Array, " H"] | None = None


# Module-level losses: wrapped in `eqx.Partial` (a pytree: bandwidths stay dynamic), so repeated
# `fit_convmmd` calls with the same shapes reuse the compiled training chunk. The public losses
# already have fit's form (prior, (x, scales), key, *, options); these only drop the options a
# loss does not take, so that every loss gets the same keywords.
def _sample_loss(prior, batch, key, *, noise, bandwidths, kernel):
    return convmmd_loss(prior, batch, key, noise=noise, bandwidths=bandwidths, kernel=kernel)


def _marginal_loss(prior, batch, key, *, noise, bandwidths, kernel):
    return convmmd_loss_gmm_marginal(
        prior, batch, key, noise=noise, bandwidths=bandwidths, kernel=kernel
    )


def _closed_loss(prior, batch, key, *, noise, bandwidths, kernel):
    del noise, kernel
    return convmmd_loss_gmm_closed(prior, batch, key, bandwidths=bandwidths)


@eqx.filter_jit
def _initial_bandwidths(
    prior: AbstractPrior, x: Array, scales: Array, key: PRNGKeyArray, noise: AbstractNoiseModel
) -> Array:
    """`quantile_bandwidths` of up to 2000 observations and as many noisy draws of ``prior``."""
    pool = min(2000, x.shape[0])
    zkey, ekey, pkey = jr.split(key, 3)
    idx = jr.permutation(pkey, x.shape[0])[:pool]
    sim = prior.sample(zkey, pool) + noise.sample(ekey, scales[idx])
    return quantile_bandwidths(x[idx], sim.astype(x.dtype))


_LOSS_FNS = {"sample": _sample_loss, "marginal": _marginal_loss, "closed": _closed_loss}


def _optimizer(
    learning_rate: float, num_steps: int, warmup: int, weight_decay: float, clip_norm: float
) -> optax.GradientTransformation:
    """`_cached_optimizer`, or a fresh one when an argument is not hashable (e.g. an array)."""
    try:
        return _cached_optimizer(learning_rate, num_steps, warmup, weight_decay, clip_norm)
    except TypeError:
        return _cached_optimizer.__wrapped__(
            learning_rate, num_steps, warmup, weight_decay, clip_norm
        )


@ft.lru_cache(maxsize=32)
def _cached_optimizer(
    learning_rate: float, num_steps: int, warmup: int, weight_decay: float, clip_norm: float
) -> optax.GradientTransformation:
    """One optimiser object per configuration: `fit` keys its compiled chunk on the optimiser
    (a static argument, compared by identity of its functions), so a fresh object per call
    recompiled every `fit_convmmd` call; repeated calls (seeds, restarts) now reuse it.
    """
    return optax.apply_if_finite(
        adamw_cosine(
            learning_rate,
            num_steps,
            warmup_steps=warmup,
            weight_decay=weight_decay,
            clip_norm=clip_norm,
        ),
        max_consecutive_errors=100,
    )


def fit_convmmd(
    prior: AbstractPrior,
    data: tuple[Float[Array, "n dim"], Float[Array, "n ..."]],
    *,
    key: PRNGKeyArray,
    num_steps: int,
    optimizer: optax.GradientTransformation | None = None,
    noise: AbstractNoiseModel,
    loss: str = "sample",
    kernel: str = "gaussian",
    bandwidths: Float[Array, " H"] | None = None,
    batch_size: int,
    learning_rate: float = 1e-2,
    warmup_steps: int | None = None,
    weight_decay: float = 1e-4,
    clip_norm: float = 5.0,
    **fit_options: Unpack[FitOptions],
) -> ConvMMDResult:
    """Fit ``prior`` to noisy observations by minimising the convMMD loss.

    Each step draws ``batch_size`` rows (x_i, scales_i) jointly (`jaxgen.core.minibatches`),
    simulates as many noisy model draws with those scales and takes one AdamW step (linear
    warm-up, cosine decay, global-norm clipping; non-finite updates skipped) through
    `jaxgen.core.fit`. The bandwidths, when not given, are computed ONCE from up to 2000
    observations and 2000 noisy draws of the initial model (`quantile_bandwidths`) and then
    kept fixed (recomputing them would change the objective).

    Args:
        prior: the sieve (`GaussianMixture` or `FlowPrior`, or any module with a pathwise
            ``sample(key, num)``); ``loss="marginal"``/``"closed"`` need a `GaussianMixture`.
        data: the arrays ``(x, scales)``: observations ``x`` (n >= 2, dim) and their noise
            scales, (n, dim) sds or (n, dim, dim) Cholesky factors (arrays only: the bandwidth
            heuristic reads them).
        key: PRNG key of the run.
        num_steps: optimiser steps.
        optimizer: default AdamW at ``learning_rate`` with linear warm-up, cosine decay and
            global-norm clipping (`jaxgen.core.adamw_cosine`), non-finite updates skipped.
        noise: the known `AbstractNoiseModel`.
        loss: ``"sample"`` (`convmmd_loss`), ``"marginal"`` (`convmmd_loss_gmm_marginal`) or
            ``"closed"`` (`convmmd_loss_gmm_closed`; Gaussian kernel and noise only).
        kernel: ``"gaussian"`` or ``"laplace"``.
        bandwidths: fixed (H,) bandwidths, or ``None`` for the quantile heuristic.
        batch_size: observations (= model draws) per step, >= 2.
        learning_rate: peak AdamW learning rate of the default optimizer.
        warmup_steps: linear warm-up steps (default min(200, num_steps // 10)).
        weight_decay: AdamW weight decay.
        clip_norm: global gradient-norm clip.
        **fit_options: `jaxgen.core.FitOptions`, forwarded to `jaxgen.core.fit`.

    Returns:
        `ConvMMDResult`: the `jaxgen.core.FitResult` fields (``model`` is the fitted prior) and
        ``bandwidths``.
    """
    check_fit_options(fit_options)
    x, scales = check_tuple(data, 2, "data", layout="(x, scales)")
    if loss not in LOSSES:
        raise ValueError(f"`loss` must be one of {LOSSES}, got {loss!r}.")
    check_module(prior, AbstractPrior, "prior")
    check_module(noise, AbstractNoiseModel, "noise")
    check_kernel(kernel)
    if loss in ("marginal", "closed") and not isinstance(prior, GaussianMixture):
        raise TypeError(f'loss="{loss}" needs a GaussianMixture prior, got {type(prior).__name__}.')
    if loss == "closed" and (kernel != "gaussian" or noise.kind != "gaussian"):
        raise ValueError(
            'loss="closed" is exact only for kernel="gaussian" and Gaussian noise, got '
            f"kernel={kernel!r}, noise={noise.kind!r}."
        )
    if not isinstance(batch_size, int) or batch_size < 2:
        raise ValueError(f"`batch_size` must be an int >= 2, got {batch_size!r}.")
    x = check_observations(x)
    scales = check_scales(scales, x.shape, noise).astype(x.dtype)
    bkey, run_key = jr.split(key)
    if bandwidths is None:
        bandwidths = _initial_bandwidths(prior, x, scales, bkey, noise)
    h = check_bandwidths(bandwidths, x.dtype)
    warmup = min(200, num_steps // 10) if warmup_steps is None else warmup_steps
    if optimizer is None:
        optimizer = _optimizer(learning_rate, num_steps, warmup, weight_decay, clip_norm)
    loss_fn = eqx.Partial(_LOSS_FNS[loss], noise=noise, bandwidths=h, kernel=kernel)
    result = fit(
        loss_fn,
        prior,
        minibatches((x, scales), batch_size),
        optimizer,
        num_steps=num_steps,
        key=run_key,
        **fit_options,
    )
    return ConvMMDResult.extend(result, bandwidths=jnp.asarray(h))
