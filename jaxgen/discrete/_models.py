"""The denoiser: `jaxgen.nn.Transformer` (bidirectional, time-conditioned) plus an exit-rate head.

One network serves every parameterisation: its per-position logits are read as jump logits
(Neural CTMC), clean-token logits (MDLM / GIDD, ``"x0"``) or log concrete scores (SEDD,
``"score"``); the scalar exit head is used by Neural CTMC only.
"""

import abc
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from ..core.checks import check_module
from ..nn import Transformer
from ._ctmc import NEG, _check_schedule, rates_from_score, rates_from_x0
from ._schedules import AbstractSchedule, check_time, check_tokens

PARAMETERIZATIONS = ("ctmc", "x0", "score")
EXIT_CLIP = 15.0  # |s| bound of the learned log-ratio to the reference exit rate (a jaxgen choice)


class AbstractRateModel(eqx.Module):
    """The denoiser slot: ``model(z, t) -> (exit_score (L,), logits (L, V))`` on ONE sequence.

    ``z`` holds noisy ids in ``[0, vocab_size)`` and ``t`` is a scalar time in ``[0, 1]``. The
    logits are read as jump logits (``"ctmc"``), clean-token logits (``"x0"``) or log concrete
    scores (``"score"``) by `model_rates`; the exit score ``s`` is used by ``"ctmc"`` only
    (``log lambda = clip(s) + ref_t(z)``; return zeros if unused). Subclass it with your own
    equinox module to train it with the losses of this family and sample it with `sample`.
    """

    vocab_size: eqx.AbstractVar[int]

    @abc.abstractmethod
    def __call__(
        self, z: Int[Array, " L"], t: Float[Array, ""]
    ) -> tuple[Float[Array, " L"], Float[Array, "L S"]]:
        """(exit score ``(L,)``, logits ``(L, V)``) for one noisy sequence at time ``t``."""


def check_rate_model(model: Any, schedule: AbstractSchedule) -> None:
    """``model`` must be an `AbstractRateModel` over the schedule's ``V`` states."""
    check_module(model, AbstractRateModel, "model")
    if model.vocab_size != schedule.vocab_size:
        raise ValueError(
            f"model vocab_size {model.vocab_size} != schedule vocab_size {schedule.vocab_size}."
        )


class DiffusionTransformer(AbstractRateModel):
    """Bidirectional time-conditioned `jaxgen.nn.Transformer` with an extra exit-rate head.

    ``model(z, t) -> (exit_score (L,), logits (L, V))`` on one noisy sequence.

    The exit head is a zero-initialised linear map of the final features, so an untrained Neural
    CTMC model starts at the reference exit rate (exactly MDLM's rate for the masked process).
    """

    transformer: Transformer
    exit_head: eqx.nn.Linear

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        num_layers: int,
        num_heads: int,
        max_len: int,
        *,
        key: PRNGKeyArray,
        **transformer_options: Any,
    ):
        """Build the network.

        Args:
            vocab_size, dim, num_layers, num_heads, max_len: the sizes of
                `jaxgen.nn.Transformer` (states ``V``, width, blocks, heads, longest sequence).
            key: PRNG key.
            **transformer_options: any other keyword of `jaxgen.nn.Transformer` (``mixer``,
                ``mixer_kwargs``, ``positions``, ...), except ``causal`` and
                ``time_conditioning``, which this model fixes (bidirectional, time-conditioned).
        """
        fixed = {"causal", "time_conditioning"} & set(transformer_options)
        if fixed:
            raise ValueError(f"DiffusionTransformer fixes {sorted(fixed)}; do not pass them.")
        ktr, _ = jr.split(key)
        self.transformer = Transformer(
            vocab_size,
            dim,
            num_layers,
            num_heads,
            max_len,
            key=ktr,
            causal=False,
            time_conditioning=True,
            **transformer_options,
        )
        dim = self.transformer.dim
        lin = eqx.nn.Linear(dim, 1, key=key)
        self.exit_head = eqx.tree_at(
            lambda m: (m.weight, m.bias),
            lin,
            (jnp.zeros_like(lin.weight), jnp.zeros_like(lin.bias)),
        )

    @property
    def vocab_size(self) -> int:  # the `AbstractRateModel` attribute
        """Number of states ``V`` the network reads and predicts."""
        return self.transformer.vocab_size

    def __call__(
        self, z: Int[Array, " L"], t: Float[ArrayLike, ""]
    ) -> tuple[Float[Array, " L"], Float[Array, "L S"]]:
        """(exit score ``s`` (L,), logits (L, V)) for one noisy sequence at time ``t``."""
        h, _ = self.transformer.features(z, jnp.asarray(t))
        logits = self.transformer.logits(h)
        exit_score = jax.vmap(self.exit_head)(h)[:, 0]
        return exit_score, logits


