r"""Semi-relaxed Gromov-Wasserstein (srGW) with the square loss, solved by conditional gradient.

Problem. Given a structure matrix $A \in \mathbb{R}^{n \times n}$ with node weights $h$ (the fixed
row marginal) and a target structure $W \in \mathbb{R}^{K \times K}$, the srGW objective of a
coupling $T \in \mathcal{U}_n(h) = \{T \ge 0,\ T 1_K = h\}$ is

$$F(T, W) = \sum_{i,j,k,l} (A_{ij} - W_{kl})^2 T_{ik} T_{jl}
          = p^\top (A \circ A) p + q^\top (W \circ W) q - 2 \langle A T W^\top, T \rangle,$$

with $p = T 1_K$ and $q = T^\top 1_n$ (the free column marginal). The column marginal is not
constrained, so the linear minimisation oracle over $\mathcal{U}_n(h)$ splits into rows, and $F$
restricted to a segment is a quadratic whose minimiser is exact (no Armijo search).

The srGW *barycenter* of one graph alternates the conditional-gradient solve in $T$ with the
closed-form minimiser in $W$: $W_{kl} = (T^\top A T)_{kl} / (q_k q_l)$.

References:
    Vincent-Cuaz, Flamary, Corneli, Vayer, Courty. Semi-relaxed Gromov-Wasserstein divergence
    with applications on graphs. ICLR 2022 (arXiv 2110.02753).
    Dufour, Naepels, Santoro. Network learning with semi-relaxed Gromov-Wasserstein.
    arXiv 2606.02223.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from jaxgen.core import RESULTS, iterate, sharded_vmap
from jaxgen.core.checks import check_finite, check_nonnegative
from jaxgen.core.types import Array, Bool, Float, Int


def _check_pair(A: Array, T: Array, W: Array | None = None) -> None:
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"`A` must be a square (n, n) matrix, got shape {A.shape}.")
    if T.ndim != 2 or T.shape[0] != A.shape[0]:
        raise ValueError(f"`T` must have shape (n, K) = ({A.shape[0]}, K), got {T.shape}.")
    if W is not None and W.shape != (T.shape[1], T.shape[1]):
        raise ValueError(
            f"`W` must have shape (K, K) = ({T.shape[1]}, {T.shape[1]}), got {W.shape}."
        )


def _cross(A: Array, T: Array, W: Array) -> Array:
    r"""$\langle A T W^\top, T\rangle = \sum_{ijkl} A_{ij} W_{kl} T_{ik} T_{jl}$."""
    return jnp.sum((A @ T @ W.T) * T)


def srgw_objective(
    A: Float[Array, "n n"], T: Float[Array, "n K"], W: Float[Array, "K K"]
) -> Float[Array, ""]:
    r"""The srGW square-loss objective $F(T, W) = \sum_{ijkl} (A_{ij} - W_{kl})^2 T_{ik} T_{jl}$.

    Computed in matrix form, $p^\top (A\circ A) p + q^\top (W\circ W) q - 2\langle A T W^\top,
    T\rangle$ with $p = T 1$, $q = T^\top 1$, in $O(n^2 K)$ (the $n^2 K^2$ tensor is never formed).
    $A$ and $W$ need not be symmetric. For a deterministic $T = Z/n$ this is
    $n^{-2}\sum_{ij}(A_{ij} - W_{z_i z_j})^2$, the least-squares SBM criterion.

    Returns:
        The scalar $F$ (it can be slightly negative in float32 through cancellation).

    References:
        Vincent-Cuaz et al., ICLR 2022, eq. (3); Peyré, Cuturi, Solomon, ICML 2016, Prop. 1.
    """
    _check_pair(A, T, W)
    p, q = jnp.sum(T, axis=1), jnp.sum(T, axis=0)
    return p @ (A * A) @ p + q @ (W * W) @ q - 2.0 * _cross(A, T, W)


def srgw_grad_T(
    A: Float[Array, "n n"], T: Float[Array, "n K"], W: Float[Array, "K K"]
) -> Float[Array, "n K"]:
    r"""Gradient of `srgw_objective` in $T$ (as a function on all of $\mathbb{R}^{n\times K}$).

    $\nabla_T F = (A_2 + A_2^\top) p\, 1_K^\top + 1_n ((W_2 + W_2^\top) q)^\top
    - 2 (A T W^\top + A^\top T W)$ with $A_2 = A\circ A$, $W_2 = W\circ W$. For symmetric $A, W$
    this is $2 A_2 p 1^\top + 2\cdot 1 (W_2 q)^\top - 4 A T W$. The first term is constant along
    each row, so it does not change the linear minimisation over $\mathcal{U}_n(h)$.
    """
    _check_pair(A, T, W)
    p, q = jnp.sum(T, axis=1), jnp.sum(T, axis=0)
    A2, W2 = A * A, W * W
    row = (A2 + A2.T) @ p
    col = (W2 + W2.T) @ q
    return row[:, None] + col[None, :] - 2.0 * (A @ T @ W.T + A.T @ T @ W)


def lmo_rows(G: Float[Array, "n K"], h: Float[Array, " n"]) -> Float[Array, "n K"]:
    r"""Linear minimisation oracle over $\{S \ge 0, S 1 = h\}$: $S_i = h_i e_{k^*(i)}$.

    $k^*(i) = \arg\min_k G_{ik}$, ties broken by the lowest index (POT splits tied mass evenly).
    ``G`` must be finite (a NaN would be ignored by the argmin) and ``h`` non-negative (value
    checks; the solvers call the unchecked core inside their loops).
    """
    if G.ndim != 2 or h.shape != (G.shape[0],):
        raise ValueError(f"`G` (n, K) and `h` (n,) expected, got {G.shape} and {h.shape}.")
    return _lmo_rows(check_finite(G, "G"), check_nonnegative(h, "h"))


def _lmo_rows(G: Array, h: Array) -> Array:
    return jax.nn.one_hot(jnp.argmin(G, axis=1), G.shape[1], dtype=G.dtype) * h[:, None]


def _quad_step(a: Array, b: Array) -> Array:
    """Argmin over [0, 1] of b x + a x^2 (exact, convex or not)."""
    safe = jnp.where(a > 0, a, 1.0)
    convex = jnp.clip(-b / (2.0 * safe), 0.0, 1.0)
    return jnp.where(a > 0, convex, jnp.where(a + b < 0, 1.0, 0.0)).astype(b.dtype)


def exact_line_search(
    A: Float[Array, "n n"],
    T: Float[Array, "n K"],
    W: Float[Array, "K K"],
    D: Float[Array, "n K"],
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    r"""Exact minimiser of $\gamma \mapsto F(T + \gamma D, W)$ on $[0, 1]$ for a direction $D$ with
    zero row sums.

    $F(T + \gamma D) = F(T) + b\gamma + a\gamma^2$ with $d_q = D^\top 1$,
    $a = d_q^\top W_2 d_q - 2\langle A D W^\top, D\rangle$ and
    $b = q^\top (W_2 + W_2^\top) d_q - 2(\langle A T W^\top, D\rangle + \langle A D W^\top,
    T\rangle)
    = \langle \nabla_T F, D\rangle$. If $a > 0$, $\gamma^* = \mathrm{clip}(-b/2a, 0, 1)$; otherwise
    $\gamma^* = 1$ when $a + b < 0$ and $0$ else (POT's `solve_1d_linesearch_quad`).

    Returns:
        ``(gamma, F_new)``: the step and $F(T + \gamma D, W)$.

    References:
        Vincent-Cuaz et al., ICLR 2022, Algorithm 1 and its line search (POT
        `solve_semirelaxed_gromov_linesearch`).
    """
    _check_pair(A, T, W)
    if D.shape != T.shape:
        raise ValueError(f"`D` must have the shape of `T` {T.shape}, got {D.shape}.")
    q, dq = jnp.sum(T, axis=0), jnp.sum(D, axis=0)
    W2 = W * W
    a = dq @ W2 @ dq - 2.0 * _cross(A, D, W)
    b = q @ (W2 + W2.T) @ dq - 2.0 * (jnp.sum((A @ T @ W.T) * D) + jnp.sum((A @ D @ W.T) * T))
    gamma = _quad_step(a, b)
    return gamma, srgw_objective(A, T, W) + b * gamma + a * gamma**2


class SrgwOutput(NamedTuple):
    r"""Result of `solve_srgw_coupling`.

    Attributes:
        coupling: the coupling $T$ (n, K), rows summing to $h$.
        objective: $F(T, W)$, recomputed from scratch at the end.
        fw_gap: the Frank-Wolfe gap $\langle \nabla F, T - S\rangle \ge 0$ at the returned $T$.
        num_steps: conditional-gradient steps taken.
        result: a `jaxgen.core.RESULTS` flag.
    """

    coupling: Float[Array, "n K"]
    objective: Float[Array, ""]
    fw_gap: Float[Array, ""]
    num_steps: Int[Array, ""]
    result: RESULTS


def _big(x: Array) -> Array:
    """A finite sentinel ("no previous value"): `iterate` stops on non-finite states."""
    return jnp.full_like(x, jnp.finfo(x.dtype).max / 4)


class _CGState(NamedTuple):
    T: Array
    AT: Array  # A @ T, kept up to date incrementally (one n x n x K product per step)
    AtT: Array  # A.T @ T (the same array as AT when symmetric)
    F: Array
    F_prev: Array
    G: Array  # gradient at T, without the row-constant term
    gap: Array


def _grad_parts(AT: Array, AtT: Array, T: Array, W: Array) -> Array:
    q = jnp.sum(T, axis=0)
    W2 = W * W
    return ((W2 + W2.T) @ q)[None, :] - 2.0 * (AT @ W.T + AtT @ W)


def _cg_state(A: Array, T: Array, W: Array, h: Array, symmetric: bool) -> _CGState:
    AT = A @ T
    AtT = AT if symmetric else A.T @ T
    q = jnp.sum(T, axis=0)
    F = h @ (A * A) @ h + q @ (W * W) @ q - 2.0 * jnp.sum((AT @ W.T) * T)
    G = _grad_parts(AT, AtT, T, W)
    S = _lmo_rows(G, h)
    gap = jnp.sum(G * (T - S))
    return _CGState(T, AT, AtT, F, _big(F), G, gap)


def _cg_step(state: _CGState, A: Array, W: Array, h: Array, symmetric: bool) -> _CGState:
    T, AT, AtT, F, _, G, _ = state
    S = _lmo_rows(G, h)
    D = S - T
    AD = A @ D
    AtD = AD if symmetric else A.T @ D
    q, dq = jnp.sum(T, axis=0), jnp.sum(D, axis=0)
    W2 = W * W
    a = dq @ W2 @ dq - 2.0 * jnp.sum((AD @ W.T) * D)
    b = jnp.sum(G * D)  # = <grad F, D>: the row-constant part vanishes since D 1 = 0
    del q
    gamma = _quad_step(a, b)
    T = T + gamma * D
    AT = AT + gamma * AD
    AtT = AT if symmetric else AtT + gamma * AtD
    F_new = F + b * gamma + a * gamma**2
    G = _grad_parts(AT, AtT, T, W)
    gap = jnp.sum(G * (T - _lmo_rows(G, h)))
    return _CGState(T, AT, AtT, F_new, F, G, gap)


def _cg_converged(state: _CGState, tol: float) -> Bool[Array, ""]:
    scale = jnp.maximum(jnp.abs(state.F), jnp.finfo(state.F.dtype).tiny)
    small_gap = state.gap <= tol * scale
    small_decrease = jnp.abs(state.F_prev - state.F) <= tol * scale
    return small_gap | small_decrease


def _solve_coupling(
    A: Array, W: Array, T0: Array, *, max_steps: int, tol: float, symmetric: bool, throw: bool
) -> tuple[_CGState, Array, RESULTS]:
    h = jnp.sum(T0, axis=1)
    state = _cg_state(A, T0, W, h, symmetric)
    out = iterate(
        lambda s: _cg_step(s, A, W, h, symmetric),
        state,
        converged_fn=lambda s: _cg_converged(s, tol),
        max_steps=max_steps,
        throw=throw,
    )
    return out.state, out.num_steps, out.result


def _check_solver_args(max_steps: int, tol: float) -> None:
    if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
        raise ValueError(f"`max_steps` must be a Python int >= 1, got {max_steps!r}.")
    if not (isinstance(tol, int | float) and tol >= 0):
        raise ValueError(f"`tol` must be a float >= 0, got {tol!r}.")


def solve_srgw_coupling(
    A: Float[Array, "n n"],
    W: Float[Array, "K K"],
    T0: Float[Array, "n K"],
    *,
    max_steps: int = 1000,
    tol: float = 1e-9,
    symmetric: bool = True,
    throw: bool = True,
) -> SrgwOutput:
    r"""Minimise $F(\cdot, W)$ over $\mathcal{U}_n(h)$, $h = T_0 1$, by conditional gradient.

    Each step: gradient $G$, row-wise LMO $S$, exact line search along $D = S - T$, and
    $T \leftarrow T + \gamma^* D$. $A T$ is updated incrementally ($A T \mathrel{+}= \gamma A D$),
    so a
    step costs one $n \times n \times K$ product. The loop is a bounded `lax.while_loop` that stops
    when the Frank-Wolfe gap or the decrease of $F$ falls below ``tol`` times $|F|$. The same
    iterates as POT's `ot.gromov.semirelaxed_gromov_wasserstein(A, W, h, G0=T0)` (ties aside).

    Args:
        A: source structure (n, n).
        W: target structure (K, K), held fixed.
        T0: feasible starting coupling (n, K); its row sums define $h$.
        max_steps: the most conditional-gradient steps.
        tol: relative tolerance on the FW gap and on the decrease of $F$.
        symmetric: whether $A$ and $W$ are symmetric (saves one product per step). With
            ``False`` the general (directed) gradient is used.
        throw: raise when ``max_steps`` is reached or a value is non-finite.

    Returns:
        `SrgwOutput`.

    Raises:
        ValueError: for mismatched shapes; as value checks, for a non-finite ``A`` or ``W`` or
            a ``T0`` with a negative or non-finite entry (not a coupling).

    References:
        Vincent-Cuaz et al., ICLR 2022, Algorithm 1.
    """
    _check_pair(A, T0, W)
    _check_solver_args(max_steps, tol)
    A, W = check_finite(A, "A"), check_finite(W, "W")
    T0 = check_nonnegative(T0, "T0")
    return _solve_output(A, W, T0, max_steps=max_steps, tol=tol, symmetric=symmetric, throw=throw)


def _solve_output(A: Array, W: Array, T0: Array, **options) -> SrgwOutput:
    """`SrgwOutput` of one checked problem (shared by the single and batched entry points)."""
    state, num_steps, result = _solve_coupling(A, W, T0, **options)
    return SrgwOutput(state.T, srgw_objective(A, state.T, W), state.gap, num_steps, result)


def solve_srgw_couplings(
    A: Float[Array, "B n n"],
    W: Float[Array, "B K K"],
    T0: Float[Array, "B n K"],
    *,
    max_steps: int = 1000,
    tol: float = 1e-9,
    symmetric: bool = True,
    throw: bool = True,
    mesh: Mesh | None = None,
) -> SrgwOutput:
    r"""`solve_srgw_coupling` over a batch of ``B`` graphs, optionally across a device mesh.

    Args:
        A, W, T0: stacked problems, shapes ``(B, n, n)``, ``(B, K, K)`` and ``(B, n, K)``.
        max_steps, tol, symmetric, throw: as in `solve_srgw_coupling`.
        mesh: split the batch over this mesh's devices (`jaxgen.core.sharded_vmap`; ``B`` a
            multiple of ``mesh.size``); each graph's solve is the one-device solve.

    Returns:
        `SrgwOutput` whose fields carry a leading batch axis.
    """
    A, W, T0 = jnp.asarray(A), jnp.asarray(W), jnp.asarray(T0)
    if A.ndim != 3 or W.ndim != 3 or T0.ndim != 3:
        raise ValueError(
            "`A`, `W`, `T0` must be stacked (B, n, n), (B, K, K), (B, n, K) arrays, got "
            f"{A.shape}, {W.shape}, {T0.shape}."
        )
    if not A.shape[0] == W.shape[0] == T0.shape[0]:
        raise ValueError(
            f"`A`, `W`, `T0` must share their batch size, got {A.shape[0]}, {W.shape[0]}, "
            f"{T0.shape[0]}."
        )
    _check_pair(A[0], T0[0], W[0])
    _check_solver_args(max_steps, tol)
    A, W = check_finite(A, "A"), check_finite(W, "W")
    T0 = check_nonnegative(T0, "T0")

    options = dict(max_steps=max_steps, tol=tol, symmetric=symmetric, throw=throw)
    one = functools.partial(_solve_output, **options)
    return sharded_vmap(one, mesh)(A, W, T0)


def w_step(
    A: Float[Array, "n n"], T: Float[Array, "n K"], W_prev: Float[Array, "K K"]
) -> Float[Array, "K K"]:
    r"""Closed-form minimiser of $F(T, \cdot)$: $W_{kl} = (T^\top A T)_{kl} / (q_k q_l)$.

    $\partial F/\partial W_{kl} = 2 W_{kl} q_k q_l - 2 (T^\top A T)_{kl}$ vanishes there. Entries of
    empty columns ($q_k q_l = 0$) keep their ``W_prev`` value (no division by zero inside `jit`).
    When $A \in [0, 1]^{n\times n}$, so is $W$. ``A`` and ``W_prev`` must be finite and ``T``
    non-negative (value checks; the barycenter loop calls the unchecked core).
    """
    _check_pair(A, T, W_prev)
    A, W_prev = check_finite(A, "A"), check_finite(W_prev, "W_prev")
    return _w_step(A, check_nonnegative(T, "T"), W_prev)


def _w_step(A: Array, T: Array, W_prev: Array) -> Array:
    q = jnp.sum(T, axis=0)
    qq = q[:, None] * q[None, :]
    ok = qq > 0
    return jnp.where(ok, (T.T @ A @ T) / jnp.where(ok, qq, 1.0), W_prev)


class SrgwBarycenterOutput(NamedTuple):
    """Result of `srgw_barycenter`.

    Attributes:
        coupling: $T$ (n, K).
        structure: $W$ (K, K), optimal for $T$.
        objective: $F(T, W)$ (recomputed from scratch).
        num_steps: outer (block-coordinate) iterations.
        num_inner_steps: total conditional-gradient steps.
        result: a `jaxgen.core.RESULTS` flag (of the outer loop).
    """

    coupling: Float[Array, "n K"]
    structure: Float[Array, "K K"]
    objective: Float[Array, ""]
    num_steps: Int[Array, ""]
    num_inner_steps: Int[Array, ""]
    result: RESULTS


class _BCState(NamedTuple):
    T: Array
    W: Array
    F: Array
    F_prev: Array
    dW: Array
    inner: Array


def srgw_barycenter(
    A: Float[Array, "n n"],
    T0: Float[Array, "n K"],
    W0: Float[Array, "K K"] | None = None,
    *,
    max_steps: int = 1000,
    max_inner_steps: int = 1000,
    tol: float = 1e-6,
    inner_tol: float | None = None,
    symmetric: bool = True,
    throw: bool = True,
) -> SrgwBarycenterOutput:
    r"""SrGW barycenter of one graph with $K$ atoms by block-coordinate descent.

    Alternates $T \leftarrow$ `solve_srgw_coupling`$(A, W, T)$ (warm-started) and
    $W \leftarrow$ `w_step`$(A, T, W)$. $F$ never increases. Stops when
    $\|W - W_{prev}\|_F \le$ ``tol`` or the relative decrease of $F$ is $\le$ ``tol``. Equivalent to
    POT's `ot.gromov.semirelaxed_gromov_barycenters(N=K, Cs=[A], ps=[h], warmstartT=True)`.

    Args:
        A: the structure (n, n).
        T0: starting coupling (n, K); its row sums are the fixed marginal $h$.
        W0: starting structure; default `w_step`$(A, T_0, 0)$.
        max_steps: the most outer iterations; ``max_inner_steps`` bounds each T-solve.
        tol: outer tolerance; ``inner_tol`` (default ``tol``) is the T-solve's.
        symmetric: whether $A$ (and hence $W$) is symmetric.
        throw: raise when the outer loop hits ``max_steps`` or a value is non-finite.

    Returns:
        `SrgwBarycenterOutput`.

    References:
        Dufour, Naepels, Santoro, arXiv 2606.02223 (Algorithm 1); Vincent-Cuaz et al., ICLR 2022.
    """
    K = T0.shape[1] if T0.ndim == 2 else -1
    if W0 is None:
        _check_pair(A, T0)
        A, T0 = check_finite(A, "A"), check_nonnegative(T0, "T0")
        W0 = w_step(A, T0, jnp.zeros((K, K), dtype=A.dtype))
    _check_pair(A, T0, W0)
    _check_solver_args(max_steps, tol)
    _check_solver_args(max_inner_steps, tol if inner_tol is None else inner_tol)
    itol = tol if inner_tol is None else inner_tol

    def step(s: _BCState) -> _BCState:
        cg, n_in, _ = _solve_coupling(
            A, s.W, s.T, max_steps=max_inner_steps, tol=itol, symmetric=symmetric, throw=False
        )
        W = _w_step(A, cg.T, s.W)
        F = srgw_objective(A, cg.T, W)
        return _BCState(cg.T, W, F, s.F, jnp.sqrt(jnp.sum((W - s.W) ** 2)), s.inner + n_in)

    def converged(s: _BCState) -> Bool[Array, ""]:
        scale = jnp.maximum(jnp.abs(s.F), jnp.finfo(s.F.dtype).tiny)
        return (s.dW <= tol) | (jnp.abs(s.F_prev - s.F) <= tol * scale)

    F0 = srgw_objective(A, T0, W0)
    init = _BCState(T0, W0, F0, _big(F0), _big(F0), jnp.array(0))
    out = iterate(step, init, converged_fn=converged, max_steps=max_steps, throw=throw)
    s = out.state
    return SrgwBarycenterOutput(
        s.T, s.W, srgw_objective(A, s.T, s.W), out.num_steps, s.inner, out.result
    )


def round_argmax(T: Float[Array, "n K"]) -> Int[Array, " n"]:
    r"""Deterministic labels $z_i = \arg\max_k T_{ik}$ (the authors' rounding)."""
    if T.ndim != 2:
        raise ValueError(f"`T` must be (n, K), got shape {T.shape}.")
    return jnp.argmax(check_nonnegative(T, "T"), axis=1)


def round_greedy(
    A: Float[Array, "n n"], T: Float[Array, "n K"], W: Float[Array, "K K"]
) -> Int[Array, " n"]:
    r"""Greedy sequential rounding with the guarantee $F(T_{round}, W) \le F(T, W) + \max W^2 \cdot
    \sum_i h_i^2$ when $A_{ii} = 0$ (that is $\le F + \max W^2 / n$ for uniform $h$).

    For $i = 1, \dots, n$, row $i$ is replaced by $h_i e_k$ with $k$ minimising the coefficient of
    row $i$ in the off-diagonal part of $F$,
    $c_k = \sum_{j \ne i}\sum_l [(A_{ij} - W_{kl})^2 + (A_{ji} - W_{lk})^2] T_{jl}$.
    The off-diagonal part is linear in each row, so it never increases; the diagonal part is at
    most $\max_{kl}(A_{ii} - W_{kl})^2 \sum_i h_i^2$. Cost $O(n^2 K)$.

    Returns:
        Labels (n,).
    """
    _check_pair(A, T, W)
    A, W, T = check_finite(A, "A"), check_finite(W, "W"), check_nonnegative(T, "T")
    h = jnp.sum(T, axis=1)
    W2 = W * W

    def body(i: Array, carry: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
        T, AT, AtT = carry
        row = T[i]
        # sums over j != i of A_ij T_jl and A_ji T_jl
        a_out = AT[i] - A[i, i] * row
        a_in = AtT[i] - A[i, i] * row
        q_rest = jnp.sum(T, axis=0) - row
        c = (W2 + W2.T) @ q_rest - 2.0 * (W @ a_out + W.T @ a_in)
        new = jax.nn.one_hot(jnp.argmin(c), T.shape[1], dtype=T.dtype) * h[i]
        delta = new - row
        T = T.at[i].set(new)
        # A T changes by A[:, i] delta^T, A^T T by A[i, :]^T delta^T
        AT = AT + A[:, i][:, None] * delta[None, :]
        AtT = AtT + A[i, :][:, None] * delta[None, :]
        return T, AT, AtT

    T, _, _ = jax.lax.fori_loop(0, T.shape[0], body, (T, A @ T, A.T @ T))
    return jnp.argmax(T, axis=1)
