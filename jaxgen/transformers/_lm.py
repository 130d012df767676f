"""Language modelling on `jaxgen.nn.Transformer`: loss, training, evaluation, sampling, scoring.

Everything here works on token ids; byte-level corpora and tokenizers are in `jaxgen.data`
(``load_text_corpus``, ``ByteTokenizer``, ``random_windows``). With byte tokens, bits per token
are bits per byte (= bits per character for ASCII text).
"""

import math
from typing import Any, NamedTuple, Unpack

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
import optax
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree

from ..core import FitOptions, FitResult, adamw_cosine, as_batches, check_fit_options, fit
from ..core.checks import (
    check_in_interval,
    check_module,
    check_nonnegative,
    check_positive,
    check_positive_int,
)
from ..nn import AbstractCausalLM, dyadic_schedule

AUX_LOSS_WEIGHT = 0.01  # weight of the MoE load-balancing loss inside `lm_loss`
#: Models every LM function accepts: any `jaxgen.nn.AbstractCausalLM` (`jaxgen.nn.Transformer`,
#: `QESTransformer`, or your own subclass).
CausalLM = AbstractCausalLM


def _check_model(model: CausalLM) -> None:
    check_module(model, AbstractCausalLM, "model")


def _forward(model: CausalLM, tokens: Array) -> tuple[Array, Array]:
    """(logits, auxiliary loss) of one sequence through the `AbstractCausalLM` contract."""
    h, aux = model.features(tokens)
    return model.logits(h), aux


def _logits(model: CausalLM, tokens: Array) -> Array:
    return _forward(model, tokens)[0]


def token_nll(model: CausalLM, tokens: Int[Array, " L"]) -> Float[Array, " L-1"]:
    """``-log p(x_i | x_<i)`` for ``i = 1..L-1`` of one sequence (causal model)."""
    _check_model(model)
    if not model.causal:
        raise ValueError("next-token likelihoods need a causal model (causal=True).")
    logits = _logits(model, tokens[:-1])
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, tokens[1:, None], axis=-1)[:, 0]


def _split_batch(batch: PyTree) -> tuple[Array, Array | None]:
    if isinstance(batch, tuple | list):
        if len(batch) != 2:
            raise ValueError(f"a batch is `tokens` or `(tokens, mask)`, got {len(batch)} items.")
        tokens, mask = batch
        if mask.shape != tokens.shape:
            raise ValueError(f"`mask` shape {mask.shape} must equal `tokens` shape {tokens.shape}.")
        return tokens, mask
    return batch, None


def lm_loss(model: CausalLM, batch: PyTree, key: PRNGKeyArray) -> Float[Array, ""]:
    """Mean next-token cross-entropy (nats) over a batch, plus the auxiliary (MoE load) loss.

    ``batch`` is ``int[B, L]`` (every position after the first is a target) or
    ``(int[B, L], bool[B, L])`` where the mask selects the target positions (padding excluded).
    Module level, so `jaxgen.core.fit` reuses its compiled step.
    """
    del key
    _check_model(model)
    tokens, mask = _split_batch(batch)
    if tokens.ndim != 2 or tokens.shape[1] < 2 or tokens.shape[0] < 1:
        raise ValueError(
            f"`batch` tokens must have shape (B, L) with L >= 2 and B >= 1, got {tokens.shape}."
        )
    logits, aux = jax.vmap(lambda x: _forward(model, x))(tokens[:, :-1])
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    if mask is None:
        loss = jnp.mean(nll)
    else:
        w = mask[:, 1:].astype(nll.dtype)
        loss = jnp.sum(nll * w) / jnp.maximum(jnp.sum(w), 1.0)
    return loss + AUX_LOSS_WEIGHT * jnp.mean(aux)


def _matrices(params: PyTree) -> PyTree:
    return jtu.tree_map(lambda x: x.ndim >= 2, params)


