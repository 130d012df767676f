"""Small dense linear-algebra helpers shared by the families."""

import jax.numpy as jnp
from jaxtyping import Array, Float


def psd_sqrt(matrix: Float[Array, "dim dim"]) -> Float[Array, "dim dim"]:
    """Symmetric square root of a symmetric PSD matrix (eigh; round-off negatives clipped to 0)."""
    evals, evecs = jnp.linalg.eigh(0.5 * (matrix + matrix.T))
    return (evecs * jnp.sqrt(jnp.clip(evals, 0.0))[None, :]) @ evecs.T
