"""Small dense linear-algebra helpers shared by the families."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float


def psd_sqrt(matrix: Float[Array, "dim dim"]) -> Float[Array, "dim dim"]:
    """Symmetric square root of a symmetric PSD matrix (eigh; round-off negatives clipped to 0)."""
    evals, evecs = jnp.linalg.eigh(0.5 * (matrix + matrix.T))
    return (evecs * jnp.sqrt(jnp.clip(evals, 0.0))[None, :]) @ evecs.T


def gaussian_logpdf_chol(
    x: Float[Array, "*batch dim"], mean: Float[Array, " dim"], chol: Float[Array, "dim dim"]
) -> Float[Array, " *batch"]:
    r"""Gaussian log-density by a Cholesky factor: $\log \mathcal N(x; m, L L^\top)$.

    $-\tfrac12 \|L^{-1}(x - m)\|^2 - \sum_i \log |L_{ii}| - \tfrac d2 \log 2\pi$, one triangular
    solve for every row of ``x`` (shape ``(dim,)`` or ``(..., dim)``; ``mean`` broadcasts).

    Args:
        x: points, ``(..., dim)``.
        mean: the mean ``m``, ``(dim,)`` (or broadcastable to ``x``).
        chol: lower-triangular ``L`` with ``L L^T`` the covariance, ``(dim, dim)``.

    Returns:
        The log-densities, shape ``x.shape[:-1]``.
    """
    d = x.shape[-1]
    r = x - jnp.broadcast_to(mean, x.shape)
    z = jax.scipy.linalg.solve_triangular(chol, r.reshape(-1, d).T, lower=True)
    half_logdet = jnp.sum(jnp.log(jnp.abs(jnp.diagonal(chol))))
    logp = -0.5 * jnp.sum(z**2, 0) - half_logdet - 0.5 * d * jnp.log(2 * jnp.pi)
    return logp.reshape(x.shape[:-1])
