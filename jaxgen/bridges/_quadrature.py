"""Quadrature rules for expectations under the standard Gaussian ``N(0, I_d)``.

A `Quadrature` holds nodes ``xi_j`` and log-weights ``log w_j`` (``sum_j w_j = 1``) so that
``E f(xi) ~ sum_j w_j f(xi_j)``; everything downstream stays in log space (``logsumexp``), since
high-order Gauss-Hermite weights underflow in float32.
"""

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray


def weighted_points(
    points: Float[ArrayLike, "..."],
    log_weights: Float[ArrayLike, "..."],
    names: tuple[str, str] = ("nodes", "log_weights"),
) -> tuple[Float[Array, "M dim"], Float[Array, " M"]]:
    """The checked pair ``(points (M, dim), log-weights (M,))`` behind `Quadrature` (normalised
    weights under N(0, I)) and `AtomicLogPotential` (unnormalised atom weights).

    Raises:
        ValueError: naming ``names`` when the shapes disagree.
    """
    points = jnp.asarray(points)
    log_weights = jnp.asarray(log_weights, points.dtype)
    if points.ndim != 2 or log_weights.shape != points.shape[:1]:
        raise ValueError(
            f"`{names[0]}` must be (M, dim) and `{names[1]}` (M,), got {points.shape} and "
            f"{log_weights.shape}."
        )
    return points, log_weights


class Quadrature(eqx.Module):
    """Nodes ``(M, dim)`` and normalised log-weights ``(M,)`` for ``E_{xi ~ N(0, I)}``."""

    nodes: Float[Array, "M dim"]
    log_weights: Float[Array, " M"]

    def __init__(self, nodes: Float[Array, "M dim"], log_weights: Float[Array, " _"]):
        """Wrap nodes and log-weights; the weights are renormalised to sum to one."""
        nodes, log_weights = weighted_points(nodes, log_weights)
        self.nodes = nodes
        self.log_weights = log_weights - jax.nn.logsumexp(log_weights)

    @property
    def dim(self) -> int:
        """The dimension of the nodes."""
        return self.nodes.shape[1]


def gauss_hermite(dim: int, n_per_dim: int, dtype: object = None) -> Quadrature:
    """Tensor-product Gauss-Hermite rule for ``N(0, I_dim)`` with ``n_per_dim ** dim`` nodes.

    Exact for polynomials of degree ``<= 2 n_per_dim - 1`` in each coordinate.

    Args:
        dim: dimension (the rule has ``n_per_dim ** dim`` nodes: keep ``dim <= 3``).
        n_per_dim: nodes per coordinate.
        dtype: floating dtype of the nodes (default: JAX's default float).

    Returns:
        The `Quadrature`.
    """
    if not isinstance(dim, int) or dim < 1:
        raise ValueError(f"`dim` must be an int >= 1, got {dim!r}.")
    if not isinstance(n_per_dim, int) or n_per_dim < 1:
        raise ValueError(f"`n_per_dim` must be an int >= 1, got {n_per_dim!r}.")
    if n_per_dim**dim > 1_000_000:
        raise ValueError(
            f"a tensor Gauss-Hermite rule with n_per_dim={n_per_dim} in dim={dim} has "
            f"{n_per_dim**dim} nodes; use `monte_carlo` in this dimension."
        )
    x, w = np.polynomial.hermite_e.hermegauss(n_per_dim)  # weight exp(-x^2/2)
    logw = np.log(w) - 0.5 * np.log(2 * np.pi)
    nodes = np.array(list(itertools.product(x, repeat=dim)))
    log_weights = np.array([sum(c) for c in itertools.product(logw, repeat=dim)])
    dtype = jnp.result_type(float) if dtype is None else dtype
    return Quadrature(jnp.asarray(nodes, dtype), jnp.asarray(log_weights, dtype))


def monte_carlo(
    key: PRNGKeyArray, dim: int, num: int, *, antithetic: bool = True, dtype: object = None
) -> Quadrature:
    """Monte Carlo rule: ``num`` standard normal nodes with equal weights.

    With ``antithetic=True`` (``num`` even) the nodes come in pairs ``(xi, -xi)``, which makes the
    rule exact for odd functions and halves the variance of near-linear integrands.
    """
    if not isinstance(dim, int) or dim < 1:
        raise ValueError(f"`dim` must be an int >= 1, got {dim!r}.")
    if not isinstance(num, int) or num < 1:
        raise ValueError(f"`num` must be an int >= 1, got {num!r}.")
    if antithetic and num % 2:
        raise ValueError(f"`num` must be even with `antithetic=True`, got {num}.")
    dtype = jnp.result_type(float) if dtype is None else dtype
    if antithetic:
        half = jr.normal(key, (num // 2, dim), dtype)
        nodes = jnp.concatenate([half, -half])
    else:
        nodes = jr.normal(key, (num, dim), dtype)
    return Quadrature(nodes, jnp.zeros(num, dtype))
