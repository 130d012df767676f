"""Reverse-time samplers for CTMC-parameterised discrete diffusion (Euler, tau-leaping, Gillespie).

Time runs backwards on the grid ``t_k = 1 - eps - k h``, ``h = (1 - 2 eps)/K``, ``k = 0..K-1``;
the network is evaluated once per step at ``(z, t_k)`` (with a mask token, once more at
``t = eps`` to fill the tokens still masked) and positions move in parallel
(a `lax.fori_loop` over steps whose count may be traced, so one compiled sampler serves
every K; one key per step). The chain starts from the prior ``q_1``.

References:
    Neural CTMC: Li et al., arXiv 2604.15694; tau-leaping for discrete diffusion: Campbell et al.,
    arXiv 2205.14987; Gillespie, J. Phys. Chem. 81 (1977).
"""

import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jax import lax
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ..core.checks import check_in_interval, check_positive
from ._ctmc import NEG, _check_schedule
from ._models import PARAMETERIZATIONS, AbstractRateModel, check_rate_model, model_rates
from ._random import categorical, uniform
from ._schedules import AbstractSchedule

METHODS = ("euler", "tau_leaping", "gillespie")
RateFn = Callable[[Array, Array], tuple[Array, Array]]


def _check_rates(log_lam: Array, log_pi: Array) -> tuple[Array, Array]:
    log_lam = eqx.error_if(
        log_lam,
        jnp.any(jnp.isnan(log_lam) | (log_lam == jnp.inf)),
        "`log_lam` must not be NaN or +inf (a non-finite exit rate).",
    )
    return log_lam, log_pi


def jump_step(
    key: PRNGKeyArray,
    z: Int[Array, "*batch L"],
    log_lam: Float[Array, "*batch L"],
    log_pi: Float[Array, "*batch L S"],
    h: Float[Array, ""] | float,
    method: str = "euler",
) -> Int[Array, "*batch L"]:
    """One step of length ``h`` of the reverse chain with its rates frozen over the step.

    Position ``i`` moves to ``y ~ pi_i`` when its jump fires:

    - ``"euler"``: w.p. ``1 - exp(-h lambda_i)``; exact for frozen rates when at most one jump
      per position is allowed.
    - ``"tau_leaping"``: ``n_y ~ Poisson(h lambda pi_y)`` and the position moves iff exactly one
      jump fired (jaxgen rule). By Poisson splitting ``sum_y n_y ~ Poisson(h lambda)`` and a single
      event lands on ``y ~ pi``; multiple events are rejected (the state stays).

    Acts on one sequence or a batch (leading axes) with one key: the random bits are drawn in one
    go.

    ``h`` must be finite and > 0 and ``log_pi`` free of NaN and ``+inf`` (value checks; the
    samplers call the body without them, with their own grid's ``h``).
    """
    h = check_positive(h, "h")
    log_pi = check_in_interval(log_pi, "log_pi", -math.inf, math.inf, closed=(True, False))
    return _jump_step(key, z, log_lam, log_pi, h, method)


def _jump_step(
    key: PRNGKeyArray, z: Array, log_lam: Array, log_pi: Array, h: Array | float, method: str
) -> Array:
    # The body of `jump_step` (the exit-rate check only; called at every sampler step).
    log_lam, log_pi = _check_rates(log_lam, log_pi)
    kf, ky = jr.split(key)
    rate = h * jnp.exp(log_lam)
    if method == "euler":
        fired = uniform(kf, z.shape, rate.dtype) < -jnp.expm1(-rate)
    elif method == "tau_leaping":
        fired = jr.poisson(kf, rate, z.shape) == 1
    else:
        raise ValueError(f"`method` must be 'euler' or 'tau_leaping', got {method!r}.")
    y = categorical(ky, log_pi).astype(z.dtype)
    return jnp.where(fired, y, z)


def euler_jump_step(key, z, log_lam, log_pi, h):
    """Exit-rate Euler step: `jump_step` with ``method="euler"``."""
    return jump_step(key, z, log_lam, log_pi, h, "euler")


def tau_leap_step(key, z, log_lam, log_pi, h):
    """tau-leaping step: `jump_step` with ``method="tau_leaping"``."""
    return jump_step(key, z, log_lam, log_pi, h, "tau_leaping")


def _gillespie_interval(
    key: PRNGKeyArray, z: Array, rate_fn: RateFn, t: Array, h: Array, max_events: int
) -> Array:
    """Exact event-by-event simulation over an interval of length ``h`` with time frozen at t."""

    def cond(state):
        _, _, remaining, count, done = state
        return ~done & (count < max_events)

    def body(state):
        key, z, remaining, count, _ = state
        key, ke, ki, ky = jr.split(key, 4)
        log_lam, log_pi = _check_rates(*rate_fn(z, t))
        log_total = jax.nn.logsumexp(log_lam)
        wait = jr.exponential(ke, (), remaining.dtype) * jnp.exp(-log_total)
        fire = wait < remaining
        i = categorical(ki, log_lam)
        y = categorical(ky, log_pi[i]).astype(z.dtype)
        z = jnp.where(fire, z.at[i].set(y), z)
        return key, z, remaining - wait, count + 1, ~fire

    init = (key, z, h, jnp.asarray(0), jnp.asarray(False))
    return lax.while_loop(cond, body, init)[1]


def _fill_masks(key: PRNGKeyArray, z: Array, log_pi: Array, schedule: AbstractSchedule) -> Array:
    """Replace tokens still masked by a draw of the jump distribution ``log_pi`` (mask excluded)."""
    is_mask = jnp.broadcast_to(jnp.arange(schedule.vocab_size) == schedule.mask_id, log_pi.shape)
    log_pi = jnp.where(is_mask, NEG, log_pi)
    y = categorical(key, log_pi).astype(z.dtype)
    return jnp.where(z == schedule.mask_id, y, z)


