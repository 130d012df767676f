"""Error metrics for graphon / SBM estimates: node-level MSE, sorted graphon L2, ARI, link AUC.

All are pure and jittable (sizes are static).

References:
    Gao, Lu, Zhou. Rate-optimal graphon estimation. Ann. Stat. 2015 (node-level MSE).
    Hubert, Arabie. Comparing partitions. J. Classification 1985 (adjusted Rand index).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from jaxgen.core.checks import (
    check_finite,
    check_in_interval,
    check_labels,
    check_positive_int,
    check_probabilities,
)
from jaxgen.core.types import Array, Bool, Float, Int, PRNGKeyArray

from ._sample import GraphonFn


def _square(name: str, x: Array) -> None:
    if x.ndim != 2 or x.shape[0] != x.shape[1]:
        raise ValueError(f"`{name}` must be square (n, n), got shape {x.shape}.")


def node_mse(
    P_hat: Float[Array, "n n"], P: Float[Array, "n n"], *, include_diag: bool = False
) -> Float[Array, ""]:
    r"""Node-level MSE $\frac{1}{n(n-1)}\sum_{i\ne j}(\hat P_{ij} - P_{ij})^2$ (or over all
    $n^2$ pairs with ``include_diag``). Nodes are shared, so no relabelling is needed.
    """
    _square("P_hat", P_hat)
    if P.shape != P_hat.shape:
        raise ValueError(f"`P` must have the shape of `P_hat` {P_hat.shape}, got {P.shape}.")
    n = P.shape[0]
    sq = (P_hat - P) ** 2
    if include_diag:
        return jnp.mean(sq)
    return (jnp.sum(sq) - jnp.sum(jnp.diagonal(sq))) / (n * (n - 1))


def graphon_l2_sorted(
    block_matrix: Float[Array, "K K"],
    block_proportions: Float[Array, " K"],
    graphon_fn: GraphonFn,
    *,
    r: int = 1000,
) -> Float[Array, ""]:
    r"""$L^2$ distance between a step-function estimate and a graphon, after sorting both by degree.

    The blocks are laid on $[0, 1]$ as consecutive intervals of length $q_k$ in increasing order
    of the estimated degree $(W q)_k$; the graphon's grid ($r$ midpoints) is rearranged in
    increasing order of $d(u) = \int W(u, v)\,dv$. Meaningful when $d$ is strictly monotone
    (otherwise it is an upper bound on the distance up to measure-preserving maps).
    """
    K = block_matrix.shape[0]
    if block_matrix.shape != (K, K) or block_proportions.shape != (K,):
        raise ValueError(
            f"`block_matrix` (K, K) and `block_proportions` (K,) expected, got "
            f"{block_matrix.shape} and {block_proportions.shape}."
        )
    check_positive_int(r, "r")
    block_matrix = check_finite(block_matrix, "block_matrix")
    block_proportions = check_probabilities(block_proportions, "block_proportions")
    dtype = block_matrix.dtype
    x = (jnp.arange(r, dtype=dtype) + 0.5) / r
    G = graphon_fn(x[:, None], x[None, :])
    order = jnp.argsort(jnp.mean(G, axis=1))
    G = G[order][:, order]
    q = block_proportions / jnp.sum(block_proportions)
    deg = block_matrix @ q
    # empty blocks get zero length; sort the rest by degree
    border = jnp.argsort(deg)
    edges = jnp.cumsum(q[border])
    idx = jnp.clip(jnp.searchsorted(edges, x, side="right"), 0, K - 1)
    blocks = border[idx]
    est = block_matrix[blocks][:, blocks]
    return jnp.sqrt(jnp.mean((est - G) ** 2))


def adjusted_rand_index(
    labels_true: Int[Array, " n"], labels_pred: Int[Array, " n"]
) -> Float[Array, ""]:
    r"""Adjusted Rand index of two partitions of $n$ items (1 = identical up to relabelling).

    $\mathrm{ARI} = (\sum_{ij}\binom{n_{ij}}2 - E)/(\frac12(\sum_i\binom{a_i}2 + \sum_j\binom{b_j}2)
    - E)$ with $E = \sum_i\binom{a_i}2\sum_j\binom{b_j}2/\binom n2$. Labels are integers in
    $[0, n)$ (checked: a label outside would be dropped from the contingency table). Two trivial
    partitions (both one block, or both singletons) give 1.

    Raises:
        ValueError: for shapes other than two equal ``(n,)``, ``n >= 2``, or (as a value check)
            a label outside ``[0, n)``.
        TypeError: for non-integer labels.
    """
    labels_true, labels_pred = jnp.asarray(labels_true), jnp.asarray(labels_pred)
    if labels_true.shape != labels_pred.shape or labels_true.ndim != 1:
        raise ValueError(
            f"`labels_true` and `labels_pred` must be (n,) of equal shape, got "
            f"{labels_true.shape} and {labels_pred.shape}."
        )
    n = labels_true.shape[0]
    if n < 2:
        raise ValueError(f"`labels_true` must have n >= 2 items, got {n}.")
    labels_true = check_labels(labels_true, "labels_true", n)
    labels_pred = check_labels(labels_pred, "labels_pred", n)
    dtype = jnp.result_type(float)
    C = jax.nn.one_hot(labels_true, n, dtype=dtype).T @ jax.nn.one_hot(labels_pred, n, dtype=dtype)

    def comb2(x: Array) -> Array:
        return jnp.sum(x * (x - 1) / 2)

    sum_ij, sum_a, sum_b = comb2(C), comb2(C.sum(1)), comb2(C.sum(0))
    expected = sum_a * sum_b / (n * (n - 1) / 2)
    maximum = 0.5 * (sum_a + sum_b)
    denom = maximum - expected
    return jnp.where(denom == 0, 1.0, (sum_ij - expected) / jnp.where(denom == 0, 1.0, denom))


def link_auc(
    scores: Float[Array, "n n"], A: Float[Array, "n n"], mask: Bool[Array, "n n"]
) -> Float[Array, ""]:
    r"""Area under the ROC curve of ``scores`` for predicting the edges of ``A`` on the pairs
    ``mask`` (only $i < j$ is used). Ties count one half (Mann-Whitney). ``scores`` and ``A``
    must be finite and the masked pairs must hold both classes (value checks).
    """
    _square("scores", scores)
    if A.shape != scores.shape or mask.shape != scores.shape:
        raise ValueError(
            f"`A` and `mask` must have shape {scores.shape}, got {A.shape} and {mask.shape}."
        )
    scores, A = check_finite(scores, "scores"), check_finite(A, "A")
    n = scores.shape[0]
    upper = mask & jnp.triu(jnp.ones((n, n), dtype=bool), k=1)
    s = scores.ravel()
    pos = (upper & (A > 0)).ravel()
    neg = (upper & (A <= 0)).ravel()
    s = eqx.error_if(
        s,
        ~(jnp.any(pos) & jnp.any(neg)),
        "`A` must hold both an edge and a non-edge among the pairs of `mask` (else no AUC).",
    )
    neg_sorted = jnp.sort(jnp.where(neg, s, jnp.inf))
    below = jnp.searchsorted(neg_sorted, s, side="left")
    at_or_below = jnp.searchsorted(neg_sorted, s, side="right")
    wins = jnp.where(pos, below + 0.5 * (at_or_below - below), 0.0)
    return jnp.sum(wins) / (jnp.sum(pos) * jnp.sum(neg))


def hold_out_pairs(
    key: PRNGKeyArray, A: Float[Array, "n n"], frac: float = 0.1
) -> tuple[Float[Array, "n n"], Bool[Array, "n n"]]:
    """Hide a fraction ``frac`` of the node pairs $i < j$ for link prediction.

    Returns:
        ``(A_train, mask)``: ``A`` with the held-out pairs set to 0 (symmetrically) and the
        symmetric mask of held-out pairs.
    """
    _square("A", A)
    A = check_finite(A, "A")
    frac = check_in_interval(frac, "frac", 0.0, 1.0)
    n = A.shape[0]
    upper = jnp.triu(jr.uniform(key, (n, n)) < frac, k=1)
    mask = upper | upper.T
    return jnp.where(mask, 0.0, A).astype(A.dtype), mask
