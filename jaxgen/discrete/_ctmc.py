"""CTMC rates shared by every discrete diffusion method: targets, divergences, conversions.

A reverse CTMC is described per position by an exit rate ``lambda`` (when to jump) and a jump
distribution ``pi`` over the other states (where to jump). Every function here acts on ONE
sequence (``x, z: int[L]``); vmap for batches. Log rates are ``-inf`` exactly where a rate is
structurally zero (unmasked tokens of the masked process); jump log-probabilities are finite
(``NEG`` on excluded states) so that ``0 * log pi`` never produces NaN.

References:
    Neural CTMC: Li et al., arXiv 2604.15694; SEDD: Lou et al., arXiv 2310.16834;
    MDLM: Sahoo et al., arXiv 2406.07524; GIDD: von Ruette et al., arXiv 2503.04482.
"""

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.scipy.special import xlogy
from jaxtyping import Array, ArrayLike, Float, Int

from ..core.checks import check_in_interval, check_module, check_nonnegative
from ._schedules import AbstractSchedule, InterpolatingSchedule, check_time, check_tokens

NEG = -1e9  # finite "minus infinity" for excluded jump logits (an all -inf row gives NaN)


def _check_schedule(schedule: Any) -> None:
    # any forward family: uniform_schedule, masked_schedule, gidd_schedule or a user subclass
    check_module(schedule, AbstractSchedule, "schedule")


def _require_kind(schedule: Any, method: str, kind: str) -> InterpolatingSchedule:
    """Closed forms written for one built-in family (MDLM: masked; GIDD's weights: gidd)."""
    got = schedule.kind if isinstance(schedule, InterpolatingSchedule) else type(schedule).__name__
    if got != kind:
        raise ValueError(f"{method} needs the {kind} schedule, got kind={got!r}.")
    return schedule


def _check_pair(x: Array, z: Array, schedule: AbstractSchedule) -> tuple[Array, Array]:
    if x.ndim != 1 or z.shape != x.shape:
        raise ValueError(
            f"`x` and `z` must be sequences of equal shape (L,), got {x.shape} and "
            f"{z.shape}; vmap over batches."
        )
    x = check_tokens(x, schedule.num_tokens, "x")
    z = check_tokens(z, schedule.vocab_size, "z")
    return x, z


def _log_not(logp: Array, onehot: Array) -> Array:
    """``log sum_{y != z} p(y)`` per row, without forming ``1 - p(z)`` (no cancellation)."""
    return jax.nn.logsumexp(jnp.where(onehot, -jnp.inf, logp), axis=-1)


def _rates_at(schedule: AbstractSchedule, z: Array, t: Any) -> tuple[Array, ...]:
    alpha, mix, sigma, rho = schedule.rates(check_time(t))
    onehot = jax.nn.one_hot(z, schedule.vocab_size, dtype=bool)
    rho_z = jnp.maximum(rho[z], 0.0)
    return alpha, mix, sigma, rho_z, onehot


