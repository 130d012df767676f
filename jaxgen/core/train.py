"""One generic optax training loop: a jitted step, checkpoints, resume, data parallelism.

Losses are pure ``(model, batch, key) -> scalar``. Batches come from a pure sampler
``batches(key) -> batch`` that is traced inside the step, so batch sampling, key splitting, the
gradient and the update are one compiled call. The key of step ``k`` is ``fold_in(key, k)``:
a run restarted from its step-``k`` checkpoint replays exactly the steps an uninterrupted run
would have taken.
"""

import dataclasses
import functools
import sys
from collections.abc import Callable
from typing import Any, TypedDict

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
from jax.sharding import Mesh
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree

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


def _loss_and_grad(
    model: PyTree,
    batch: PyTree,
    key: PRNGKeyArray,
    state: PyTree,
    step: Any,
    *,
    loss_fn: Callable[..., Any],
    stateful: bool,
    pass_step: bool,
) -> tuple[Float[Array, ""], PyTree, PyTree]:
    """(loss, new state, gradients) of one step; the new state carries no gradient."""
    extra = {"step": step} if pass_step else {}
    if stateful:

        def with_state(m: PyTree) -> tuple[Float[Array, ""], PyTree]:
            return loss_fn(m, batch, key, state, **extra)

        (loss, new_state), grads = eqx.filter_value_and_grad(with_state, has_aux=True)(model)
        return loss, jax.lax.stop_gradient(new_state), grads
    loss, grads = eqx.filter_value_and_grad(lambda m: loss_fn(m, batch, key, **extra))(model)
    return loss, state, grads


def _sampled_step(
    model: PyTree,
    opt_state: optax.OptState,
    key: PRNGKeyArray,
    step: Any,
    state: PyTree = None,
    *,
    loss_fn: Callable[..., Any],
    batches: BatchSampler,
    optimizer: optax.GradientTransformation,
    mesh: Mesh | None,
    stateful: bool = False,
    pass_step: bool = False,
) -> tuple[PyTree, optax.OptState, PyTree, Float[Array, ""]]:
    """Step ``step`` of a run: draw the batch, take one optimiser step.

    Returns (model, opt_state, state, loss). The key of step ``k`` is ``fold_in(key, k)``,
    whatever the chunking, so a run's losses do not depend on ``steps_per_call``.
    """
    batch_key, loss_key = jr.split(jr.fold_in(key, step))
    batch = batches(batch_key)
    if mesh is not None:
        batch = shard_batch(batch, mesh)
    loss, state, grads = _loss_and_grad(
        model,
        batch,
        loss_key,
        state,
        step,
        loss_fn=loss_fn,
        stateful=stateful,
        pass_step=pass_step,
    )
    updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_inexact_array))
    return eqx.apply_updates(model, updates), opt_state, state, loss


def _chunk(
    shared: tuple[PRNGKeyArray, dict[str, Any]],
    model: PyTree,
    opt_state: optax.OptState,
    state: PyTree,
    start: Int[Array, ""],
    count: Int[Array, ""],
    *,
    chunk_size: int,
) -> tuple[PyTree, optax.OptState, PyTree, Float[Array, " chunk"]]:
    """Steps ``start, ..., start + count - 1`` (``count <= chunk_size``) in one ``lax.scan``.

    ``shared = (key, step_kwargs)``: the key and what `_sampled_step` takes by keyword (loss,
    batch sampler, optimizer). It is the first argument so that it is never donated: a loss
    may close over arrays the caller keeps (a frozen teacher, the data).

    The scan has the static length ``chunk_size``; iterations ``i >= count`` pass the carry
    through (``lax.cond``), so a short last chunk (or one cut at a checkpoint) reuses the same
    executable. The returned losses are valid in their first ``count`` entries.
    """
    key, step_kwargs = shared
    params, static = eqx.partition((model, opt_state, state), eqx.is_array)
    dtype = jnp.result_type(float)

    def one_step(params: PyTree, i: Int[Array, ""]) -> tuple[PyTree, Array]:
        m, o, s = eqx.combine(params, static)
        m, o, s, loss = _sampled_step(m, o, key, start + i, s, **step_kwargs)
        return eqx.filter((m, o, s), eqx.is_array), loss.astype(dtype)

    def skip(params: PyTree, i: Int[Array, ""]) -> tuple[PyTree, Array]:
        return params, jnp.zeros((), dtype)

    def body(params: PyTree, i: Int[Array, ""]) -> tuple[PyTree, Array]:
        return jax.lax.cond(i < count, one_step, skip, params, i)

    params, losses = jax.lax.scan(body, params, jnp.arange(chunk_size, dtype=start.dtype))
    model, opt_state, state = eqx.combine(params, static)
    return model, opt_state, state, losses


