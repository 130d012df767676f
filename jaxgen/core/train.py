"""One generic optax training loop: a jitted step, checkpoints, resume, data parallelism.

Losses are pure ``(model, batch, key) -> scalar``. Batches come from a pure sampler
``batches(key) -> batch`` that is traced inside the step, so batch sampling, key splitting, the
gradient and the update are one compiled call. The key of step ``k`` is ``fold_in(key, k)``:
a run restarted from its step-``k`` checkpoint replays exactly the steps an uninterrupted run
would have taken.
"""

import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
from jax.sharding import Mesh
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from .checkpoint import latest_checkpoint, load_checkpoint, prune_checkpoints, save_checkpoint
from .mesh import replicate, shard_batch

LossFn = Callable[[PyTree, PyTree, PRNGKeyArray], Float[Array, ""]]
BatchSampler = Callable[[PRNGKeyArray], PyTree]


def make_step(
    model: PyTree,
    opt_state: optax.OptState,
    batch: PyTree,
    key: PRNGKeyArray,
    *,
    loss_fn: LossFn,
    optimizer: optax.GradientTransformation,
) -> tuple[PyTree, optax.OptState, Float[Array, ""]]:
    """One optimiser step on ``loss_fn(model, batch, key)``; returns (model, opt_state, loss)."""
    loss, grads = eqx.filter_value_and_grad(loss_fn)(model, batch, key)
    updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_inexact_array))
    return eqx.apply_updates(model, updates), opt_state, loss


def _sampled_step(
    model: PyTree,
    opt_state: optax.OptState,
    key: PRNGKeyArray,
    step: Any,
    *,
    loss_fn: LossFn,
    batches: BatchSampler,
    optimizer: optax.GradientTransformation,
    mesh: Mesh | None,
) -> tuple[PyTree, optax.OptState, Float[Array, ""]]:
    batch_key, loss_key = jr.split(jr.fold_in(key, step))
    batch = batches(batch_key)
    if mesh is not None:
        batch = shard_batch(batch, mesh)
    return make_step(model, opt_state, batch, loss_key, loss_fn=loss_fn, optimizer=optimizer)


# Module level, so that repeated `fit` calls with the same loss/sampler/optimizer reuse the
# compiled step. `_sampled_step` is the un-jitted twin for `eqx.debug.assert_max_traces`.
train_step = eqx.filter_jit(_sampled_step)


def minibatches(data: PyTree, batch_size: int) -> BatchSampler:
    """A pure sampler drawing ``batch_size`` rows (with replacement) from arrays of equal length.

    Args:
        data: pytree of arrays sharing the leading axis ``N``.
        batch_size: rows per batch (>= 1).

    Returns:
        ``batches(key) -> pytree`` of arrays with leading axis ``batch_size``.
    """
    leaves = jax.tree_util.tree_leaves(data)
    if not leaves:
        raise ValueError("`data` has no arrays.")
    sizes = {np.shape(x)[0] for x in leaves}
    if len(sizes) != 1:
        raise ValueError(f"every array in `data` must share its leading axis, got sizes {sizes}.")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be an int >= 1, got {batch_size!r}.")
    (num,) = sizes
    data = jax.tree_util.tree_map(jnp.asarray, data)

    def sample(key: PRNGKeyArray) -> PyTree:
        idx = jr.randint(key, (batch_size,), 0, num)
        return jax.tree_util.tree_map(lambda x: x[idx], data)

    return sample


def adamw_cosine(
    learning_rate: float,
    num_steps: int,
    *,
    warmup_steps: int = 0,
    weight_decay: float = 1e-4,
    clip_norm: float | None = 1.0,
) -> optax.GradientTransformation:
    """AdamW with linear warm-up then cosine decay, and global-norm gradient clipping."""
    schedule = optax.warmup_cosine_decay_schedule(
        0.0 if warmup_steps else learning_rate, learning_rate, max(warmup_steps, 1), num_steps
    )
    adamw = optax.adamw(schedule, weight_decay=weight_decay)
    return adamw if clip_norm is None else optax.chain(optax.clip_by_global_norm(clip_norm), adamw)


