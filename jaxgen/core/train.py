"""One generic optax training loop: a jitted step, checkpoints, resume, data parallelism.

Losses are pure ``(model, batch, key) -> scalar``. Batches come from a pure sampler
``batches(key) -> batch`` that is traced inside the step, so batch sampling, key splitting, the
gradient and the update are one compiled call. The key of step ``k`` is ``fold_in(key, k)``:
a run restarted from its step-``k`` checkpoint replays exactly the steps an uninterrupted run
would have taken.
"""

import dataclasses
import functools
import inspect
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
from jax.sharding import Mesh, PartitionSpec
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree

from .checkpoint import load_latest_checkpoint, prune_checkpoints, save_checkpoint
from .checks import (
    check_choice,
    check_in_interval,
    check_key,
    check_nonnegative,
    check_positive,
    check_positive_int,
    is_traced,
)
from .mesh import (
    ShardingRule,
    fsdp_rule,
    param_shardings,
    replicate,
    shard_batch,
    shard_params as _shard_tree,
)

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


def _all_finite(tree: PyTree) -> Array:
    leaves = [
        jnp.all(jnp.isfinite(x))
        for x in jax.tree_util.tree_leaves(eqx.filter(tree, eqx.is_inexact_array))
    ]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def _checked_step(
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
    on_nonfinite: str = "ignore",
) -> tuple[PyTree, optax.OptState, PyTree, Float[Array, ""], Array]:
    """`_sampled_step` that also returns whether the loss and gradients were finite.

    Unless ``on_nonfinite == "ignore"``, a step whose loss or any update (the optimiser's output
    from the gradients: a non-finite gradient of a trained array makes it non-finite) is not
    finite returns
    the model, optimiser state and carried state it was given (the update is dropped, as
    ``optax.apply_if_finite`` does, here also for a non-finite loss and inside the scan).
    """
    batch_key, loss_key = jr.split(jr.fold_in(key, step))
    batch = batches(batch_key)
    if mesh is not None:
        batch = shard_batch(batch, mesh)
    loss, new_state, grads = _loss_and_grad(
        model,
        batch,
        loss_key,
        state,
        step,
        loss_fn=loss_fn,
        stateful=stateful,
        pass_step=pass_step,
    )
    updates, new_opt_state = optimizer.update(
        grads, opt_state, eqx.filter(model, eqx.is_inexact_array)
    )
    new = (eqx.apply_updates(model, updates), new_opt_state, new_state)
    if on_nonfinite == "ignore":
        return *new, loss, jnp.asarray(True)
    # The updates, not the raw gradients, as optax.apply_if_finite does: a gradient the
    # optimiser discards (a part frozen with optax.set_to_zero) cannot spoil the run.
    ok = jnp.isfinite(loss) & _all_finite(updates)
    old_arrays, static = eqx.partition((model, opt_state, state), eqx.is_array)
    new_arrays = eqx.filter(new, eqx.is_array)
    kept = jax.tree_util.tree_map(lambda n, o: jnp.where(ok, n, o), new_arrays, old_arrays)
    return *eqx.combine(kept, static), loss, ok


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
    on_nonfinite: str = "ignore",
) -> tuple[PyTree, optax.OptState, PyTree, Float[Array, ""]]:
    """Step ``step`` of a run: draw the batch, take one optimiser step.

    Returns (model, opt_state, state, loss). The key of step ``k`` is ``fold_in(key, k)``,
    whatever the chunking, so a run's losses do not depend on ``steps_per_call``. With
    ``on_nonfinite="skip_step"`` (or ``"raise"``) a step with a non-finite loss or gradient
    leaves model, optimiser state and state unchanged.
    """
    model, opt_state, state, loss, _ = _checked_step(
        model,
        opt_state,
        key,
        step,
        state,
        loss_fn=loss_fn,
        batches=batches,
        optimizer=optimizer,
        mesh=mesh,
        stateful=stateful,
        pass_step=pass_step,
        on_nonfinite=on_nonfinite,
    )
    return model, opt_state, state, loss


