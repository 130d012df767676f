"""Interpolating forward noising families on a finite vocabulary (uniform, masked, GIDD hybrid).

One position is corrupted independently of the others by

    q_t(z | x) = alpha_t 1[z = x] + m_t(z),     sum_z m_t(z) = 1 - alpha_t,

with ``alpha_0 = 1``, ``alpha_1 = 0``. Writing ``sigma_t = -alpha_t' / alpha_t`` and the *rate
into z* ``rho_t(z) = m_t'(z) + sigma_t m_t(z)``, the forward generator jumps from any state ``a`` to
``z != a`` at rate ``rho_t(z)`` (then ``d/dt q_t = rho_t - sigma_t q_t``).
"""

import abc
import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from ._random import categorical

KINDS = ("uniform", "masked", "gidd")


def check_time(t: Any, name: str = "t") -> Array:
    """``t`` as a floating scalar array, with a runtime error when it leaves ``[0, 1]``."""
    t = jnp.asarray(t)
    if t.ndim != 0:
        raise ValueError(f"`{name}` must be a scalar time, got shape {t.shape}.")
    if not jnp.issubdtype(t.dtype, jnp.floating):
        t = t.astype(jnp.result_type(float))
    return eqx.error_if(t, ~((t >= 0) & (t <= 1)), f"`{name}` must lie in [0, 1].")


def check_tokens(x: Any, vocab_size: int, name: str) -> Array:
    """Integer ids with a runtime error when any id falls outside ``[0, vocab_size)``."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise TypeError(f"`{name}` must hold integer token ids, got dtype {x.dtype}.")
    return eqx.error_if(
        x,
        jnp.any((x < 0) | (x >= vocab_size)),
        f"`{name}` has token ids outside the vocabulary [0, {vocab_size}).",
    )


class AbstractSchedule(eqx.Module):
    """A forward noising family ``q_t(z|x) = alpha_t e_x + m_t`` on one position (the slot).

    Subclasses give ``num_tokens`` (``N`` real tokens), ``mask_id`` (``N``, or ``None`` when
    there is no mask state) and ``alpha_mixing(t) -> (alpha_t, m_t)`` with ``alpha_0 = 1``,
    ``alpha_1 = 0`` and ``m_t >= 0`` summing to ``1 - alpha_t`` over the ``V`` states
    (``V = N + 1`` with a mask, else ``N``). Everything else (rates by ``jax.jvp``, marginals,
    the prior ``q_1 = m_1``, forward draws) follows from these and is shared.
    """

    num_tokens: eqx.AbstractVar[int]
    mask_id: eqx.AbstractVar[int | None]

    @abc.abstractmethod
    def alpha_mixing(self, t: Float[Array, ""]) -> tuple[Float[Array, ""], Float[Array, " S"]]:
        """``(alpha_t, m_t)`` at a scalar time ``t`` (dtype of ``t``), differentiable in ``t``."""

    @property
    def vocab_size(self) -> int:
        """``V``: ``N`` without a mask state, ``N + 1`` (mask included) with one."""
        return self.num_tokens if self.mask_id is None else self.num_tokens + 1

    def alpha(self, t: Float[ArrayLike, ""]) -> Float[Array, ""]:
        """Probability ``alpha_t`` that a token is still clean at time ``t``."""
        return self.alpha_mixing(check_time(t))[0]

    def mixing(self, t: Float[ArrayLike, ""]) -> Float[Array, " S"]:
        """Noise mass ``m_t`` over the ``V`` states (sums to ``1 - alpha_t``)."""
        return self.alpha_mixing(check_time(t))[1]

    def rates(
        self, t: Float[ArrayLike, ""]
    ) -> tuple[Float[Array, ""], Float[Array, " S"], Float[Array, ""], Float[Array, " S"]]:
        """``(alpha_t, m_t, sigma_t, rho_t)``: ``sigma = -alpha'/alpha``, ``rho = m' + sigma m``.

        Derivatives by ``jax.jvp``; ``t`` must lie in ``[0, 1)`` (``sigma_1`` is infinite).
        """
        t = check_time(t)
        (alpha, mix), (dalpha, dmix) = jax.jvp(self.alpha_mixing, (t,), (jnp.ones_like(t),))
        sigma = -dalpha / alpha
        return alpha, mix, sigma, dmix + sigma * mix

    def sigma(self, t: Float[ArrayLike, ""]) -> Float[Array, ""]:
        """``sigma_t = -alpha_t'/alpha_t``, the total forward rate of a clean token."""
        return self.rates(t)[2]

    def rates_in(self, t: Float[ArrayLike, ""]) -> Float[Array, " S"]:
        """``rho_t(z) = m_t'(z) + sigma_t m_t(z)``: forward jump rate into each state ``z``."""
        return self.rates(t)[3]

    def marginal(self, x: Int[ArrayLike, " L"], t: Float[ArrayLike, ""]) -> Float[Array, "L S"]:
        """``q_t(. | x_i)`` for every position: ``alpha_t e_{x_i} + m_t``, shape ``(L, V)``."""
        x = check_tokens(x, self.vocab_size, "x")
        alpha, mix = self.alpha_mixing(check_time(t))
        return alpha * jax.nn.one_hot(x, self.vocab_size, dtype=mix.dtype) + mix[None, :]

    def log_marginal(self, x: Int[ArrayLike, " L"], t: Float[ArrayLike, ""]) -> Float[Array, "L S"]:
        """``log q_t(. | x_i)``, shape ``(L, V)`` (``-inf`` where the mass is exactly 0)."""
        return jnp.log(self.marginal(x, t))

    def prior(self, dtype: Any = None) -> Float[Array, " S"]:
        """``q_1 = m_1``, the same for every clean token (uniform over ``N``, or the mask)."""
        dtype = jnp.result_type(float) if dtype is None else dtype
        return self.alpha_mixing(jnp.ones((), dtype))[1]

    def sample(
        self, key: PRNGKeyArray, x: Int[ArrayLike, " L"], t: Float[ArrayLike, ""]
    ) -> Int[Array, " L"]:
        """Draw ``z_i ~ q_t(. | x_i)`` independently per position."""
        logq = self.log_marginal(x, t)
        return categorical(key, logq).astype(jnp.asarray(x).dtype)


