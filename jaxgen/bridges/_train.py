"""Empirical-risk minimisation of the Schrödinger potential (negative log-likelihood of X_T)."""

from typing import Any, Unpack

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ..core import FitOptions, FitResult, adamw_cosine, check_fit_options, fit, minibatches
from ..core.checks import check_nonnegative, check_positive, check_positive_int
from ._likelihood import _bank_log_h, _e1_from_bank
from ._potential import AbstractClosedFormLogPotential, AbstractLogPotential
from ._quadrature import monte_carlo
from ._reference import AbstractReference, _check_horizon, _positive


def check_samples(Y: Any, dim: int | None = None, name: str = "Y") -> Float[Array, "n dim"]:
    """Samples as a finite ``(n, dim)`` float array, or a ValueError naming ``name``."""
    arr = jnp.asarray(Y)
    if arr.ndim != 2:
        raise ValueError(f"`{name}` must be a 2-D array (n, dim), got shape {arr.shape}.")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"`{name}` must have {dim} columns (the dimension), got {arr.shape[1]}.")
    if arr.shape[0] < 1:
        raise ValueError(f"`{name}` must hold at least one sample, got shape {arr.shape}.")
    if not jnp.issubdtype(arr.dtype, jnp.floating):
        arr = arr.astype(jnp.result_type(float))
    try:
        finite = bool(jnp.all(jnp.isfinite(arr)))
    except jax.errors.ConcretizationTypeError:
        return eqx.error_if(arr, ~jnp.all(jnp.isfinite(arr)), f"`{name}` has non-finite values.")
    if not finite:
        raise ValueError(f"`{name}` has non-finite values (nan or inf).")
    return arr


class SBNLLLoss(eqx.Module):
    r"""The training loss ``(psi, batch, key) -> scalar`` for `jaxgen.core.fit`.

    ``-mean_b log rho_T^psi(y_b) + lam (mean_i psi(x_i))^2`` with the E1 estimator: each step
    draws a fresh source bank ``x_{1:N} ~ rho0 = N(0, I)`` and ``M`` antithetic inner nodes
    (common to the batch). The penalty fixes the additive constant of ``psi`` (which leaves the
    likelihood unchanged) by centring ``psi`` under ``rho0`` (``= gamma_inf`` for the default
    reference).

    Attributes:
        ref: reference diffusion.
        T: horizon.
        num_sources: ``N``, size of the source bank.
        num_inner: ``M``, inner Monte Carlo nodes for ``h`` (ignored for closed-form potentials).
            ``log h`` is a log-mean-exp over ``M`` nodes, biased low by about
            ``Var(e^psi) / (2 M (E e^psi)^2)`` (Jensen); the loss is therefore biased low by an
            amount that grows with how peaked ``e^psi`` is, and a small ``M`` lets training
            lower the loss by making ``psi`` spikier instead of fitting the target (measured
            on the benchmark's ring-8 at ``d = 8``: ``M = 8`` or ``16`` gives samples worse than
            the untrained potential, ``M = 32``/``64`` learns the ring). Default 64.
        penalty: ``lam``.
    """

    ref: AbstractReference
    T: Float[Array, ""]
    num_sources: int = eqx.field(static=True)
    num_inner: int = eqx.field(static=True)
    penalty: float = eqx.field(static=True)

    def __init__(
        self,
        ref: AbstractReference,
        T: Float[ArrayLike, ""],
        *,
        num_sources: int = 256,
        num_inner: int = 64,
        penalty: float = 1e-2,
    ):
        """Build the loss."""
        self.ref = ref
        self.T = _positive(jnp.asarray(T, ref.Sigma.dtype), "T")
        for name, v in (("num_sources", num_sources), ("num_inner", num_inner)):
            if not isinstance(v, int) or v < 2:
                raise ValueError(f"`{name}` must be an int >= 2, got {v!r}.")
        if num_inner % 2:
            raise ValueError(f"`num_inner` must be even (antithetic nodes), got {num_inner}.")
        penalty = float(penalty)  # static: a Python number even when built under jit
        check_nonnegative(penalty, "penalty")  # a Python number is checked at once
        self.num_sources, self.num_inner, self.penalty = num_sources, num_inner, penalty

    def __call__(
        self, psi: AbstractLogPotential, batch: Float[Array, "B dim"], key: PRNGKeyArray
    ) -> Float[Array, ""]:
        """The loss on a batch ``(B, dim)``."""
        d = self.ref.dim
        bank_key, inner_key = jr.split(key)
        bank = jr.normal(bank_key, (self.num_sources, d), batch.dtype)
        inner = None
        if not isinstance(psi, AbstractClosedFormLogPotential):
            inner = monte_carlo(inner_key, d, self.num_inner, dtype=batch.dtype)
        lh = _bank_log_h(psi, self.ref, self.T, bank, inner)  # T checked in __init__
        ll = jax.vmap(lambda y: _e1_from_bank(psi, self.ref, y, self.T, bank, lh))(batch)
        centre = jnp.mean(jax.vmap(psi)(bank))
        return -jnp.mean(ll) + self.penalty * centre**2


