r"""Graphon and stochastic-block-model estimation by semi-relaxed Gromov-Wasserstein (srGW).

Given one unlabelled graph $A$ ($n$ nodes) and a number of blocks $K$, fit a $K$-node weighted
template graph $W$ to $A$ through a semi-relaxed coupling $T$ (rows summing to $h = 1/n$,
columns free):

$$(\hat T, \hat W) \in \arg\min_{T \in \mathcal U_n(h),\ W} \sum_{i,j,k,l} (A_{ij} - W_{kl})^2
T_{ik} T_{jl}.$$

For a deterministic $T = Z/n$ this is the least-squares SBM criterion
$n^{-2}\sum_{ij} (A_{ij} - W_{z_i z_j})^2$; srGW relaxes the NP-hard assignment into a quadratic
program over a product of simplices, solved by block-coordinate descent (conditional gradient
with exact line search in $T$, closed form in $W$). The relaxed optimum is essentially
deterministic: greedy rounding costs at most $\max W^2 / n$.

References:
    Dufour, Naepels, Santoro. Network learning with semi-relaxed Gromov-Wasserstein.
    arXiv 2606.02223.
    Vincent-Cuaz, Flamary, Corneli, Vayer, Courty. Semi-relaxed Gromov-Wasserstein divergence
    with applications on graphs. ICLR 2022.
"""

import math
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from jaxgen.core import RESULTS, iterate
from jaxgen.core.checks import check_finite
from jaxgen.core.types import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray
from jaxgen.transport import round_argmax, round_greedy, srgw_barycenter, srgw_objective, w_step

InitMethod = Literal["kmeans", "spectral", "random", "product"]
_INITS = ("kmeans", "spectral", "random", "product")


# ----------------------------------------------------------------------------------------------
# input checks
# ----------------------------------------------------------------------------------------------


def check_adjacency(
    A: ArrayLike, *, name: str = "A", allow_self_loops: bool = False
) -> Float[Array, "n n"]:
    """Validate an undirected (weighted) adjacency matrix and return it as a float array.

    Checks: 2-D and square (``ValueError`` at trace time); finite, symmetric, entries in [0, 1]
    and (unless ``allow_self_loops``) a zero diagonal. For concrete arrays a ``ValueError`` naming
    ``name`` is raised; under `jit`/`vmap` the same conditions go through `eqx.error_if`.
    Boolean and integer inputs are cast to the default float dtype.
    """
    A = jnp.asarray(A)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"`{name}` must be a square (n, n) adjacency matrix, got shape {A.shape}.")
    if A.shape[0] < 2:
        raise ValueError(f"`{name}` must have at least 2 nodes, got {A.shape[0]}.")
    if not jnp.issubdtype(A.dtype, jnp.floating):
        A = A.astype(jnp.result_type(float))
    msgs = (
        f"`{name}` contains NaN or inf entries.",
        f"`{name}` must be symmetric (an undirected graph).",
        f"`{name}` must have entries in [0, 1] (binary or edge probabilities).",
        f"`{name}` has self-loops (non-zero diagonal); pass allow_self_loops=True to allow them.",
    )
    if isinstance(A, jax.core.Tracer):
        A = eqx.error_if(A, ~jnp.all(jnp.isfinite(A)), msgs[0])
        A = eqx.error_if(A, jnp.any(jnp.abs(A - A.T) > 1e-6), msgs[1])
        A = eqx.error_if(A, jnp.any((A < 0) | (A > 1)), msgs[2])
        if not allow_self_loops:
            A = eqx.error_if(A, jnp.any(jnp.diagonal(A) != 0), msgs[3])
        return A
    a = np.asarray(A)
    if not np.all(np.isfinite(a)):
        raise ValueError(msgs[0])
    if np.any(np.abs(a - a.T) > 1e-6):
        raise ValueError(msgs[1])
    if np.any((a < 0) | (a > 1)):
        raise ValueError(msgs[2])
    if not allow_self_loops and np.any(np.diagonal(a) != 0):
        raise ValueError(msgs[3])
    return A


def _check_k(K: int, n: int) -> None:
    if not isinstance(K, int | np.integer) or isinstance(K, bool):
        raise TypeError(f"`K` must be a Python int, got {type(K).__name__}.")
    if not 1 <= K <= n:
        raise ValueError(f"`K` must satisfy 1 <= K <= n = {n}, got K = {K}.")


# ----------------------------------------------------------------------------------------------
# initialisations
# ----------------------------------------------------------------------------------------------


def _sqdist(X: Array, C: Array) -> Array:
    return jnp.sum(X * X, 1)[:, None] - 2.0 * X @ C.T + jnp.sum(C * C, 1)[None, :]


