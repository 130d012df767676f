"""Interpolants with independent endpoints and their exact velocities for Gaussian-mixture targets.

An interpolant turns a pair (X_0, X_1) and a time t into a point X_t and the regression target
for flow matching (the pathwise velocity Xdot_t). Two are provided:

- `LinearInterpolant`: X_t = (1 - t) X_0 + t X_1 (rectified flow / flow matching).
- `NoiseAugmentedInterpolant`: X_t = (1 - t) X_0 + t X_1 + sqrt(2t(1-t)) P^{1/2} Z, whose flow is
  exactly straight for Gaussian endpoints when P = S0 # S1 (see `GaussianStraightProcess`).

For a Gaussian source and a Gaussian-mixture target, (X_t, Xdot_t) given the component is
Gaussian, so the Markovian projection v_t(x) = E[Xdot_t | X_t = x] is available in closed form
(`MixtureInterpolantVelocity`); it covers both interpolants (P = 0 is the linear one).
"""

import abc
import functools as ft

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ..core import psd_sqrt
from ..core.checks import check_covariance
from ._velocity import AbstractVelocityField


class AbstractInterpolant(eqx.Module):
    """X_t from an endpoint pair, and the flow-matching regression target."""

    @abc.abstractmethod
    def sample(
        self,
        key: PRNGKeyArray,
        x0: Float[Array, " dim"],
        x1: Float[Array, " dim"],
        t: Float[Array, ""],
    ) -> tuple[Float[Array, " dim"], Float[Array, " dim"]]:
        """Return ``(x_t, target)`` for one pair; ``target`` is the pathwise velocity."""

    @abc.abstractmethod
    def noise_matrix(self, dim: int, dtype: jnp.dtype) -> Float[Array, "dim dim"]:
        """The covariance P of the injected noise (zero for the linear interpolant)."""

    def gaussian_velocity(
        self, m0: ArrayLike, cov0: ArrayLike, m1: ArrayLike, cov1: ArrayLike
    ) -> "MixtureInterpolantVelocity":
        """The exact velocity of this interpolant for N(m0, cov0) -> N(m1, cov1)."""
        m1 = jnp.asarray(m1)
        return MixtureInterpolantVelocity(
            m0,
            cov0,
            jnp.ones((1,), m1.dtype),
            m1[None, :],
            jnp.asarray(cov1)[None, :, :],
            noise_cov=self.noise_matrix(m1.shape[0], m1.dtype),
        )


class LinearInterpolant(AbstractInterpolant):
    """X_t = (1 - t) X_0 + t X_1 with target X_1 - X_0 (independent coupling flow matching).

    References:
        Lipman et al., Flow Matching for Generative Modeling, arXiv:2210.02747;
        Liu, Gong & Liu, Flow Straight and Fast, arXiv:2209.03003.
    """

    def sample(self, key, x0, x1, t):
        del key
        return (1 - t) * x0 + t * x1, x1 - x0

    def noise_matrix(self, dim, dtype):
        return jnp.zeros((dim, dim), dtype)


class NoiseAugmentedInterpolant(AbstractInterpolant):
    r"""X_t = (1-t) X_0 + t X_1 + \gamma_t P^{1/2} Z, $\gamma_t = \sqrt{2t(1-t)}$.

    The regression target is the pathwise velocity $X_1 - X_0 + \dot\gamma_t P^{1/2} Z$, with
    $\dot\gamma_t = (1 - 2t)/\gamma_t$; it is singular at $t \in \{0, 1\}$, so train on
    $t \in [\epsilon, 1 - \epsilon]$.

    References:
        Tsimpos, Sharp & Marzouk, arXiv:2604.15439 (2026), §3.1.
    """

    noise_cov: Float[Array, "dim dim"]
    noise_root: Float[Array, "dim dim"]

    def __init__(self, noise_cov: ArrayLike):
        """``noise_cov``: the symmetric PSD matrix P (e.g. `matrix_geometric_mean(S0, S1)`)."""
        self.noise_cov = check_covariance(noise_cov, "noise_cov")
        self.noise_root = psd_sqrt(self.noise_cov)

    def sample(self, key, x0, x1, t):
        if x0.shape != (self.noise_cov.shape[0],) or x1.shape != x0.shape:
            raise ValueError(
                f"`x0`, `x1` must have shape ({self.noise_cov.shape[0]},), got "
                f"{x0.shape} and {x1.shape}."
            )
        noise = self.noise_root @ jr.normal(key, x0.shape, x0.dtype)
        gamma = jnp.sqrt(2 * t * (1 - t))
        x_t = (1 - t) * x0 + t * x1 + gamma * noise
        return x_t, x1 - x0 + (1 - 2 * t) / gamma * noise

    def noise_matrix(self, dim, dtype):
        if dim != self.noise_cov.shape[0]:
            raise ValueError(
                f"this interpolant is {self.noise_cov.shape[0]}-dimensional; the "
                f"endpoints are {dim}-dimensional."
            )
        return self.noise_cov.astype(dtype)