def _constrain(tree: PyTree, shardings: PyTree) -> PyTree:
    """``with_sharding_constraint`` on every array of ``tree`` that has a sharding."""
    if shardings is None:
        return tree
    return jax.tree_util.tree_map(
        lambda x, s: x if s is None else jax.lax.with_sharding_constraint(x, s),
        tree,
        shardings,
        is_leaf=lambda x: x is None,
    )


#: Per-step flags returned by a chunk: the step ran with finite loss and gradients, it had a
#: non-finite one (its update was dropped), or it did not run (past ``count``, or after a
#: non-finite step under ``on_nonfinite="raise"``).
STEP_OK, STEP_NONFINITE, STEP_NOT_RUN = 0, 1, 2


def _chunk(
    shared: tuple[PRNGKeyArray, dict[str, Any]],
    model: PyTree,
    opt_state: optax.OptState,
    state: PyTree,
    start: Int[Array, ""],
    count: Int[Array, ""],
    halted: Array | None = None,
    *,
    chunk_size: int,
    on_nonfinite: str = "ignore",
    shardings: PyTree = None,
) -> tuple[PyTree, optax.OptState, PyTree, Float[Array, " chunk"], Int[Array, " chunk"], Array]:
    """Steps ``start, ..., start + count - 1`` (``count <= chunk_size``) in one ``lax.scan``.

    ``shared = (key, step_kwargs)``: the key and what `_sampled_step` takes by keyword (loss,
    batch sampler, optimizer). It is the first argument so that it is never donated: a loss
    may close over arrays the caller keeps (a frozen teacher, the data).

    The scan has the static length ``chunk_size``; iterations ``i >= count`` pass the carry
    through (``lax.cond``), so a short last chunk (or one cut at a checkpoint) reuses the same
    executable. Under ``on_nonfinite="raise"`` the first step with a non-finite loss or
    gradient sets ``halted`` (carried from chunk to chunk, so chunks dispatched before the host
    has seen it do nothing) and every later step passes the carry through.

    Returns:
        ``(model, opt_state, state, losses, flags, halted)``: ``losses`` and ``flags``
        (`STEP_OK`, `STEP_NONFINITE`, `STEP_NOT_RUN`) have length ``chunk_size``, valid in
        their first ``count`` entries. ``shardings`` (a pytree of ``NamedSharding`` matching
        the arrays of ``(model, opt_state, state)``) keeps sharded parameters sharded.
    """
    key, step_kwargs = shared
    params, static = eqx.partition((model, opt_state, state), eqx.is_array)
    dtype = jnp.result_type(float)
    halted = jnp.asarray(False) if halted is None else halted

    def one_step(carry: tuple[PyTree, Array], i: Int[Array, ""]) -> tuple[Any, Any]:
        params, halted = carry
        m, o, s = eqx.combine(params, static)
        m, o, s, loss, ok = _checked_step(
            m, o, key, start + i, s, on_nonfinite=on_nonfinite, **step_kwargs
        )
        if on_nonfinite == "raise":
            halted = halted | ~ok
        params = _constrain(eqx.filter((m, o, s), eqx.is_array), shardings)
        flag = jnp.where(ok, STEP_OK, STEP_NONFINITE).astype(jnp.int8)
        return (params, halted), (loss.astype(dtype), flag)

    def skip(carry: tuple[PyTree, Array], i: Int[Array, ""]) -> tuple[Any, Any]:
        return carry, (jnp.zeros((), dtype), jnp.asarray(STEP_NOT_RUN, jnp.int8))

    def body(carry: tuple[PyTree, Array], i: Int[Array, ""]) -> tuple[Any, Any]:
        return jax.lax.cond((i < count) & ~carry[1], one_step, skip, carry, i)

    (params, halted), (losses, flags) = jax.lax.scan(
        body, (params, halted), jnp.arange(chunk_size, dtype=start.dtype)
    )
    model, opt_state, state = eqx.combine(params, static)
    return model, opt_state, state, losses, flags, halted


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
    learning_rate: float | Float[Array, ""],
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

    Raises:
        ValueError: ``learning_rate`` or ``clip_norm`` not finite and > 0, ``weight_decay`` not
            finite and >= 0, ``b1`` or ``b2`` outside ``[0, 1)``, ``num_steps`` or
            ``warmup_steps`` not an int >= 0 (numbers are checked now; a traced value carries
            the check into the optimiser).
    """
    if callable(learning_rate):
        raise TypeError(
            "`learning_rate` must be a number (the peak of the warm-up-cosine schedule), got "
            f"{type(learning_rate).__name__}; pass a schedule to optax.adamw directly."
        )
    learning_rate = _checked(check_positive, learning_rate, "learning_rate")
    num_steps = check_positive_int(num_steps, "num_steps", minimum=0)
    warmup_steps = check_positive_int(warmup_steps, "warmup_steps", minimum=0)
    weight_decay = _checked(check_nonnegative, weight_decay, "weight_decay")
    if clip_norm is not None:
        clip_norm = _checked(check_positive, clip_norm, "clip_norm")
    b1 = _checked(check_in_interval, b1, "b1", 0.0, 1.0, closed=(True, False))
    b2 = _checked(check_in_interval, b2, "b2", 0.0, 1.0, closed=(True, False))
    args = (learning_rate, num_steps, warmup_steps, weight_decay, clip_norm, b1, b2, mask)
    try:
        return _adamw_cosine(*args)
    except TypeError:  # an unhashable argument (an array learning rate, a pytree mask)
        return _adamw_cosine.__wrapped__(*args)


def _checked(check: Callable[..., Any], value: Any, *args: Any, **kwargs: Any) -> Any:
    """``check(value, ...)``; a concrete value is kept as given (a Python float stays hashable for
    the optimiser cache; its check has already raised if it failed), a traced one is replaced by
    the checked array that carries the run-time check.
    """
    out = check(value, *args, **kwargs)
    return out if is_traced(value) else value


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
            restored from a checkpoint keep the losses recorded before the interruption. A step
            skipped under ``on_nonfinite="skip_step"`` keeps its non-finite loss.
        resumed_from: the step a checkpoint was resumed from (0 for a fresh run).
        state: the final carried state (``None`` unless `fit` was given ``state=``).
        evaluations: ``(step, dict)`` for every ``callback`` call that returned a dict.
        nonfinite_steps: the steps (0-based, as indices of ``losses``) whose loss or gradient
            was not finite and whose update was dropped (``on_nonfinite="skip_step"``).
    """

    model: PyTree
    opt_state: optax.OptState
    losses: np.ndarray
    resumed_from: int
    state: PyTree = None
    evaluations: tuple[tuple[int, dict[str, Any]], ...] = ()
    nonfinite_steps: tuple[int, ...] = ()

    @classmethod
    def extend(cls, result: "FitResult", **extras: Any) -> Any:
        """``result`` as a ``cls``: its `FitResult` fields (``model`` overridable) + ``extras``.

        A trainer returning a subclass ends with ``MyResult.extend(fit(...), extra=...)``.
        """
        fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(FitResult)}
        return cls(**{**fields, **extras})