class InterpolatingSchedule(AbstractSchedule):
    """A forward noising family ``q_t(z|x) = alpha_t e_x + m_t`` (acts on one position).

    Attributes:
        kind: ``"uniform"`` (``V = N``, ``m_t = (1 - alpha_t)/N``), ``"masked"`` (``V = N + 1``,
            ``m_t = (1 - alpha_t) e_m``) or ``"gidd"`` (``V = N + 1``, mask plus uniform noise:
            ``m_t = (t e_m + c_t u)/(1 + c_t)``, ``c_t = B t^(g/2) (1-t)^(g/2)``,
            ``B = 2^g p_u/(1 - p_u)``, ``alpha_t = (1 - t)/(1 + c_t)``).
        num_tokens: ``N``, the number of real tokens.
        mask_id: the mask token id (``N``) for the masked and GIDD families, else ``None``.
        p_u: GIDD's uniform-noise fraction at ``t = 1/2``; gamma: GIDD's exponent ``g``.

    Uniform and masked use ``alpha_t = 1 - t``. Time derivatives come from ``jax.jvp``, so every
    family shares one code path. All methods take the dtype of ``t``.

    References:
        GIDD: von Ruette et al., arXiv 2503.04482; MDLM: Sahoo et al., arXiv 2406.07524;
        Neural CTMC: Li et al., arXiv 2604.15694.
    """

    kind: str = eqx.field(static=True)
    num_tokens: int = eqx.field(static=True)
    mask_id: int | None = eqx.field(static=True)
    p_u: float = eqx.field(static=True)
    gamma: float = eqx.field(static=True)

    def __init__(
        self,
        kind: str,
        num_tokens: int,
        mask_id: int | None = None,
        p_u: float = 0.2,
        gamma: float = 1.0,
    ):
        if kind not in KINDS:
            raise ValueError(f"unknown schedule `kind` {kind!r}; expected one of {list(KINDS)}.")
        if not isinstance(num_tokens, int) or num_tokens < 2:
            raise ValueError(f"`num_tokens` must be an int >= 2, got {num_tokens!r}.")
        if kind == "uniform":
            if mask_id is not None:
                raise ValueError(f"the uniform schedule has no mask token; got mask_id={mask_id}.")
        else:
            if mask_id is None:
                raise ValueError(
                    f"the {kind} schedule needs a `mask_id` (expected {num_tokens}, "
                    "the id after the real tokens); got None."
                )
            if mask_id != num_tokens:
                raise ValueError(
                    f"`mask_id` must be num_tokens = {num_tokens} (the last id), got {mask_id}."
                )
        if not 0.0 < p_u < 1.0:
            raise ValueError(f"`p_u` must lie in (0, 1), got {p_u}.")
        if not gamma > 0.0:
            raise ValueError(f"`gamma` must be > 0, got {gamma}.")
        self.kind, self.num_tokens, self.mask_id = kind, num_tokens, mask_id
        self.p_u, self.gamma = float(p_u), float(gamma)

    def alpha_mixing(self, t: Float[Array, ""]) -> tuple[Float[Array, ""], Float[Array, " S"]]:
        """``(alpha_t, m_t)`` of the family (see the class docstring)."""
        n, v = self.num_tokens, self.vocab_size
        if self.kind == "uniform":
            alpha = 1 - t
            return alpha, jnp.full((v,), 1.0, t.dtype) * (t / n)
        if self.kind == "masked":
            return 1 - t, jax.nn.one_hot(n, v, dtype=t.dtype) * t
        g = self.gamma
        big_b = 2.0**g * self.p_u / (1 - self.p_u)
        c = big_b * t ** (g / 2) * (1 - t) ** (g / 2)
        u = jnp.concatenate([jnp.full((n,), 1.0 / n, t.dtype), jnp.zeros((1,), t.dtype)])
        e_m = jax.nn.one_hot(n, v, dtype=t.dtype)
        return (1 - t) / (1 + c), (t * e_m + c * u) / (1 + c)


def uniform_schedule(num_tokens: int) -> InterpolatingSchedule:
    """Uniform noise, ``alpha_t = 1 - t``: ``q_t(z|x) = (1-t) 1[z=x] + t/N``."""
    return InterpolatingSchedule("uniform", num_tokens)


def masked_schedule(num_tokens: int, mask_id: int | None = None) -> InterpolatingSchedule:
    """Absorbing (mask) noise on ``V = N + 1`` states, ``alpha_t = 1 - t``, mask id ``N``.

    ``mask_id`` defaults to ``num_tokens``; passing anything else raises ``ValueError``.
    """
    return InterpolatingSchedule("masked", num_tokens, num_tokens if mask_id is None else mask_id)


def gidd_schedule(num_tokens: int, p_u: float = 0.2, gamma: float = 1.0) -> InterpolatingSchedule:
    """GIDD's mask + uniform hybrid (``p_u`` uniform fraction at ``t = 1/2``), mask id ``N``."""
    if not isinstance(p_u, int | float) or not math.isfinite(p_u):
        raise ValueError(f"`p_u` must be a finite float, got {p_u!r}.")
    return InterpolatingSchedule("gidd", num_tokens, num_tokens, p_u=p_u, gamma=gamma)