def fit_log_potential(
    psi: AbstractLogPotential,
    Y: Any,
    *,
    key: PRNGKeyArray,
    num_steps: int = 2000,
    optimizer: optax.GradientTransformation | None = None,
    ref: AbstractReference,
    T: Float[ArrayLike, ""],
    batch_size: int = 256,
    num_sources: int = 256,
    num_inner: int = 64,
    penalty: float = 1e-2,
    learning_rate: float = 2e-3,
    **fit_options: Unpack[FitOptions],
) -> FitResult:
    r"""Fit ``psi`` by maximum likelihood of the bridge's terminal law: ``argmin L_n(psi)``.

    ``L_n(psi) = -(1/n) sum_i log rho_T^psi(Y_i)`` (= empirical ``KL(rho*, rho_T^psi)`` up to a
    constant), minimised with `jaxgen.core.fit` on `SBNLLLoss` (AdamW, cosine decay, clipping 1).

    Args:
        psi: initial potential.
        Y: target samples ``(n, dim)``, finite (the data: ``batch_size`` rows drawn per step,
            `jaxgen.core.minibatches`).
        key: PRNG key of the run (batches, source banks, inner nodes).
        ref: reference diffusion (source ``rho0 = N(0, I)`` at time 0).
        T: horizon (> 0).
        num_steps: optimiser steps.
        batch_size: target samples per step.
        num_sources: source bank size ``N``.
        num_inner: inner nodes ``M`` for ``h`` (keep it >= 32: see `SBNLLLoss` on the bias a
            small ``M`` puts into the loss).
        penalty: weight of the centring penalty.
        optimizer: default ``adamw_cosine(learning_rate, num_steps, weight_decay=0)``.
        learning_rate: used by the default optimizer.
        **fit_options: `jaxgen.core.FitOptions`, forwarded to `jaxgen.core.fit`.

    Returns:
        The `FitResult` of `jaxgen.core.fit` (``.model`` is the fitted potential).

    References:
        Puchkin et al., Sample complexity of Schrödinger potential estimation, arXiv 2506.03043.
    """
    check_fit_options(fit_options)
    Y = check_samples(Y, ref.dim, "Y")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be an int >= 1, got {batch_size!r}.")
    loss = SBNLLLoss(ref, T, num_sources=num_sources, num_inner=num_inner, penalty=penalty)
    if optimizer is None:
        check_positive(learning_rate, "learning_rate")
        optimizer = adamw_cosine(learning_rate, max(num_steps, 1), weight_decay=0.0)
    return fit(
        loss,
        psi,
        minibatches(Y, batch_size),
        optimizer,
        num_steps=num_steps,
        key=key,
        **fit_options,
    )


def evaluate_nll(
    key: PRNGKeyArray,
    psi: AbstractLogPotential,
    Y: Any,
    *,
    ref: AbstractReference,
    T: Float[ArrayLike, ""],
    num_sources: int = 1024,
    num_inner: int = 256,
) -> Float[Array, ""]:
    """Held-out NLL ``-mean log rho_T^psi(Y_i)`` with the E1 estimator (one bank for all ``Y``)."""
    Y = check_samples(Y, ref.dim, "Y")
    num_sources = check_positive_int(num_sources, "num_sources")
    num_inner = check_positive_int(num_inner, "num_inner", minimum=2)
    T = _check_horizon(jnp.asarray(T, Y.dtype))
    return _evaluate_nll(key, psi, Y, ref, T, num_sources, num_inner)


@eqx.filter_jit
def _evaluate_nll(key: Any, psi: Any, Y: Any, ref: Any, T: Any, N: int, M: int) -> Array:
    d = ref.dim
    bank_key, inner_key = jr.split(key)
    bank = jr.normal(bank_key, (N, d), Y.dtype)
    inner = None
    if not isinstance(psi, AbstractClosedFormLogPotential):
        inner = monte_carlo(inner_key, d, 2 * (M // 2), dtype=Y.dtype)
    lh = _bank_log_h(psi, ref, T, bank, inner)
    ll = jax.lax.map(lambda y: _e1_from_bank(psi, ref, y, T, bank, lh), Y, batch_size=256)
    return -jnp.mean(ll)