@ft.partial(jax.jit, static_argnums=3)
def _checked_mixture(
    cov0: Array, weights: Array, noise_cov: Array | None, dim: int
) -> tuple[Array, Array, Array | None]:
    """Checked ``cov0``, ``log(weights)`` and ``noise_cov`` in one compiled call (eagerly, the
    checks' small ops would compile one by one).
    """
    weights = eqx.error_if(
        weights,
        jnp.any(weights < 0) | (jnp.abs(jnp.sum(weights) - 1) > 1e-6),
        "`weights` must be non-negative and sum to 1.",
    )
    cov0 = check_covariance(cov0, "cov0", dim)
    if noise_cov is not None:
        noise_cov = check_covariance(noise_cov, "noise_cov", dim)
    return cov0, jnp.log(weights), noise_cov


class MixtureInterpolantVelocity(AbstractVelocityField):
    r"""Exact velocity of the noise-augmented interpolant from N(m0, S0) to a Gaussian mixture.

    For component k (weight $\pi_k$, law $N(\mu_k, S_k)$): $m_{k,t} = (1-t) m_0 + t\mu_k$,
    $\Sigma_{k,t} = (1-t)^2 S_0 + t^2 S_k + 2t(1-t) P$, $C_{k,t} = -(1-t) S_0 + t S_k + (1-2t) P$,
    and $v_t(x) = \sum_k w_k(t, x)\,[(\mu_k - m_0) + C_{k,t}\Sigma_{k,t}^{-1}(x - m_{k,t})]$ with
    responsibilities $w_k \propto \pi_k N(x; m_{k,t}, \Sigma_{k,t})$ (softmax of log-densities).
    Valid for $t \in [0, 1)$ (and at $t = 1$ when every $S_k$ is positive definite).

    References:
        Tsimpos, Sharp & Marzouk, arXiv:2604.15439 (2026).
    """

    m0: Float[Array, " dim"]
    cov0: Float[Array, "dim dim"]
    log_weights: Float[Array, " K"]
    means: Float[Array, "K dim"]
    covs: Float[Array, "K dim dim"]
    noise_cov: Float[Array, "dim dim"]
    dim: int = eqx.field(static=True)

    def __init__(
        self,
        m0: ArrayLike,
        cov0: ArrayLike,
        weights: ArrayLike,
        means: ArrayLike,
        covs: ArrayLike,
        *,
        noise_cov: ArrayLike | None = None,
    ):
        """Args: source mean/cov ``(dim,)``/``(dim, dim)``; mixture ``weights (K,)`` (>= 0, sum 1),
        ``means (K, dim)``, ``covs (K, dim, dim)``; ``noise_cov`` P (default 0: linear).
        """
        m0, means, covs = jnp.asarray(m0), jnp.asarray(means), jnp.asarray(covs)
        weights = jnp.asarray(weights, dtype=means.dtype)
        if m0.ndim != 1:
            raise ValueError(f"`m0` must have shape (dim,), got {m0.shape}.")
        dim = m0.shape[0]
        if weights.ndim != 1 or means.shape != (weights.shape[0], dim):
            raise ValueError(
                f"`weights` (K,) and `means` (K, {dim}) expected, got {weights.shape} "
                f"and {means.shape}."
            )
        if covs.shape != (weights.shape[0], dim, dim):
            raise ValueError(
                f"`covs` must have shape ({weights.shape[0]}, {dim}, {dim}), got {covs.shape}."
            )
        self.dim = dim
        self.m0, self.means, self.covs = m0, means, covs
        noise_cov = None if noise_cov is None else jnp.asarray(noise_cov)
        self.cov0, self.log_weights, noise_cov = _checked_mixture(
            jnp.asarray(cov0), weights, noise_cov, dim
        )
        self.noise_cov = jnp.zeros((dim, dim), m0.dtype) if noise_cov is None else noise_cov

    def __call__(self, t, x, args=None):
        if x.shape != (self.dim,):
            raise ValueError(f"`x` must have shape ({self.dim},), got {x.shape}.")
        t = jnp.asarray(t, dtype=x.dtype)

        def component(mean, cov):
            m_t = (1 - t) * self.m0 + t * mean
            sigma = (1 - t) ** 2 * self.cov0 + t**2 * cov + 2 * t * (1 - t) * self.noise_cov
            cross = -(1 - t) * self.cov0 + t * cov + (1 - 2 * t) * self.noise_cov
            chol = jnp.linalg.cholesky(sigma)
            white = jax.scipy.linalg.solve_triangular(chol, x - m_t, lower=True)
            log_det = 2 * jnp.sum(jnp.log(jnp.diag(chol)))
            log_density = -0.5 * (jnp.sum(white**2) + log_det)  # the 2*pi term cancels
            solved = jax.scipy.linalg.solve_triangular(chol.T, white, lower=False)
            return log_density, mean - self.m0 + cross @ solved

        log_density, velocities = jax.vmap(component)(self.means, self.covs)
        resp = jax.nn.softmax(self.log_weights + log_density)
        return resp @ velocities