def lm_optimizer(
    learning_rate: float,
    num_steps: int,
    *,
    warmup_steps: int | None = None,
    weight_decay: float = 0.1,
    clip_norm: float | None = 1.0,
    b1: float = 0.9,
    b2: float = 0.95,
    dyadic_depth: int | None = None,
) -> optax.GradientTransformation:
    """The LM preset of `jaxgen.core.adamw_cosine`: betas 0.9/0.95, decay on matrices only.

    Linear warm-up over ``warmup_steps`` (default ``max(1, num_steps // 20)``) then cosine
    decay, global-norm clipping. ``dyadic_depth``: wrap it in the CoFrGeNet dyadic schedule
    (`jaxgen.nn.dyadic_schedule`).

    Raises:
        ValueError: ``learning_rate`` or ``clip_norm`` not finite and > 0, ``weight_decay`` not
            finite and >= 0, ``b1`` or ``b2`` outside ``[0, 1)`` (each a number, checked now).
    """
    if not callable(learning_rate):
        check_positive(learning_rate, "learning_rate")
    check_nonnegative(weight_decay, "weight_decay")
    if clip_norm is not None:
        check_positive(clip_norm, "clip_norm")
    check_in_interval(b1, "b1", 0.0, 1.0, closed=(True, False))
    check_in_interval(b2, "b2", 0.0, 1.0, closed=(True, False))
    warmup = max(1, num_steps // 20) if warmup_steps is None else max(1, warmup_steps)
    opt = adamw_cosine(
        learning_rate,
        num_steps,
        warmup_steps=warmup,
        weight_decay=weight_decay,
        clip_norm=clip_norm,
        b1=b1,
        b2=b2,
        mask=_matrices,
    )
    if dyadic_depth is not None:
        opt = dyadic_schedule(opt, max(num_steps, 1), dyadic_depth)
    return opt


def fit_lm(
    model: AbstractCausalLM,
    data: Any,
    *,
    key: PRNGKeyArray,
    num_steps: int,
    optimizer: optax.GradientTransformation | None = None,
    batch_size: int | None = None,
    learning_rate: float = 1e-3,
    warmup_steps: int | None = None,
    weight_decay: float = 0.1,
    clip_norm: float | None = 1.0,
    dyadic_depth: int | None = None,
    **fit_options: Unpack[FitOptions],
) -> FitResult:
    """Train a causal LM with `jaxgen.core.fit` on `lm_loss` (checkpointed and resumable).

    Args:
        model: a causal `jaxgen.nn.AbstractCausalLM` (e.g. `jaxgen.nn.Transformer`); every
            inexact array leaf is trained (train a `QESTransformer`'s adapters with
            `fit_qes`).
        data: a pure sampler ``batches(key) -> int[B, L]`` or ``(int[B, L], bool[B, L])``
            (e.g. ``jaxgen.data.random_windows(tokens, B, context + 1)``), or the arrays
            themselves (``int[N, L]`` sequences, or ``(tokens, mask)``) with ``batch_size``
            (`jaxgen.core.as_batches`).
        key: PRNG key of the run.
        num_steps: optimiser steps.
        optimizer: default `lm_optimizer` built from ``learning_rate``, ``warmup_steps``,
            ``weight_decay``, ``clip_norm`` and ``dyadic_depth`` (ignored when given).
        batch_size: rows per step when ``data`` are arrays.
        **fit_options: `jaxgen.core.FitOptions`, forwarded to `jaxgen.core.fit`.

    Returns:
        `jaxgen.core.FitResult`.
    """
    check_fit_options(fit_options)
    _check_model(model)
    if not model.causal:
        raise ValueError("`fit_lm` trains causal language models; got causal=False.")
    batches = as_batches(data, batch_size)
    if optimizer is None:
        optimizer = lm_optimizer(
            learning_rate,
            num_steps,
            warmup_steps=warmup_steps,
            weight_decay=weight_decay,
            clip_norm=clip_norm,
            dyadic_depth=dyadic_depth,
        )
    return fit(lm_loss, model, batches, optimizer, num_steps=num_steps, key=key, **fit_options)


@eqx.filter_jit
def _batch_nll(model: CausalLM, windows: Array, mask: Array) -> tuple[Array, Array]:
    nll = jax.vmap(lambda seq: token_nll(model, seq))(windows)
    w = mask[:, 1:].astype(nll.dtype)
    return jnp.sum(nll * w), jnp.sum(w)


class LMEvaluation(NamedTuple):
    """Held-out next-token statistics.

    Attributes:
        nll: mean negative log-likelihood per predicted token (nats).
        bits_per_token: ``nll / ln 2`` (bits per byte for byte tokens).
        perplexity: ``exp(nll)``.
        num_tokens: number of predicted tokens.
    """

    nll: float
    bits_per_token: float
    perplexity: float
    num_tokens: int


def evaluate_lm(
    model: CausalLM,
    tokens: np.ndarray | Array,
    *,
    context: int | None = None,
    max_windows: int | None = None,
    batch_size: int = 64,
) -> LMEvaluation:
    """Deterministic held-out evaluation on non-overlapping windows of a token stream.

    Windows of ``context + 1`` tokens start every ``context`` tokens, so each token after the
    first is predicted exactly once, from at most ``context`` previous tokens of its window.

    Args:
        model: causal `jaxgen.nn.AbstractCausalLM`.
        tokens: 1-D integer stream ``(N,)``.
        context: window context (default ``model.max_len``, at most ``model.max_len``).
        max_windows: evaluate only the first this many windows (evenly spaced if fewer).
        batch_size: windows per compiled call.
    """
    _check_model(model)
    arr = np.asarray(tokens)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"`tokens` must be a 1-D integer array, got {arr.dtype}{arr.shape}.")
    batch_size = check_positive_int(batch_size, "batch_size")
    context = model.max_len if context is None else context
    if not 1 <= context <= model.max_len:
        raise ValueError(
            f"`context` must be in [1, {model.max_len}] (the model's max_len), got {context}."
        )
    num = (arr.shape[0] - 1) // context
    if num < 1:
        raise ValueError(
            f"`tokens` has {arr.shape[0]} ids; need at least context + 1 = {context + 1}."
        )
    starts = np.arange(num) * context
    if max_windows is not None and max_windows < num:
        starts = starts[np.linspace(0, num - 1, max_windows).round().astype(int)]
    windows = np.stack([arr[s : s + context + 1] for s in starts]).astype(np.int32)
    total, count = 0.0, 0.0
    for i in range(0, len(windows), batch_size):
        chunk = windows[i : i + batch_size]
        pad = batch_size - len(chunk)
        mask = np.ones_like(chunk, dtype=bool)
        if pad:  # pad to a fixed batch shape so one compilation serves every chunk
            chunk = np.concatenate([chunk, np.zeros((pad, chunk.shape[1]), np.int32)])
            mask = np.concatenate([mask, np.zeros((pad, mask.shape[1]), bool)])
        s, c = _batch_nll(model, jnp.asarray(chunk), jnp.asarray(mask))
        total, count = total + float(s), count + float(c)
    nll = total / count
    return LMEvaluation(nll, nll / math.log(2), math.exp(nll), int(count))