def conditional_targets(
    schedule: AbstractSchedule,
    x: Int[ArrayLike, " L"],
    z: Int[ArrayLike, " L"],
    t: Float[ArrayLike, ""],
) -> tuple[Float[Array, " L"], Float[Array, "L S"]]:
    """Reverse exit rate and jump distribution conditioned on the clean sequence.

    For each position, from the noisy state ``z`` given the clean token ``x``:

        lambda*(z|x) = rho_t(z) (1 - q_t(z|x)) / q_t(z|x),
        pi*(y|z,x)   = q_t(y|x) / (1 - q_t(z|x)),    y != z,   pi*(z|z,x) = 0.

    ``1 - q_t(z|x)`` is computed as ``sum_{y != z} q_t(y|x)`` (log-sum-exp). ``z`` must be
    reachable (``q_t(z|x) > 0``).

    Args:
        schedule: the forward family. x: clean ids in ``[0, N)``. z: noisy ids in ``[0, V)``.
        t: time in ``[0, 1)``.

    Returns:
        ``(log_exit_rate (L,), jump_probs (L, V))``; ``log_exit_rate = -inf`` where the rate is
        exactly zero (e.g. unmasked tokens of the masked process).
    """
    _check_schedule(schedule)
    x, z = _check_pair(jnp.asarray(x), jnp.asarray(z), schedule)
    alpha, mix, _, rho_z, onehot = _rates_at(schedule, z, t)
    logq = jnp.log(alpha * jax.nn.one_hot(x, schedule.vocab_size, dtype=mix.dtype) + mix[None, :])
    logq_z = jnp.sum(jnp.where(onehot, logq, 0.0), axis=-1)
    log_rest = _log_not(logq, onehot)
    safe_rest = jnp.where(jnp.isfinite(log_rest), log_rest, 0.0)
    active = rho_z > 0
    log_lam = jnp.where(
        active, jnp.log(jnp.where(active, rho_z, 1.0)) + safe_rest - logq_z, -jnp.inf
    )
    log_lam = jnp.where(jnp.isfinite(log_rest), log_lam, -jnp.inf)  # t = 0: nothing to undo
    pi = jnp.where(onehot, 0.0, jnp.exp(logq - safe_rest[:, None]))
    return log_lam, pi


def poisson_kl(
    rate: Float[ArrayLike, "*shape"], log_rate_model: Float[ArrayLike, "*shape"]
) -> Float[Array, "*shape"]:
    """KL rate between Poisson clocks, elementwise.

        rate (log rate - log_rate_model) - rate + exp(log_rate_model)

    It is ``>= 0`` and zero iff the rates agree. ``rate = 0`` contributes
    ``exp(log_rate_model)`` (``0 log 0 = 0``); ``log_rate_model = -inf`` with ``rate > 0`` is
    ``+inf``. Negative or non-finite ``rate`` and NaN/``+inf`` ``log_rate_model`` raise at run time.
    """
    rate, log_model = jnp.asarray(rate), jnp.asarray(log_rate_model)
    if rate.shape != log_model.shape:
        raise ValueError(
            f"`rate` {rate.shape} and `log_rate_model` {log_model.shape} must have the same shape."
        )
    rate = eqx.error_if(
        rate,
        jnp.any(~jnp.isfinite(rate) | (rate < 0)),
        "`rate` must be finite and >= 0 (a negative or non-finite rate).",
    )
    log_model = eqx.error_if(
        log_model,
        jnp.any(jnp.isnan(log_model) | (log_model == jnp.inf)),
        "`log_rate_model` must not be NaN or +inf.",
    )
    pos = rate > 0
    safe_rate = jnp.where(pos, rate, 1.0)
    safe_model = jnp.where(pos, log_model, 0.0)
    cross = jnp.where(pos, rate * (jnp.log(safe_rate) - safe_model), 0.0)
    return cross - rate + jnp.exp(log_model)


def _no_nan_or_posinf(x: ArrayLike, name: str) -> Array:
    # Log-probabilities and log-scores: ``-inf`` (probability 0) is valid, NaN and ``+inf`` not.
    return check_in_interval(x, name, -math.inf, math.inf, closed=(True, False))


def categorical_kl(
    probs: Float[ArrayLike, "*shape S"], log_probs_model: Float[ArrayLike, "*shape S"]
) -> Float[Array, "*shape"]:
    """``KL(p || q) = sum_y p_y (log p_y - log q_y)`` over the last axis (``0 log 0 = 0``).

    ``probs`` must be finite and >= 0 (a value check); the losses call the unchecked body.
    """
    return _categorical_kl(check_nonnegative(probs, "probs"), log_probs_model)


