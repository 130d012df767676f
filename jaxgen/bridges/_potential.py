"""Log Schrödinger potentials ``psi``: the one function that parametrises a bridge.

A potential acts on ONE point ``x`` of shape ``(dim,)`` and returns a scalar; vmap for batches.
Potentials whose heat transform ``log T_tau e^psi`` has a closed form (quadratic, Gaussian
mixture, weighted atoms) subclass `AbstractClosedFormLogPotential` and expose ``log_heat``.
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ..core import gaussian_logpdf_chol
from ..core.checks import check_positive_int
from ._quadrature import weighted_points
from ._reference import AbstractReference


class AbstractLogPotential(eqx.Module):
    """A log Schrödinger potential ``psi: R^dim -> R`` on a single point."""

    @abc.abstractmethod
    def __call__(self, x: Float[Array, " dim"]) -> Float[Array, ""]:
        """``psi(x)``."""


class AbstractClosedFormLogPotential(AbstractLogPotential):
    """A potential whose heat transform ``log (T_tau e^psi)(x)`` is available in closed form."""

    @abc.abstractmethod
    def log_heat(
        self, ref: AbstractReference, x: Float[Array, " dim"], tau: Float[ArrayLike, ""]
    ) -> Float[Array, ""]:
        """``log E exp psi(mean(x, tau) + cov(tau)^{1/2} xi)``, ``xi ~ N(0, I)``."""


class BoundedMLPLogPotential(AbstractLogPotential):
    r"""Bounded neural potential ``psi(x) = M tanh(f(x)/M) - 1/2 softplus(kappa) ||W (x - c)||^2``.

    ``f`` is an MLP (SiLU), ``M`` the cap, ``W = Sigma^{-1/2}`` and ``c = m`` of the reference
    (identity and zero by default). The class satisfies the assumptions of the estimator's
    guarantee: ``psi <= M`` (so ``E e^psi`` is finite) and ``psi >= -Lambda ||W(x - c)||^2 - M``.

    References:
        Puchkin et al., arXiv 2506.03043 (the class Psi and its assumptions).
    """

    mlp: eqx.nn.MLP
    raw_kappa: Float[Array, ""]
    center: Float[Array, " dim"]
    whiten: Float[Array, "dim dim"]
    bound: float = eqx.field(static=True)

    def __init__(
        self,
        dim: int,
        width: int = 128,
        depth: int = 3,
        bound: float = 10.0,
        *,
        key: PRNGKeyArray,
        ref: AbstractReference | None = None,
        init_kappa: float = 0.05,
        dtype: object = None,
    ):
        """Build the potential; ``init_kappa`` is the initial quadratic coefficient (> 0)."""
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"`dim` must be an int >= 1, got {dim!r}.")
        check_positive_int(width, "width")
        check_positive_int(depth, "depth", minimum=0)
        if not bound > 0:
            raise ValueError(f"`bound` must be > 0, got {bound}.")
        if not init_kappa > 0:
            raise ValueError(f"`init_kappa` must be > 0, got {init_kappa}.")
        dtype = jnp.result_type(float) if dtype is None else dtype
        self.mlp = eqx.nn.MLP(dim, "scalar", width, depth, jax.nn.silu, key=key, dtype=dtype)
        self.raw_kappa = jnp.log(jnp.expm1(jnp.asarray(init_kappa, dtype)))
        self.bound = float(bound)
        if ref is None:
            self.center = jnp.zeros(dim, dtype)
            self.whiten = jnp.eye(dim, dtype=dtype)
        else:
            if ref.dim != dim:
                raise ValueError(f"`ref` has dim {ref.dim}, expected {dim}.")
            evals, evecs = jnp.linalg.eigh(ref.Sigma)
            self.whiten = (evecs / jnp.sqrt(evals)[None, :]) @ evecs.T
            self.center = getattr(ref, "m", jnp.zeros(dim, dtype))

    def __call__(self, x: Float[Array, " dim"]) -> Float[Array, ""]:
        """``psi(x)``."""
        capped = self.bound * jnp.tanh(self.mlp(x) / self.bound)
        z = self.whiten @ (x - self.center)
        return capped - 0.5 * jax.nn.softplus(self.raw_kappa) * jnp.sum(z**2)


class QuadraticLogPotential(AbstractClosedFormLogPotential):
    r"""``psi(x) = -1/2 x^T Lambda x + eta^T x + c`` (exact for Gaussian targets).

    Heat transform with ``mu = mean(x, tau)``, ``C = cov(tau)``, ``g = eta - Lambda mu``:
    ``log T_tau e^psi(x) = psi(mu) - 1/2 logdet(I + C Lambda) + 1/2 g^T (I + C Lambda)^{-1} C g``
    (finite when ``C^{-1} + Lambda`` is positive definite).
    """

    Lambda: Float[Array, "dim dim"]
    eta: Float[Array, " dim"]
    const: Float[Array, ""]

    def __init__(
        self,
        Lambda: Float[ArrayLike, "dim dim"],
        eta: Float[ArrayLike, " dim"],
        const: Float[ArrayLike, ""] = 0.0,
    ):
        """Build ``psi``; ``Lambda`` is symmetrised."""
        eta = jnp.asarray(eta)
        Lambda = jnp.asarray(Lambda, eta.dtype)
        if eta.ndim != 1 or Lambda.shape != (eta.shape[0],) * 2:
            raise ValueError(
                f"`Lambda` must be (dim, dim) and `eta` (dim,), got {Lambda.shape} and {eta.shape}."
            )
        self.Lambda = 0.5 * (Lambda + Lambda.T)
        self.eta = eta
        self.const = jnp.asarray(const, eta.dtype)

    def __call__(self, x: Float[Array, " dim"]) -> Float[Array, ""]:
        """``psi(x)``."""
        return -0.5 * x @ self.Lambda @ x + self.eta @ x + self.const

    def log_heat(
        self, ref: AbstractReference, x: Float[Array, " dim"], tau: Float[ArrayLike, ""]
    ) -> Float[Array, ""]:
        """Closed-form ``log T_tau e^psi(x)``."""
        mu = ref.mean(x, tau)
        C = ref.cov(tau)
        A = jnp.eye(mu.shape[0], dtype=mu.dtype) + C @ self.Lambda
        g = self.eta - self.Lambda @ mu
        _, logdet = jnp.linalg.slogdet(A)
        return self(mu) - 0.5 * logdet + 0.5 * g @ jnp.linalg.solve(A, C @ g)


class GMMLogPotential(AbstractClosedFormLogPotential):
    r"""Gaussian-mixture potential ``e^psi(y) = sum_k alpha_k N(y; mu_k, L_k L_k^T)`` (Light SB).

    Heat transform in closed form:
    ``log T_tau e^psi(x) = logsumexp_k [log alpha_k + log N(mean(x, tau); mu_k, S_k + cov(tau))]``.

    References:
        Korotin, Gushchin, Burnaev, Light Schrödinger Bridge, arXiv 2310.01174.
    """

    log_alpha: Float[Array, " K"]
    mu: Float[Array, "K dim"]
    chol: Float[Array, "K dim dim"]

    def __init__(
        self,
        log_alpha: Float[ArrayLike, " K"],
        mu: Float[ArrayLike, "K dim"],
        chol: Float[ArrayLike, "K dim dim"],
    ):
        """Build the mixture; only the lower triangles of ``chol`` are used."""
        mu = jnp.asarray(mu)
        log_alpha = jnp.asarray(log_alpha, mu.dtype)
        chol = jnp.asarray(chol, mu.dtype)
        if mu.ndim != 2 or log_alpha.shape != mu.shape[:1] or chol.shape != mu.shape + mu.shape[1:]:
            raise ValueError(
                "`log_alpha` (K,), `mu` (K, dim) and `chol` (K, dim, dim) must agree, got "
                f"{log_alpha.shape}, {mu.shape} and {chol.shape}."
            )
        self.log_alpha, self.mu, self.chol = log_alpha, mu, chol

    def _covs(self) -> Float[Array, "K dim dim"]:
        L = jnp.tril(self.chol)
        return L @ jnp.swapaxes(L, -1, -2)

    def _log_mix(self, y: Float[Array, " dim"], extra: Float[Array, "dim dim"]) -> Float[Array, ""]:
        covs = self._covs() + extra[None]

        def one(mu: Array, cov: Array) -> Array:
            L = jnp.linalg.cholesky(cov)
            return gaussian_logpdf_chol(y[None, :], mu, L)[0]

        return jax.nn.logsumexp(self.log_alpha + jax.vmap(one)(self.mu, covs))

    def __call__(self, x: Float[Array, " dim"]) -> Float[Array, ""]:
        """``psi(x) = log sum_k alpha_k N(x; mu_k, S_k)``."""
        return self._log_mix(x, jnp.zeros((x.shape[0],) * 2, x.dtype))

    def log_heat(
        self, ref: AbstractReference, x: Float[Array, " dim"], tau: Float[ArrayLike, ""]
    ) -> Float[Array, ""]:
        """Closed-form ``log T_tau e^psi(x)``."""
        return self._log_mix(ref.mean(x, tau), ref.cov(tau))


class AtomicLogPotential(AbstractClosedFormLogPotential):
    r"""Weighted atoms ``e^psi = sum_j alpha_j delta_{y_j}`` (the entropic plug-in potential).

    ``psi`` itself is not a function on ``R^dim`` (``__call__`` returns ``log alpha`` of the
    nearest atom, for display only); the bridge only needs the heat transform
    ``log T_tau e^psi(x) = logsumexp_j [log alpha_j + log N(y_j; mean(x, tau), cov(tau))]``,
    finite for ``tau > 0``. With ``alpha_j = b_j exp(g_j / eps)`` from entropic OT duals this is
    the Sinkhorn bridge of Pooladian & Niles-Weed.

    References:
        Pooladian, Niles-Weed, Plug-in estimation of Schrödinger bridges, arXiv 2408.11686.
    """

    log_alpha: Float[Array, " K"]
    atoms: Float[Array, "K dim"]

    def __init__(self, log_alpha: Float[ArrayLike, " K"], atoms: Float[ArrayLike, "K dim"]):
        """Build the atomic potential."""
        atoms, log_alpha = weighted_points(atoms, log_alpha, ("atoms", "log_alpha"))
        self.log_alpha, self.atoms = log_alpha, atoms

    def __call__(self, x: Float[Array, " dim"]) -> Float[Array, ""]:
        """``log alpha`` of the nearest atom (display only)."""
        return self.log_alpha[jnp.argmin(jnp.sum((self.atoms - x[None]) ** 2, -1))]

    def log_heat(
        self, ref: AbstractReference, x: Float[Array, " dim"], tau: Float[ArrayLike, ""]
    ) -> Float[Array, ""]:
        """Closed-form ``log T_tau e^psi(x)`` (``tau > 0``)."""
        chol = jnp.sqrt(ref.cov_factor(tau)) * ref.sqrt_Sigma
        return jax.nn.logsumexp(
            self.log_alpha + gaussian_logpdf_chol(self.atoms, ref.mean(x, tau), chol)
        )
