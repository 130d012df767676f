r"""Canonical-form Gaussian messages and the backward filter on a tree.

A message is the unnormalised Gaussian potential

    U(x; c, F, H) = exp(c + F^T x - x^T H x / 2),   H symmetric PSD, possibly singular.

Leaves start from their observation likelihood, messages are pulled back through each edge's
linear-Gaussian proxy (a one-step kernel, or a linear SDE via the backward ODEs or their closed
form) and summed at internal nodes. Nothing here inverts H: only ``I + H Q`` is solved.

References:
    F. van der Meulen, S. Sommer, "Backward Filtering Forward Guiding", JMLR 2025,
    arXiv 2505.18239.
    G. Yang, F. van der Meulen, S. Sommer, "Neural Backward Filtering Forward Guiding",
    arXiv 2601.23030.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jaxtyping import Array, Float

from ...core import solve_ode
from ...core.checks import check_positive, check_rank, check_shape
from ._topology import TreeTopology


class Canonical(NamedTuple):
    """Canonical Gaussian potential ``exp(c + F^T x - x^T H x / 2)`` (leading axes allowed).

    Attributes:
        c: ``(...)`` log-constant.
        F: ``(..., dim)`` information vector.
        H: ``(..., dim, dim)`` precision-like matrix (symmetric PSD, possibly singular).
    """

    c: Float[Array, "*batch"]
    F: Float[Array, "*batch dim"]
    H: Float[Array, "*batch dim dim"]


def _sym(m: Array) -> Array:
    return 0.5 * (m + jnp.swapaxes(m, -1, -2))


def log_potential(msg: Canonical, x: Float[Array, " dim"]) -> Float[Array, ""]:
    """``log U(x; c, F, H) = c + F^T x - x^T H x / 2`` for one message and one state."""
    return msg.c + msg.F @ x - 0.5 * x @ msg.H @ x


def leaf_message(
    y: Float[Array, " m"], C: Float[Array, "m dim"], R: Float[Array, "m m"]
) -> Canonical:
    r"""Message of an observation ``y = C x + eta``, ``eta ~ N(0, R)`` (``R`` positive definite).

    ``H = C^T R^{-1} C``, ``F = C^T R^{-1} y``, ``c = -y^T R^{-1} y / 2 - log det(2 pi R) / 2``.
    """
    y = check_rank(y, 1, "y", layout="(m,)")
    m = y.shape[0]
    C, R = check_shape(C, (m, None), "C"), check_shape(R, (m, m), "R")
    L = jnp.linalg.cholesky(R)
    L = eqx.error_if(L, ~jnp.all(jnp.isfinite(L)), "`R` must be symmetric positive definite.")
    Li_C = jsl.solve_triangular(L, C, lower=True)
    Li_y = jsl.solve_triangular(L, y, lower=True)
    logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(L)))
    c = -0.5 * Li_y @ Li_y - 0.5 * (logdet + y.shape[0] * math.log(2 * math.pi))
    return Canonical(c, Li_C.T @ Li_y, _sym(Li_C.T @ Li_C))


def pullback(
    msg: Canonical,
    Phi: Float[Array, "dim_child dim"],
    beta: Float[Array, " dim_child"],
    Q: Float[Array, "dim_child dim_child"],
) -> Canonical:
    r"""Pull a message back through the kernel ``N(Phi x + beta, Q)``.

    Returns the canonical form of ``x -> \int U(z; c, F, H) N(z; Phi x + beta, Q) dz``:
    with ``M = (I + H Q)^{-1}``, ``Hb = M H``, ``Fb = M F``,
    ``cb = c + F^T Q M F / 2 - log det(I + H Q) / 2``, the result is
    ``H' = Phi^T Hb Phi``, ``F' = Phi^T (Fb - Hb beta)``,
    ``c' = cb + Fb^T beta - beta^T Hb beta / 2``.
    ``Q`` may be singular (``Q = 0`` is the identity map) and so may ``H``.
    """
    Q = check_rank(Q, 2, "Q", layout="(dim_child, dim_child)")
    k = Q.shape[-1]
    Q = check_shape(Q, (k, k), "Q")
    Phi, beta = check_shape(Phi, (k, None), "Phi"), check_shape(beta, (k,), "beta")
    if msg.F.shape != (k,) or msg.H.shape != (k, k):
        raise ValueError(
            f"`msg` must be a message on the child's space (F: ({k},), H: ({k}, {k})), got F: "
            f"{msg.F.shape}, H: {msg.H.shape}."
        )
    eye = jnp.eye(k, dtype=Q.dtype)
    IHQ = eye + msg.H @ Q
    MH_MF = jnp.linalg.solve(IHQ, jnp.concatenate([msg.H, msg.F[:, None]], axis=1))
    Hb, Fb = _sym(MH_MF[:, :k]), MH_MF[:, k]
    _, logdet = jnp.linalg.slogdet(IHQ)
    cb = msg.c + 0.5 * msg.F @ (Q @ Fb) - 0.5 * logdet
    Hp = _sym(Phi.T @ Hb @ Phi)
    Fp = Phi.T @ (Fb - Hb @ beta)
    cp = cb + Fb @ beta - 0.5 * beta @ Hb @ beta
    return Canonical(cp, Fp, Hp)


def fuse(msgs: Canonical) -> Canonical:
    """Fuse (multiply) messages stacked along the leading axis: their parameters add."""
    return Canonical(jnp.sum(msgs.c, 0), jnp.sum(msgs.F, 0), jnp.sum(msgs.H, 0))


def log_evidence(
    root_msg: Canonical,
    x_root: Float[Array, " dim"] | None = None,
    prior: tuple[Float[Array, " dim"], Float[Array, "dim dim"]] | None = None,
) -> Float[Array, ""]:
    """``log p(y | x_root)`` (fixed root) or ``log p(y)`` under a root prior ``N(m, P)``."""
    if (x_root is None) == (prior is None):
        raise ValueError("pass exactly one of `x_root` and `prior`.")
    if x_root is not None:
        return log_potential(root_msg, x_root)
    m, P = prior  # type: ignore[misc]
    d = m.shape[0]
    return pullback(root_msg, jnp.eye(d, dtype=m.dtype), m, P).c


# -- proxies ----------------------------------------------------------------------------------


class LinearKernels(NamedTuple):
    """Per-edge linear-Gaussian one-step kernels ``x_v ~ N(Phi_v x_pa + beta_v, Q_v)``.

    Row ``v`` describes the edge into node ``v`` (the root row is ignored).

    Attributes:
        Phi: ``(N, dim, dim)``.
        beta: ``(N, dim)``.
        Q: ``(N, dim, dim)`` symmetric PSD.
    """

    Phi: Float[Array, "N dim dim"]
    beta: Float[Array, "N dim"]
    Q: Float[Array, "N dim dim"]


class LinearSDEs(NamedTuple):
    r"""Per-edge linear SDEs ``dX = (B X + beta) dt + sigma dW`` on ``[0, tau_v]``.

    The diffusion ``a = sigma sigma^T`` is linear in time between ``a0`` (at the parent end,
    t = 0) and ``a1`` (at the child end, t = tau_v). Row ``v`` is the edge into node ``v``.

    Attributes:
        B: ``(N, dim, dim)``.
        beta: ``(N, dim)``.
        a0: ``(N, dim, dim)`` symmetric PSD.
        a1: ``(N, dim, dim)`` symmetric PSD.
    """

    B: Float[Array, "N dim dim"]
    beta: Float[Array, "N dim"]
    a0: Float[Array, "N dim dim"]
    a1: Float[Array, "N dim dim"]


def _check_psd(name: str, M: Array) -> Array:
    scale = jnp.max(jnp.abs(M)) + 1.0
    asym = jnp.max(jnp.abs(M - jnp.swapaxes(M, -1, -2))) > 1e-8 * scale
    neg = jnp.min(jnp.linalg.eigvalsh(_sym(M))) < -1e-8 * scale
    return eqx.error_if(M, asym | neg, f"`{name}` must be symmetric positive semi-definite.")


def _check_rows(name: str, arr: Array, topo: TreeTopology, tail: tuple[int, ...]) -> None:
    if arr.shape != (topo.num_nodes, *tail):
        raise ValueError(
            f"`{name}` must have shape {(topo.num_nodes, *tail)} (one row per node), "
            f"got {arr.shape}."
        )


def lg_sde_to_discrete(
    B: Float[Array, "dim dim"],
    beta: Float[Array, " dim"],
    a: Float[Array, "dim dim"],
    tau: Float[Array, ""] | float,
) -> tuple[Float[Array, "dim dim"], Float[Array, " dim"], Float[Array, "dim dim"]]:
    r"""Exact transition ``N(Phi x + b, Q)`` of ``dX = (B X + beta) dt + sigma dW`` over ``tau``.

    ``Phi = e^{B tau}``, ``b = \int_0^tau e^{B s} beta ds``,
    ``Q = \int_0^tau e^{B s} a e^{B^T s} ds``,
    all from matrix exponentials of block matrices (Van Loan, 1978); ``a`` is constant.
    """
    d = B.shape[0]
    z = jnp.zeros((d, d), B.dtype)
    vl = jsl.expm(jnp.block([[-B, a], [z, B.T]]) * tau)
    Phi = vl[d:, d:].T
    Q = _sym(Phi @ vl[:d, d:])
    aug = jnp.zeros((d + 1, d + 1), B.dtype).at[:d, :d].set(B).at[:d, d].set(beta)
    b = jsl.expm(aug * tau)[:d, d]
    return Phi, b, Q


# -- backward filter --------------------------------------------------------------------------


class TreeFilter(NamedTuple):
    r"""Output of `backward_filter`.

    Attributes:
        node: `Canonical` with leading axis N: the message h~_v at each node (its own
            observation plus the pulled-back messages of its children).
        edge: `Canonical` with leading axis N: h~_{v -> pa}, the message of node v as a function
            of its parent's state (the root row repeats ``node``).
        H_t: ``(N, K+1, dim, dim)`` or ``None``: for SDE edges, H(t_k) on the guiding grid
            ``t_k = tau_v (1 - (1 - k/K)^2)`` (k = 0 parent end, k = K child end).
        F_t: ``(N, K+1, dim)`` or ``None``, the matching F(t_k).
    """

    node: Canonical
    edge: Canonical
    H_t: Float[Array, "N K1 dim dim"] | None
    F_t: Float[Array, "N K1 dim"] | None


def guiding_grid(num_steps: int) -> Float[Array, " K1"]:
    """Unit guiding grid ``u_k = 1 - (1 - k/K)^2``, k = 0..K (times are ``tau_v * u_k``).

    Denser near the child end, where ``r~ = F - H x`` grows like ``1 / (tau - t)``: the steps
    ``u_{k+1} - u_k = (2 (K - k) - 1) / K^2`` decrease from ``(2K - 1) / K^2`` to ``1 / K^2``.

    Raises:
        ValueError: if ``num_steps`` is not an int >= 1.
    """
    if not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"`num_steps` must be an int >= 1, got {num_steps!r}.")
    k = jnp.arange(num_steps + 1) / num_steps
    return 1.0 - (1.0 - k) ** 2


def _a_tilde(t, tau, a0, a1):
    return a0 + (t / tau) * (a1 - a0)


def _backward_vf(u, y, args):
    """Backward ODEs for (c, F, H) in reversed unit time u = (tau - t) / tau."""
    c, F, H = y
    B, beta, a0, a1, tau = args
    t = tau * (1.0 - u)
    a = _a_tilde(t, tau, a0, a1)
    dH = -B.T @ H - H @ B + H @ a @ H
    dF = -B.T @ F + H @ (a @ F) + H @ beta
    dc = -beta @ F - 0.5 * F @ (a @ F) + 0.5 * jnp.trace(a @ H)
    return (-tau * dc, -tau * dF, -tau * _sym(dH))


def _edge_ode(msg, B, beta, a0, a1, tau, num_steps, rtol, atol):
    grid = guiding_grid(num_steps)
    s_grid = (1.0 - grid)[::-1]  # increasing reversed times, 0 ... 1
    sol = solve_ode(
        _backward_vf,
        (msg.c, msg.F, msg.H),
        t0=0.0,
        t1=1.0,
        ts=s_grid,
        rtol=rtol,
        atol=atol,
        args=(B, beta, a0, a1, tau),
        max_steps=16384,
    )
    c, F, H = (y[::-1] for y in sol.ys)
    return Canonical(c, F, _sym(H))


def _edge_closed(msg, B, beta, a0, a1, tau, num_steps):
    # Attach the check to a0, which the pullback uses (B is otherwise dead and the check with it).
    a0 = eqx.error_if(
        a0,
        jnp.any(B != 0) | jnp.any(beta != 0),
        "method='closed' needs a driftless proxy (B = 0 and beta = 0); use method='ode'.",
    )
    t = tau * guiding_grid(num_steps)

    def at(tk):
        A = ((tau**2 - tk**2) / (2 * tau)) * a1 + ((tau - tk) ** 2 / (2 * tau)) * a0
        return pullback(msg, jnp.eye(a0.shape[0], dtype=a0.dtype), beta, A)

    return jax.vmap(at)(t)


def backward_filter(
    topo: TreeTopology,
    y: Float[Array, "NL m"],
    proxy: LinearKernels | LinearSDEs,
    *,
    C: Float[Array, "m dim"] | None = None,
    R: Float[Array, "m m"],
    num_steps: int = 50,
    method: str = "closed",
    rtol: float = 1e-8,
    atol: float = 1e-10,
) -> TreeFilter:
    r"""Backward filtering: canonical messages of the linear-Gaussian proxy, leaves to root.

    Leaves carry ``y_i = C x_{leaves[i]} + eta``, ``eta ~ N(0, R)``; messages are pulled back
    through each edge (`pullback` for `LinearKernels`; for `LinearSDEs` the backward ODEs

        dH/dt = -B^T H - H B + H a H,  dF/dt = -B^T F + H a F + H beta,
        dc/dt = -beta^T F - F^T a F / 2 + tr(a H) / 2

    from ``t = tau_v`` to 0, solved with `jaxgen.core.solve_ode` (``method="ode"``) or, for a
    driftless proxy (``B = beta = 0``), in closed form as the pullback with
    ``Q = \int_t^tau a(s) ds`` (``method="closed"``)) and summed at internal nodes. Levels are
    processed deepest first by a `jax.lax.scan` over the padded level schedule, each level by one
    vmapped call.

    Args:
        topo: the tree (static).
        y: ``(N_L, m)`` leaf observations, rows in the order of ``topo.leaves``.
        proxy: `LinearKernels` (discrete edges) or `LinearSDEs` (continuous edges), one row per
            node.
        C: ``(m, dim)`` observation matrix (default identity, ``m = dim``).
        R: ``(m, m)`` observation noise covariance (positive definite).
        num_steps: K, the number of guiding-grid intervals per SDE edge.
        method: ``"closed"`` or ``"ode"`` (SDE edges only).
        rtol: ODE relative tolerance.
        atol: ODE absolute tolerance.

    Returns:
        `TreeFilter`. ``log_evidence(filt.node.c[root]...)``: see `log_evidence`.

    References:
        van der Meulen & Sommer, arXiv 2505.18239 (pullbacks and fusion); Schauer, van der
        Meulen & van Zanten, arXiv 1311.3606 (backward ODEs of guided proposals).
    """
    check_positive(rtol, "rtol")
    check_positive(atol, "atol")
    if isinstance(proxy, LinearKernels):
        sde = False
        d = proxy.Phi.shape[-1]
        _check_rows("proxy.Phi", proxy.Phi, topo, (d, d))
        _check_rows("proxy.beta", proxy.beta, topo, (d,))
        _check_rows("proxy.Q", proxy.Q, topo, (d, d))
    elif isinstance(proxy, LinearSDEs):
        sde = True
        d = proxy.B.shape[-1]
        for name in ("B", "a0", "a1"):
            _check_rows(f"proxy.{name}", getattr(proxy, name), topo, (d, d))
        _check_rows("proxy.beta", proxy.beta, topo, (d,))
        if method not in ("closed", "ode"):
            raise ValueError(f"`method` must be 'closed' or 'ode', got {method!r}.")
        if not isinstance(num_steps, int) or num_steps < 1:
            raise ValueError(f"`num_steps` must be an int >= 1, got {num_steps!r}.")
    else:
        raise TypeError(f"`proxy` must be LinearKernels or LinearSDEs, got {type(proxy).__name__}.")
    y = jnp.asarray(y)
    if y.ndim != 2 or y.shape[0] != topo.num_leaves:
        raise ValueError(f"`y` must have shape (num_leaves={topo.num_leaves}, m), got {y.shape}.")
    m = y.shape[1]
    dtype = y.dtype
    C = jnp.eye(d, dtype=dtype) if C is None else jnp.asarray(C)
    if C.shape != (m, d):
        raise ValueError(f"`C` must have shape (m={m}, dim={d}), got {C.shape}.")
    R = jnp.asarray(R)
    if R.shape != (m, m):
        raise ValueError(f"`R` must have shape ({m}, {m}), got {R.shape}.")
    # Value checks (eqx.error_if) after every shape check, so shape errors cost no compute.
    R = _check_psd("R", R)
    if sde:
        proxy = proxy._replace(
            a0=_check_psd("proxy.a0", proxy.a0), a1=_check_psd("proxy.a1", proxy.a1)
        )
    else:
        proxy = proxy._replace(Q=_check_psd("proxy.Q", proxy.Q))

    n = topo.num_nodes
    leaf = jax.vmap(leaf_message, in_axes=(0, None, None))(y, C, R)
    leaves = jnp.asarray(topo.leaves)
    # One scratch row (index n) absorbs the padding of the level schedule.
    node = Canonical(
        jnp.zeros((n + 1,), dtype).at[leaves].set(leaf.c),
        jnp.zeros((n + 1, d), dtype).at[leaves].set(leaf.F),
        jnp.zeros((n + 1, d, d), dtype).at[leaves].set(leaf.H),
    )
    tau_all = jnp.asarray(np.append(topo.branch_length, 1.0), dtype)
    pad = lambda a: jnp.concatenate([a, jnp.zeros((1, *a.shape[1:]), a.dtype)])  # noqa: E731
    params = tuple(pad(jnp.asarray(a, dtype)) for a in proxy)
    K1 = num_steps + 1 if sde else 1

    def level_step(node, sched):
        idx, par = sched
        msg = jax.tree_util.tree_map(lambda a: a[idx], node)
        p = tuple(a[idx] for a in params)
        if sde and method == "ode":
            grid_msgs = jax.vmap(
                lambda mm, B, b, a0, a1, tau: _edge_ode(
                    mm, B, b, a0, a1, tau, num_steps, rtol, atol
                )
            )(msg, *p, tau_all[idx])
        elif sde:
            grid_msgs = jax.vmap(
                lambda mm, B, b, a0, a1, tau: _edge_closed(mm, B, b, a0, a1, tau, num_steps)
            )(msg, *p, tau_all[idx])
        else:
            grid_msgs = jax.tree_util.tree_map(lambda a: a[:, None], jax.vmap(pullback)(msg, *p))
        up = jax.tree_util.tree_map(lambda a: a[:, 0], grid_msgs)
        node = jax.tree_util.tree_map(lambda a, u: a.at[par].add(u).at[n].set(0), node, up)
        return node, (up, grid_msgs.H, grid_msgs.F)

    sched = (jnp.asarray(topo.level_schedule[::-1]), jnp.asarray(topo.level_schedule_parent[::-1]))
    node, (ups, Hs, Fs) = jax.lax.scan(level_step, node, sched)
    flat = topo.level_schedule[::-1].reshape(-1)
    edge = jax.tree_util.tree_map(
        lambda a, u: a.at[jnp.asarray(flat)].set(u.reshape(-1, *u.shape[2:])), node, ups
    )
    node = jax.tree_util.tree_map(lambda a: a[:n], node)
    r = topo.root
    edge = jax.tree_util.tree_map(lambda e, a: e[:n].at[r].set(a[r]), edge, node)
    H_t = F_t = None
    if sde:
        H_t = jnp.zeros((n + 1, K1, d, d), dtype).at[flat].set(Hs.reshape(-1, K1, d, d))[:n]
        F_t = jnp.zeros((n + 1, K1, d), dtype).at[flat].set(Fs.reshape(-1, K1, d))[:n]
    return TreeFilter(node, edge, H_t, F_t)


# -- dense reference --------------------------------------------------------------------------


def dense_tree_smoother(
    topo: TreeTopology,
    kernels: LinearKernels,
    y: Float[Array, "NL m"],
    *,
    C: Float[Array, "m dim"] | None = None,
    R: Float[Array, "m m"],
    x_root: Float[Array, " dim"] | None = None,
    prior: tuple[Float[Array, " dim"], Float[Array, "dim dim"]] | None = None,
) -> tuple[Float[Array, "N dim"], Float[Array, "N dim dim"], Float[Array, ""]]:
    r"""Exact smoother of a linear-Gaussian tree by dense Gaussian conditioning (reference).

    Stacks all node states into one vector ``x = (I - A)^{-1} (b + w)`` (A holds the blocks
    ``Phi_v`` at (v, pa(v)), ``w ~ N(0, blockdiag(Q_v))``, the root row carries ``x_root`` or the
    prior), then conditions the joint Gaussian on ``y`` with one dense Cholesky. Independent of
    the message passing (cost O((N dim)^3)); use it only on small trees.

    Returns:
        ``(means (N, dim), covariances (N, dim, dim), log_evidence)``: posterior of every node
        and ``log p(y | x_root)`` (or ``log p(y)`` under ``prior``).
    """
    if (x_root is None) == (prior is None):
        raise ValueError("pass exactly one of `x_root` and `prior`.")
    Phi, beta, Q = kernels
    n, d = topo.num_nodes, Phi.shape[-1]
    y = jnp.asarray(y)
    if y.ndim != 2 or y.shape[0] != topo.num_leaves:
        raise ValueError(f"`y` must have shape (num_leaves={topo.num_leaves}, m), got {y.shape}.")
    dtype = y.dtype
    m = y.shape[1]
    C = jnp.eye(d, dtype=dtype) if C is None else jnp.asarray(C)
    R = jnp.asarray(R)
    if R.shape != (m, m):
        raise ValueError(f"`R` must have shape ({m}, {m}), got {R.shape}.")
    R, Q = _check_psd("R", R), _check_psd("kernels.Q", Q)
    r = topo.root
    if prior is None:
        m0, P0 = x_root, jnp.zeros((d, d), dtype)
    else:
        m0, P0 = prior
    b = beta.at[r].set(m0).reshape(n * d)
    Qs = Q.at[r].set(P0)
    Qbig = (jnp.eye(n, dtype=dtype)[:, None, :, None] * Qs[:, :, None, :]).reshape(n * d, n * d)
    child = np.flatnonzero(topo.parent >= 0)
    A = jnp.zeros((n, n, d, d), dtype).at[child, topo.parent[child]].set(Phi[child])
    A = A.transpose(0, 2, 1, 3).reshape(n * d, n * d)
    L = jnp.linalg.inv(jnp.eye(n * d, dtype=dtype) - A)
    mean = L @ b
    S = L @ Qbig @ L.T
    nl = topo.num_leaves
    Cbig = jnp.zeros((nl, n, m, d), dtype).at[np.arange(nl), topo.leaves].set(C)
    Cbig = Cbig.transpose(0, 2, 1, 3).reshape(nl * m, n * d)
    Rbig = jnp.kron(jnp.eye(nl, dtype=dtype), R)
    yv = y.reshape(nl * m)
    Syy = Cbig @ S @ Cbig.T + Rbig
    chol = jnp.linalg.cholesky(Syy)
    resid = yv - Cbig @ mean
    z = jsl.cho_solve((chol, True), resid)
    K = jsl.cho_solve((chol, True), Cbig @ S).T
    post_mean = mean + K @ resid
    post_cov = S - K @ Cbig @ S
    logev = (
        -0.5 * resid @ z
        - jnp.sum(jnp.log(jnp.diagonal(chol)))
        - 0.5 * nl * m * math.log(2 * math.pi)
    )
    means = post_mean.reshape(n, d)
    ar = np.arange(n)
    covs = post_cov.reshape(n, d, n, d)[ar, :, ar, :]
    return means, covs, logev
