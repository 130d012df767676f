"""Straight-line processes between Gaussian endpoints (Tsimpos, Sharp & Marzouk 2026, §3.1).

With X_0 ~ N(m0, S0) and X_1 ~ N(m1, S1) independent and Z ~ N(0, I),

    X_t = (1 - t) X_0 + t X_1 + sqrt(2 t (1 - t)) P^{1/2} Z,    P = S0 # S1,

(the matrix geometric mean) has an exactly straight Markovian projection: its material
acceleration vanishes, so one Euler step of size 1 is the transport map T(x) = m1 + A (x - m0),
A = P S0^{-1}.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ..core import psd_sqrt
from ..core.checks import check_covariance
from ._interpolants import NoiseAugmentedInterpolant


def _cholesky_pd(name: str, cov: Array) -> Array:
    chol = jnp.linalg.cholesky(cov)
    return eqx.error_if(
        chol, ~jnp.all(jnp.isfinite(chol)), f"`{name}` must be positive definite (Cholesky failed)."
    )


def matrix_geometric_mean(
    cov0: Float[Array, "dim dim"], cov1: Float[Array, "dim dim"]
) -> Float[Array, "dim dim"]:
    r"""The matrix geometric mean $P = S_0 \# S_1$, the PSD solution of $P S_0^{-1} P = S_1$.

    Computed through the pencil $(S_1, S_0)$: with $S_0 = L L^\top$ and
    $L^{-1} S_1 L^{-\top} = U \Lambda U^\top$, $P = L U \Lambda^{1/2} U^\top L^\top$.

    Args:
        cov0: $S_0$, symmetric positive definite.
        cov1: $S_1$, symmetric positive semi-definite, same shape.

    Returns:
        $P$, symmetric PSD, shape ``(dim, dim)``.

    References:
        Bhatia, Positive Definite Matrices (2007), ch. 4.
    """
    cov0 = check_covariance(cov0, "cov0", definite=True)
    cov1 = check_covariance(cov1, "cov1", cov0.shape[0])
    chol = _cholesky_pd("cov0", cov0)
    half = jax.scipy.linalg.solve_triangular(chol, cov1, lower=True)
    whitened = jax.scipy.linalg.solve_triangular(chol, half.T, lower=True)
    root = psd_sqrt(whitened)
    mean = chol @ root @ chol.T
    return 0.5 * (mean + mean.T)


@eqx.filter_jit  # (not jax.jit: a failed check then raises EquinoxRuntimeError, not an XLA error)
def _endpoint_matrices(cov0: Array, cov1: Array, dim: int) -> tuple[Array, Array, Array, Array]:
    """Checked ``(cov0, cov1)``, ``P = cov0 # cov1`` and ``A = P cov0^{-1}`` in one compiled call
    (eagerly, the few dozen small ops of the checks and the pencil would compile one by one).
    """
    cov0 = check_covariance(cov0, "cov0", dim, definite=True)
    cov1 = check_covariance(cov1, "cov1", dim)
    noise_cov = matrix_geometric_mean(cov0, cov1)
    # A = P S0^{-1}; since P and S0 are symmetric, A^T = S0^{-1} P.
    return cov0, cov1, noise_cov, jnp.linalg.solve(cov0, noise_cov).T


class GaussianStraightProcess(eqx.Module):
    r"""The explicit straight-line process between independent Gaussian endpoints.

    Its velocity, valid for every $t \in [0, 1]$ (ends as limits), is
    $v_t(x) = (m_1 - m_0) + (A - I)(I + t(A - I))^{-1}(x - m_t)$ with $A = P S_0^{-1}$,
    $m_t = (1-t) m_0 + t m_1$; the flow is $Y_t(x) = x + t(T(x) - x)$.

    Attributes:
        m0, cov0, m1, cov1: the endpoint means ``(dim,)`` and covariances ``(dim, dim)``.
        noise_cov: $P = S_0 \# S_1$, the covariance of the injected noise at its peak.
        transport_matrix: $A = P S_0^{-1}$ (so $A S_0 A^\top = S_1$).

    References:
        Tsimpos, Sharp & Marzouk, One-Shot Generative Flows: Existence and Obstructions,
        arXiv:2604.15439 (2026), §3.1.
    """

    m0: Float[Array, " dim"]
    cov0: Float[Array, "dim dim"]
    m1: Float[Array, " dim"]
    cov1: Float[Array, "dim dim"]
    noise_cov: Float[Array, "dim dim"]
    transport_matrix: Float[Array, "dim dim"]

    def __init__(self, m0: ArrayLike, cov0: ArrayLike, m1: ArrayLike, cov1: ArrayLike):
        """Build the process for ``X_0 ~ N(m0, cov0)``, ``X_1 ~ N(m1, cov1)``.

        Args:
            m0: source mean, shape ``(dim,)``.
            cov0: source covariance, symmetric positive definite ``(dim, dim)``.
            m1: target mean, shape ``(dim,)``.
            cov1: target covariance, symmetric PSD ``(dim, dim)``.
        """
        m0, m1 = jnp.asarray(m0), jnp.asarray(m1)
        if m0.ndim != 1:
            raise ValueError(f"`m0` must be a vector (dim,), got shape {m0.shape}.")
        if m1.shape != m0.shape:
            raise ValueError(f"`m1` must have the shape of `m0` {m0.shape}, got {m1.shape}.")
        self.m0, self.m1 = m0, m1
        self.cov0, self.cov1, self.noise_cov, self.transport_matrix = _endpoint_matrices(
            jnp.asarray(cov0), jnp.asarray(cov1), m0.shape[0]
        )

    @property
    def dim(self) -> int:
        """State dimension."""
        return self.m0.shape[0]

    def _lift(self, t: Array) -> Array:
        eye = jnp.eye(self.dim, dtype=self.m0.dtype)
        return eye + t * (self.transport_matrix - eye)

    def marginal(
        self, t: Float[Array, ""] | float
    ) -> tuple[Float[Array, " dim"], Float[Array, "dim dim"]]:
        r"""Mean and covariance of $X_t$: $m_t$ and $\Sigma_t = L_t S_0 L_t^\top$, $L_t = I +
        t(A-I)$.
        """
        t = jnp.asarray(t, dtype=self.m0.dtype)
        lift = self._lift(t)
        return (1 - t) * self.m0 + t * self.m1, lift @ self.cov0 @ lift.T

    def velocity(
        self, t: Float[Array, ""] | float, x: Float[Array, " dim"], args: object = None
    ) -> Float[Array, " dim"]:
        """The exact velocity field (a diffrax vector field ``(t, x, args)``) on one sample."""
        if x.shape != (self.dim,):
            raise ValueError(f"`x` must have shape ({self.dim},), got {x.shape}.")
        t = jnp.asarray(t, dtype=x.dtype)
        m_t = (1 - t) * self.m0 + t * self.m1
        eye = jnp.eye(self.dim, dtype=x.dtype)
        return (
            self.m1
            - self.m0
            + (self.transport_matrix - eye) @ jnp.linalg.solve(self._lift(t), x - m_t)
        )

    def transport_map(self, x: Float[Array, " dim"]) -> Float[Array, " dim"]:
        """T(x) = m1 + A (x - m0), which pushes N(m0, cov0) to N(m1, cov1)."""
        return self.m1 + self.transport_matrix @ (x - self.m0)

    def flow_map(
        self, t: Float[Array, ""] | float, x: Float[Array, " dim"]
    ) -> Float[Array, " dim"]:
        """Y_t(x) = x + t (T(x) - x): the flow of `velocity` from time 0, in closed form."""
        return x + t * (self.transport_map(x) - x)

    def interpolant(self) -> NoiseAugmentedInterpolant:
        """The interpolant that generates this process from endpoint pairs (for flow matching)."""
        return NoiseAugmentedInterpolant(self.noise_cov)

    def sample(
        self, key: PRNGKeyArray, t: Float[Array, ""] | float
    ) -> tuple[Float[Array, " dim"], Float[Array, " dim"]]:
        """One draw of ``(X_t, Xdot_t)`` at a time ``t`` in (0, 1) (Xdot is singular at the
        ends).
        """
        key0, key1, key_pair = jr.split(key, 3)
        x0 = self.m0 + jnp.linalg.cholesky(self.cov0) @ jr.normal(key0, (self.dim,), self.m0.dtype)
        x1 = self.m1 + psd_sqrt(self.cov1) @ jr.normal(key1, (self.dim,), self.m0.dtype)
        return self.interpolant().sample(key_pair, x0, x1, jnp.asarray(t, self.m0.dtype))

    @eqx.filter_jit  # eagerly, its factorisations and draws would compile op by op
    def sample_path(self, key: PRNGKeyArray, ts: Float[Array, " T"]) -> Float[Array, "T dim"]:
        """One path on the grid ``ts``: the endpoints and Z are drawn once and shared by all t."""
        ts = jnp.asarray(ts, self.m0.dtype)
        if ts.ndim != 1:
            raise ValueError(f"`ts` must be 1-D, got shape {ts.shape}.")
        key0, key1, keyz = jr.split(key, 3)
        dtype = self.m0.dtype
        x0 = self.m0 + jnp.linalg.cholesky(self.cov0) @ jr.normal(key0, (self.dim,), dtype)
        x1 = self.m1 + psd_sqrt(self.cov1) @ jr.normal(key1, (self.dim,), dtype)
        noise = psd_sqrt(self.noise_cov) @ jr.normal(keyz, (self.dim,), dtype)
        gamma = jnp.sqrt(jnp.clip(2 * ts * (1 - ts), 0.0))
        return (
            (1 - ts)[:, None] * x0[None, :]
            + ts[:, None] * x1[None, :]
            + gamma[:, None] * noise[None, :]
        )
