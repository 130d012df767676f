"""QES training: the channelling objective, adapter training through
`jaxgen.core.fit`, and the fine-pruning (B3) and anti-backdoor-learning (B5) baselines.

Batches are dicts: ``tokens`` int (B, L), ``weights`` float (B, L-1) (weight of predicting token
``t + 1``: 1 on the output and its ``eos``), optional ``inputs`` bool (B, L) (the input-token
positions the routing loss looks at; default: every position before the first weighted
prediction) and optional ``poisoned`` bool (B,) (ground truth, never read by the objective; only
counted to report suspect recall).
"""

import dataclasses
import functools as ft
from typing import Any, Unpack

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
import optax
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from ...core import FitOptions, FitResult, as_batches, check_fit_options, fit, minibatches
from ...core.checks import check_in_interval, check_module
from ...nn import AbstractCausalLM, SwiGLUMixer, Transformer, adapted_linear
from .._lm import lm_loss, lm_optimizer
from ._data import VOCAB
from ._eval import PROMPT_LEN, clean_accuracy, greedy_decode, lm_tokens
from ._experts import QESConfig, _route_loss, _trim_suspects, switch_load_loss
from ._model import QESTransformer, attach_lora, shutdown, trainable_filter


def backdoor_batches(
    x: np.ndarray, y: np.ndarray, batch_size: int, poisoned: np.ndarray | None = None
):
    """Pure sampler ``batches(key) -> dict`` over a backdoor task set (`make_task`, `poison`).

    ``inputs`` marks the non-pad positions of ``x`` (letters, trigger; not bos, pad or sep).
    """
    tokens, weights = lm_tokens(x, y)
    letters = jnp.asarray(x) != VOCAB.pad
    inputs = jnp.zeros(tokens.shape, bool).at[:, 1 : 1 + x.shape[1]].set(letters)
    data = {"tokens": tokens, "weights": weights, "inputs": inputs}
    if poisoned is not None:
        data["poisoned"] = jnp.asarray(poisoned, bool)
    return minibatches(data, batch_size)


def _unpack(batch: dict[str, Array]) -> tuple[Array, Array, Array]:
    if not isinstance(batch, dict) or "tokens" not in batch or "weights" not in batch:
        raise TypeError("a QES batch is a dict with 'tokens' (B, L) and 'weights' (B, L-1).")
    tokens, weights = batch["tokens"], batch["weights"]
    B, L = tokens.shape
    if weights.shape != (B, L - 1):
        raise ValueError(f"`weights` must have shape {(B, L - 1)}, got {weights.shape}.")
    if "inputs" in batch:
        inputs = batch["inputs"].astype(weights.dtype)
    else:  # prompt positions: before the first weighted prediction
        first = jnp.argmax(weights > 0, axis=1)
        inputs = (jnp.arange(L)[None, :] <= first[:, None]).astype(weights.dtype)
    return tokens, weights, inputs[:, :-1]


def sample_losses(
    model: QESTransformer, tokens: Array, weights: Array, keep: Array | None = None
) -> tuple[Float[Array, " B"], Float[Array, "B layers L E"]]:
    """Per-sample mean token cross-entropy on the weighted targets, and the router gates.

    ``tokens`` (B, L) ids, ``weights`` (B, L-1) on the predictions of ``tokens[:, 1:]``, ``keep``
    (B,) the trimming weights (default 1).
    """
    tokens, weights = jnp.asarray(tokens), jnp.asarray(weights)
    if tokens.ndim != 2 or tokens.shape[1] < 2:
        raise ValueError(f"`tokens` must have shape (B, L) with L >= 2, got {tokens.shape}.")
    B, L = tokens.shape
    if weights.shape != (B, L - 1):
        raise ValueError(f"`weights` must have shape {(B, L - 1)}, got {weights.shape}.")
    if keep is not None and jnp.shape(keep) != (B,):
        raise ValueError(f"`keep` must have shape {(B,)}, got {jnp.shape(keep)}.")
    keep = jnp.ones(tokens.shape[:1], weights.dtype) if keep is None else keep
    logits, gates = jax.vmap(model.forward)(tokens[:, :-1], keep)
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    w = weights.astype(nll.dtype)
    return jnp.sum(nll * w, 1) / jnp.maximum(jnp.sum(w, 1), 1.0), gates


