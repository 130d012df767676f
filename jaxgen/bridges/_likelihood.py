"""The terminal density ``rho_T^psi`` of the bridge built on a potential (the training loss).

``rho_T^psi(y) = e^{psi(y)} int q_T(y | x) rho0(x) / h_psi(x, 0) dx``: two estimators.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ..core import gaussian_logpdf_chol
from ._htransform import _log_h
from ._potential import AbstractLogPotential
from ._quadrature import Quadrature
from ._reference import AbstractReference, _check_horizon


def source_bank_log_h(
    psi: AbstractLogPotential,
    ref: AbstractReference,
    T: Float[ArrayLike, ""],
    bank: Float[Array, "N dim"],
    inner: Quadrature | None = None,
) -> Float[Array, " N"]:
    """``log h_psi(x_i, 0)`` for every source point of ``bank`` (shared by a batch of ``y``)."""
    T = _check_horizon(T)
    return _bank_log_h(psi, ref, T, bank, inner)


def _bank_log_h(
    psi: AbstractLogPotential,
    ref: AbstractReference,
    T: ArrayLike,
    bank: Array,
    inner: Quadrature | None,
) -> Array:
    # The unchecked body (the horizon checked once by the caller).
    return jax.vmap(lambda x: _log_h(psi, ref, x, 0.0, T, inner))(bank)


def log_terminal_density(
    psi: AbstractLogPotential,
    ref: AbstractReference,
    y: Float[Array, " dim"],
    T: Float[ArrayLike, ""],
    *,
    outer: Quadrature | Float[Array, "N dim"],
    inner: Quadrature | None = None,
    source_mean: Float[Array, " dim"] | None = None,
    source_cov: Float[Array, "dim dim"] | None = None,
) -> Float[Array, ""]:
    r"""``log rho_T^psi(y)``, the log density of ``X_T`` under the bridge of ``psi``.

    (E1, ``outer`` is a source bank ``x_{1:N} ~ rho0``):
    ``psi(y) + logsumexp_i [log q_T(y | x_i) - log h(x_i, 0)] - log N``.
    Unbiased inside the log; vmapped over ``y`` the bank's ``log h`` is computed once.

    (E2, ``outer`` is a `Quadrature`, Gaussian source ``N(mu0, S0)``, default ``N(0, I)``):
    ``psi(y) + log N(y; F mu0 + g, G) + log E_{x ~ X_0 | X_T = y} exp(-log h(x, 0))`` with the
    posterior of `AbstractReference.backward_posterior`; deterministic with Gauss-Hermite nodes.

    Both expectations are in log space. ``inner=None`` uses the potential's closed-form ``h``.

    Args:
        psi: the log potential.
        ref: the reference diffusion.
        y: the point, shape ``(dim,)``.
        T: the horizon (> 0).
        outer: source bank ``(N, dim)`` (E1) or a `Quadrature` over ``N(0, I)`` (E2).
        inner: quadrature for ``h`` (``None``: closed form).
        source_mean: mean of the Gaussian source (E2 only; default 0).
        source_cov: covariance of the Gaussian source (E2 only; default ``I``; ``0`` gives a
            Dirac source, e.g. the Föllmer process).

    Returns:
        The scalar ``log rho_T^psi(y)``.

    References:
        Puchkin et al., Sample complexity of Schrödinger potential estimation, arXiv 2506.03043.
    """
    T = _check_horizon(T)
    y = jnp.asarray(y)
    d = ref.dim
    if y.ndim != 1 or y.shape[0] != d:
        raise ValueError(f"`y` must have shape ({d},), got {y.shape}.")
    if isinstance(outer, Quadrature):
        mu0 = jnp.zeros(d, y.dtype) if source_mean is None else jnp.asarray(source_mean, y.dtype)
        S0 = jnp.eye(d, dtype=y.dtype) if source_cov is None else jnp.asarray(source_cov, y.dtype)
        mean_T, G = ref.terminal_marginal(mu0, S0, T)
        log_marg = gaussian_logpdf_chol(y[None, :], mean_T, jnp.linalg.cholesky(G))[0]
        post_mean, post_cov = ref.backward_posterior(y, mu0, S0, T)
        # PSD square root (the posterior may be singular, e.g. a Dirac source).
        evals, evecs = jnp.linalg.eigh(post_cov)
        root = evecs * jnp.sqrt(jnp.clip(evals, 0.0))[None, :]
        xs = post_mean[None, :] + outer.nodes @ root.T
        lh = jax.vmap(lambda x: _log_h(psi, ref, x, 0.0, T, inner))(xs)
        return psi(y) + log_marg + jax.nn.logsumexp(outer.log_weights - lh)
    bank = jnp.asarray(outer)
    if bank.ndim != 2 or bank.shape[1] != d:
        raise ValueError(
            f"`outer` must be a Quadrature or a (N, {d}) source bank, got {bank.shape}."
        )
    if bank.shape[0] == 0:
        raise ValueError(f"`outer` must hold at least one source point, got shape {bank.shape}.")
    lh = _bank_log_h(psi, ref, T, bank, inner)
    return _e1_from_bank(psi, ref, y, T, bank, lh)


def _e1_from_bank(
    psi: AbstractLogPotential,
    ref: AbstractReference,
    y: Float[Array, " dim"],
    T: Float[ArrayLike, ""],
    bank: Float[Array, "N dim"],
    bank_log_h: Float[Array, " N"],
) -> Float[Array, ""]:
    chol = jnp.sqrt(ref.cov_factor(T)) * ref.sqrt_Sigma
    F, g = ref.decay(T), ref.offset(T)
    # log q_T(y | x_i) = log N(y - F x_i; g, Sigma_T), one Cholesky factor for all i.
    log_q = gaussian_logpdf_chol(y[None, :] - F * bank, g, chol)
    return psi(y) + jax.nn.logsumexp(log_q - bank_log_h) - jnp.log(bank.shape[0])
