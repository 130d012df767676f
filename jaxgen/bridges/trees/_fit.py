r"""Training the NBFFG residual: full-tree and path-subsampled variational objectives.

The variational objective of the controlled guided process q_theta is

    KL(q_theta || p(. | y, x_r)) = E_q[sum_v l_v] + log p(y | x_r) - log h~_r(x_r),

with ``l_v = int_0^tau (|theta|^2 / 2 - G) dt`` on SDE edges, so minimising ``E sum_v l_v``
maximises the ELBO ``log h~_r(x_r) - E sum_v l_v``. The full-tree loss simulates every edge;
the path-subsampled loss (`path_loss`) simulates B root-to-leaf paths with weights
``N_L / n_L(v)`` and is unbiased for the same quantity at O(B D) cost.

References:
    G. Yang, F. van der Meulen, S. Sommer, "Neural Backward Filtering Forward Guiding",
    arXiv 2601.23030.
    G. Yang, F. van der Meulen, S. Sommer, "Neural Guided Diffusion Bridges", ICML 2025,
    arXiv 2502.11909.
"""

from __future__ import annotations

import dataclasses
from typing import Unpack

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ...core import FitOptions, FitResult, adamw_cosine, check_fit_options, fit
from ._guided import (
    AbstractKernelResidual,
    AbstractSDEControl,
    GuidedTree,
    _check_control,
    guided_sample,
    path_loss,
)
from ._topology import TreeTopology


class _Trainable(eqx.Module):
    control: AbstractSDEControl | AbstractKernelResidual
    frozen: GuidedTree


def _frozen(gt: GuidedTree) -> GuidedTree:
    return jax.tree_util.tree_map(jax.lax.stop_gradient, gt)


def full_tree_loss(
    key: PRNGKeyArray,
    gt: GuidedTree,
    control: AbstractSDEControl | AbstractKernelResidual | None,
    num_samples: int = 1,
) -> Float[Array, ""]:
    """Monte Carlo estimate of ``E sum_v l_v`` from ``num_samples`` whole-tree draws.

    The mean over draws (keys ``jr.split(key, num_samples)``) of the sum over nodes of
    `guided_sample`'s ``train_loss``.
    """
    if not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"`num_samples` must be an int >= 1, got {num_samples!r}.")
    keys = jr.split(key, num_samples)
    draws = jax.vmap(lambda k: guided_sample(k, gt, control))(keys)
    return jnp.mean(jnp.sum(draws.train_loss, axis=1))


def _loss_full(model: _Trainable, batch: Array, key: PRNGKeyArray) -> Float[Array, ""]:
    return full_tree_loss(key, _frozen(model.frozen), model.control, batch.shape[0])


def _loss_path(model: _Trainable, batch: Int[Array, " B"], key: PRNGKeyArray) -> Float[Array, ""]:
    return path_loss(key, _frozen(model.frozen), batch, model.control)


def leaf_batches(num_leaves: int, batch_size: int):
    """Pure sampler of ``batch_size`` distinct leaf rows, uniformly without replacement.

    Each leaf is in a batch with probability ``batch_size / num_leaves`` (what makes
    `path_loss` unbiased).

    Raises:
        ValueError: if ``batch_size`` is not an int in ``[1, num_leaves]``.
    """
    if not isinstance(batch_size, int) or not 1 <= batch_size <= num_leaves:
        raise ValueError(f"`batch_size` must be an int in [1, {num_leaves}], got {batch_size!r}.")

    def sample(key: PRNGKeyArray) -> Int[Array, " B"]:
        return jr.choice(key, num_leaves, (batch_size,), replace=False)

    return sample


def stratified_leaf_batches(topo: TreeTopology, batch_size: int):
    r"""Pure sampler of ``batch_size`` distinct leaf rows by systematic sampling in DFS order.

    The leaves are put in depth-first order (lexicographic order of their root-to-leaf paths,
    so every subtree's leaves are contiguous); with stride ``s = N_L / batch_size`` and one
    offset ``u ~ U[0, s)``, the rows at positions ``floor(u + k s)``, ``k < batch_size``, are
    drawn. Each leaf is in a batch with probability exactly ``1 / s = batch_size / N_L``, as in
    `leaf_batches`, so `path_loss` stays unbiased; but a subtree with ``n_L(v)`` leaves now holds
    ``floor`` or ``ceil`` of ``n_L(v) / s`` of them instead of a hypergeometric number, so the
    inner edges' weights ``N_L / n_L(v)`` are (nearly) not random and only the edges near the
    leaves add sampling variance (stratification).

    Raises:
        ValueError: if ``batch_size`` is not an int in ``[1, N_L]``.
    """
    nl = topo.num_leaves
    if not isinstance(batch_size, int) or not 1 <= batch_size <= nl:
        raise ValueError(f"`batch_size` must be an int in [1, {nl}], got {batch_size!r}.")
    order = jnp.asarray(np.lexsort(np.asarray(topo.leaf_paths).T[::-1]))
    stride = nl / batch_size

    def sample(key: PRNGKeyArray) -> Int[Array, " B"]:
        u = jr.uniform(key, (), maxval=stride)
        pos = jnp.floor(u + stride * jnp.arange(batch_size)).astype(jnp.int32)
        return order[jnp.clip(pos, 0, nl - 1)]

    return sample


