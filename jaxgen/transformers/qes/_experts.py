"""Quarantined Expert Shutdown (QES) building blocks.

LoRA and routed LoRA experts, a token router, Switch load balance, per-batch suspect trimming
and the deployment mask.

A reconstruction from the QES abstract (jaxgen choices). Every layer acts on ONE
vector; vmap for tokens and batches.
"""

import dataclasses
import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PRNGKeyArray

from jaxgen.core.checks import (
    check_finite,
    check_in_interval,
    check_nonnegative,
    check_positive,
)
from jaxgen.nn._layers import RMSNorm


def _check_rank(rank: int, d_out: int, d_in: int) -> None:
    if not isinstance(rank, int) or not 1 <= rank <= min(d_in, d_out):
        raise ValueError(f"rank must be an int in [1, {min(d_in, d_out)}], got {rank!r}.")


class LoRALinear(eqx.Module):
    """``y = W x + (alpha / r) B A x`` (Hu et al. 2021) with a frozen ``W`` (d_out, d_in).

    ``A`` (r, d_in) ~ N(0, 1/d_in), ``B`` (d_out, r) = 0, so the layer starts equal to ``W``.
    """

    weight: Float[Array, "d_out d_in"]
    A: Float[Array, "r d_in"]
    B: Float[Array, "d_out r"]
    scale: float = eqx.field(static=True)

    def __init__(self, weight: Array, rank: int, *, alpha: float = 16.0, key: PRNGKeyArray):
        weight = jnp.asarray(weight)
        if weight.ndim != 2:
            raise ValueError(f"weight must be (d_out, d_in), got shape {weight.shape}.")
        d_out, d_in = weight.shape
        _check_rank(rank, d_out, d_in)
        check_positive(alpha, "alpha")  # a static float: raises now
        self.weight = weight
        self.A = jr.normal(key, (rank, d_in), weight.dtype) / math.sqrt(d_in)
        self.B = jnp.zeros((d_out, rank), weight.dtype)
        self.scale = float(alpha) / rank

    def __call__(self, x: Float[Array, " d_in"]) -> Float[Array, " d_out"]:
        """Apply to one vector."""
        return self.weight @ x + self.scale * (self.B @ (self.A @ x))

    def merge(self) -> Float[Array, "d_out d_in"]:
        """The dense matrix ``W + scale * B A``."""
        return self.weight + self.scale * (self.B @ self.A)


class MoLoRALinear(eqx.Module):
    """Routed LoRA experts (mixture of LoRA experts with a softmax router).

    ``y = W x + scale * sum_e mask_e g_e B_e A_e x`` with no renormalisation of the gates.

    ``keep`` implements gradient channelling: every expert other than
    ``quarantine`` outputs ``keep * out + (1 - keep) * stop_gradient(out)`` (same value, gradient
    scaled by ``keep``).
    """

    weight: Float[Array, "d_out d_in"]
    A: Float[Array, "E r d_in"]
    B: Float[Array, "E d_out r"]
    scale: float = eqx.field(static=True)

    def __init__(
        self,
        weight: Array,
        num_experts: int,
        rank: int,
        *,
        alpha: float = 16.0,
        key: PRNGKeyArray,
    ):
        weight = jnp.asarray(weight)
        if weight.ndim != 2:
            raise ValueError(f"weight must be (d_out, d_in), got shape {weight.shape}.")
        d_out, d_in = weight.shape
        _check_rank(rank, d_out, d_in)
        if not isinstance(num_experts, int) or num_experts < 1:
            raise ValueError(f"num_experts must be an int >= 1, got {num_experts!r}.")
        check_positive(alpha, "alpha")  # a static float: raises now
        self.weight = weight
        self.A = jr.normal(key, (num_experts, rank, d_in), weight.dtype) / math.sqrt(d_in)
        self.B = jnp.zeros((num_experts, d_out, rank), weight.dtype)
        self.scale = float(alpha) / rank

    @property
    def num_experts(self) -> int:
        """Number of experts ``E``."""
        return self.A.shape[0]

    def __call__(
        self, x: Float[Array, " d_in"], *routing: Any, **options: Any
    ) -> Float[Array, " d_out"]:
        """``weight @ x + delta(x, gates, mask, keep=1.0, quarantine=0)`` on one vector.

        ``gates`` are the router's (E,) weights and ``mask`` the (E,) deployment mask; the
        arguments after ``x`` are those of `delta`.
        """
        return self.weight @ x + self.delta(x, *routing, **options)

    def delta(
        self,
        x: Float[Array, " d_in"],
        gates: Float[Array, " E"],
        mask: Float[Array, " E"],
        keep: Float[Array, ""] | float = 1.0,
        quarantine: int = 0,
    ) -> Float[Array, " d_out"]:
        """The adapter term alone, ``scale sum_e mask_e g_e B_e A_e x`` (the frozen map excluded).

        This is what the `jaxgen.nn` adapter hook adds to a base transformer's linear map.
        """
        E = self.num_experts
        for name, v in (("gates", gates), ("mask", mask)):
            if jnp.shape(v) != (E,):
                raise ValueError(f"{name} must have shape ({E},), got {jnp.shape(v)}.")
        if not 0 <= quarantine < E:
            raise ValueError(f"quarantine must be in [0, {E}), got {quarantine}.")
        out = jnp.einsum("eor,er->eo", self.B, jnp.einsum("erd,d->er", self.A, x))
        keep = jnp.asarray(keep, out.dtype)
        channelled = keep * out + (1 - keep) * jax.lax.stop_gradient(out)
        is_q = (jnp.arange(E) == quarantine)[:, None]
        out = jnp.where(is_q, out, channelled)
        w = (mask * gates).astype(out.dtype)
        return self.scale * (w @ out)