def _frozen(model: QESTransformer) -> QESTransformer:
    # No gradient into the base, the weight copies or the mask: their backward work is skipped
    # and their gradients are exactly 0 (the optimizer also zeroes their updates).
    train, rest = eqx.partition(model, trainable_filter(model))
    return eqx.combine(train, jax.lax.stop_gradient(rest))


def _finite(loss: Array, name: str) -> Array:
    return eqx.error_if(loss, ~jnp.isfinite(loss), f"{name} is not finite (NaN or inf).")


def qes_loss(
    model: QESTransformer,
    batch: dict[str, Array],
    key: PRNGKeyArray,
    *,
    cfg: QESConfig,
    step: Any = None,
) -> tuple[Float[Array, ""], dict[str, Array]]:
    """The QES objective on one batch; returns ``(loss, aux)``.

    ``l_i^off`` (quarantine off) ranks the samples; the ``ceil(rho B)`` worst are suspects
    (``k_i = 0``, no gradient through ``k``), with ``rho`` ramped linearly from 0 to
    ``cfg.rho_hat`` over the first ``warmup_frac * total_steps`` steps. Then

        L = mean_i l_i^full + lambda_keep sum_i k_i l_i^off / sum_i k_i
            + lambda_route L_route + lambda_bal L_bal,

    where ``l^full`` runs with every expert on and, if ``cfg.channel``, non-quarantine experts
    take gradients only from kept samples (2.3(3)); ``L_route`` pulls suspects' strongest input
    token to ``q`` and pushes kept tokens away (2.3(5), mean over blocks of ``g_q``); ``L_bal`` is
    the Switch load balance over the other experts on kept samples (2.3(6)). A non-finite loss
    raises.

    Args:
        model: `attach_qes` output.
        batch: dict (see module docstring), e.g. from `backdoor_batches`.
        key: unused (deterministic objective); kept for `jaxgen.core.fit`.
        cfg: `QESConfig`.
        step: traced step index for the warm-up (``None``: no warm-up).

    Returns:
        ``loss`` and ``aux`` with ``l_full``, ``l_off``, ``keep`` (B,), ``gbar_q`` (B, L-1),
        ``task``, ``keep_loss``, ``route``, ``balance`` (scalars).
    """
    del key
    if not isinstance(model, QESTransformer) or model.routers is None:
        raise TypeError("`model` must be a routed QESTransformer (from `attach_qes`).")
    if cfg.num_experts != model.num_experts or cfg.quarantine != model.quarantine:
        raise ValueError(
            f"`cfg` (E={cfg.num_experts}, q={cfg.quarantine}) does not match the model "
            f"(E={model.num_experts}, q={model.quarantine})."
        )
    tokens, weights, inputs = _unpack(batch)
    model = _frozen(model)
    q = cfg.quarantine
    rho = jnp.asarray(cfg.rho_hat, weights.dtype)
    warmup = round(cfg.warmup_frac * cfg.total_steps)
    if step is not None and warmup > 0:
        rho = rho * jnp.clip(jnp.asarray(step, weights.dtype) / warmup, 0.0, 1.0)
    need_off = cfg.rho_hat > 0 or cfg.lambda_keep != 0
    if need_off:
        l_off, _ = sample_losses(shutdown(model, q), tokens, weights)
        keep = _trim_suspects(l_off, rho)
        kept = jnp.maximum(jnp.sum(keep), 1.0)
        keep_loss = jnp.sum(keep * l_off) / kept
    else:
        l_off = jnp.zeros(tokens.shape[:1], weights.dtype)
        keep = jnp.ones(tokens.shape[:1], weights.dtype)
        keep_loss = jnp.zeros((), weights.dtype)
    chan = keep if cfg.channel else None
    l_full, gates = sample_losses(model, tokens, weights, chan)
    task = jnp.mean(l_full)
    gbar_q = jnp.mean(gates[..., q], axis=1)  # (B, L-1): mean over blocks
    route = _route_loss(gbar_q, keep, inputs)
    B, layers, T, E = gates.shape
    tok_w = jnp.broadcast_to(keep[:, None], (B, T)).reshape(-1)
    per_layer = jnp.moveaxis(gates, 1, 0).reshape(layers, B * T, E)
    balance = jnp.mean(jax.vmap(lambda g: switch_load_loss(g, q, tok_w))(per_layer))
    loss = task + cfg.lambda_keep * keep_loss + cfg.lambda_route * route + cfg.lambda_bal * balance
    loss = _finite(loss, "qes_loss")
    aux = {
        "l_full": l_full,
        "l_off": l_off,
        "keep": keep,
        "gbar_q": gbar_q,
        "task": task,
        "keep_loss": keep_loss,
        "route": route,
        "balance": balance,
    }
    return loss, jax.lax.stop_gradient(aux)