def sequence_log_prob(
    model: CausalLM, tokens: Int[Array, " L"], mask: Bool[Array, " L"] | None = None
) -> Float[Array, ""]:
    """``sum_{i >= 1, mask_i} log p(x_i | x_<i)`` of one sequence (the first token is context).

    For documents of different lengths pad them and pass ``mask`` (True on real tokens). Prepend
    a BOS id if the first token should be scored too.
    """
    nll = token_nll(model, tokens)
    if mask is not None:
        if mask.shape != tokens.shape:
            raise ValueError(f"`mask` shape {mask.shape} must equal `tokens` shape {tokens.shape}.")
        nll = jnp.where(mask[1:], nll, 0.0)
    return -jnp.sum(nll)


@eqx.filter_jit
def score_sequences(
    model: CausalLM, tokens: Int[Array, "B L"], mask: Bool[Array, "B L"] | None = None
) -> Float[Array, " B"]:
    """`sequence_log_prob` of every row of a batch (jitted)."""
    if tokens.ndim != 2:
        raise ValueError(f"`tokens` must have shape (B, L), got {tokens.shape}.")
    if mask is None:
        mask = jnp.ones(tokens.shape, dtype=bool)
    if mask.shape != tokens.shape:
        raise ValueError(f"`mask` shape {mask.shape} must equal `tokens` shape {tokens.shape}.")
    return jax.vmap(lambda x, m: sequence_log_prob(model, x, m))(tokens, mask)