class TokenRouter(eqx.Module):
    """``g(h) = softmax((W RMSNorm(h) + b) / T)`` on the simplex of ``E`` experts."""

    norm: RMSNorm
    W: Float[Array, "E dim"]
    b: Float[Array, " E"]
    temperature: float = eqx.field(static=True)

    def __init__(self, dim: int, num_experts: int, *, temperature: float = 1.0, key: PRNGKeyArray):
        if num_experts < 2:
            raise ValueError(f"num_experts must be >= 2, got {num_experts}.")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}.")
        self.norm = RMSNorm(dim)
        self.W = jr.normal(key, (num_experts, dim)) * 0.02
        self.b = jnp.zeros((num_experts,))
        self.temperature = float(temperature)

    def __call__(self, h: Float[Array, " dim"]) -> Float[Array, " E"]:
        """Gates for one token."""
        return jax.nn.softmax((self.W @ self.norm(h) + self.b) / self.temperature)


def switch_load_loss(
    gates: Float[Array, "T E"],
    exclude: int | None = None,
    weights: Float[Array, " T"] | None = None,
) -> Float[Array, ""]:
    """Switch load balance (Fedus et al. 2021).

    ``E' sum_e f_e P_e`` over the ``E'`` experts not ``exclude``d, ``f_e`` = (weighted)
    fraction of tokens whose top expert is ``e``, ``P_e`` = mean gate
    (both weighted by ``weights``, e.g. the keep flags of the tokens' samples).
    """
    T, E = gates.shape
    w = jnp.ones((T,), gates.dtype) if weights is None else weights.astype(gates.dtype)
    keep = jnp.ones((E,), bool) if exclude is None else jnp.arange(E) != exclude
    g = jnp.where(keep, gates, 0.0)
    top = jax.nn.one_hot(jnp.argmax(jnp.where(keep, gates, -jnp.inf), axis=-1), E, dtype=g.dtype)
    denom = jnp.maximum(w.sum(), 1e-12)
    f = (w @ top) / denom
    P = (w @ g) / denom
    return keep.sum() * jnp.sum(f * P)


def trim_suspects(losses: Float[Array, " B"], rho_hat: float | Array) -> Float[Array, " B"]:
    """Keep weights of suspect trimming.

    0 for the ``ceil(rho_hat B)`` largest losses (ties: lower
    index first), 1 otherwise; no gradient flows through them.

    Raises:
        ValueError: ``losses`` not finite (an ``EquinoxRuntimeError`` under `jax.jit`): a NaN
            loss sorts arbitrarily and would trim the wrong samples. Inside `qes_loss` the check
            is skipped: a non-finite loss there reaches `jaxgen.core.fit`, whose
            ``on_nonfinite`` option decides.
    """
    return _trim_suspects(check_finite(losses, "losses"), rho_hat)