def adapter_task_loss(
    model: QESTransformer, batch: dict[str, Array], key: PRNGKeyArray
) -> Float[Array, ""]:
    """``mean_i s_i l_i`` with every expert on: plain LoRA (B1, B4) and MoE-LoRA (B2) training.

    ``s_i = 1``, except with an ``isolated`` bool (B,) entry in the batch (anti-backdoor
    learning, `fit_abl`): ``s_i = -1`` on isolated samples (gradient ascent on them).
    """
    del key
    tokens, weights, _ = _unpack(batch)
    l_full, _ = sample_losses(_frozen(model), tokens, weights)
    if "isolated" in batch:
        l_full = jnp.where(batch["isolated"], -1.0, 1.0).astype(l_full.dtype) * l_full
    return _finite(jnp.mean(l_full), "adapter_task_loss")


def adapter_optimizer(
    model: QESTransformer,
    learning_rate: float,
    num_steps: int,
    *,
    weight_decay: float = 0.0,
    clip_norm: float | None = 1.0,
) -> optax.GradientTransformation:
    """AdamW + warm-up/cosine (`lm_optimizer`) on the adapters and routers; zero elsewhere.

    The labels come from `trainable_filter` of the parameters, so one optimizer object serves
    every `QESTransformer`; it is cached per setting so `fit` reuses its compiled step.
    """
    if not isinstance(model, QESTransformer):
        raise TypeError(f"`model` must be a QESTransformer, got {type(model).__name__}.")
    return _cached_adapter_optimizer(float(learning_rate), int(num_steps), weight_decay, clip_norm)


def _labels(params: PyTree) -> PyTree:
    return jtu.tree_map(lambda t: "train" if t else "frozen", trainable_filter(params))


@ft.lru_cache(maxsize=64)
def _cached_adapter_optimizer(
    learning_rate: float, num_steps: int, weight_decay: float, clip_norm: float | None
) -> optax.GradientTransformation:
    inner = lm_optimizer(
        learning_rate, num_steps, weight_decay=weight_decay, clip_norm=clip_norm, b2=0.999
    )
    return optax.multi_transform({"train": inner, "frozen": optax.set_to_zero()}, _labels)


@ft.lru_cache(maxsize=16)
def _cached_full_optimizer(learning_rate: float, num_steps: int) -> optax.GradientTransformation:
    return lm_optimizer(learning_rate, num_steps, weight_decay=0.0)