def sample_rates(
    key: PRNGKeyArray,
    rate_fn: RateFn,
    schedule: AbstractSchedule,
    num: int,
    length: int,
    steps: int,
    method: str = "euler",
    t_eps: float = 1e-3,
    max_events: int | None = None,
) -> Int[Array, "B L"]:
    """Sample ``num`` sequences from the reverse chain ``rate_fn(z (L,), t) -> (log_lam, log_pi)``.

    Args:
        key: PRNG key. rate_fn: the reverse chain on one sequence (log exit rate (L,), log jump
            probabilities (L, V)). schedule: gives the prior ``q_1`` and the mask id.
        num, length: output shape. steps: ``K >= 1`` grid steps.
        method: ``"euler"`` or ``"tau_leaping"`` (`jump_step`), or
            ``"gillespie"`` (exact simulation of the chain whose rates are frozen in time over
            each step; at most ``max_events`` jumps per step, default ``4 * length``; for tests and
            small state spaces). Masked tokens left at the end are filled from ``pi`` at
            ``t = eps``.

    Returns:
        ``int32[num, length]``.
    """
    _check_schedule(schedule)
    for name, val in (("num", num), ("length", length), ("steps", steps)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 1:
            raise ValueError(f"`{name}` must be an int >= 1, got {val!r}.")
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {list(METHODS)}, got {method!r}.")
    if not 0.0 <= t_eps < 0.5:
        raise ValueError(f"`t_eps` must lie in [0, 0.5), got {t_eps}.")
    max_events = 4 * length if max_events is None else max_events
    # jitted with the step count traced: one compilation per rate_fn serves every K
    return _sample_rates_jit(
        key, rate_fn, schedule, num, length, jnp.asarray(steps), method, t_eps, max_events
    )


def _sample_rates(key, rate_fn, schedule, num, length, steps, method, t_eps, max_events):
    # ``steps`` may be traced: one compiled sampler serves every step count (a bounded
    # fori_loop, i.e. a while_loop; sampling is never differentiated).
    dtype = jnp.result_type(float)
    k0, kscan, kfill = jr.split(key, 3)
    z0 = categorical(k0, jnp.log(schedule.prior(dtype)), shape=(num, length)).astype(jnp.int32)
    h = (1 - 2 * t_eps) / steps.astype(dtype)

    # With a mask token, tokens still masked after the K steps are filled from ``pi`` at
    # ``t = eps``. For Euler and tau-leaping that fill is one more loop iteration (``i = K``, where
    # ``t_K = eps``) reusing the step's network call, so the compiled sampler holds one forward.
    fill_in_loop = schedule.mask_id is not None and method != "gillespie"

    def body(i, z):
        t = (1 - t_eps) - h * i.astype(dtype)
        key_i = jr.fold_in(kscan, i)
        if method == "gillespie":  # event-by-event per sequence
            return jax.vmap(lambda k, zi: _gillespie_interval(k, zi, rate_fn, t, h, max_events))(
                jr.split(key_i, num), z
            )
        # one network call for the batch, then one draw of random bits for all positions
        log_lam, log_pi = jax.vmap(rate_fn, in_axes=(0, None))(z, t)
        k_step, k_fill = jr.split(key_i)
        stepped = _jump_step(k_step, z, log_lam, log_pi, h, method)
        if not fill_in_loop:
            return stepped
        return jnp.where(i == steps, _fill_masks(k_fill, z, log_pi, schedule), stepped)

    z = lax.fori_loop(0, steps + 1 if fill_in_loop else steps, body, z0)
    if schedule.mask_id is None or fill_in_loop:
        return z

    def final_fill(key, z):  # Gillespie: one more network call at t = eps
        return _fill_masks(key, z, rate_fn(z, jnp.asarray(t_eps, dtype))[1], schedule)

    return jax.vmap(final_fill)(jr.split(kfill, num), z)


_sample_rates_jit = eqx.filter_jit(_sample_rates)


@eqx.filter_jit
def _sample_model(model, schedule, key, num, length, steps, method, parameterization, t_eps):
    def rate_fn(z, t):
        return model_rates(model, schedule, z, t, parameterization)

    return _sample_rates(key, rate_fn, schedule, num, length, steps, method, t_eps, 4 * length)


def sample(
    key: PRNGKeyArray,
    model: AbstractRateModel,
    schedule: AbstractSchedule,
    num: int,
    length: int,
    steps: int,
    method: str = "euler",
    parameterization: str = "ctmc",
    t_eps: float = 1e-3,
) -> Int[Array, "B L"]:
    """Jitted reverse sampling from a trained `AbstractRateModel` (see `sample_rates`).

    ``parameterization`` (``"ctmc"``, ``"x0"``, ``"score"``) says how the network's outputs become
    rates (`model_rates`), so Neural CTMC, MDLM/GIDD and SEDD share this sampler.
    """
    _check_schedule(schedule)
    check_rate_model(model, schedule)
    if parameterization not in PARAMETERIZATIONS:
        raise ValueError(
            f"`parameterization` must be one of {list(PARAMETERIZATIONS)}, got "
            f"{parameterization!r}."
        )
    for name, val in (("num", num), ("length", length), ("steps", steps)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 1:
            raise ValueError(f"`{name}` must be an int >= 1, got {val!r}.")
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {list(METHODS)}, got {method!r}.")
    if not 0.0 <= t_eps < 0.5:
        raise ValueError(f"`t_eps` must lie in [0, 0.5), got {t_eps}.")
    return _sample_model(
        model, schedule, key, num, length, jnp.asarray(steps), method, parameterization, t_eps
    )