def generative_perplexity(
    scorer: CausalLM, samples: Int[Array, "B L"], mask: Bool[Array, "B L"] | None = None
) -> Float[Array, ""]:
    """Perplexity of generated ``samples`` under a separately trained causal ``scorer``.

    ``exp(-sum log p / number of scored tokens)``; the first token of each row is context only.
    The offline stand-in for scoring samples with a large pretrained LM.
    """
    samples = jnp.asarray(samples)
    if samples.ndim != 2 or samples.shape[0] < 1 or samples.shape[1] < 2:
        raise ValueError(
            f"`samples` must have shape (B, L) with B >= 1, L >= 2, got {samples.shape}."
        )
    if mask is None:
        mask = jnp.ones(samples.shape, dtype=bool)
    logp = score_sequences(scorer, samples, mask)
    count = jnp.sum(mask[:, 1:])
    return jnp.exp(-jnp.sum(logp) / count)


def _sample_impl(
    key: PRNGKeyArray,
    model: CausalLM,
    prompt: Array,
    length: int,
    temperature: float,
    top_k: int | None,
) -> Array:
    p = prompt.shape[0]
    buf = jnp.zeros((length,), jnp.int32).at[:p].set(prompt.astype(jnp.int32))

    def step(i: Array, carry: tuple[Array, PRNGKeyArray]) -> tuple[Array, PRNGKeyArray]:
        buf, key = carry
        key, sub = jr.split(key)
        logits = _logits(model, buf)[i - 1] / temperature  # causal: positions >= i are not seen
        if top_k is not None:
            kth = jax.lax.top_k(logits, top_k)[0][-1]
            logits = jnp.where(logits >= kth, logits, -jnp.inf)
        return buf.at[i].set(jr.categorical(sub, logits).astype(jnp.int32)), key

    return jax.lax.fori_loop(p, length, step, (buf, key))[0]


# one compiled sampler per (model structure, prompt length, length, temperature, top_k); the
# keys are the batch axis
_sample_batch = eqx.filter_jit(
    eqx.filter_vmap(_sample_impl, in_axes=(0, None, None, None, None, None))
)


def sample_lm(
    key: PRNGKeyArray,
    model: CausalLM,
    num_samples: int,
    length: int,
    *,
    prompt: Int[Array, " P"],
    temperature: float = 1.0,
    top_k: int | None = None,
) -> Int[Array, "B L"]:
    """Ancestral sampling from a causal LM: ``int32[num_samples, length]``, prompt included.

    Each step re-runs the model on the fixed-length buffer (no KV cache: small models only).

    Args:
        key: PRNG key.
        model: causal `jaxgen.nn.AbstractCausalLM`.
        num_samples: sequences to draw.
        length: total length including the prompt (``<= model.max_len``).
        prompt: 1-D ids, at least one (e.g. a newline byte or a BOS id).
        temperature: logits are divided by it (> 0).
        top_k: keep only the ``top_k`` most likely tokens (``None``: all).
    """
    _check_model(model)
    if not model.causal:
        raise ValueError("`sample_lm` needs a causal model.")
    prompt = jnp.asarray(prompt)
    if prompt.ndim != 1 or prompt.shape[0] < 1:
        raise ValueError(f"`prompt` must be 1-D with at least one token, got {prompt.shape}.")
    if not prompt.shape[0] <= length <= model.max_len:
        raise ValueError(
            f"`length` must be in [len(prompt)={prompt.shape[0]}, max_len="
            f"{model.max_len}], got {length}."
        )
    if not temperature > 0:
        raise ValueError(f"`temperature` must be > 0, got {temperature!r}.")
    if top_k is not None and not 1 <= top_k <= model.out_size:
        raise ValueError(f"`top_k` must be in [1, {model.out_size}] or None, got {top_k!r}.")
    return _sample_batch(jr.split(key, num_samples), model, prompt, length, temperature, top_k)
