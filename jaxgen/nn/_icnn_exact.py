r"""Exact constructions: MAX_n as a depth-n ICNN and a depth-(ceil(log2 n)+1) ReLU net; the
separation candidate family f_k.

References:
    Bakaev, Brunck, Hertrich, Reichman, Yehudayoff, On the depth of monotone ReLU neural
    networks and ICNNs, arXiv:2505.06169 (Theorem B: ICNN depth of MAX_n is exactly n;
    Theorem C: depth separation ReLU vs ICNN).
    Arora, Basu, Mianjy, Mukherjee, Understanding deep neural networks with ReLU,
    arXiv:1611.01491 (pairwise max tree).
"""

import math
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ..core.checks import check_finite
from ._icnn import ICNN, ReLUNet, _check_int, _default_dtype


def max_n(x: Float[Array, "*batch n"]) -> Float[Array, "*batch"]:
    r"""$\mathrm{MAX}_n(x) = \max_i x_i$ over the last axis."""
    return jnp.max(x, axis=-1)


def icnn_max_affine_exact(
    G: Float[ArrayLike, "M n"], h: Float[ArrayLike, " M"], *, dtype: Any = None
) -> ICNN:
    r"""Width-1 ICNN with ``M - 1`` hidden layers computing $\max_j (g_j \cdot x + h_j)$ exactly.

    Chain of pairwise maxima: $z_1 = \sigma(\ell_1 - \ell_2)$,
    $z_k = \sigma(z_{k-1} + \ell_k - \ell_{k+1})$, $f = z_{M-1} + \ell_M$ with
    $\ell_j = g_j \cdot x + h_j$. Invariant: $z_k + \ell_{k+1} = \max_{j \le k+1} \ell_j$.
    Hidden-to-hidden and output weights are exactly 1 (``mode="project"``).

    Args:
        G: slopes, shape ``(M, n)`` with ``M >= 2``.
        h: offsets, shape ``(M,)``.
        dtype: parameter dtype (default: JAX's default float).
    """
    dtype = _default_dtype(dtype)
    G = np.asarray(G, dtype=np.float64)
    h = np.asarray(h, dtype=np.float64)
    if G.ndim != 2 or G.shape[0] < 2 or h.shape != (G.shape[0],):
        raise ValueError(
            f"`G` must be (M, n) with M >= 2 and `h` (M,), got {G.shape} and {h.shape}."
        )
    M, n = G.shape
    A = [(G[k] - G[k + 1])[None, :] for k in range(M - 1)]
    b = [np.array([h[k] - h[k + 1]]) for k in range(M - 1)]
    W = [np.ones((1, 1)) for _ in range(M - 2)]
    return ICNN.from_weights(A, b, W, np.ones(1), G[-1], h[-1], mode="project", dtype=dtype)


def icnn_max_exact(n: int, *, dtype: Any = None) -> ICNN:
    r"""The width-1, depth-n ICNN ($n - 1$ hidden layers) with $f(x) = \max_i x_i$ exactly.

    $z_1 = \sigma(x_1 - x_2)$, $z_k = \sigma(z_{k-1} + x_k - x_{k+1})$,
    $f = z_{n-1} + x_n$. Depth n is optimal for ICNNs (Bakaev et al. 2025, Theorem B).

    Args:
        n: number of inputs, int >= 2.
        dtype: parameter dtype (default: JAX's default float).
    """
    n = _check_int("n", n, 2)
    return icnn_max_affine_exact(np.eye(n), np.zeros(n), dtype=dtype)


def relu_max_tree(n: int, *, dtype: Any = None) -> ReLUNet:
    r"""Unconstrained ReLU net with ``ceil(log2 n)`` hidden layers computing $\max_i x_i$.

    Each round pairs the current values: $\max(a, b) = \sigma(a - b) + \sigma(b) - \sigma(-b)$
    (3 neurons); an odd one out passes as $u = \sigma(u) - \sigma(-u)$ (2 neurons). The linear
    read-out of one round is folded into the next round's affine map.

    Args:
        n: number of inputs, int >= 2.
        dtype: parameter dtype (default: JAX's default float).
    """
    n = _check_int("n", n, 2)
    dtype = _default_dtype(dtype)
    readout = np.eye(n)  # current values = readout @ (previous layer's activations)
    weights = []
    while readout.shape[0] > 1:
        m = readout.shape[0]
        rows, out_rows = [], []
        for i in range(0, m - 1, 2):
            a, b = np.eye(m)[i], np.eye(m)[i + 1]
            base = len(rows)
            rows += [a - b, b, -b]
            out_rows.append((base, [1.0, 1.0, -1.0]))
        if m % 2:
            u = np.eye(m)[m - 1]
            base = len(rows)
            rows += [u, -u]
            out_rows.append((base, [1.0, -1.0]))
        pre = np.stack(rows)  # (neurons, m): pre-activations in terms of current values
        weights.append(pre @ readout)
        new = np.zeros((len(out_rows), len(rows)))
        for j, (base, coefs) in enumerate(out_rows):
            new[j, base : base + len(coefs)] = coefs
        readout = new
    biases = [np.zeros(W.shape[0]) for W in weights]
    net = ReLUNet.from_weights(weights, biases, readout[0], 0.0, dtype=dtype)
    if net.n_hidden != math.ceil(math.log2(n)):  # pragma: no cover - construction invariant
        raise RuntimeError("relu_max_tree: wrong number of hidden layers.")
    return net


