r"""Random graphs from graphons and stochastic block models, and the 13 test graphons.

A graphon is a symmetric measurable $W: [0,1]^2 \to [0,1]$. A graph on $n$ nodes is drawn by
$\xi_i \sim U(0, 1)$ i.i.d., $P_{ij} = W(\xi_i, \xi_j)$ for $i \ne j$, $P_{ii} = 0$, and
$A_{ij} = A_{ji} \sim \mathrm{Bernoulli}(P_{ij})$ independently for $i < j$.

References:
    Lovász. Large networks and graph limits. AMS 2012.
    Chan, Airoldi. A consistent histogram estimator for exchangeable graph models. ICML 2014.
    Xu, Luo, Carin, Zha. Learning graphons via structured Gromov-Wasserstein barycenters.
    AAAI 2021 (the list of test graphons).
"""

from collections.abc import Callable

import jax.numpy as jnp
import jax.random as jr

from jaxgen.core.checks import check_in_interval, check_probabilities
from jaxgen.core.types import Array, Float, Int, PRNGKeyArray

GraphonFn = Callable[[Array, Array], Array]


def _bernoulli_symmetric(key: PRNGKeyArray, P: Array) -> Array:
    n = P.shape[0]
    upper = jnp.triu(jr.uniform(key, (n, n), dtype=P.dtype) < P, k=1)
    return (upper | upper.T).astype(P.dtype)


def _check_n(n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 2:
        raise ValueError(f"`n` must be a Python int >= 2, got {n!r}.")


def sample_graphon(
    key: PRNGKeyArray, n: int, graphon_fn: GraphonFn
) -> tuple[Float[Array, "n n"], Float[Array, "n n"], Float[Array, " n"]]:
    r"""Sample an undirected simple graph of ``n`` nodes from a graphon.

    Args:
        key: PRNG key.
        n: number of nodes (static).
        graphon_fn: vectorised symmetric $W(u, v) \in [0, 1]$ (for instance ``GRAPHONS[name]``).

    Returns:
        ``(A, P, xi)``: adjacency $A \in \{0, 1\}^{n\times n}$ (symmetric, zero diagonal), edge
        probabilities $P$ (zero diagonal) and latent positions $\xi \in [0,1]^n$, in the default
        float dtype.
    """
    _check_n(n)
    key_xi, key_a = jr.split(key)
    xi = jr.uniform(key_xi, (n,))
    P = jnp.clip(graphon_fn(xi[:, None], xi[None, :]), 0.0, 1.0).astype(xi.dtype)
    P = P * (1 - jnp.eye(n, dtype=P.dtype))
    return _bernoulli_symmetric(key_a, P), P, xi


def sample_sbm(
    key: PRNGKeyArray, n: int, B: Float[Array, "K K"], pi: Float[Array, " K"]
) -> tuple[Float[Array, "n n"], Float[Array, "n n"], Int[Array, " n"]]:
    r"""Sample a graph from the stochastic block model SBM(B, pi).

    $z_i \sim \mathrm{Categorical}(\pi)$, $P_{ij} = B_{z_i z_j}$ ($i \ne j$), $A_{ij} \sim
    \mathrm{Bernoulli}(P_{ij})$ for $i < j$, symmetrised.

    Returns:
        ``(A, P, z)``: adjacency, edge probabilities (zero diagonal) and block labels (n,).
    """
    _check_n(n)
    B, pi = jnp.asarray(B), jnp.asarray(pi)
    if B.ndim != 2 or B.shape[0] != B.shape[1] or pi.shape != (B.shape[0],):
        raise ValueError(f"`B` must be (K, K) and `pi` (K,), got {B.shape} and {pi.shape}.")
    B = check_in_interval(B, "B", 0.0, 1.0)
    pi = check_probabilities(pi, "pi")
    key_z, key_a = jr.split(key)
    z = jr.categorical(key_z, jnp.log(pi), shape=(n,))
    P = B[z][:, z] * (1 - jnp.eye(n, dtype=B.dtype))
    return _bernoulli_symmetric(key_a, P), P, z


def _max(u: Array, v: Array) -> Array:
    return jnp.maximum(u, v)


def _min(u: Array, v: Array) -> Array:
    return jnp.minimum(u, v)


# The 13 graphons of Dufour et al. (the first 11 are the benchmark list of Xu et al. 2021).
GRAPHONS: dict[str, GraphonFn] = {
    "product": lambda u, v: u * v,
    "exp_power": lambda u, v: jnp.exp(-(u**0.7 + v**0.7)),
    "poly_sqrt": lambda u, v: 0.25 * (u**2 + v**2 + jnp.sqrt(u) + jnp.sqrt(v)),
    "mean": lambda u, v: 0.5 * (u + v),
    "logistic_sq": lambda u, v: 1.0 / (1.0 + jnp.exp(-2.0 * (u**2 + v**2))),
    "logistic_maxmin": lambda u, v: 1.0 / (1.0 + jnp.exp(-(_max(u, v) ** 2 + _min(u, v) ** 4))),
    "exp_max": lambda u, v: jnp.exp(-(_max(u, v) ** 0.75)),
    "exp_min_sqrt": lambda u, v: jnp.exp(-0.5 * (_min(u, v) + jnp.sqrt(u) + jnp.sqrt(v))),
    "log_max": lambda u, v: jnp.log1p(0.5 * _max(u, v)),
    "abs_diff": lambda u, v: jnp.abs(u - v),
    "one_minus_abs_diff": lambda u, v: 1.0 - jnp.abs(u - v),
    "sin_product": lambda u, v: 0.5 + 0.5 * jnp.sin(2 * jnp.pi * u) * jnp.sin(2 * jnp.pi * v),
    "cos_sin": lambda u, v: (
        0.5
        + 0.25 * jnp.cos(2 * jnp.pi * (u - v)) * (jnp.sin(4 * jnp.pi * u) + jnp.sin(4 * jnp.pi * v))
    ),
}
"""Name -> vectorised graphon $W(u, v)$. In order: $uv$; $e^{-(u^{0.7}+v^{0.7})}$;
$\\frac14(u^2+v^2+\\sqrt u+\\sqrt v)$; $\\frac12(u+v)$; $(1+e^{-2(u^2+v^2)})^{-1}$;
$(1+e^{-(\\max^2+\\min^4)})^{-1}$; $e^{-\\max^{0.75}}$; $e^{-(\\min+\\sqrt u+\\sqrt v)/2}$;
$\\log(1+\\max/2)$; $|u-v|$; $1-|u-v|$; $\\frac12+\\frac12\\sin 2\\pi u\\sin 2\\pi v$;
$\\frac12+\\frac14\\cos 2\\pi(u-v)(\\sin 4\\pi u+\\sin 4\\pi v)$."""


def graphon(name: str) -> GraphonFn:
    """The named test graphon (one of ``GRAPHONS``)."""
    if name not in GRAPHONS:
        raise ValueError(f"unknown graphon {name!r}; expected one of {sorted(GRAPHONS)}.")
    return GRAPHONS[name]


def graphon_grid(graphon_fn: GraphonFn, r: int, dtype: jnp.dtype | None = None) -> Array:
    r"""$W$ on the midpoints of an $r\times r$ grid of $[0,1]^2$ (r, r)."""
    x = (jnp.arange(r, dtype=dtype) + 0.5) / r
    return graphon_fn(x[:, None], x[None, :])