# Module level, so that repeated `fit` calls with the same loss/sampler/optimizer reuse the
# compiled step. `_sampled_step` is the un-jitted twin for `eqx.debug.assert_max_traces`.
train_step = eqx.filter_jit(_sampled_step)
# Model, optimiser state and carried state are donated (never the first argument: key, loss,
# sampler, optimizer): `fit` copies them once on entry, so the caller's arrays stay valid while
# the chunks update theirs in place.
train_chunk = eqx.filter_jit(_chunk, donate="all-except-first")


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
    data = jax.tree_util.tree_map(jnp.asarray, data)
    # A pytree (data are its leaves), not a closure: `fit` then passes the arrays into its
    # compiled chunk instead of baking them in as constants, and reuses that chunk for any
    # data of the same shapes (a closure is a new static argument on every call).
    return eqx.Partial(_sample_rows, data, batch_size=batch_size)


def _sample_rows(data: PyTree, key: PRNGKeyArray, *, batch_size: int) -> PyTree:
    num = jax.tree_util.tree_leaves(data)[0].shape[0]
    idx = jr.randint(key, (batch_size,), 0, num)
    return jax.tree_util.tree_map(lambda x: x[idx], data)


def adamw_cosine(
    learning_rate: float,
    num_steps: int,
    *,
    warmup_steps: int = 0,
    weight_decay: float = 1e-4,
    clip_norm: float | None = 1.0,
    b1: float = 0.9,
    b2: float = 0.999,
    mask: Any = None,
) -> optax.GradientTransformation:
    """AdamW with linear warm-up then cosine decay, and global-norm gradient clipping.

    The one warm-up-cosine AdamW builder of jaxgen (the LM preset `jaxgen.transformers.lm_optimizer`
    is this with betas 0.9/0.95 and decay on matrices only).

    Args:
        learning_rate: peak learning rate.
        num_steps: steps of the schedule (warm-up included); the decay reaches 0 at
            ``max(num_steps, warmup_steps + 1)``.
        warmup_steps: linear warm-up from 0 (``0``: start at the peak).
        weight_decay: AdamW decoupled weight decay.
        clip_norm: global gradient-norm clip applied first (``None``: none).
        b1, b2: Adam betas.
        mask: optax.adamw's weight-decay mask (a pytree of bools or a function of the params).

    Returns:
        An optax transformation. Equal (hashable) arguments return the same object, so that
        `fit`, whose compiled chunk is keyed on the optimiser, compiles once for repeated runs
        (seeds, restarts, arms sharing a recipe).
    """
    args = (learning_rate, num_steps, warmup_steps, weight_decay, clip_norm, b1, b2, mask)
    try:
        return _adamw_cosine(*args)
    except TypeError:  # an unhashable argument (an array learning rate, a pytree mask)
        return _adamw_cosine.__wrapped__(*args)


@functools.lru_cache(maxsize=64)
def _adamw_cosine(
    learning_rate: Any,
    num_steps: int,
    warmup_steps: int,
    weight_decay: Any,
    clip_norm: Any,
    b1: Any,
    b2: Any,
    mask: Any,
) -> optax.GradientTransformation:
    warmup = max(warmup_steps, 1)
    schedule = optax.warmup_cosine_decay_schedule(
        0.0 if warmup_steps else learning_rate, learning_rate, warmup, max(num_steps, warmup + 1)
    )
    adamw = optax.adamw(schedule, b1=b1, b2=b2, weight_decay=weight_decay, mask=mask)
    return adamw if clip_norm is None else optax.chain(optax.clip_by_global_norm(clip_norm), adamw)