def _trim_suspects(losses: Array, rho_hat: float | Array) -> Array:
    if isinstance(rho_hat, int | float) and not 0 <= rho_hat < 1:
        raise ValueError(f"rho_hat must be in [0, 1), got {rho_hat}.")
    losses = jax.lax.stop_gradient(losses)
    (B,) = losses.shape
    n = jnp.ceil(jnp.asarray(rho_hat, losses.dtype) * B - 1e-9).astype(jnp.int32)
    # Stable sort of -loss: equal losses keep index order, so the lower index is trimmed first.
    order = jnp.argsort(-losses, stable=True)
    rank = jnp.zeros((B,), jnp.int32).at[order].set(jnp.arange(B, dtype=jnp.int32))
    return (rank >= n).astype(losses.dtype)


@dataclasses.dataclass(frozen=True)
class QESConfig:
    """QES hyper-parameters (all defaults are jaxgen choices)."""

    num_experts: int = 4
    rank: int = 8
    alpha: float = 16.0
    quarantine: int = 0
    rho_hat: float = 0.2
    lambda_keep: float = 1.0
    lambda_route: float = 0.1
    lambda_bal: float = 0.01
    warmup_frac: float = 0.05
    channel: bool = True
    total_steps: int = 1500  # length of the run: the warm-up is ``warmup_frac * total_steps``

    def __post_init__(self):
        if self.num_experts < 2:
            raise ValueError(f"num_experts must be >= 2, got {self.num_experts}.")
        if not 0 <= self.quarantine < self.num_experts:
            raise ValueError(
                f"quarantine must be in [0, {self.num_experts}), got {self.quarantine}."
            )
        if not 0 <= self.rho_hat < 1:
            raise ValueError(f"rho_hat must be in [0, 1), got {self.rho_hat}.")
        # Static floats: each check raises ValueError now, naming the field.
        check_positive(self.alpha, "alpha")
        for name in ("lambda_keep", "lambda_route", "lambda_bal"):
            check_nonnegative(getattr(self, name), name)
        check_in_interval(self.warmup_frac, "warmup_frac", 0.0, 1.0)


def route_loss(
    gbar_q: Float[Array, "B L"], keep: Float[Array, " B"], valid: Float[Array, "B L"]
) -> Float[Array, ""]:
    """Routing attraction/repulsion on input positions (``valid``).

    Probabilities are clipped to ``[1e-6, 1 - 1e-6]``.

    Raises:
        ValueError: ``gbar_q`` outside ``[0, 1]`` or NaN (an ``EquinoxRuntimeError`` under
            `jax.jit`): the clip would turn it into a plausible loss. Inside `qes_loss` the
            gates come from a softmax and the check is skipped.
    """
    return _route_loss(check_in_interval(gbar_q, "gbar_q", 0.0, 1.0), keep, valid)


def _route_loss(gbar_q: Array, keep: Array, valid: Array) -> Array:
    g = jnp.clip(gbar_q, 1e-6, 1 - 1e-6)
    attract = -jnp.log(jnp.max(jnp.where(valid > 0, g, 1e-6), axis=-1))
    repel = jnp.sum(-jnp.log1p(-g) * valid, -1) / jnp.maximum(valid.sum(-1), 1.0)
    return jnp.mean((1 - keep) * attract + keep * repel)


def shutdown_mask(mask: Float[Array, " E"], expert: int | Int[Array, ""]) -> Float[Array, " E"]:
    """``mask`` with ``expert`` switched off.

    Raises:
        ValueError: ``mask`` entries outside ``[0, 1]`` or NaN (an ``EquinoxRuntimeError`` under
            `jax.jit`).
    """
    mask = check_in_interval(mask, "mask", 0.0, 1.0)
    (E,) = mask.shape
    if isinstance(expert, int) and not 0 <= expert < E:
        raise ValueError(f"expert must be in [0, {E}), got {expert}.")
    return mask * (jnp.arange(E) != expert).astype(mask.dtype)