def _categorical_kl(probs: ArrayLike, log_probs_model: ArrayLike) -> Array:
    # The body of `categorical_kl` without its check (the losses build valid ``probs``).
    p, logq = jnp.asarray(probs), jnp.asarray(log_probs_model)
    safe = jnp.where(p > 0, logq, 0.0)
    return jnp.sum(xlogy(p, p) - jnp.where(p > 0, p * safe, 0.0), axis=-1)


def path_kl(
    rate: Float[ArrayLike, " L"],
    jump_probs: Float[ArrayLike, "L S"],
    log_rate_model: Float[ArrayLike, " L"],
    log_jump_model: Float[ArrayLike, "L S"],
) -> Float[Array, " L"]:
    """Path-space KL rate between two CTMCs, split into timing and direction.

        D = [lambda log(lambda/lambda_theta) - lambda + lambda_theta] + lambda KL(pi || pi_theta)

    which equals ``sum_{y != z} [R_theta - R + R log(R/R_theta)]`` for ``R = lambda pi``.

    Args:
        rate: true exit rate ``lambda >= 0`` (L,). jump_probs: ``pi`` (L, V), zero on the current
            state. log_rate_model: ``log lambda_theta`` (L,). log_jump_model: ``log pi_theta``.

    Returns:
        ``D`` per position (L,), ``>= 0``.

    ``rate`` and ``jump_probs`` must be finite and >= 0 (value checks); the losses call the
    unchecked body.
    """
    rate = check_nonnegative(rate, "rate")
    jump_probs = check_nonnegative(jump_probs, "jump_probs")
    return _path_kl(rate, jump_probs, log_rate_model, log_jump_model)


def _path_kl(
    rate: ArrayLike, jump_probs: ArrayLike, log_rate_model: ArrayLike, log_jump_model: ArrayLike
) -> Array:
    # The body of `path_kl` without its checks (the losses build valid rates).
    rate = jnp.asarray(rate)
    cat = _categorical_kl(jump_probs, log_jump_model)
    return poisson_kl(rate, log_rate_model) + jnp.where(rate > 0, rate * cat, 0.0)


def _check_per_token_logits(schedule, z, values, name: str):
    """Validate tokens ``z`` (L,) and per-token log-values (L, V); returns both as arrays."""
    _check_schedule(schedule)
    z = check_tokens(z, schedule.vocab_size, "z")
    values = jnp.asarray(values)
    if values.shape != (*z.shape, schedule.vocab_size):
        raise ValueError(
            f"`{name}` must have shape {(*z.shape, schedule.vocab_size)}, got {values.shape}."
        )
    return z, values


def rates_from_x0(
    schedule: AbstractSchedule,
    z: Int[ArrayLike, " L"],
    log_x0: Float[ArrayLike, "L S"],
    t: Float[ArrayLike, ""],
) -> tuple[Float[Array, " L"], Float[Array, "L S"]]:
    """(exit rate, jump distribution) of the reverse chain built from a clean-token prediction.

    ``R_theta(z -> y) = rho_t(z) q_t(y|x_hat) / q_t(z|x_hat)``, ``q_t(.|x_hat) = alpha_t x_hat +
    m_t`` (the MDLM / GIDD parameterisation), so ``lambda_theta = rho_t(z)(1 - q_t(z|x_hat)) /
    q_t(z|x_hat)`` and ``pi_theta(y) = q_t(y|x_hat)/(1 - q_t(z|x_hat))``.

    Args:
        log_x0: log-probabilities of the clean token ``log x_hat`` (L, V) (the mask entry
            should be very negative).

    Returns:
        ``(log_exit_rate (L,), log_jump_probs (L, V))`` with ``NEG`` on the current state.
    """
    z, log_x0 = _check_per_token_logits(schedule, z, log_x0, "log_x0")
    alpha, mix, _, rho_z, onehot = _rates_at(schedule, z, t)
    logq = jnp.logaddexp(jnp.log(alpha) + log_x0, jnp.log(mix)[None, :])
    logq_z = jnp.sum(jnp.where(onehot, logq, 0.0), axis=-1)
    log_rest = _log_not(logq, onehot)
    active = rho_z > 0
    log_lam = jnp.where(
        active, jnp.log(jnp.where(active, rho_z, 1.0)) + log_rest - logq_z, -jnp.inf
    )
    log_pi = jnp.where(onehot, NEG, logq - log_rest[:, None])
    return log_lam, log_pi