class FitResult(eqx.Module):
    """What `fit` returns, and what every ``fit_<method>`` trainer of jaxgen returns.

    A method whose trainer has more to report subclasses it and adds its extras as fields
    (e.g. `jaxgen.energy.JEMResult.buffer`); ``dataclasses.replace(result, model=...)`` makes a
    modified copy. It is an equinox module (a pytree), not a tuple: read it by attribute.

    Attributes:
        model: the trained model.
        opt_state: the final optimiser state.
        losses: the loss of every step taken, shape ``(num_steps,)`` (numpy, float64); steps
            restored from a checkpoint keep the losses recorded before the interruption.
        resumed_from: the step a checkpoint was resumed from (0 for a fresh run).
        state: the final carried state (``None`` unless `fit` was given ``state=``).
        evaluations: ``(step, dict)`` for every ``callback`` call that returned a dict.
    """

    model: PyTree
    opt_state: optax.OptState
    losses: np.ndarray
    resumed_from: int
    state: PyTree = None
    evaluations: tuple[tuple[int, dict[str, Any]], ...] = ()

    @classmethod
    def extend(cls, result: "FitResult", **extras: Any) -> Any:
        """``result`` as a ``cls``: its `FitResult` fields (``model`` overridable) + ``extras``.

        A trainer returning a subclass ends with ``MyResult.extend(fit(...), extra=...)``.
        """
        fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(FitResult)}
        return cls(**{**fields, **extras})


class FitOptions(TypedDict, total=False):
    """The options of `fit` that every ``fit_<method>`` trainer forwards (``**fit_options``).

    Attributes:
        steps_per_call: optimiser steps per compiled call (default `DEFAULT_STEPS_PER_CALL`).
        callback: ``callback(step, model, state) -> dict | None`` (with ``callback_every``).
        callback_every: steps between callback calls.
        checkpoint_dir: where to write checkpoints and resume from.
        checkpoint_every: steps between checkpoints.
        keep_checkpoints: how many recent checkpoints to keep.
        mesh: a device mesh (`data_mesh`) for data parallelism.
        progress: a tqdm bar when stderr is a terminal (default ``True``).
    """

    steps_per_call: int | None
    callback: Callable[[int, PyTree, PyTree], dict[str, Any] | None] | None
    callback_every: int | None
    checkpoint_dir: str | None
    checkpoint_every: int
    keep_checkpoints: int
    mesh: Mesh | None
    progress: bool


#: The names of `FitOptions`, in `fit`'s order.
FIT_OPTIONS: tuple[str, ...] = tuple(FitOptions.__annotations__)


def check_fit_options(fit_options: dict[str, Any], name: str = "fit_options") -> dict[str, Any]:
    """``fit_options`` may only hold `FitOptions` keys (a trainer's ``**fit_options``).

    Raises:
        TypeError: naming the unknown option(s) and the accepted ones.
    """
    unknown = sorted(set(fit_options) - set(FIT_OPTIONS))
    if unknown:
        raise TypeError(
            f"`{name}` got unknown option(s) {unknown}; the options forwarded to "
            f"`jaxgen.core.fit` are {list(FIT_OPTIONS)}."
        )
    return fit_options


def as_batches(data: Any, batch_size: int | None, name: str = "data") -> BatchSampler:
    """The one data form of the ``fit_<method>`` trainers, as a pure batch sampler.

    Args:
        data: a pure sampler ``batches(key) -> batch`` (any callable, used as is: e.g.
            `minibatches`, `jaxgen.data.random_windows`), or a pytree of arrays sharing the
            leading axis (one row per example), from which each step draws ``batch_size`` rows
            with replacement (`minibatches`).
        batch_size: rows per step; required (an int >= 1) when ``data`` are arrays.
        name: the argument's name in error messages.

    Returns:
        ``batches(key) -> batch``.
    """
    if callable(data) and not eqx.is_array(data):
        return data
    if batch_size is None:
        raise ValueError(
            f"`batch_size` is required when `{name}` are arrays (rows drawn per step); "
            "or pass a sampler `batches(key) -> batch`."
        )
    return minibatches(data, batch_size)


#: Optimiser steps per compiled call when `fit` is not told otherwise: short runs take a handful
#: of dispatches, and Ctrl-C or a crash loses at most this many steps past the last checkpoint.
DEFAULT_STEPS_PER_CALL = 100


def _positive_int(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"`{name}` must be an int >= 1, got {value!r}.")
    return value


