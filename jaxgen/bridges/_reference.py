"""Reference diffusions of a Schrödinger bridge: Ornstein-Uhlenbeck and Brownian motion.

Both references are linear with additive noise, so their transition kernels are Gaussian:
``X_{t+tau} | X_t = x ~ N(F(tau) x + g(tau), c(tau) Sigma)`` with a scalar factor ``F``, an offset
``g`` and a scalar variance factor ``c``. Every bridge routine of this family only uses
``mean(x, tau)``, ``cov_factor(tau)`` and ``Sigma``.
"""

import abc
import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ..core.checks import check_positive


def _positive(value: ArrayLike, name: str) -> Float[Array, ""]:
    """A positive scalar: checked in Python when concrete, with `error_if` when traced."""
    arr = jnp.asarray(value)
    if not jnp.issubdtype(arr.dtype, jnp.floating):
        arr = arr.astype(jnp.result_type(float))
    if arr.ndim != 0:
        raise ValueError(f"`{name}` must be a scalar, got shape {arr.shape}.")
    try:
        concrete = float(arr)
    except jax.errors.ConcretizationTypeError:
        concrete = None
    if concrete is not None and not (math.isfinite(concrete) and concrete > 0):
        raise ValueError(f"`{name}` must be finite and > 0, got {concrete}.")
    return eqx.error_if(arr, ~(jnp.isfinite(arr) & (arr > 0)), f"`{name}` must be finite and > 0.")


def _check_horizon(T: ArrayLike, name: str = "T") -> ArrayLike:
    """The horizon must be finite and > 0: a Python number is checked now and returned as is
    (it may be static); an array gets the value check of `check_positive` (use the result).
    """
    if isinstance(T, int | float) and not isinstance(T, bool):
        if not (math.isfinite(T) and T > 0):
            raise ValueError(f"`{name}` (the horizon) must be finite and > 0, got {T}.")
        return T
    return check_positive(T, name)


class AbstractReference(eqx.Module):
    """A linear reference diffusion ``dX = drift(X) dt + Sigma^{1/2} dW`` with Gaussian kernels.

    Subclasses give the transition ``X_{t+tau} | X_t = x ~ N(mean(x, tau), cov_factor(tau) Sigma)``
    where ``mean(x, tau) = decay(tau) x + offset(tau)``.
    """

    Sigma: eqx.AbstractVar[Float[Array, "dim dim"]]

    @abc.abstractmethod
    def drift(self, x: Float[Array, " dim"]) -> Float[Array, " dim"]:
        """The reference drift at ``x``."""

    @abc.abstractmethod
    def decay(self, tau: Float[ArrayLike, ""]) -> Float[Array, ""]:
        """The scalar ``F(tau)`` multiplying ``x`` in the transition mean."""

    @abc.abstractmethod
    def offset(self, tau: Float[ArrayLike, ""]) -> Float[Array, " dim"]:
        """The constant ``g(tau)`` of the transition mean."""

    @abc.abstractmethod
    def cov_factor(self, tau: Float[ArrayLike, ""]) -> Float[Array, ""]:
        """The scalar ``c(tau)`` with ``Cov(X_{t+tau} | X_t) = c(tau) Sigma``."""

    @property
    def dim(self) -> int:
        """The state dimension."""
        return self.Sigma.shape[0]

    @property
    def sqrt_Sigma(self) -> Float[Array, "dim dim"]:
        """Lower Cholesky factor of ``Sigma`` (the diffusion matrix of the SDE)."""
        return jnp.linalg.cholesky(self.Sigma)

    def mean(self, x: Float[Array, " dim"], tau: Float[ArrayLike, ""]) -> Float[Array, " dim"]:
        """Transition mean ``E[X_{t+tau} | X_t = x]``."""
        return self.decay(tau) * x + self.offset(tau)

    def cov(self, tau: Float[ArrayLike, ""]) -> Float[Array, "dim dim"]:
        """Transition covariance ``Cov(X_{t+tau} | X_t)``."""
        return self.cov_factor(tau) * self.Sigma

    def terminal_marginal(
        self, mu0: Float[Array, " dim"], S0: Float[Array, "dim dim"], T: Float[ArrayLike, ""]
    ) -> tuple[Float[Array, " dim"], Float[Array, "dim dim"]]:
        """Law of ``X_T`` when ``X_0 ~ N(mu0, S0)``: ``N(F mu0 + g, F^2 S0 + Sigma_T)``."""
        F = self.decay(T)
        return F * mu0 + self.offset(T), F**2 * S0 + self.cov(T)

    def backward_posterior(
        self,
        y: Float[Array, " dim"],
        mu0: Float[Array, " dim"],
        S0: Float[Array, "dim dim"],
        T: Float[ArrayLike, ""],
    ) -> tuple[Float[Array, " dim"], Float[Array, "dim dim"]]:
        """Law of ``X_0 | X_T = y`` when ``X_0 ~ N(mu0, S0)``.

        ``N(mu0 + F S0 G^{-1}(y - F mu0 - g), S0 - F^2 S0 G^{-1} S0)`` with ``G = F^2 S0 +
        Sigma_T``.
        """
        F = self.decay(T)
        mean_T, G = self.terminal_marginal(mu0, S0, T)
        gain = jnp.linalg.solve(G, F * S0).T  # F S0 G^{-1} (G, S0 symmetric)
        post_mean = mu0 + gain @ (y - mean_T)
        post_cov = S0 - F * gain @ S0
        return post_mean, 0.5 * (post_cov + post_cov.T)