def rates_from_score(
    schedule: AbstractSchedule,
    z: Int[ArrayLike, " L"],
    log_score: Float[ArrayLike, "L S"],
    t: Float[ArrayLike, ""],
) -> tuple[Float[Array, " L"], Float[Array, "L S"]]:
    """(exit rate, jump distribution) from a concrete score ``s_y ~ p_t(z^{i<-y}) / p_t(z)``.

    ``R_theta(z -> y) = rho_t(z) s_y`` (SEDD), so ``lambda_theta = rho_t(z) sum_{y != z} s_y`` and
    ``pi_theta = s / sum_{y != z} s`` on ``y != z``.

    ``log_score`` must be free of NaN and ``+inf`` (a value check: the entry at ``z`` is not
    read, so a NaN there would otherwise vanish).

    Returns:
        ``(log_exit_rate (L,), log_jump_probs (L, V))``.
    """
    z, log_score = _check_per_token_logits(schedule, z, log_score, "log_score")
    log_score = _no_nan_or_posinf(log_score, "log_score")
    _, _, _, rho_z, onehot = _rates_at(schedule, z, t)
    log_tot = _log_not(log_score, onehot)
    active = rho_z > 0
    log_lam = jnp.where(active, jnp.log(jnp.where(active, rho_z, 1.0)) + log_tot, -jnp.inf)
    return log_lam, jnp.where(onehot, NEG, log_score - log_tot[:, None])


def gidd_integrand(
    schedule: AbstractSchedule,
    x: Int[ArrayLike, " L"],
    z: Int[ArrayLike, " L"],
    log_x0: Float[ArrayLike, "L S"],
    t: Float[ArrayLike, ""],
    *,
    weighting: str = "elbo",
    max_weight: float = 2.0,
) -> Float[Array, " L"]:
    """GIDD's per-position loss ``w [KL(q_t(.|x) || q_t(.|x_hat)) + r - log r - 1]``.

    ``w = rho_t(z)/q_t(z|x)`` (the ELBO weight), ``r = q_t(z|x)/q_t(z|x_hat)``. With
    ``weighting="elbo"`` this equals ``path_kl`` of the conditional targets against
    `rates_from_x0` (check C4); ``"clip"`` clips ``w`` to ``[0, max_weight]``; ``"dynamic"`` uses
    GIDD's heuristic weights (1 on uniform-noised tokens, 2 on masks, ``B (SNR)^(-g/2)`` on clean
    ones, clipped to ``max_weight``).
    """
    if weighting not in ("elbo", "clip", "dynamic"):
        raise ValueError(f"`weighting` must be 'elbo', 'clip' or 'dynamic', got {weighting!r}.")
    if not (math.isfinite(max_weight) and max_weight > 0):
        raise ValueError(f"`max_weight` must be finite and > 0, got {max_weight}.")
    _check_schedule(schedule)
    x, z = _check_pair(jnp.asarray(x), jnp.asarray(z), schedule)
    alpha, mix, _, rho_z, onehot = _rates_at(schedule, z, t)
    v = schedule.vocab_size
    logq = jnp.log(alpha * jax.nn.one_hot(x, v, dtype=mix.dtype) + mix[None, :])
    logq_hat = jnp.logaddexp(jnp.log(alpha) + jnp.asarray(log_x0), jnp.log(mix)[None, :])
    kl = _categorical_kl(jnp.exp(logq), logq_hat)
    log_r = jnp.sum(jnp.where(onehot, logq, 0.0), axis=-1) - jnp.sum(
        jnp.where(onehot, logq_hat, 0.0), axis=-1
    )
    itakura_saito = jnp.expm1(log_r) - log_r
    logq_z = jnp.sum(jnp.where(onehot, logq, 0.0), axis=-1)
    w = rho_z * jnp.exp(-logq_z)
    if weighting == "clip":
        w = jnp.clip(w, 0.0, max_weight)
    elif weighting == "dynamic":
        schedule = _require_kind(schedule, "GIDD's dynamic weighting", "gidd")
        is_x, is_m = z == x, z == (v - 1 if schedule.mask_id is not None else -1)
        big_b = 2.0**schedule.gamma * schedule.p_u / (1 - schedule.p_u)
        log_snr = jnp.clip(-jnp.log(alpha / (1 - alpha)), -20, 20)
        x_scale = big_b * jnp.exp(schedule.gamma / 2 * log_snr)
        w = jnp.where(is_x, x_scale, jnp.where(is_m, 2.0, 1.0)).astype(w.dtype)
        w = jnp.clip(w, 0.0, max_weight)
    return w * (kl + itakura_saito)