class NonFiniteError(FloatingPointError):
    """`fit` met a non-finite loss or gradient (``on_nonfinite="raise"``).

    Attributes:
        step: the step (0-based index into the loss history) whose loss or gradient was not
            finite; its update was not applied.
        loss: that step's loss (may itself be finite when only a gradient was not).
        last_finite_loss: the loss of the step before (``None`` for the first step).
        checkpoint: the path of the last checkpoint (written or resumed from), kept as it was;
            ``None`` without checkpoints.
    """

    def __init__(
        self, step: int, loss: float, last_finite_loss: float | None, checkpoint: str | None
    ):
        self.step, self.loss = step, loss
        self.last_finite_loss, self.checkpoint = last_finite_loss, checkpoint
        last = (
            "none (it was the first step)"
            if last_finite_loss is None
            else f"{last_finite_loss:.6g} at step {step - 1}"
        )
        where = (
            f"the last checkpoint, {checkpoint}, is kept: a restart with the same "
            "`checkpoint_dir` resumes from it"
            if checkpoint is not None
            else "no checkpoint was written (`checkpoint_dir` is None or none was due yet)"
        )
        super().__init__(
            f"fit stopped: the loss or a gradient is not finite at step {step} (loss {loss}); "
            f"last finite loss: {last}; {where}. Lower the learning rate or check the data and "
            'the loss; `on_nonfinite="skip_step"` drops such steps and trains on.'
        )


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
        on_nonfinite: ``"raise"`` (default), ``"skip_step"`` or ``"ignore"`` at a non-finite
            loss or update.
        shard_params: shard parameters and optimiser state over the mesh (FSDP; ``True``, or a
            rule ``(path, array) -> PartitionSpec | None``).
    """

    steps_per_call: int | None
    callback: Callable[[int, PyTree, PyTree], dict[str, Any] | None] | None
    callback_every: int | None
    checkpoint_dir: str | None
    checkpoint_every: int
    keep_checkpoints: int
    mesh: Mesh | None
    progress: bool
    on_nonfinite: str
    shard_params: Any


#: The names of `FitOptions`, in `fit`'s order.
FIT_OPTIONS: tuple[str, ...] = tuple(FitOptions.__annotations__)


def check_fit_options(
    fit_options: dict[str, Any],
    name: str = "fit_options",
    *,
    unsupported: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``fit_options`` may only hold `FitOptions` keys (a trainer's ``**fit_options``).

    Args:
        fit_options: the trainer's ``**fit_options``.
        name: the argument's name in error messages.
        unsupported: for a trainer not built on `fit` (no optimiser steps), the options that
            do not apply to it, each with the reason; such an option given a value other than
            `fit`'s default raises instead of being ignored.

    Raises:
        TypeError: naming the unknown option(s) and the accepted ones.
        ValueError: an ``unsupported`` option given a value other than `fit`'s default, naming
            the option, the reason and the value.
    """
    unknown = sorted(set(fit_options) - set(FIT_OPTIONS))
    if unknown:
        raise TypeError(
            f"`{name}` got unknown option(s) {unknown}; the options forwarded to "
            f"`jaxgen.core.fit` are {list(FIT_OPTIONS)}."
        )
    for option, reason in (unsupported or {}).items():
        if option not in fit_options:
            continue
        value, default = fit_options[option], _fit_defaults()[option]
        if not (value is default or (isinstance(value, str) and value == default)):
            raise ValueError(
                f"`{option}` does not apply here: {reason}. Leave it at its default "
                f"({default!r}), got {value!r}."
            )
    return fit_options