class OUReference(AbstractReference):
    r"""Ornstein-Uhlenbeck reference ``dX = b (m - X) dt + Sigma^{1/2} dW``.

    Transition: ``m_tau(x) = (1 - e^{-b tau}) m + e^{-b tau} x``,
    ``Sigma_tau = (1 - e^{-2 b tau}) / (2 b) Sigma``; stationary law ``N(m, Sigma / (2 b))``.
    The default ``b = 1, m = 0, Sigma = 2 I`` has stationary law ``N(0, I)``.

    References:
        Puchkin et al., Sample complexity of Schrödinger potential estimation, arXiv 2506.03043.
    """

    b: Float[Array, ""]
    m: Float[Array, " dim"]
    Sigma: Float[Array, "dim dim"]

    def __init__(
        self,
        dim: int,
        b: Float[ArrayLike, ""] = 1.0,
        m: Float[ArrayLike, " dim"] | None = None,
        Sigma: Float[ArrayLike, "dim dim"] | Float[ArrayLike, ""] = 2.0,
    ):
        """Build the reference; ``Sigma`` is a scalar (``Sigma * I``) or a PD matrix."""
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"`dim` must be an int >= 1, got {dim!r}.")
        self.b = _positive(b, "b")
        dtype = self.b.dtype
        self.m = jnp.zeros(dim, dtype) if m is None else jnp.asarray(m, dtype)
        if self.m.shape != (dim,):
            raise ValueError(f"`m` must have shape ({dim},), got {self.m.shape}.")
        sig = jnp.asarray(Sigma, dtype)
        if sig.ndim == 0:
            sig = _positive(sig, "Sigma") * jnp.eye(dim, dtype=dtype)
        elif sig.shape != (dim, dim):
            raise ValueError(f"`Sigma` must be a scalar or ({dim}, {dim}), got {sig.shape}.")
        self.Sigma = sig

    def drift(self, x: Float[Array, " dim"]) -> Float[Array, " dim"]:
        """``b (m - x)``."""
        return self.b * (self.m - x)

    def decay(self, tau: Float[ArrayLike, ""]) -> Float[Array, ""]:
        """``e^{-b tau}``."""
        return jnp.exp(-self.b * tau)

    def offset(self, tau: Float[ArrayLike, ""]) -> Float[Array, " dim"]:
        """``(1 - e^{-b tau}) m``."""
        return -jnp.expm1(-self.b * tau) * self.m

    def cov_factor(self, tau: Float[ArrayLike, ""]) -> Float[Array, ""]:
        """``(1 - e^{-2 b tau}) / (2 b)``."""
        return -jnp.expm1(-2.0 * self.b * tau) / (2.0 * self.b)

    def stationary(self) -> tuple[Float[Array, " dim"], Float[Array, "dim dim"]]:
        """Mean and covariance of the stationary law ``N(m, Sigma / (2 b))``."""
        return self.m, self.Sigma / (2.0 * self.b)


class BrownianReference(AbstractReference):
    r"""Brownian reference ``dX = sigma dW`` (the Föllmer / Sinkhorn-bridge convention).

    Transition ``N(x, sigma^2 tau I)``.

    References:
        Föllmer (1985); Tzen & Raginsky, arXiv 1905.09883.
    """

    Sigma: Float[Array, "dim dim"]

    def __init__(self, dim: int, sigma: Float[ArrayLike, ""] = 1.0):
        """Build ``sigma W`` in ``R^dim``; ``sigma > 0``."""
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"`dim` must be an int >= 1, got {dim!r}.")
        s = _positive(sigma, "sigma")
        self.Sigma = s**2 * jnp.eye(dim, dtype=s.dtype)

    def drift(self, x: Float[Array, " dim"]) -> Float[Array, " dim"]:
        """Zero."""
        return jnp.zeros_like(x)

    def decay(self, tau: Float[ArrayLike, ""]) -> Float[Array, ""]:
        """One."""
        return jnp.ones((), self.Sigma.dtype)

    def offset(self, tau: Float[ArrayLike, ""]) -> Float[Array, " dim"]:
        """Zero."""
        return jnp.zeros(self.dim, self.Sigma.dtype)

    def cov_factor(self, tau: Float[ArrayLike, ""]) -> Float[Array, ""]:
        """``tau``."""
        return jnp.asarray(tau, self.Sigma.dtype)