def kmeans(
    key: PRNGKeyArray, X: Float[Array, "n dim"], K: int, *, max_steps: int = 100
) -> Int[Array, " n"]:
    r"""Lloyd's k-means with greedy k-means++ seeding, in one `lax.while_loop` (labels (n,)).

    Greedy seeding draws $2 + \lfloor\log K\rfloor$ $D^2$-candidates per centre and keeps the one
    that lowers the potential most (as scikit-learn's `KMeans` does).

    Empty clusters keep their previous centre. Stops when no label changes or after
    ``max_steps`` iterations.

    References:
        Arthur, Vassilvitskii. k-means++: the advantages of careful seeding. SODA 2007.
    """
    if X.ndim != 2 or not 1 <= K <= X.shape[0]:
        raise ValueError(f"`X` must be (n, dim) with n >= K = {K}, got shape {X.shape}.")
    X = check_finite(X, "X")
    n = X.shape[0]
    num_trials = 2 + int(math.log(K))  # greedy k-means++ (scikit-learn's default seeding)
    key_first, key_u = jr.split(key)
    first = jr.randint(key_first, (), 0, n)
    # all random numbers drawn up front: D^2 sampling by inverting the cumulative weights
    us = jr.uniform(key_u, (K, num_trials), dtype=X.dtype)
    C = jnp.zeros((K, X.shape[1]), X.dtype).at[0].set(X[first])
    d2 = jnp.clip(_sqdist(X, X[first][None, :])[:, 0], 0.0)

    def seed(k: Array, carry: tuple[Array, Array]) -> tuple[Array, Array]:
        C, d2 = carry
        cum = jnp.cumsum(d2)
        cand = jnp.where(
            cum[-1] > 0,
            jnp.searchsorted(cum, us[k] * cum[-1], side="right"),
            jnp.floor(us[k] * n).astype(jnp.int32),
        )
        cand = jnp.clip(cand, 0, n - 1)
        d2_cand = jnp.minimum(d2[:, None], jnp.clip(_sqdist(X, X[cand]), 0.0))  # (n, trials)
        best = jnp.argmin(jnp.sum(d2_cand, axis=0))
        C = C.at[k].set(X[cand[best]])
        return C, d2_cand[:, best]

    C, _ = jax.lax.fori_loop(1, K, seed, (C, d2))

    def step(state: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
        C, labels, _ = state
        new = jnp.argmin(_sqdist(X, C), axis=1)
        Z = jax.nn.one_hot(new, K, dtype=X.dtype)
        counts = jnp.sum(Z, 0)
        means = (Z.T @ X) / jnp.where(counts > 0, counts, 1.0)[:, None]
        C = jnp.where((counts > 0)[:, None], means, C)
        return C, new, jnp.any(new != labels)

    labels0 = jnp.argmin(_sqdist(X, C), axis=1)
    out = iterate(
        step,
        (C, labels0, jnp.array(True)),
        converged_fn=lambda s: ~s[2],
        max_steps=max_steps,
        throw=False,
    )
    return out.state[1]


def init_coupling(
    key: PRNGKeyArray, A: Float[Array, "n n"], K: int, method: InitMethod
) -> tuple[Float[Array, "n K"], Float[Array, "K K"]]:
    r"""A starting coupling $T^0$ (rows summing to $1/n$) and structure $W^0$.

    - ``"kmeans"``: k-means (k-means++ seeding) on the rows of $A$; $T^0 = Z/n$.
    - ``"spectral"``: k-means on the $K$ leading eigenvectors of $A$ (by $|\lambda|$), scaled
      by $|\lambda|$.
    - ``"random"``: Dirichlet(1) rows divided by $n$.
    - ``"product"``: $T^0 = 1 1^\top / (nK)$, a saddle point, so $W^0$ gets symmetric
      Uniform(-0.01, 0.01) noise (as POT does).

    $W^0$ is `w_step`$(A, T^0, 0)$ (plus the noise for ``"product"``).
    """
    n = A.shape[0]
    dtype = A.dtype
    key_init, key_noise = jr.split(key)
    if method == "kmeans":
        T = jax.nn.one_hot(kmeans(key_init, A, K), K, dtype=dtype) / n
    elif method == "spectral":
        evals, evecs = jnp.linalg.eigh(A)
        top = jnp.argsort(-jnp.abs(evals))[:K]
        X = evecs[:, top] * jnp.abs(evals[top])[None, :]
        T = jax.nn.one_hot(kmeans(key_init, X, K), K, dtype=dtype) / n
    elif method == "random":
        T = jr.dirichlet(key_init, jnp.ones(K, dtype=dtype), (n,)) / n
    elif method == "product":
        T = jnp.full((n, K), 1.0 / (n * K), dtype=dtype)
    else:
        raise ValueError(f"`init` must be one of {_INITS}, got {method!r}.")
    W = w_step(A, T, jnp.zeros((K, K), dtype=dtype))
    if method == "product":
        noise = jr.uniform(key_noise, (K, K), dtype=dtype, minval=-0.01, maxval=0.01)
        W = W + 0.5 * (noise + noise.T)
    return T, W


# ----------------------------------------------------------------------------------------------
# the estimator
# ----------------------------------------------------------------------------------------------


class GraphonEstimate(eqx.Module):
    r"""A fitted srGW block model of one graph.

    Attributes:
        labels: block of each node after rounding (n,).
        block_matrix: $\hat W$ (K, K), the W-step on the rounded assignment (entries of empty
            blocks keep the relaxed value; no node uses them).
        block_sizes: number of nodes per block (K,); zeros mark empty blocks.
        coupling: the relaxed coupling $\hat T$ (n, K) of the best start.
        relaxed_block_matrix: $W$ optimal for $\hat T$ (K, K).
        objective: relaxed $F(\hat T, W)$.
        rounded_objective: $F(Z/n, \hat W) = n^{-2}\sum_{ij} (A_{ij} - \hat W_{z_i z_j})^2$.
        rounding_gap: ``rounded_objective - objective`` (the relaxed-versus-rounded gap; $\le 1/n$
            for greedy rounding up to the final W-step, which only lowers it).
        frac_deterministic: fraction of rows of $\hat T$ that are one-hot (to 1e-6 of $h_i$).
        start_objectives: relaxed objective of every start (num_starts,).
        num_steps: outer iterations of the best start.
        result: its `jaxgen.core.RESULTS` flag.
    """

    labels: Int[Array, " n"]
    block_matrix: Float[Array, "K K"]
    block_sizes: Int[Array, " K"]
    coupling: Float[Array, "n K"]
    relaxed_block_matrix: Float[Array, "K K"]
    objective: Float[Array, ""]
    rounded_objective: Float[Array, ""]
    rounding_gap: Float[Array, ""]
    frac_deterministic: Float[Array, ""]
    start_objectives: Float[Array, " S"]
    num_steps: Int[Array, ""]
    result: RESULTS

    @property
    def converged(self) -> Bool[Array, ""]:
        """Whether the best start met its tolerance."""
        return self.result == RESULTS.successful

    @property
    def num_blocks(self) -> Int[Array, ""]:
        """Number of non-empty blocks after rounding."""
        return jnp.sum(self.block_sizes > 0)

    @property
    def block_proportions(self) -> Float[Array, " K"]:
        r"""$\hat q_k$ = fraction of nodes in block $k$ (K,)."""
        return self.block_sizes / jnp.sum(self.block_sizes)

    def edge_probabilities(self) -> Float[Array, "n n"]:
        r"""$\hat P_{ij} = \hat W_{z_i z_j}$ (n, n), diagonal included."""
        return self.block_matrix[self.labels][:, self.labels]


def _fit_one(
    A: Array, K: int, key: PRNGKeyArray, init: str, max_steps: int, max_inner_steps: int, tol: float
) -> tuple[Array, Array, Array, Array, RESULTS]:
    T0, W0 = init_coupling(key, A, K, init)  # type: ignore[arg-type]
    out = srgw_barycenter(
        A, T0, W0, max_steps=max_steps, max_inner_steps=max_inner_steps, tol=tol, throw=False
    )
    return out.coupling, out.structure, out.objective, out.num_steps, out.result


@eqx.filter_jit
def _estimate(
    A: Array,
    K: int,
    keys: Array,
    init: str,
    max_steps: int,
    max_inner_steps: int,
    tol: float,
    rounding: str,
) -> GraphonEstimate:
    n = A.shape[0]
    Ts, Ws, Fs, steps, results = jax.vmap(
        lambda k: _fit_one(A, K, k, init, max_steps, max_inner_steps, tol)
    )(keys)
    best = jnp.argmin(jnp.where(jnp.isfinite(Fs), Fs, jnp.inf))
    T, W, F = Ts[best], Ws[best], Fs[best]
    result = jax.tree_util.tree_map(lambda x: x[best], results)
    h = jnp.full((n,), 1.0 / n, dtype=A.dtype)
    z = round_greedy(A, T, W) if rounding == "greedy" else round_argmax(T)
    Z = jax.nn.one_hot(z, K, dtype=A.dtype) * h[:, None]
    W_det = w_step(A, Z, W)
    P = W_det[z][:, z]
    F_round = jnp.sum((A - P) ** 2) / n**2
    sizes = jnp.sum(jax.nn.one_hot(z, K, dtype=jnp.int32), axis=0)
    frac_det = jnp.mean(jnp.max(T, axis=1) >= (1.0 - 1e-6) * h)
    return GraphonEstimate(
        labels=z,
        block_matrix=W_det,
        block_sizes=sizes,
        coupling=T,
        relaxed_block_matrix=W,
        objective=F,
        rounded_objective=F_round,
        rounding_gap=F_round - F,
        frac_deterministic=frac_det.astype(A.dtype),
        start_objectives=Fs,
        num_steps=steps[best],
        result=result,
    )


def estimate_graphon(
    key: PRNGKeyArray,
    A: ArrayLike,
    K: int,
    *,
    init: InitMethod = "kmeans",
    num_starts: int = 1,
    max_steps: int = 1000,
    max_inner_steps: int = 1000,
    tol: float = 1e-6,
    rounding: Literal["argmax", "greedy"] = "argmax",
    allow_self_loops: bool = False,
    throw: bool = True,
) -> GraphonEstimate:
    r"""Estimate a $K$-block model (SBM, or a step-function graphon) of one graph by srGW.

    Each start draws $T^0$ by ``init`` (default k-means on the rows of $A$, as the authors do),
    then alternates the conditional-gradient T-solve (exact line search, warm-started) and the
    closed-form W-step until $\|W - W_{prev}\|_F \le$ ``tol`` or the relative decrease of $F$ is
    $\le$ ``tol`` (`jaxgen.transport.srgw_barycenter`). The ``num_starts`` starts run in one
    vmapped call; the one with the smallest relaxed objective is kept, rounded (``"argmax"`` or
    the guaranteed ``"greedy"``), and $\hat W$ is refitted on the rounded assignment.

    For smooth graphons the authors take $K = \lfloor\sqrt n\rfloor$; for SBMs the true $K$.
    Shapes stay fixed under `jit` (empty blocks are kept, with ``block_sizes == 0``), so the
    function can be vmapped over graphs of equal size.

    Args:
        A: symmetric adjacency (n, n), binary or in [0, 1], zero diagonal.
        K: number of blocks, ``1 <= K <= n`` (static).
        key: PRNG key (split over the starts).
        init: ``"kmeans"``, ``"spectral"``, ``"random"`` or ``"product"``.
        num_starts: independent starts (vmapped).
        max_steps: outer (block-coordinate) iterations; ``max_inner_steps`` bounds each T-solve.
        tol: tolerance of both loops.
        rounding: ``"argmax"`` ($z_i = \arg\max_k T_{ik}$) or ``"greedy"``.
        allow_self_loops: accept a non-zero diagonal.
        throw: raise when the best start did not converge or produced a non-finite value.

    Returns:
        `GraphonEstimate` (``labels``, ``block_matrix``, ``block_sizes``, ``coupling``,
        ``edge_probabilities()``, ``objective``, ``rounding_gap``, ``converged``).

    Examples:
        >>> import jax.random as jr
        >>> from jaxgen.graphs import estimate_graphon, sample_sbm
        >>> A, P, z = sample_sbm(jr.key(0), 60, jnp.array([[.9, .1], [.1, .9]]), jnp.array([.5,
        .5]))
        >>> est = estimate_graphon(jr.key(1), A, 2)
        >>> est.edge_probabilities().shape
        (60, 60)

    References:
        Dufour, Naepels, Santoro. Network learning with semi-relaxed Gromov-Wasserstein.
        arXiv 2606.02223.
    """
    A = check_adjacency(A, allow_self_loops=allow_self_loops)
    n = A.shape[0]
    _check_k(K, n)
    K = int(K)
    if init not in _INITS:
        raise ValueError(f"`init` must be one of {_INITS}, got {init!r}.")
    if rounding not in ("argmax", "greedy"):
        raise ValueError(f"`rounding` must be 'argmax' or 'greedy', got {rounding!r}.")
    if not isinstance(num_starts, int) or isinstance(num_starts, bool) or num_starts < 1:
        raise ValueError(f"`num_starts` must be a Python int >= 1, got {num_starts!r}.")
    for name, value in (("max_steps", max_steps), ("max_inner_steps", max_inner_steps)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"`{name}` must be a Python int >= 1, got {value!r}.")
    if not (isinstance(tol, int | float) and tol >= 0):
        raise ValueError(f"`tol` must be a float >= 0, got {tol!r}.")
    keys = jr.split(key, num_starts)
    est = _estimate(A, K, keys, init, max_steps, max_inner_steps, float(tol), rounding)
    if throw:
        est = est.result.error_if(est, est.result != RESULTS.successful)
    return est


def objective_of_labels(
    A: Float[Array, "n n"], labels: Int[Array, " n"], K: int
) -> tuple[Float[Array, ""], Float[Array, "K K"]]:
    r"""Least-squares SBM fit of fixed labels: $(F(Z/n, \hat W), \hat W)$ with $\hat W$ the
    block means ($0$ for empty blocks).
    """
    n = A.shape[0]
    Z = jax.nn.one_hot(labels, K, dtype=A.dtype) / n
    W = w_step(A, Z, jnp.zeros((K, K), dtype=A.dtype))
    return srgw_objective(A, Z, W), W