# --------------------------------------------------------------------------------------------
# separation family
# --------------------------------------------------------------------------------------------


def _triangular_lattice(k: int) -> np.ndarray:
    i, j = np.meshgrid(np.arange(k + 1), np.arange(k + 1), indexing="ij")
    i, j = i.ravel().astype(np.float64), j.ravel().astype(np.float64)
    return np.stack([i + 0.5 * j, (math.sqrt(3.0) / 2.0) * j], axis=-1)


# Registry hook: the paper's exact family can be added here without changing the API.
SEPARATION_FAMILIES: dict[str, Callable[[int], np.ndarray]] = {
    "triangular": _triangular_lattice,
}


def lattice_points(k: int, *, family: str = "triangular") -> np.ndarray:
    r"""Points of the separation family's lattice; ``"triangular"``: the rhombus
    $\Lambda_k = \{i u + j v : 0 \le i, j \le k\}$, $u = (1, 0)$, $v = (1/2, \sqrt{3}/2)$.

    Returns:
        numpy float64 array ``((k+1)^2, 2)``.
    """
    k = _check_int("k", k, 1)
    if family not in SEPARATION_FAMILIES:
        raise ValueError(f"`family` must be one of {sorted(SEPARATION_FAMILIES)}, got {family!r}.")
    return SEPARATION_FAMILIES[family](k)


def max_affine(
    G: Float[ArrayLike, "M n"], h: Float[ArrayLike, " M"]
) -> Callable[[Float[Array, "*batch n"]], Float[Array, "*batch"]]:
    r"""The convex CPWL function $x \mapsto \max_j (g_j \cdot x + h_j)$ (any batch shape)."""
    G_np, h_np = np.asarray(G), np.asarray(h)
    if G_np.ndim != 2 or h_np.shape != (G_np.shape[0],):
        raise ValueError(f"`G` must be (M, n) and `h` (M,), got {G_np.shape} and {h_np.shape}.")
    check_finite(G_np, "G")  # concrete (numpy) arrays: raises ValueError now
    check_finite(h_np, "h")

    def f(x: Float[Array, "*batch n"]) -> Float[Array, "*batch"]:
        if x.shape[-1] != G_np.shape[1]:
            raise ValueError(f"`x` must end in dimension {G_np.shape[1]}, got shape {x.shape}.")
        Gx = jnp.asarray(G_np, dtype=x.dtype)
        hx = jnp.asarray(h_np, dtype=x.dtype)
        hx = jnp.reshape(hx, (1,) * (x.ndim - 1) + hx.shape)  # explicit rank for promotion
        return jnp.max(x @ Gx.T + hx, axis=-1)

    return f


def separation_fk(
    x: Float[Array, "*batch 2"], k: int, *, family: str = "triangular"
) -> Float[Array, "*batch"]:
    r"""The separation candidate $f_k(x) = \max_{p \in \Lambda_k} (\langle p, x\rangle -
    \tfrac12 \|p\|^2)$ (a choice of jaxgen; the paper's exact family was not recoverable).

    Identity: $f_k(x) = \tfrac12\|x\|^2 - \tfrac12 \operatorname{dist}(x, \Lambda_k)^2$; its
    linearity regions are the Voronoi cells of $\Lambda_k$ and its Newton subdivision the
    Delaunay triangulation ($2k^2$ triangles). An ICNN computes it with $(k+1)^2 - 1$ hidden
    layers (`icnn_separation_exact`); two-hidden-layer ReLU nets of size $O(k^2)$ compute any
    CPWL function on $\mathbb{R}^2$ with $O(k^2)$ pieces.
    """
    if x.shape[-1] != 2:
        raise ValueError(f"`x` must end in dimension 2, got shape {x.shape}.")
    P = lattice_points(k, family=family)
    return max_affine(P, -0.5 * np.sum(P**2, axis=-1))(x)


def icnn_separation_exact(k: int, *, family: str = "triangular", dtype: Any = None) -> ICNN:
    """Width-1 ICNN with ``(k+1)^2 - 1`` hidden layers computing `separation_fk` exactly."""
    P = lattice_points(k, family=family)
    return icnn_max_affine_exact(P, -0.5 * np.sum(P**2, axis=-1), dtype=dtype)