class FitResult(NamedTuple):
    """What `fit` returns.

    Attributes:
        model: the trained model.
        opt_state: the final optimiser state.
        losses: the loss of every step taken, shape ``(num_steps,)`` (numpy, float64); steps
            restored from a checkpoint keep the losses recorded before the interruption.
        resumed_from: the step a checkpoint was resumed from (0 for a fresh run).
    """

    model: PyTree
    opt_state: optax.OptState
    losses: np.ndarray
    resumed_from: int


def fit(
    loss_fn: LossFn,
    model: PyTree,
    batches: BatchSampler,
    optimizer: optax.GradientTransformation,
    *,
    num_steps: int,
    key: PRNGKeyArray,
    checkpoint_dir: str | None = None,
    checkpoint_every: int = 1000,
    keep_checkpoints: int = 2,
    mesh: Mesh | None = None,
    progress: bool = True,
) -> FitResult:
    """Minimise ``loss_fn`` over the inexact arrays of ``model`` with ``optimizer``.

    Args:
        loss_fn: pure ``(model, batch, key) -> scalar``; define it at module level (or keep one
            object) so the compiled step is reused.
        model: an equinox module (or any pytree); its inexact arrays are trained.
        batches: pure sampler ``batches(key) -> batch`` (see `minibatches`), traced in the step.
        optimizer: an optax transformation (e.g. `adamw_cosine`).
        num_steps: total number of steps (a resumed run continues up to this number).
        key: PRNG key of the run; step ``k`` uses ``fold_in(key, k)``.
        checkpoint_dir: where to write checkpoints and resume from (``None``: no checkpoints).
        checkpoint_every: steps between checkpoints; a final one is always written.
        keep_checkpoints: how many recent checkpoints to keep.
        mesh: a device mesh (`data_mesh`); the batch is sharded over its ``"data"`` axis and the
            model replicated. ``None`` runs on the default device.
        progress: show a tqdm bar when stderr is a terminal.

    Returns:
        `FitResult` (model, opt_state, losses, resumed_from).
    """
    if not isinstance(num_steps, int) or num_steps < 0:
        raise ValueError(f"`num_steps` must be an int >= 0, got {num_steps!r}.")
    if not isinstance(checkpoint_every, int) or checkpoint_every < 1:
        raise ValueError(f"`checkpoint_every` must be an int >= 1, got {checkpoint_every!r}.")
    if not callable(batches):
        raise TypeError(
            "`batches` must be a pure sampler `batches(key) -> batch`; wrap arrays with "
            f"`jaxgen.core.minibatches(data, batch_size)`. Got {type(batches).__name__}."
        )
    opt_state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
    key_data = jr.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    losses: list[float] = []
    start = 0
    path = latest_checkpoint(checkpoint_dir)
    if path is not None:
        (model, opt_state, saved_key), meta = load_checkpoint(path, (model, opt_state, key_data))
        if not np.array_equal(np.asarray(saved_key), np.asarray(key_data)):
            raise ValueError(
                f"the checkpoint at {path} was written by a run with another `key`; pass the "
                "same key to resume, or a fresh `checkpoint_dir`."
            )
        start, losses = int(meta["step"]), list(meta["losses"])
    if mesh is not None:
        model, opt_state = replicate((model, opt_state), mesh)

    def checkpoint(step: int) -> None:
        if checkpoint_dir is not None:
            save_checkpoint(checkpoint_dir, step, (model, opt_state, key_data), {"losses": losses})
            prune_checkpoints(checkpoint_dir, keep_checkpoints)

    bar = None
    if progress and sys.stderr.isatty() and num_steps > start:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_steps, initial=start, desc="fit", leave=False)
    pending: list[jax.Array] = []
    for step in range(start, num_steps):
        model, opt_state, loss = train_step(
            model,
            opt_state,
            key,
            jnp.asarray(step),
            loss_fn=loss_fn,
            batches=batches,
            optimizer=optimizer,
            mesh=mesh,
        )
        pending.append(loss)
        done = step + 1
        if done % checkpoint_every == 0 or done == num_steps or bar is not None and done % 50 == 0:
            losses.extend(float(x) for x in jax.device_get(pending))
            pending = []
            if bar is not None:
                bar.update(done - bar.n)
                bar.set_postfix(loss=f"{losses[-1]:.4g}")
            if done % checkpoint_every == 0 or done == num_steps:
                checkpoint(done)
    if bar is not None:
        bar.close()
    return FitResult(model, opt_state, np.asarray(losses, dtype=np.float64), start)
