"""Closed forms: entropic OT between Gaussians, the Gaussian Schrödinger bridge, Föllmer drift.

Used as references by the tests and the benchmark (float64 recommended).
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ..core import psd_sqrt
from ..core.checks import check_finite, check_rank, check_shape
from ._potential import QuadraticLogPotential
from ._reference import AbstractReference, _check_horizon


def _check_square(M: Array, name: str, dim: int | None = None) -> None:
    if M.ndim != 2 or M.shape[0] != M.shape[1] or (dim is not None and M.shape[0] != dim):
        want = "square" if dim is None else f"({dim}, {dim})"
        raise ValueError(f"`{name}` must be {want}, got shape {M.shape}.")


def gaussian_eot_cross_cov(
    A: Float[Array, "dim dim"], B: Float[Array, "dim dim"], eps: Float[ArrayLike, ""]
) -> Float[Array, "dim dim"]:
    r"""Cross-covariance ``Cov(X, Y)`` of the entropic OT plan between ``N(., A)`` and ``N(., B)``.

    For the cost ``||x - y||^2 / 2`` with regularisation ``eps`` (equivalently the static SB for
    the Brownian kernel ``N(y; x, eps I)``):
    ``C = 1/2 (A^{1/2} D A^{-1/2} - eps I)``, ``D = (4 A^{1/2} B A^{1/2} + eps^2 I)^{1/2}``.

    References:
        Janati, Muzellec, Peyré, Cuturi, Entropic OT between (unbalanced) Gaussian measures,
        arXiv 2006.02572; Bunne et al., arXiv 2202.05722.
    """
    A, B = jnp.asarray(A), jnp.asarray(B)
    _check_square(A, "A")
    _check_square(B, "B", A.shape[0])
    if isinstance(eps, int | float) and not eps > 0:
        raise ValueError(f"`eps` must be > 0, got {eps}.")
    eye = jnp.eye(A.shape[0], dtype=A.dtype)
    Ah = psd_sqrt(A)
    D = psd_sqrt(4.0 * Ah @ B @ Ah + eps**2 * eye)
    return 0.5 * (Ah @ D @ jnp.linalg.inv(Ah) - eps * eye)


def _iso_scale(ref: AbstractReference) -> Float[Array, ""]:
    # The closed forms assume Sigma = sigma^2 I; sigma^2 is read from the trace.
    return jnp.trace(ref.Sigma) / ref.dim


def _sb_pieces(
    mu_star: Array, S_star: Array, ref: AbstractReference, T: ArrayLike
) -> tuple[Array, Array, Array, Array, Array]:
    mu_star, S_star = jnp.asarray(mu_star), jnp.asarray(S_star)
    if mu_star.shape != (ref.dim,):
        raise ValueError(f"`mu_star` must have shape ({ref.dim},), got {mu_star.shape}.")
    _check_square(S_star, "S_star", ref.dim)
    T = _check_horizon(T)
    F, g = ref.decay(T), ref.offset(T)
    s_T = ref.cov_factor(T) * _iso_scale(ref)
    eye = jnp.eye(ref.dim, dtype=mu_star.dtype)
    Cp = gaussian_eot_cross_cov(eye, S_star / F**2, s_T / F**2)
    cross = F * Cp  # Cov(X_0, X_T)
    return mu_star, S_star, cross, s_T, g


def gaussian_sb_coupling(
    mu_star: Float[Array, " dim"],
    S_star: Float[Array, "dim dim"],
    ref: AbstractReference,
    T: Float[ArrayLike, ""],
) -> tuple[Float[Array, " 2*dim"], Float[Array, "2*dim 2*dim"]]:
    r"""Static SB coupling of ``(X_0, X_T)`` from ``N(0, I)`` to ``N(mu*, S*)`` (isotropic
    ``Sigma``).

    Mapping ``y' = (y - g) / F`` turns the OU kernel ``N(y; F x + g, s_T I)`` into a Brownian kernel
    of variance ``eps = s_T / F^2``; then ``Cov(X_0, X_T) = F C'`` with ``C'`` of
    `gaussian_eot_cross_cov` (``A = I``, ``B' = S* / F^2``).

    Returns:
        Mean ``(0, mu*)`` and covariance ``[[I, F C'], [F C'^T, S*]]`` of the pair.
    """
    mu_star, S_star, cross, _, _ = _sb_pieces(mu_star, S_star, ref, T)
    eye = jnp.eye(ref.dim, dtype=mu_star.dtype)
    mean = jnp.concatenate([jnp.zeros_like(mu_star), mu_star])
    cov = jnp.block([[eye, cross], [cross.T, S_star]])
    return mean, cov


def gaussian_sb_potential_ou(
    mu_star: Float[Array, " dim"],
    S_star: Float[Array, "dim dim"],
    ref: AbstractReference,
    T: Float[ArrayLike, ""],
) -> QuadraticLogPotential:
    r"""The exact log potential ``psi*(y) = -1/2 y^T Lambda y + eta^T y`` of the Gaussian SB.

    With ``K = S* - (F C')^T (F C') = Var(X_T | X_0)``:
    ``Lambda = K^{-1} - s_T^{-1} I``, ``eta = K^{-1} mu* - g / s_T`` (``g`` the reference offset),
    from matching ``X_T | X_0 = x ∝ q_T(y | x) e^{psi(y)}`` with the coupling's regression.

    References:
        Bunne et al., The Schrödinger bridge between Gaussian measures has a
        closed form, arXiv 2202.05722.
    """
    mu_star, S_star, cross, s_T, g = _sb_pieces(mu_star, S_star, ref, T)
    K = S_star - cross.T @ cross
    Kinv = jnp.linalg.inv(0.5 * (K + K.T))
    Lambda = Kinv - jnp.eye(ref.dim, dtype=mu_star.dtype) / s_T
    eta = Kinv @ mu_star - g / s_T
    return QuadraticLogPotential(Lambda, eta)


def ou_bridge_moments(
    ref: AbstractReference,
    x0: Float[Array, " dim"],
    xT: Float[Array, " dim"],
    t: Float[ArrayLike, ""],
    T: Float[ArrayLike, ""],
) -> tuple[Float[Array, " dim"], Float[Array, "dim dim"]]:
    r"""Law of ``X_t`` given ``X_0 = x0``, ``X_T = xT`` under the reference (a Gaussian bridge).

    In centred coordinates ``z = x - m``: mean ``F_t z0 + F_{T-t} (v_t / v_T)(zT - F_T z0)``,
    covariance ``(c_t - F_{T-t}^2 c_t^2 / c_T) Sigma`` (``c`` = `cov_factor`, ``F`` = `decay`).
    """
    T = _check_horizon(T)
    t = check_finite(t, "t")
    m = getattr(ref, "m", jnp.zeros(ref.dim, ref.Sigma.dtype))
    a, c, w = _bridge_coeffs(ref, t, T)
    return m + a * (x0 - m) + c * (xT - m), w * ref.Sigma


def _bridge_coeffs(
    ref: AbstractReference, t: ArrayLike, T: ArrayLike
) -> tuple[Array, Array, Array]:
    ct, cT = ref.cov_factor(t), ref.cov_factor(T)
    Frem = ref.decay(jnp.asarray(T) - t)
    c = Frem * ct / cT
    a = ref.decay(t) - c * ref.decay(T)
    w = ct - Frem**2 * ct**2 / cT
    return a, c, w


def gaussian_sb_marginal(
    mu_star: Float[Array, " dim"],
    S_star: Float[Array, "dim dim"],
    ref: AbstractReference,
    T: Float[ArrayLike, ""],
    t: Float[ArrayLike, ""],
) -> tuple[Float[Array, " dim"], Float[Array, "dim dim"]]:
    """Mean and covariance of the SB marginal ``X_t`` (the bridge integrated over the coupling)."""
    mu_star, S_star, cross, _, _ = _sb_pieces(mu_star, S_star, ref, T)
    m = getattr(ref, "m", jnp.zeros(ref.dim, ref.Sigma.dtype))
    a, c, w = _bridge_coeffs(ref, t, T)
    eye = jnp.eye(ref.dim, dtype=mu_star.dtype)
    mean = m + a * (0.0 - m) + c * (mu_star - m)
    cov = a**2 * eye + c**2 * S_star + a * c * (cross + cross.T) + w * ref.Sigma
    return mean, cov


def follmer_drift_gaussian(
    t: Float[ArrayLike, ""],
    x: Float[Array, " dim"],
    mu: Float[Array, " dim"],
    S: Float[Array, "dim dim"],
) -> Float[Array, " dim"]:
    r"""Föllmer drift for ``rho* = N(mu, S)``: ``(t S + (1 - t) I)^{-1} (mu + (S - I) x)``.

    The Föllmer process is the SB from ``delta_0`` to ``rho*`` on ``[0, 1]`` with a standard
    Brownian reference; ``psi* = log(rho* / N(0, I))``.

    References:
        Föllmer 1985; Tzen & Raginsky, arXiv 1905.09883; Huang et al., arXiv 2106.10880.
    """
    x = check_rank(x, 1, "x", layout="(dim,)")
    d = x.shape[0]
    mu, S = check_shape(mu, (d,), "mu"), check_shape(S, (d, d), "S")
    eye = jnp.eye(d, dtype=x.dtype)
    return jnp.linalg.solve(t * S + (1.0 - t) * eye, mu + (S - eye) @ x)


def follmer_marginal_gaussian(
    t: Float[ArrayLike, ""], mu: Float[Array, " dim"], S: Float[Array, "dim dim"]
) -> tuple[Float[Array, " dim"], Float[Array, "dim dim"]]:
    """``X_t ~ N(t mu, t^2 S + t (1 - t) I)`` for the Föllmer process to ``N(mu, S)``."""
    mu = check_rank(mu, 1, "mu", layout="(dim,)")
    S = check_shape(S, (mu.shape[0], mu.shape[0]), "S")
    eye = jnp.eye(mu.shape[0], dtype=mu.dtype)
    return t * mu, t**2 * S + t * (1.0 - t) * eye


def quadratic_terminal_law(
    psi: QuadraticLogPotential,
    ref: AbstractReference,
    T: Float[ArrayLike, ""],
    source_mean: Float[Array, " dim"] | None = None,
    source_cov: Float[Array, "dim dim"] | None = None,
) -> tuple[Float[Array, " dim"], Float[Array, "dim dim"]]:
    r"""Exact Gaussian law of ``X_T`` for the bridge of a quadratic potential.

    ``log [rho0(x) q_T(y | x) e^{psi(y)} / h(x, 0)]`` is a quadratic form in ``(x, y)``; its
    Hessian and gradient at 0 (computed exactly by autodiff) give the joint Gaussian, whose
    ``y``-block is returned.
    """
    T = _check_horizon(T)
    d = ref.dim
    dtype = psi.eta.dtype
    mu0 = jnp.zeros(d, dtype) if source_mean is None else source_mean
    S0 = jnp.eye(d, dtype=dtype) if source_cov is None else source_cov
    chol_T = jnp.linalg.cholesky(ref.cov(T))
    chol_0 = jnp.linalg.cholesky(S0)

    def log_joint(z: Array) -> Array:
        x, y = z[:d], z[d:]
        r0 = jax.scipy.linalg.solve_triangular(chol_0, x - mu0, lower=True)
        rT = jax.scipy.linalg.solve_triangular(chol_T, y - ref.mean(x, T), lower=True)
        return -0.5 * r0 @ r0 - 0.5 * rT @ rT + psi(y) - psi.log_heat(ref, x, jnp.asarray(T, dtype))

    z0 = jnp.zeros(2 * d, dtype)
    P = -jax.hessian(log_joint)(z0)
    cov = jnp.linalg.inv(0.5 * (P + P.T))
    mean = cov @ jax.grad(log_joint)(z0)
    return mean[d:], cov[d:, d:]


def gaussian_kl(
    mu0: Float[Array, " dim"],
    S0: Float[Array, "dim dim"],
    mu1: Float[Array, " dim"],
    S1: Float[Array, "dim dim"],
) -> Float[Array, ""]:
    r"""``KL(N(mu0, S0) || N(mu1, S1))``."""
    mu0 = check_rank(mu0, 1, "mu0", layout="(dim,)")
    d = mu0.shape[0]
    mu1 = check_shape(mu1, (d,), "mu1")
    S0, S1 = check_shape(S0, (d, d), "S0"), check_shape(S1, (d, d), "S1")
    # A failed Cholesky factor is NaN: ``S0`` and ``S1`` must be positive definite (value check).
    L0 = check_finite(jnp.linalg.cholesky(S0), "S0 (positive definite: its Cholesky factor)")
    L1 = check_finite(jnp.linalg.cholesky(S1), "S1 (positive definite: its Cholesky factor)")
    A = jax.scipy.linalg.solve_triangular(L1, L0, lower=True)
    r = jax.scipy.linalg.solve_triangular(L1, mu1 - mu0, lower=True)
    logdet = 2.0 * (jnp.sum(jnp.log(jnp.diagonal(L1))) - jnp.sum(jnp.log(jnp.diagonal(L0))))
    return 0.5 * (jnp.sum(A**2) + r @ r - d + logdet)
