"""Training losses (Neural CTMC, MDLM, GIDD, SEDD) and the NELBO evaluator.

Every loss is a per-token Monte-Carlo estimate of ``int_0^1 E_{z ~ q_t(.|x)} sum_i D_i dt / L``
with low-discrepancy times ``t_b = eps + (1 - 2 eps)((b + u)/B mod 1)`` (fresh ``u`` per batch),
``z`` drawn from the forward marginal and ONE network call per sequence. With the ELBO weights it
is an upper bound on ``-log p_theta(x) / L`` in nats (``q_1`` equals the prior for all three
families, so there is no prior term).

Every loss reads ``(model, x, key, *, schedule, options)``, so
``functools.partial(mdlm_loss, schedule=schedule)`` is a loss for `jaxgen.core.fit`.

References:
    Neural CTMC: Li et al., arXiv 2604.15694; MDLM: Sahoo et al., arXiv 2406.07524;
    GIDD: von Ruette et al., arXiv 2503.04482; SEDD: Lou et al., arXiv 2310.16834.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ..core.checks import check_in_interval, check_positive_int, check_rank
from ._ctmc import (
    _check_schedule,
    _path_kl,
    _require_kind,
    conditional_targets,
    gidd_integrand,
    mdlm_integrand,
    score_entropy,
)
from ._models import AbstractRateModel, check_rate_model, model_log_x0, model_rates
from ._schedules import AbstractSchedule, check_tokens

T_EPS = 1e-3  # times are kept in [eps, 1 - eps] (rates blow up at the ends)


def _check(
    model: AbstractRateModel, schedule: AbstractSchedule, x: Array, ndim: int, t_eps: float
) -> Array:
    _check_schedule(schedule)
    check_rate_model(model, schedule)
    check_in_interval(t_eps, "t_eps", 0.0, 0.5, closed=(True, False))
    shape = "(B, L)" if ndim == 2 else "(L,)"
    x = check_rank(x, ndim, "x", layout=shape)
    if x.size == 0:  # an empty mean is NaN
        raise ValueError(f"`x` must have shape {shape} with no empty axis, got {x.shape}.")
    return check_tokens(x, schedule.num_tokens, "x")


def stratified_times(
    key: PRNGKeyArray, num: int, t_eps: float = T_EPS, dtype=None
) -> Float[Array, " T"]:
    """Low-discrepancy times ``t_b = eps + (1 - 2 eps)((b + u)/num mod 1)``, ``u ~ U(0, 1)``."""
    dtype = jnp.result_type(float) if dtype is None else dtype
    u = jr.uniform(key, (), dtype)
    return t_eps + (1 - 2 * t_eps) * jnp.mod((jnp.arange(num, dtype=dtype) + u) / num, 1.0)


Integrand = Callable[[AbstractRateModel, AbstractSchedule, Array, Array, Array], Array]


def _mdlm_integrand(model, schedule, x, z, t):
    return mdlm_integrand(schedule, x, z, model_log_x0(model, schedule, z, t), t)


def _sedd_integrand(model, schedule, x, z, t):
    _, logits = model(z, t)
    return score_entropy(schedule, x, z, logits, t)


def _gidd_integrand(weighting):
    def integrand(model, schedule, x, z, t):
        return gidd_integrand(
            schedule, x, z, model_log_x0(model, schedule, z, t), t, weighting=weighting
        )

    return integrand


def _path_integrand(parameterization: str) -> Integrand:
    """The path KL ``D`` of the model's rates, read under ``parameterization``, per position."""

    def integrand(model, schedule, x, z, t):
        log_lam, log_pi = model_rates(model, schedule, z, t, parameterization)
        log_star, pi_star = conditional_targets(schedule, x, z, t)
        return _path_kl(jnp.exp(log_star), pi_star, log_lam, log_pi)

    return integrand


_PATH_INTEGRANDS = {name: _path_integrand(name) for name in ("ctmc", "x0", "score")}


def _path_integrand_checked(parameterization: str) -> Integrand:
    if parameterization not in _PATH_INTEGRANDS:
        raise ValueError(
            f"`parameterization` must be one of {list(_PATH_INTEGRANDS)}, got {parameterization!r}."
        )
    return _PATH_INTEGRANDS[parameterization]


def _batch_loss(integrand: Integrand, model, schedule, x, key, t_eps):
    b, length = x.shape
    kt, kz = jr.split(key)
    t = stratified_times(kt, b, t_eps)
    z = jax.vmap(schedule.sample)(jr.split(kz, b), x, t)
    d = jax.vmap(lambda xi, zi, ti: integrand(model, schedule, xi, zi, ti))(x, z, t)
    return (1 - 2 * t_eps) * jnp.mean(jnp.sum(d, axis=-1)) / length