def fit(
    loss_fn: Callable[..., Any],
    model: PyTree,
    batches: BatchSampler,
    optimizer: optax.GradientTransformation,
    *,
    num_steps: int,
    key: PRNGKeyArray,
    steps_per_call: int | None = None,
    state: PyTree = None,
    pass_step: bool = False,
    callback: Callable[[int, PyTree, PyTree], dict[str, Any] | None] | None = None,
    callback_every: int | None = None,
    checkpoint_dir: str | None = None,
    checkpoint_every: int = 1000,
    keep_checkpoints: int = 2,
    mesh: Mesh | None = None,
    progress: bool = True,
) -> FitResult:
    """Minimise ``loss_fn`` over the inexact arrays of ``model`` with ``optimizer``.

    Steps run ``steps_per_call`` at a time inside one compiled loop (model, optimiser state and
    carried state donated), so Python dispatch costs one call per chunk, not per step. Step ``k``
    draws its batch and loss randomness from ``fold_in(key, k)`` whatever the chunking: any
    ``steps_per_call`` gives the same losses and parameters up to float round-off, and a run
    resumed from its step-``k`` checkpoint replays exactly the steps an uninterrupted run takes.
    Chunks end at every multiple of ``checkpoint_every`` and ``callback_every`` (a chunk cut
    short there reuses the same executable: its length is traced), so checkpoints and callbacks
    happen exactly at the steps asked for.

    Args:
        loss_fn: pure ``(model, batch, key) -> scalar``; with ``state`` given,
            ``(model, batch, key, state) -> (scalar, new_state)``; with ``pass_step=True`` it
            also receives the traced step index as keyword ``step``. Define it at module level
            (or keep one object) so the compiled chunk is reused across calls.
        model: an equinox module (or any pytree); its inexact arrays are trained.
        batches: pure sampler ``batches(key) -> batch`` (see `minibatches`), traced in the step.
        optimizer: an optax transformation (e.g. `adamw_cosine`; per-part optimisers through
            ``optax.multi_transform``).
        num_steps: total number of steps (a resumed run continues up to this number).
        key: PRNG key of the run; step ``k`` uses ``fold_in(key, k)``.
        steps_per_call: optimiser steps per compiled call (default `DEFAULT_STEPS_PER_CALL`).
        state: a pytree threaded through the steps (a replay buffer, an EMA of the weights):
            the loss returns its next value, taken under ``stop_gradient``; it is checkpointed
            and resumed with the model, and returned as ``FitResult.state``.
        pass_step: give ``loss_fn`` the step index (int32 scalar) as keyword ``step``.
        callback: ``callback(step, model, state) -> dict | None``, called after every
            ``callback_every`` steps and after the last one (evaluation, logging, early
            inspection); dicts it returns are collected in ``FitResult.evaluations``.
        callback_every: steps between callback calls (required with ``callback``).
        checkpoint_dir: where to write checkpoints and resume from (``None``: no checkpoints).
        checkpoint_every: steps between checkpoints; a final one is always written.
        keep_checkpoints: how many recent checkpoints to keep.
        mesh: a device mesh (`data_mesh`); the batch is sharded over its ``"data"`` axis and the
            model replicated. ``None`` runs on the default device.
        progress: show a tqdm bar (advanced per chunk) when stderr is a terminal.

    Returns:
        `FitResult` (model, opt_state, losses, resumed_from, state, evaluations).

    Examples:
        >>> import jax.numpy as jnp, jax.random as jr, optax
        >>> loss = lambda w, batch, key: jnp.sum((w - batch) ** 2)
        >>> res = fit(loss, jnp.zeros(2), lambda k: jnp.ones(2), optax.sgd(0.1), num_steps=50,
        ...           key=jr.key(0), progress=False)
        >>> bool(jnp.allclose(res.model, 1.0, atol=1e-3)), res.losses.shape
        (True, (50,))
    """
    if not isinstance(num_steps, int) or isinstance(num_steps, bool) or num_steps < 0:
        raise ValueError(f"`num_steps` must be an int >= 0, got {num_steps!r}.")
    _positive_int("checkpoint_every", checkpoint_every)
    chunk_size = _positive_int(
        "steps_per_call", DEFAULT_STEPS_PER_CALL if steps_per_call is None else steps_per_call
    )
    if callback is not None:
        if not callable(callback):
            raise TypeError(f"`callback` must be callable, got {type(callback).__name__}.")
        if callback_every is None:
            raise ValueError("`callback_every` is required with `callback` (steps between calls).")
        _positive_int("callback_every", callback_every)
    elif callback_every is not None:
        raise ValueError("`callback_every` was given without a `callback`.")
    if not callable(batches):
        raise TypeError(
            "`batches` must be a pure sampler `batches(key) -> batch`; wrap arrays with "
            f"`jaxgen.core.minibatches(data, batch_size)`. Got {type(batches).__name__}."
        )
    stateful = state is not None
    opt_state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
    key_data = jr.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    losses: list[float] = []
    evaluations: list[tuple[int, dict[str, Any]]] = []
    start = 0
    path = latest_checkpoint(checkpoint_dir)
    if path is not None:
        template = (model, opt_state, key_data) + ((state,) if stateful else ())
        restored, meta = load_checkpoint(path, template)
        model, opt_state, saved_key = restored[:3]
        if stateful:
            state = restored[3]
        if not np.array_equal(np.asarray(saved_key), np.asarray(key_data)):
            raise ValueError(
                f"the checkpoint at {path} was written by a run with another `key`; pass the "
                "same key to resume, or a fresh `checkpoint_dir`."
            )
        start, losses = int(meta["step"]), list(meta["losses"])
    # Own copies (strongly typed, so the loop carry keeps its types): the chunks donate them.
    model, opt_state, state = jax.tree_util.tree_map(
        lambda x: jnp.array(x, dtype=x.dtype) if eqx.is_array(x) else x, (model, opt_state, state)
    )
    if mesh is not None:
        model, opt_state, state = replicate((model, opt_state, state), mesh)

    def checkpoint(step: int) -> None:
        if checkpoint_dir is not None:
            tree = (model, opt_state, key_data) + ((state,) if stateful else ())
            save_checkpoint(checkpoint_dir, step, tree, {"losses": losses})
            prune_checkpoints(checkpoint_dir, keep_checkpoints)

    bar = None
    if progress and sys.stderr.isatty() and num_steps > start:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_steps, initial=start, desc="fit", leave=False)
    step_kwargs = dict(
        loss_fn=loss_fn,
        batches=batches,
        optimizer=optimizer,
        mesh=mesh,
        stateful=stateful,
        pass_step=pass_step,
    )
    # Chunk losses stay on the device until something needs them (a checkpoint, a callback, the
    # progress bar, the end): no host sync between chunks, so the next chunk is dispatched while
    # the device still runs the current one.
    pending: list[tuple[jax.Array, int]] = []

    def flush() -> None:
        for chunk_losses, count in pending:
            losses.extend(float(x) for x in np.asarray(jax.device_get(chunk_losses))[:count])
        pending.clear()

    step = start
    while step < num_steps:
        stop = min(num_steps, step + chunk_size)
        if checkpoint_dir is not None:
            stop = min(stop, (step // checkpoint_every + 1) * checkpoint_every)
        if callback is not None:
            stop = min(stop, (step // callback_every + 1) * callback_every)
        count = stop - step
        model, opt_state, state, chunk_losses = train_chunk(
            (key, step_kwargs),
            model,
            opt_state,
            state,
            jnp.asarray(step, jnp.int32),
            jnp.asarray(count, jnp.int32),
            chunk_size=chunk_size,
        )
        pending.append((chunk_losses, count))
        step = stop
        if bar is not None:
            flush()
            bar.update(step - bar.n)
            bar.set_postfix(loss=f"{losses[-1]:.4g}")
        if checkpoint_dir is not None and (step % checkpoint_every == 0 or step == num_steps):
            flush()
            checkpoint(step)
        if callback is not None and (step % callback_every == 0 or step == num_steps):
            flush()
            out = callback(step, model, state)
            if out is not None:
                evaluations.append((step, dict(out)))
    flush()
    if bar is not None:
        bar.close()
    return FitResult(
        model=model,
        opt_state=opt_state,
        losses=np.asarray(losses, dtype=np.float64),
        resumed_from=start,
        state=state if stateful else None,
        evaluations=tuple(evaluations),
    )