def _fit_defaults() -> dict[str, Any]:
    """`fit`'s default value of each of the `FitOptions`."""
    params = inspect.signature(fit).parameters
    return {option: params[option].default for option in FIT_OPTIONS}


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

NONFINITE_OPTIONS = ("raise", "skip_step", "ignore")


def _positive_int(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"`{name}` must be an int >= 1, got {value!r}.")
    return value


def _host(x: Any) -> Any:
    """A numpy copy of ``x``, also of an array that spans other processes (collective then)."""
    if not isinstance(x, jax.Array):
        return x
    if x.is_fully_addressable:
        return np.asarray(jax.device_get(x))
    if x.is_fully_replicated:
        return np.asarray(x.addressable_data(0))
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def _barrier(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


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
    on_nonfinite: str = "raise",
    shard_params: bool | ShardingRule = False,
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

    Guarded run: by default a step whose loss or any gradient is not finite stops the run with
    a `NonFiniteError` giving the step, the last finite loss and the last checkpoint (which is
    kept; nothing past the bad step is written). The check costs one reduction per step and no
    host synchronisation: the compiled loop freezes at the bad step and the error is raised when
    the host next reads the losses (at a checkpoint, callback or the end).

    Checkpoints are written durably and atomically (see `save_checkpoint`); a damaged latest
    checkpoint is skipped with a `CheckpointWarning` and the previous one is resumed from.

    Scaling (see `jaxgen.core.mesh` for the multi-process launch recipe): with ``mesh`` the
    batch is split over the mesh's devices (over every process's devices after
    `init_processes`; feed each process only its rows with `sharded_minibatches`), only process
    0 writes checkpoints (the others wait at a barrier) and every process resumes from them.
    With ``shard_params`` the model's, optimiser state's and carried state's large arrays are
    sharded over the mesh (FSDP / ZeRO-3) instead of replicated.

    Args:
        loss_fn: pure ``(model, batch, key) -> scalar``; with ``state`` given,
            ``(model, batch, key, state) -> (scalar, new_state)``; with ``pass_step=True`` it
            also receives the traced step index as keyword ``step``. Define it at module level
            (or keep one object) so the compiled chunk is reused across calls.
        model: an equinox module (or any pytree); its inexact arrays are trained.
        batches: pure sampler ``batches(key) -> batch`` (see `minibatches`,
            `sharded_minibatches`), traced in the step.
        optimizer: an optax transformation (e.g. `adamw_cosine`; per-part optimisers through
            ``optax.multi_transform``).
        num_steps: total number of steps (a resumed run continues up to this number).
        key: PRNG key of the run, typed (``jax.random.key``) or raw (``jax.random.PRNGKey``);
            step ``k`` uses ``fold_in(key, k)``.
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
            In a multi-process run, a directory every process can read.
        checkpoint_every: steps between checkpoints; a final one is always written.
        keep_checkpoints: how many recent checkpoints to keep.
        mesh: a device mesh (`data_mesh`); the batch is sharded over all its axes and the model
            replicated (or sharded, see ``shard_params``). ``None`` runs on the default device.
        progress: show a tqdm bar (advanced per chunk) when stderr is a terminal.
        on_nonfinite: what a non-finite loss or gradient does: ``"raise"`` (default) stops with
            `NonFiniteError`; ``"skip_step"`` drops that step's update (model, optimiser state
            and carried state unchanged, as ``optax.apply_if_finite`` does), records the step
            in ``FitResult.nonfinite_steps`` and warns once at the end; ``"ignore"`` applies the
            update whatever it is (no check).
        shard_params: ``False`` (default) replicates the model on the mesh; ``True`` shards
            every large array of ``(model, opt_state, state)`` with `fsdp_rule` (needs
            ``mesh``); a rule ``(path, array) -> PartitionSpec | None`` (``path`` a key path
            into the tuple ``(model, opt_state, state)``) decides first, ``None`` falling back
            to `fsdp_rule`. Pass ``fsdp_rule(mesh, axes=..., min_size=...)`` to tune it.

    Returns:
        `FitResult` (model, opt_state, losses, resumed_from, state, evaluations,
        nonfinite_steps).

    Raises:
        NonFiniteError: a non-finite loss or gradient under ``on_nonfinite="raise"``.
        CorruptCheckpointError: every checkpoint in ``checkpoint_dir`` is damaged.

    Examples:
        >>> import jax.numpy as jnp, jax.random as jr, optax
        >>> loss = lambda w, batch, key: jnp.sum((w - batch) ** 2)
        >>> res = fit(loss, jnp.zeros(2), lambda k: jnp.ones(2), optax.sgd(0.1), num_steps=50,
        ...           key=jr.key(0), progress=False)
        >>> bool(jnp.allclose(res.model, 1.0, atol=1e-3)), res.losses.shape
        (True, (50,))
    """
    key = check_key(key, "key")
    check_choice(on_nonfinite, NONFINITE_OPTIONS, "on_nonfinite")
    if not isinstance(num_steps, int) or isinstance(num_steps, bool) or num_steps < 0:
        raise ValueError(f"`num_steps` must be an int >= 0, got {num_steps!r}.")
    _positive_int("checkpoint_every", checkpoint_every)
    _positive_int("keep_checkpoints", keep_checkpoints)
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
    if shard_params is not False and not (shard_params is True or callable(shard_params)):
        raise TypeError(
            "`shard_params` must be a bool or a rule `(path, array) -> PartitionSpec | None`, "
            f"got {type(shard_params).__name__}."
        )
    if shard_params is not False and mesh is None:
        raise ValueError("`shard_params` needs a `mesh` to shard over (see `data_mesh`).")
    stateful = state is not None
    opt_state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
    key_data = jr.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    losses: list[float] = []
    evaluations: list[tuple[int, dict[str, Any]]] = []
    nonfinite: list[int] = []
    start = 0
    template = (model, opt_state, key_data) + ((state,) if stateful else ())
    loaded = load_latest_checkpoint(checkpoint_dir, template)
    last_checkpoint = None
    if loaded is not None:
        last_checkpoint, restored, meta = loaded
        model, opt_state, saved_key = restored[:3]
        if stateful:
            state = restored[3]
        if not np.array_equal(np.asarray(saved_key), np.asarray(key_data)):
            raise ValueError(
                f"the checkpoint at {last_checkpoint} was written by a run with another `key`; "
                "pass the same key to resume, or a fresh `checkpoint_dir`."
            )
        start, losses = int(meta["step"]), list(meta["losses"])
        nonfinite = list(meta.get("nonfinite_steps", []))
    # Own copies (strongly typed, so the loop carry keeps its types): the chunks donate them.
    model, opt_state, state = jax.tree_util.tree_map(
        lambda x: jnp.array(x, dtype=x.dtype) if eqx.is_array(x) else x, (model, opt_state, state)
    )
    # On a mesh every carried array keeps one sharding from chunk to chunk (constrained inside
    # the chunk), so the second chunk reuses the first one's executable.
    shardings = None
    if mesh is not None:
        if shard_params is False:
            rule = lambda path, x: PartitionSpec()  # noqa: E731  (replicated)
        else:
            rule = fsdp_rule(mesh, override=None if shard_params is True else shard_params)
        shardings = param_shardings(eqx.filter((model, opt_state, state), eqx.is_array), mesh, rule)
        model, opt_state, state = _shard_tree((model, opt_state, state), mesh, rule)

    def checkpoint(step: int) -> None:
        nonlocal last_checkpoint
        if checkpoint_dir is not None:
            tree = (model, opt_state, key_data) + ((state,) if stateful else ())
            if jax.process_count() > 1:
                tree = jax.tree_util.tree_map(_host, tree)  # a collective: every process
            if jax.process_index() == 0:
                meta = {"losses": losses, "nonfinite_steps": nonfinite}
                save_checkpoint(checkpoint_dir, step, tree, meta)
                prune_checkpoints(checkpoint_dir, keep_checkpoints)
            _barrier(f"jaxgen.core.fit: checkpoint {step} written")
            last_checkpoint = os.path.join(checkpoint_dir, f"step_{step:08d}")

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
    pending: list[tuple[jax.Array, jax.Array, int, int]] = []

    def flush() -> None:
        for chunk_losses, chunk_flags, count, first in pending:
            values, flags = _host(chunk_losses)[:count], _host(chunk_flags)[:count]
            for j in range(count):
                if flags[j] == STEP_NOT_RUN:  # after a non-finite step under "raise"
                    break
                if flags[j] == STEP_NONFINITE:
                    if on_nonfinite == "raise":
                        pending.clear()
                        last = losses[-1] if losses else None
                        raise NonFiniteError(first + j, float(values[j]), last, last_checkpoint)
                    nonfinite.append(first + j)
                losses.append(float(values[j]))
        pending.clear()

    halted = jnp.asarray(False) if mesh is None else replicate(jnp.asarray(False), mesh)
    step = start
    try:
        while step < num_steps:
            stop = min(num_steps, step + chunk_size)
            if checkpoint_dir is not None:
                stop = min(stop, (step // checkpoint_every + 1) * checkpoint_every)
            if callback is not None:
                stop = min(stop, (step // callback_every + 1) * callback_every)
            count = stop - step
            model, opt_state, state, chunk_losses, chunk_flags, halted = train_chunk(
                (key, step_kwargs),
                model,
                opt_state,
                state,
                jnp.asarray(step, jnp.int32),
                jnp.asarray(count, jnp.int32),
                halted,
                chunk_size=chunk_size,
                on_nonfinite=on_nonfinite,
                shardings=shardings,
            )
            pending.append((chunk_losses, chunk_flags, count, step))
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
    finally:
        if bar is not None:
            bar.close()
    new_nonfinite = [k for k in nonfinite if k >= start]
    if new_nonfinite:
        shown = ", ".join(map(str, new_nonfinite[:10])) + (
            ", ..." if len(new_nonfinite) > 10 else ""
        )
        warnings.warn(
            f"fit skipped {len(new_nonfinite)} step(s) whose loss or gradient was not finite "
            f"(steps {shown}); their updates were dropped (on_nonfinite='skip_step').",
            RuntimeWarning,
            stacklevel=2,
        )
    return FitResult(
        model=model,
        opt_state=opt_state,
        losses=np.asarray(losses, dtype=np.float64),
        resumed_from=start,
        state=state if stateful else None,
        evaluations=tuple(evaluations),
        nonfinite_steps=tuple(nonfinite),
    )