def neural_ctmc_loss(
    model: AbstractRateModel,
    x: Int[Array, "B L"],
    key: PRNGKeyArray,
    *,
    schedule: AbstractSchedule,
    t_eps: float = T_EPS,
    parameterization: str = "ctmc",
) -> Float[Array, ""]:
    """Neural CTMC loss: the path KL ``D`` of the two heads against the conditional targets.

        D = [lam* log(lam*/lam_theta) - lam* + lam_theta] + lam* KL(pi* || pi_theta)

    per position (constants included, so the value is the per-token NELBO estimate in nats; the
    gradient equals the marginal path KL's in expectation).

    Args:
        model: an `AbstractRateModel` (e.g. `DiffusionTransformer`) with ``vocab_size ==
            schedule.vocab_size``.
        x: clean ids ``int[B, L]`` in ``[0, N)``. key: PRNG key.
        schedule: uniform, masked or GIDD (keyword-only, so that
            ``functools.partial(neural_ctmc_loss, schedule=schedule)`` plugs into
            `jaxgen.core.fit`).
        t_eps: times are drawn in ``[t_eps, 1 - t_eps]``.
        parameterization: how the two heads are read as rates (`model_rates`): ``"ctmc"`` (the
            paper's exit-rate and jump heads), ``"x0"`` or ``"score"`` (the same path KL for an
            x0- or score-parameterised model, as in `nelbo`).

    Returns:
        scalar loss (nats per token).
    """
    x = _check(model, schedule, x, 2, t_eps)
    return _batch_loss(_path_integrand_checked(parameterization), model, schedule, x, key, t_eps)


def gidd_loss(
    model: AbstractRateModel,
    x: Int[Array, "B L"],
    key: PRNGKeyArray,
    *,
    schedule: AbstractSchedule,
    t_eps: float = T_EPS,
    weighting: str = "elbo",
) -> Float[Array, ""]:
    """GIDD: ``w (KL(q_t(.|x) || q_t(.|x_hat)) + IS)`` (see `gidd_integrand`), any schedule.

    With the uniform schedule this is the uniform x_hat baseline (UDLM-like).
    """
    x = _check(model, schedule, x, 2, t_eps)
    if weighting not in ("elbo", "clip", "dynamic"):
        raise ValueError(f"`weighting` must be 'elbo', 'clip' or 'dynamic', got {weighting!r}.")
    return _batch_loss(_gidd_integrand(weighting), model, schedule, x, key, t_eps)


def _single_objective(
    integrand: Integrand, name: str, summary: str, requires: tuple[str, str] | None = None
) -> Callable[..., Array]:
    """A batch loss ``(model, x, key, *, schedule, t_eps=T_EPS) -> scalar`` for one integrand.

    ``requires = (method, kind)``: the loss is defined for schedules of that kind only.
    """

    def loss(
        model: AbstractRateModel,
        x: Int[Array, "B L"],
        key: PRNGKeyArray,
        *,
        schedule: AbstractSchedule,
        t_eps: float = T_EPS,
    ) -> Float[Array, ""]:
        x = _check(model, schedule, x, 2, t_eps)
        if requires is not None:
            _require_kind(schedule, *requires)
        return _batch_loss(integrand, model, schedule, x, key, t_eps)

    loss.__name__ = loss.__qualname__ = name
    loss.__doc__ = f"""{summary}

    Args:
        model: an `AbstractRateModel` (e.g. `DiffusionTransformer`) with ``vocab_size ==
            schedule.vocab_size``.
        x: clean ids ``int[B, L]``. key: PRNG key.
        schedule: the forward process (keyword-only: ``functools.partial(loss,
            schedule=schedule)`` plugs into `jaxgen.core.fit`).
        t_eps: times are drawn in ``[t_eps, 1 - t_eps]``.

    Returns:
        scalar loss (nats per token).
    """
    return loss


mdlm_loss = _single_objective(
    _mdlm_integrand,
    "mdlm_loss",
    "MDLM: ``E_t[ -alpha'/(1 - alpha) sum_{i masked} -log x_hat_i(x_i) ] / L`` (masked only).",
    requires=("MDLM", "masked"),
)
sedd_loss = _single_objective(
    _sedd_integrand,
    "sedd_loss",
    "SEDD score entropy (DWDSE), logits read as log concrete scores (uniform or absorbing).",
)


def nelbo(
    model: AbstractRateModel,
    x: Int[Array, " L"],
    key: PRNGKeyArray,
    *,
    schedule: AbstractSchedule,
    parameterization: str = "ctmc",
    num_times: int = 64,
    num_noise: int = 1,
    t_eps: float = T_EPS,
) -> Float[Array, ""]:
    """Negative ELBO of one sequence (nats, summed over positions), any parameterisation.

    ``NELBO(x) = int_0^1 E_{z ~ q_t(.|x)} sum_i D_i dt`` estimated with ``num_times`` stratified
    times times ``num_noise`` draws of ``z`` each; ``D`` is `path_kl` of the model's rates
    (`model_rates`) against `conditional_targets`. ``E_x NELBO >= H(p_data)``; divide by ``L``
    for nats per token. Times outside ``[t_eps, 1 - t_eps]`` are dropped (the bound then misses
    those end intervals, ``O(t_eps)``).
    """
    x = _check(model, schedule, x, 1, t_eps)
    integrand = _path_integrand_checked(parameterization)
    num_times = check_positive_int(num_times, "num_times")
    num_noise = check_positive_int(num_noise, "num_noise")
    kt, kz = jr.split(key)
    t = jnp.repeat(stratified_times(kt, num_times, t_eps), num_noise)
    z = jax.vmap(lambda k, ti: schedule.sample(k, x, ti))(jr.split(kz, t.shape[0]), t)
    d = jax.vmap(lambda zi, ti: jnp.sum(integrand(model, schedule, x, zi, ti)))(z, t)
    return (1 - 2 * t_eps) * jnp.mean(d)