def _full_batches(batch_size: int):
    def sample(key: PRNGKeyArray) -> Int[Array, " B"]:
        return jnp.zeros((batch_size,), jnp.int32)

    return sample


def fit_nbffg(
    control: AbstractSDEControl | AbstractKernelResidual,
    gt: GuidedTree,
    *,
    key: PRNGKeyArray,
    num_steps: int,
    optimizer: optax.GradientTransformation | None = None,
    mode: str = "path",
    batch_size: int = 8,
    leaf_sampling: str = "stratified",
    **fit_options: Unpack[FitOptions],
) -> FitResult:
    r"""Train the NBFFG residual with `jaxgen.core.fit`.

    SDE edges train a `ControlNet` (pathwise gradients through Euler-Maruyama); discrete edges
    a `ResidualFlow` (reparametrised gradients through the whitened guided draw).

    ``mode="path"`` minimises the path-subsampled loss over ``batch_size`` distinct leaves per
    step (cost O(batch_size * D) edges), drawn by `stratified_leaf_batches` (or uniformly
    without replacement by `leaf_batches`; both unbiased, the first with less variance);
    ``mode="full"`` the full-tree loss over ``batch_size`` whole-tree draws (O(batch_size * N)).
    The filter, proxy and root are frozen (stop-gradient and a zero update).
    ``FitResult.model`` is the trained residual.

    Args:
        control: initial `AbstractSDEControl` (SDE edges, e.g. `ControlNet`) or
            `AbstractKernelResidual` (discrete edges, e.g. `ResidualFlow`); the built-ins
            start as the identity residual (= BFFG).
        gt: the `GuidedTree` (its leaves hold the observations: the data of this trainer).
        key: PRNG key of the run.
        num_steps: optimiser steps.
        mode: ``"path"`` or ``"full"``.
        batch_size: leaves (path mode) or whole-tree draws (full mode) per step.
        leaf_sampling: path mode's leaf sampler, ``"stratified"`` (systematic in depth-first
            order) or ``"uniform"`` (without replacement).
        optimizer: default ``adamw_cosine(3e-3, num_steps, warmup_steps=num_steps // 20)``
            (AdamW, linear warm-up over 5% of the steps, cosine decay to 0, clip 1.0). The
            pathwise gradient is noisy (per-step s.d. of the loss ~2x its mean on the
            benchmark's double-well tree), and at the former 1e-3 without warm-up the
            path-subsampled model did not get ahead of BFFG in 1000 steps
            (benchmarks/nbffg_trees.py, ablation note).
        **fit_options: `jaxgen.core.FitOptions`, forwarded to `jaxgen.core.fit` (a
            ``callback`` sees the trained pair ``(control, frozen tree)`` as its model).

    Returns:
        `jaxgen.core.FitResult` whose ``model`` is the trained control.
    """
    check_fit_options(fit_options)
    if control is None:
        raise TypeError(
            "`control` must be an AbstractSDEControl (SDE edges, e.g. ControlNet) or an "
            "AbstractKernelResidual (discrete edges, e.g. ResidualFlow), got None."
        )
    _check_control(gt, control)
    if mode not in ("path", "full"):
        raise ValueError(f"`mode` must be 'path' or 'full', got {mode!r}.")
    if leaf_sampling not in ("stratified", "uniform"):
        raise ValueError(
            f"`leaf_sampling` must be 'stratified' or 'uniform', got {leaf_sampling!r}."
        )
    nl = gt.topo.num_leaves
    if not isinstance(batch_size, int) or batch_size < 1 or (mode == "path" and batch_size > nl):
        raise ValueError(
            f"`batch_size` must be an int in [1, {nl if mode == 'path' else 'inf'}), "
            f"got {batch_size!r}."
        )
    if optimizer is None:
        optimizer = adamw_cosine(3e-3, max(num_steps, 1), warmup_steps=num_steps // 20)

    def labels(params: _Trainable) -> _Trainable:
        return _Trainable(
            control=jax.tree_util.tree_map(lambda _: "train", params.control),
            frozen=jax.tree_util.tree_map(lambda _: "frozen", params.frozen),
        )

    opt = optax.multi_transform({"train": optimizer, "frozen": optax.set_to_zero()}, labels)
    model = _Trainable(control, gt)
    if mode == "path":
        loss_fn = _loss_path
        if leaf_sampling == "stratified":
            batches = stratified_leaf_batches(gt.topo, batch_size)
        else:
            batches = leaf_batches(nl, batch_size)
    else:
        loss_fn, batches = _loss_full, _full_batches(batch_size)
    res = fit(
        loss_fn,
        model,
        batches,
        opt,
        num_steps=num_steps,
        key=key,
        **fit_options,
    )
    return dataclasses.replace(res, model=res.model.control)