def _monitored(
    model: QESTransformer,
    batch: dict[str, Array],
    key: PRNGKeyArray,
    state: dict[str, Any],
    *,
    step: Any,
    cfg: QESConfig,
) -> tuple[Float[Array, ""], dict[str, Any]]:
    """`qes_loss` for `fit`: the carried state counts suspects among poisoned samples."""
    loss, aux = qes_loss(model, batch, key, cfg=cfg, step=step)
    new = dict(state)
    if "poisoned" in batch:
        counted = jnp.asarray(step >= cfg.total_steps // 10, aux["keep"].dtype)
        p = batch["poisoned"].astype(aux["keep"].dtype) * counted
        new["poisoned_seen"] = state["poisoned_seen"] + jnp.sum(p)
        new["poisoned_trimmed"] = state["poisoned_trimmed"] + jnp.sum(p * (1 - aux["keep"]))
    new["last"] = aux
    return loss, new


@ft.lru_cache(maxsize=32)
def _fit_loss(cfg: QESConfig):
    # One loss object per configuration, so `fit` reuses its compiled chunk across calls.
    return ft.partial(_monitored, cfg=cfg)


def fit_qes(
    model: QESTransformer,
    data: Any,
    *,
    key: PRNGKeyArray,
    num_steps: int,
    optimizer: optax.GradientTransformation | None = None,
    batch_size: int | None = None,
    cfg: QESConfig | None = None,
    learning_rate: float = 3e-3,
    weight_decay: float = 0.0,
    **fit_options: Unpack[FitOptions],
) -> FitResult:
    """Train the adapters (and routers) of ``model`` with `jaxgen.core.fit`.

    With ``cfg`` the loss is `qes_loss` (``cfg.total_steps`` set to ``num_steps``; step passed
    for the warm-up) and ``FitResult.state`` holds ``poisoned_seen`` / ``poisoned_trimmed``
    (poisoned samples seen, and marked suspect, after the first 10% of steps; needs a
    ``poisoned`` entry in the batch) and ``last`` (the last step's aux). Without ``cfg`` the loss
    is `adapter_task_loss` (plain LoRA / MoE-LoRA baselines).

    Args:
        model: `attach_qes` or `attach_lora` output.
        data: a pure sampler of dict batches (`backdoor_batches`), or the dict of arrays itself
            with ``batch_size`` (`jaxgen.core.as_batches`).
        key: PRNG key of the run.
        num_steps: optimiser steps.
        optimizer: default `adapter_optimizer` (AdamW with warm-up and cosine decay at
            ``learning_rate``, ``weight_decay``; the base and the mask untouched). A given one is
            used as is: keep the base frozen with `adapter_optimizer`'s labelling.
        batch_size: rows per step when ``data`` are arrays.
        cfg: `QESConfig`, or ``None`` for task-only training.
        learning_rate, weight_decay: of the default optimizer (the paper's 3e-3).
        **fit_options: `jaxgen.core.FitOptions`, forwarded to `jaxgen.core.fit`.

    Returns:
        `jaxgen.core.FitResult`.
    """
    check_fit_options(fit_options)
    batches = as_batches(data, batch_size)
    if optimizer is None:
        optimizer = adapter_optimizer(model, learning_rate, num_steps, weight_decay=weight_decay)
    if cfg is None:
        return fit(
            adapter_task_loss,
            model,
            batches,
            optimizer,
            num_steps=num_steps,
            key=key,
            **fit_options,
        )
    cfg = dataclasses.replace(cfg, total_steps=num_steps)
    loss_fn = _fit_loss(cfg)
    zero = jnp.zeros((), model.mask.dtype)
    probe = {"poisoned_seen": zero, "poisoned_trimmed": zero, "last": None}
    _, shapes = eqx.filter_eval_shape(
        lambda m, k: qes_loss(m, batches(k), k, cfg=cfg, step=0), model, key
    )
    probe["last"] = jtu.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    return fit(
        loss_fn,
        model,
        batches,
        optimizer,
        num_steps=num_steps,
        key=key,
        state=probe,
        pass_step=True,
        **fit_options,
    )


def suspect_recall(result: FitResult) -> float:
    """Fraction of poisoned samples marked suspect after the first 10% of `fit_qes` steps."""
    state = result.state
    if not isinstance(state, dict) or "poisoned_seen" not in state:
        raise ValueError("`result` must come from `fit_qes` with a QESConfig.")
    seen = float(state["poisoned_seen"])
    return float(state["poisoned_trimmed"]) / seen if seen > 0 else float("nan")


# ---------------------------------------------------------------------------------------------
# Baselines B3 (fine-pruning) and B5 (anti-backdoor learning).


def _as_qes(model: Transformer | QESTransformer) -> tuple[QESTransformer | None, Transformer]:
    if isinstance(model, QESTransformer):
        return model, model.base
    if isinstance(model, Transformer):
        return None, model
    raise TypeError(f"`model` must be a Transformer or QESTransformer, got {type(model).__name__}.")


def _mixer_hidden(model: QESTransformer, tokens: Array) -> Array:
    """Hidden units ``silu(W_g m) * (W_v m)`` of the LAST block's SwiGLU mixer, (L, hidden)."""
    trunk = eqx.tree_at(
        lambda m: (m.base.blocks, m.adapters),
        model,
        (model.base.blocks[:-1], model.adapters[:-1]),
    )
    if model.routers is not None:
        trunk = eqx.tree_at(lambda m: m.routers, trunk, model.routers[:-1])
    h, _ = trunk.hidden(tokens)
    block, experts = model.base.blocks[-1], model.adapters[-1]
    gates = (
        jnp.ones((h.shape[0], 1), h.dtype)
        if model.routers is None
        else jax.vmap(model.routers[-1])(h)
    )

    def adapter(name: str, x: Array) -> Array:
        return jax.vmap(lambda xt, gt: experts[name].delta(xt, gt, model.mask))(x, gates)

    h = h + block.attn(jax.vmap(block.attn_norm)(h), causal=True, adapter=adapter)
    m = jax.vmap(block.mixer_norm)(h)
    g = jax.nn.silu(adapted_linear(m, block.mixer.w_gate, "mixer.w_gate", adapter))
    return g * adapted_linear(m, block.mixer.w_value, "mixer.w_value", adapter)


@eqx.filter_jit
def _mean_abs_hidden(model: QESTransformer, tokens: Array) -> Array:
    return jnp.mean(jnp.abs(jax.vmap(lambda t: _mixer_hidden(model, t))(tokens)), axis=(0, 1))


@eqx.filter_jit
def _decode(model: Any, x: Array) -> Array:
    return greedy_decode(model, x)


def _prune(model: Any, units: Array) -> Any:
    """Zero the value rows of ``units`` in the last mixer (base and adapters): ``u_j = 0``."""
    lora = isinstance(model, QESTransformer)
    base = model.base if lora else model
    w = base.blocks[-1].mixer.w_value
    rows = jnp.zeros((w.shape[0],), bool).at[units].set(True)
    get_w = (
        (lambda m: m.base.blocks[-1].mixer.w_value)
        if lora
        else (lambda m: m.blocks[-1].mixer.w_value)
    )
    model = eqx.tree_at(get_w, model, jnp.where(rows[:, None], 0.0, w))
    if lora:
        layer = model.adapters[-1]["mixer.w_value"]
        model = eqx.tree_at(
            lambda m: m.adapters[-1]["mixer.w_value"].B,
            model,
            jnp.where(rows[None, :, None], 0.0, layer.B),
        )
    return model


def _update_mask(model: Any, rows: Array) -> PyTree:
    """Multiplicative update mask: 0 on the pruned rows (base value rows and adapter B rows)."""
    params = eqx.filter(model, eqx.is_inexact_array)
    ones = jtu.tree_map(jnp.ones_like, params)
    lora = isinstance(model, QESTransformer)
    get_w = (
        (lambda m: m.base.blocks[-1].mixer.w_value)
        if lora
        else (lambda m: m.blocks[-1].mixer.w_value)
    )
    w = get_w(model)
    ones = eqx.tree_at(get_w, ones, jnp.where(rows[:, None], 0.0, jnp.ones_like(w)))
    if lora:
        B = model.adapters[-1]["mixer.w_value"].B
        ones = eqx.tree_at(
            lambda m: m.adapters[-1]["mixer.w_value"].B,
            ones,
            jnp.where(rows[None, :, None], 0.0, jnp.ones_like(B)),
        )
    return ones


def _masked_updates(mask: PyTree) -> optax.GradientTransformation:
    def init(params: PyTree) -> optax.EmptyState:
        return optax.EmptyState()

    def update(updates: PyTree, state: Any, params: PyTree = None) -> tuple[PyTree, Any]:
        return jtu.tree_map(lambda u, m: u * m.astype(u.dtype), updates, mask), state

    return optax.GradientTransformation(init, update)  # type: ignore[arg-type]


def _full_loss(model: Transformer, batch: dict[str, Array], key: PRNGKeyArray) -> Array:
    """`lm_loss` on a QES dict batch: full fine-tuning (B0) on the weighted targets."""
    tokens, weights = batch["tokens"], batch["weights"]
    mask = jnp.concatenate([jnp.zeros_like(weights[:, :1]), weights], axis=1) > 0
    return lm_loss(model, (tokens, mask), key)


class FinePruneResult(FitResult):
    """`fit_fine_prune` output: the fine-tuning run's `jaxgen.core.FitResult` plus the pruning.

    Attributes:
        pruned_frac: fraction of the last block's hidden units pruned.
        ca_before: greedy clean accuracy before pruning.
        ca_pruned: greedy clean accuracy after pruning, before fine-tuning.
    """

    pruned_frac: float = 0.0
    ca_before: float = float("nan")
    ca_pruned: float = float("nan")


def _task_arrays(data: Any, name: str = "data") -> tuple[np.ndarray, np.ndarray]:
    if callable(data) or not isinstance(data, tuple | list) or len(data) != 2:
        raise TypeError(
            f"`{name}` must be the task arrays (x, y) (`make_task`), got {type(data).__name__}."
        )
    return np.asarray(data[0]), np.asarray(data[1])


def fit_fine_prune(
    model: Transformer | QESTransformer,
    data: tuple[np.ndarray, np.ndarray],
    *,
    key: PRNGKeyArray,
    num_steps: int = 200,
    optimizer: optax.GradientTransformation | None = None,
    batch_size: int = 32,
    learning_rate: float = 1e-3,
    max_drop: float = 0.05,
    max_frac: float = 0.6,
    prune_step: float = 0.05,
    **fit_options: Unpack[FitOptions],
) -> FinePruneResult:
    """Fine-pruning (Liu et al. 2018; baseline B3) with clean held-out data.

    Hidden units of the last block's SwiGLU mixer are pruned in increasing order of mean
    ``|silu(W_g m) (W_v m)|`` on ``clean_x`` (choice: absolute value, SwiGLU units are signed),
    ``prune_step`` of them at a time, while the greedy clean accuracy on ``(clean_x, clean_y)``
    stays within ``max_drop`` of the unpruned model and at most ``max_frac`` are pruned; a unit
    is pruned by zeroing its value row (``u_j = 0``), in the base and in the adapters. Then
    ``num_steps`` of fine-tuning on the clean data: every weight of a `Transformer` (B0), the
    adapters of a `QESTransformer` (B1); pruned rows stay zero.

    Args:
        model: a `Transformer` (B0 weights) or `QESTransformer` (adapters) whose last block
            has a SwiGLU mixer.
        data: the clean held-out task arrays ``(clean_x, clean_y)`` (arrays only: they are
            decoded to measure the clean accuracy).
        key: PRNG key (fine-tuning batches).
        num_steps: fine-tuning steps.
        optimizer: default AdamW with warm-up and cosine decay at ``learning_rate``
            (`lm_optimizer` without decay for a `Transformer`, `adapter_optimizer` for a
            `QESTransformer`); the pruned rows' updates are masked out after it.
        batch_size: rows per fine-tuning step.
        max_drop, max_frac, prune_step: the pruning schedule above.
        **fit_options: `jaxgen.core.FitOptions`, forwarded to `jaxgen.core.fit`.

    Returns:
        `FinePruneResult`: the fine-tuning run and ``pruned_frac``, ``ca_before``,
        ``ca_pruned``.

    References:
        Liu, Dolan-Gavitt, Garg, "Fine-Pruning", RAID 2018, arXiv 1805.12185.
    """
    check_fit_options(fit_options)
    clean_x, clean_y = _task_arrays(data)
    qes, base = _as_qes(model)
    if not isinstance(base.blocks[-1].mixer, SwiGLUMixer):
        raise TypeError("fit_fine_prune needs a SwiGLU mixer in the last block.")
    if not 0 < max_frac <= 1 or not 0 < prune_step <= max_frac:
        raise ValueError(f"need 0 < prune_step <= max_frac <= 1, got {prune_step}, {max_frac}.")
    # An accuracy drop: a NaN compared False and pruned up to max_frac whatever the accuracy.
    max_drop = float(check_in_interval(max_drop, "max_drop", 0.0, 1.0))
    probe = qes if qes is not None else attach_lora(base, rank=1, alpha=1.0, key=key)
    tokens, _ = lm_tokens(clean_x, np.full_like(clean_y, VOCAB.pad))
    order = jnp.argsort(_mean_abs_hidden(probe, tokens[:, :PROMPT_LEN]))
    hidden = order.shape[0]
    ca0 = clean_accuracy(_decode(model, jnp.asarray(clean_x)), clean_y)
    pruned, n, ca = model, 0, ca0
    for frac in np.arange(prune_step, max_frac + 1e-9, prune_step):
        k = int(round(frac * hidden))
        cand = _prune(model, order[:k])
        ca_k = clean_accuracy(_decode(cand, jnp.asarray(clean_x)), clean_y)
        if ca0 - ca_k > max_drop:
            break
        pruned, n, ca = cand, k, ca_k
    rows = jnp.zeros((hidden,), bool).at[order[:n]].set(True)
    umask = _update_mask(pruned, rows)
    batches = backdoor_batches(clean_x, clean_y, batch_size)
    if qes is None:
        inner = optimizer or lm_optimizer(learning_rate, num_steps, weight_decay=0.0)
        loss_fn = _full_loss
    else:
        inner = optimizer or adapter_optimizer(pruned, learning_rate, num_steps)
        loss_fn = adapter_task_loss
    opt = optax.chain(inner, _masked_updates(umask))
    res = fit(loss_fn, pruned, batches, opt, num_steps=num_steps, key=key, **fit_options)
    return FinePruneResult.extend(res, pruned_frac=n / hidden, ca_before=ca0, ca_pruned=ca)


def fit_finetune(
    model: AbstractCausalLM,
    data: Any,
    *,
    key: PRNGKeyArray,
    num_steps: int,
    optimizer: optax.GradientTransformation | None = None,
    batch_size: int | None = None,
    learning_rate: float = 1e-3,
    **fit_options: Unpack[FitOptions],
) -> FitResult:
    """Baseline B0: fine-tune every weight of ``model`` on the weighted targets (`lm_loss`).

    Args:
        model: any causal `jaxgen.nn.AbstractCausalLM` (e.g. `jaxgen.nn.Transformer`).
        data: a pure sampler of QES dict batches (`backdoor_batches`), or the dict of arrays
            with ``batch_size`` (`jaxgen.core.as_batches`).
        key: PRNG key of the run.
        num_steps: optimiser steps.
        optimizer: default ``lm_optimizer(learning_rate, num_steps, weight_decay=0)``.
        batch_size: rows per step when ``data`` are arrays.
        learning_rate: of the default optimizer.
        **fit_options: `jaxgen.core.FitOptions`, forwarded to `jaxgen.core.fit`.

    Returns:
        `jaxgen.core.FitResult`.
    """
    check_fit_options(fit_options)
    check_module(model, AbstractCausalLM, "model")
    batches = as_batches(data, batch_size)
    if optimizer is None:
        optimizer = _cached_full_optimizer(float(learning_rate), int(num_steps))
    return fit(_full_loss, model, batches, optimizer, num_steps=num_steps, key=key, **fit_options)


@eqx.filter_jit
def _all_losses(model: QESTransformer, tokens: Array, weights: Array) -> Array:
    return sample_losses(model, tokens, weights)[0]


class ABLResult(FitResult):
    """`fit_abl` output: the unlearning phase's `jaxgen.core.FitResult` plus the isolation.

    ``losses`` holds both phases (isolation then unlearning, ``num_steps`` in all).

    Attributes:
        isolated: bool (n,) flags of the isolated (lowest-loss) training samples.
    """

    isolated: np.ndarray | None = None


def fit_abl(
    model: QESTransformer,
    data: tuple[np.ndarray, np.ndarray],
    *,
    key: PRNGKeyArray,
    num_steps: int,
    optimizer: optax.GradientTransformation | None = None,
    batch_size: int = 64,
    learning_rate: float = 3e-3,
    isolate_after: int | None = None,
    isolate_frac: float = 0.01,
    **fit_options: Unpack[FitOptions],
) -> ABLResult:
    """Anti-backdoor learning (Li et al. 2021; baseline B5), on adapters.

    Train on everything for ``isolate_after`` steps (default: one epoch, ``n / batch_size``),
    isolate the ``isolate_frac`` lowest-loss samples (poisoned samples are learned fastest),
    then train the remaining steps with gradient ASCENT on the isolated samples and descent on
    the rest (``mean_i s_i l_i``, ``s_i = -1`` isolated, else 1: `adapter_task_loss`).

    Args:
        model: `attach_lora` / `attach_qes` output.
        data: the (possibly poisoned) training arrays ``(x, y)`` (arrays only: every sample's
            loss is evaluated to isolate some).
        key: PRNG key of the run.
        num_steps: optimiser steps of both phases together.
        optimizer: default `adapter_optimizer` at ``learning_rate`` (a fresh schedule per
            phase); a given one is used for both phases.
        batch_size: rows per step.
        learning_rate: of the default optimizer.
        isolate_after, isolate_frac: the isolation phase.
        **fit_options: `jaxgen.core.FitOptions`, forwarded to both `jaxgen.core.fit` runs
            (a ``checkpoint_dir`` gets one sub-directory per phase, ``isolate`` and
            ``unlearn``; callback steps count within each phase).

    Returns:
        `ABLResult`: the second run's fields (``losses`` of both runs) and ``isolated``.

    References:
        Li et al., "Anti-Backdoor Learning", NeurIPS 2021, arXiv 2110.11571.
    """
    check_fit_options(fit_options)
    x, y = _task_arrays(data)
    n = len(x)
    if not 0 < isolate_frac < 1:
        raise ValueError(f"isolate_frac must be in (0, 1), got {isolate_frac}.")
    first = max(1, n // batch_size) if isolate_after is None else isolate_after
    if not 0 < first < num_steps:
        raise ValueError(f"isolate_after must be in (0, num_steps), got {first}.")
    ckpt = fit_options.pop("checkpoint_dir", None)

    def phase(name: str) -> dict[str, Any]:
        return {**fit_options, "checkpoint_dir": None if ckpt is None else f"{ckpt}/{name}"}

    k1, k2 = jr.split(key)
    warm = fit_qes(
        model,
        backdoor_batches(x, y, batch_size),
        num_steps=first,
        key=k1,
        optimizer=optimizer,
        learning_rate=learning_rate,
        **phase("isolate"),
    )
    model = warm.model
    tokens, weights = lm_tokens(x, y)
    losses = np.concatenate(
        [
            np.asarray(_all_losses(model, tokens[i : i + 256], weights[i : i + 256]))
            for i in range(0, n, 256)
        ]
    )
    isolated = np.zeros(n, bool)
    isolated[np.argsort(losses, kind="stable")[: max(1, int(round(isolate_frac * n)))]] = True
    data = {"tokens": tokens, "weights": weights, "isolated": jnp.asarray(isolated)}
    rest = num_steps - first
    opt = optimizer or adapter_optimizer(model, learning_rate, rest)
    res = fit(
        adapter_task_loss,
        model,
        minibatches(data, batch_size),
        opt,
        num_steps=rest,
        key=k2,
        **phase("unlearn"),
    )
    res = dataclasses.replace(res, losses=np.concatenate([warm.losses, res.losses]))
    return ABLResult.extend(res, isolated=isolated)