def reference_log_exit_rate(
    schedule: AbstractSchedule, z: Int[ArrayLike, " L"], t: Float[ArrayLike, ""]
) -> Float[Array, " L"]:
    """``ref_t(z) = log rho_t(z) + log(1 - m_t(z)) - log m_t(z)``: exit rate of sure noise.

    ``-inf`` where ``rho_t(z) = 0`` (no reverse jump can leave an unmasked token of the masked
    process). For the masked process ``ref_t(m)`` equals the true exit rate ``lambda*(m)``.
    """
    _check_schedule(schedule)
    z = check_tokens(z, schedule.vocab_size, "z")
    _, mix, _, rho = schedule.rates(check_time(t))
    rho_z, m_z = jnp.maximum(rho[z], 0.0), mix[z]
    active = (rho_z > 0) & (m_z > 0)
    safe_rho, safe_m = jnp.where(active, rho_z, 1.0), jnp.where(active, m_z, 0.5)
    ref = jnp.log(safe_rho) + jnp.log1p(-safe_m) - jnp.log(safe_m)
    return jnp.where(active, ref, -jnp.inf)


def _exclude(
    logits: Array, z: Array, schedule: AbstractSchedule, *, current: bool, mask: bool
) -> Array:
    v = schedule.vocab_size
    drop = jnp.zeros(logits.shape, bool)
    if current:
        drop = drop | jax.nn.one_hot(z, v, dtype=bool)
    if mask and schedule.mask_id is not None:
        drop = drop | (jnp.arange(v) == schedule.mask_id)[None, :]
    return jnp.where(drop, NEG, logits)


def model_rates(
    model: AbstractRateModel,
    schedule: AbstractSchedule,
    z: Int[ArrayLike, " L"],
    t: Float[ArrayLike, ""],
    parameterization: str = "ctmc",
) -> tuple[Float[Array, " L"], Float[Array, "L S"]]:
    """The learned reverse chain ``(log lambda_theta (L,), log pi_theta (L, V))`` at ``(z, t)``.

    * ``"ctmc"`` (Neural CTMC): ``log lambda_theta = clip(s, -15, 15) + ref_t(z)``,
      ``pi_theta = softmax`` of the logits with the current token (and, for the masked process,
      the mask) set to ``NEG``.
    * ``"x0"`` (MDLM / GIDD / uniform x_hat): logits over real tokens -> `rates_from_x0`.
    * ``"score"`` (SEDD): logits are log scores -> `rates_from_score`.
    """
    if parameterization not in PARAMETERIZATIONS:
        raise ValueError(
            f"`parameterization` must be one of {list(PARAMETERIZATIONS)}, got "
            f"{parameterization!r}."
        )
    _check_schedule(schedule)
    check_rate_model(model, schedule)
    z = check_tokens(z, schedule.vocab_size, "z")
    t = check_time(t)
    s, logits = model(z, t)
    if parameterization == "ctmc":
        ref = reference_log_exit_rate(schedule, z, t)
        log_lam = jnp.where(jnp.isfinite(ref), jnp.clip(s, -EXIT_CLIP, EXIT_CLIP) + ref, -jnp.inf)
        # Only the current state is excluded: where no reverse jump can enter the mask (the
        # masked process), the rate out of every unmasked token is already exactly 0.
        log_pi = jax.nn.log_softmax(
            _exclude(logits, z, schedule, current=True, mask=False), axis=-1
        )
        return log_lam, log_pi
    if parameterization == "x0":
        log_x0 = jax.nn.log_softmax(
            _exclude(logits, z, schedule, current=False, mask=True), axis=-1
        )
        return rates_from_x0(schedule, z, log_x0, t)
    return rates_from_score(schedule, z, logits, t)


def model_log_x0(
    model: AbstractRateModel,
    schedule: AbstractSchedule,
    z: Int[ArrayLike, " L"],
    t: Float[ArrayLike, ""],
) -> Float[Array, "L S"]:
    """Clean-token log-probabilities of an ``"x0"`` model (mask entry ``~NEG``)."""
    _check_schedule(schedule)
    check_rate_model(model, schedule)
    _, logits = model(check_tokens(z, schedule.vocab_size, "z"), check_time(t))
    logits = _exclude(logits, jnp.asarray(z), schedule, current=False, mask=True)
    return jax.nn.log_softmax(logits, axis=-1)
