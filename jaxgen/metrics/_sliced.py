"""Sliced 1-Wasserstein distance and the integrated squared error of 1-D densities."""

import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from ._distances import sorted_projections


def sliced_w1(
    key: PRNGKeyArray,
    x: Float[Array, "n dim"],
    y: Float[Array, "n dim"],
    num_projections: int = 256,
) -> Float[Array, ""]:
    r"""Monte Carlo sliced 1-Wasserstein distance between equal-size samples.

    $SW_1 = E_\theta W_1(\theta^\top X, \theta^\top Y)$, theta uniform on the sphere; each 1-D
    W_1 uses the sorted (monotone) coupling. (The convMMD code reports $\sqrt{d}\,SW_1$.)

    Returns:
        $SW_1$, a scalar.
    """
    if x.ndim != 2 or x.shape != y.shape or x.shape[0] < 1:
        raise ValueError(f"`x` and `y` must be (n, dim) of equal shape, got {x.shape}, {y.shape}.")
    px, py = sorted_projections(key, x, y, num_projections)
    return jnp.mean(jnp.abs(px - py))


def ise_1d(
    f_hat: Float[Array, " G"], f_true: Float[Array, " G"], grid: Float[Array, " G"]
) -> Float[Array, ""]:
    r"""Integrated squared error $\int (\hat f - f)^2$ by the trapezoid rule on ``grid``."""
    if f_hat.ndim != 1 or f_hat.shape != f_true.shape or f_hat.shape != grid.shape:
        raise ValueError(
            f"`f_hat`, `f_true`, `grid` must be 1-D of equal length, got {f_hat.shape}, "
            f"{f_true.shape}, {grid.shape}."
        )
    sq = (f_hat - f_true) ** 2
    return jnp.sum(0.5 * (sq[1:] + sq[:-1]) * jnp.diff(grid))