def score_entropy(
    schedule: AbstractSchedule,
    x: Int[ArrayLike, " L"],
    z: Int[ArrayLike, " L"],
    log_score: Float[ArrayLike, "L S"],
    t: Float[ArrayLike, ""],
) -> Float[Array, " L"]:
    """SEDD's denoising score entropy per position (``>= 0``).

    sum_{y != z} rho_t(z) [ s_y - a_y log s_y + a_y (log a_y - 1) ],   a_y = q_t(y|x)/q_t(z|x).

    ``log_score`` must be free of NaN and ``+inf`` (a value check: the entry at ``z`` is masked
    out of the sum, so a NaN there would otherwise vanish).
    """
    _check_schedule(schedule)
    x, z = _check_pair(jnp.asarray(x), jnp.asarray(z), schedule)
    alpha, mix, _, rho_z, onehot = _rates_at(schedule, z, t)
    logq = jnp.log(alpha * jax.nn.one_hot(x, schedule.vocab_size, dtype=mix.dtype) + mix[None, :])
    log_a = logq - jnp.sum(jnp.where(onehot, logq, 0.0), axis=-1)[:, None]
    a = jnp.exp(log_a)
    log_s = _no_nan_or_posinf(log_score, "log_score")
    term = (
        jnp.exp(log_s)
        - jnp.where(a > 0, a * log_s, 0.0)
        + jnp.where(a > 0, a * (jnp.where(a > 0, log_a, 0.0) - 1), 0.0)
    )
    return rho_z * jnp.sum(jnp.where(onehot, 0.0, term), axis=-1)


def mdlm_integrand(
    schedule: AbstractSchedule,
    x: Int[ArrayLike, " L"],
    z: Int[ArrayLike, " L"],
    log_x0: Float[ArrayLike, "L S"],
    t: Float[ArrayLike, ""],
) -> Float[Array, " L"]:
    """MDLM's weighted cross-entropy: ``-alpha_t'/(1 - alpha_t) (-log x_hat(x))`` at masks.

    Masked schedule only (``1/t`` weight for ``alpha_t = 1 - t``); zero on unmasked tokens.
    ``log_x0`` must be free of NaN and ``+inf`` (a value check: only the entries of the clean
    tokens at masked positions are read, so a NaN elsewhere would otherwise vanish).
    """
    _check_schedule(schedule)
    _require_kind(schedule, "MDLM", "masked")
    x, z = _check_pair(jnp.asarray(x), jnp.asarray(z), schedule)
    alpha, _, sigma, _ = schedule.rates(check_time(t))
    weight = sigma * alpha / (1 - alpha)
    log_x0 = _no_nan_or_posinf(log_x0, "log_x0")
    nll = -jnp.take_along_axis(log_x0, x[:, None], axis=-1)[:, 0]
    return jnp.where(z == schedule.mask_id, weight * nll, 0.0)
