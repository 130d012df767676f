r"""Forward guiding on a tree: guided sampling, per-edge losses, importance sampling.

Given the backward filter of a linear-Gaussian proxy (`backward_filter`), states are sampled
root to leaves with each transition tilted by the proxy's h-function:

- discrete edges: ``q(x_v | x_pa) ∝ p(x_v | x_pa) h~_v(x_v)``, Gaussian for a Gaussian kernel;
- SDE edges: ``dX = [b + a r~ + sigma theta] dt + sigma dW``, ``r~(t, x) = F(t) - H(t) x``, with an
  optional learned control ``theta`` (the NBFFG residual; ``theta = 0`` is plain BFFG).

Each edge returns its loss ``l_v`` whose sum telescopes to the importance log-weight:
``p(x | y, x_r) / q(x) = exp(-sum_v l_v) h~_r(x_r) / p(y | x_r)``.

References:
    G. Yang, F. van der Meulen, S. Sommer, "Neural Backward Filtering Forward Guiding",
    arXiv 2601.23030.
    F. van der Meulen, S. Sommer, "Backward Filtering Forward Guiding", JMLR 2025,
    arXiv 2505.18239 (Thm 14: guided kernels and weights).
    M. Schauer, F. van der Meulen, H. van Zanten, "Guided proposals for simulating
    multi-dimensional diffusion bridges", Bernoulli 2017, arXiv 1311.3606.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax.sharding import Mesh
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ...core import sharded_vmap, solve_sde
from ...core.checks import (
    check_labels,
    check_module,
    check_positive_int,
    check_rank,
    check_shape,
)
from .._htransform import guide
from ._filter import (
    Canonical,
    LinearKernels,
    LinearSDEs,
    TreeFilter,
    _sym,
    log_potential,
    pullback,
)
from ._topology import TreeTopology


class AbstractTreeKernel(eqx.Module):
    """The model slot of discrete edges: a Gaussian kernel ``x_v ~ N(mean, cov)`` given the parent.

    Subclasses give ``mean(x_pa, tau) -> (dim,)`` (possibly nonlinear) and ``cov(x_pa, tau) ->
    (dim, dim)`` (symmetric positive definite), for one parent state ``x_pa`` ``(dim,)`` and
    the branch length ``tau`` (scalar).
    """

    @abc.abstractmethod
    def mean(self, x_pa: Float[Array, " dim"], tau: Float[Array, ""]) -> Float[Array, " dim"]:
        """Mean of the child given the parent state and branch length."""

    @abc.abstractmethod
    def cov(self, x_pa: Float[Array, " dim"], tau: Float[Array, ""]) -> Float[Array, "dim dim"]:
        """Covariance of the child given the parent state and branch length."""


class AbstractTreeSDE(eqx.Module):
    """The model slot of SDE edges: ``dX = drift(t, X) dt + diffusion(t, X) dW`` on ``[0, tau_v]``.

    Subclasses give ``drift(t, x) -> (dim,)`` and ``diffusion(t, x) -> (dim, w)`` (driven by a
    w-dimensional Brownian motion) for one state ``x`` ``(dim,)`` and a scalar ``t``.
    """

    @abc.abstractmethod
    def drift(self, t: Float[Array, ""], x: Float[Array, " dim"]) -> Float[Array, " dim"]:
        """Drift ``b(t, x)``."""

    @abc.abstractmethod
    def diffusion(self, t: Float[Array, ""], x: Float[Array, " dim"]) -> Float[Array, "dim w"]:
        """Noise matrix ``sigma(t, x)``."""


class TreeKernel(AbstractTreeKernel):
    """Discrete (one-step) Gaussian edge kernel from two functions.

    ``TreeKernel(mean_fn, cov_fn)`` with ``mean_fn(x_pa, tau) -> (dim,)`` and
    ``cov_fn(x_pa, tau) -> (dim, dim)``.
    """

    mean_fn: Callable[[Array, Array], Array] = eqx.field(static=True)
    cov_fn: Callable[[Array, Array], Array] = eqx.field(static=True)

    def __init__(self, mean: Callable[[Array, Array], Array], cov: Callable[[Array, Array], Array]):
        self.mean_fn, self.cov_fn = mean, cov

    def mean(self, x_pa, tau):
        return self.mean_fn(x_pa, tau)

    def cov(self, x_pa, tau):
        return self.cov_fn(x_pa, tau)


class TreeSDE(AbstractTreeSDE):
    """Edge SDE from two functions: ``TreeSDE(drift_fn, diffusion_fn)``.

    ``drift_fn(t (), x (dim,)) -> (dim,)`` and ``diffusion_fn(t (), x (dim,)) -> (dim, w)``.
    """

    drift_fn: Callable[[Array, Array], Array] = eqx.field(static=True)
    diffusion_fn: Callable[[Array, Array], Array] = eqx.field(static=True)

    def __init__(
        self, drift: Callable[[Array, Array], Array], diffusion: Callable[[Array, Array], Array]
    ):
        self.drift_fn, self.diffusion_fn = drift, diffusion

    def drift(self, t, x):
        return self.drift_fn(t, x)

    def diffusion(self, t, x):
        return self.diffusion_fn(t, x)


class AbstractSDEControl(eqx.Module):
    """The residual-control slot of SDE edges (NBFFG): ``theta(u, tau - t, x, r~) -> (w,)``.

    Called on one state at unit time ``u = t / tau``, with the time left to the child, the
    state ``x`` ``(dim,)`` and the guiding term ``r~`` ``(dim,)``; returns the control in the
    Brownian coordinates (``w`` = columns of the edge diffusion). Zero is plain BFFG.
    """

    @abc.abstractmethod
    def __call__(
        self,
        u: Float[Array, ""],
        remaining: Float[Array, ""],
        x: Float[Array, " dim"],
        r: Float[Array, " dim"],
    ) -> Float[Array, " w"]:
        """The control ``theta``."""


class AbstractKernelResidual(eqx.Module):
    """The residual slot of discrete edges (NBFFG): an invertible map of the whitened draw.

    ``residual(xi, context) -> (T(xi), log |det dT/dxi|)`` on one whitened guided draw ``xi``
    ``(dim,)`` with the context ``kappa = (x_pa, m°, log diag P°, tau_v)`` ``(3 dim + 1,)``.
    The identity map is plain BFFG.
    """

    dim: eqx.AbstractVar[int]

    @abc.abstractmethod
    def __call__(
        self, xi: Float[Array, " dim"], context: Float[Array, " c"]
    ) -> tuple[Float[Array, " dim"], Float[Array, ""]]:
        """``(T(xi; kappa), log |det dT/dxi|)``."""


class GuidedTree(eqx.Module):
    """Everything forward guiding needs, none of it trainable.

    Attributes:
        topo: the tree (static).
        model: an `AbstractTreeKernel` (discrete edges, e.g. `TreeKernel`) or an
            `AbstractTreeSDE` (SDE edges, e.g. `TreeSDE`).
        filt: `TreeFilter` of the proxy (from `backward_filter`).
        proxy: the proxy used by ``filt`` (`LinearKernels` or `LinearSDEs`).
        x_root: ``(dim,)`` fixed root state.
    """

    topo: TreeTopology = eqx.field(static=True)
    model: AbstractTreeKernel | AbstractTreeSDE
    filt: TreeFilter
    proxy: LinearKernels | LinearSDEs
    x_root: Float[Array, " dim"]

    def __check_init__(self):
        check_module(self.model, (AbstractTreeKernel, AbstractTreeSDE), "model")
        sde = isinstance(self.model, AbstractTreeSDE)
        if sde != isinstance(self.proxy, LinearSDEs) or sde == (self.filt.H_t is None):
            raise TypeError(
                "`model`, `proxy` and `filt` must agree: an AbstractTreeSDE with LinearSDEs and "
                "an SDE filter, or an AbstractTreeKernel with LinearKernels and a discrete "
                "filter; got "
                f"{type(self.model).__name__}, {type(self.proxy).__name__}."
            )
        if self.x_root.shape != self.filt.node.F.shape[1:]:
            raise ValueError(
                f"`x_root` must have shape {self.filt.node.F.shape[1:]}, got {self.x_root.shape}."
            )

    @property
    def is_sde(self) -> bool:
        """Whether edges are SDEs."""
        return isinstance(self.model, AbstractTreeSDE)

    @property
    def num_steps(self) -> int:
        """Euler-Maruyama steps per SDE edge (the filter's guiding grid)."""
        return 0 if self.filt.H_t is None else self.filt.H_t.shape[1] - 1

    def root_log_h(self) -> Float[Array, ""]:
        """``log h~_r(x_r)``: the proxy's log-evidence at the fixed root."""
        root = jax.tree_util.tree_map(lambda a: a[self.topo.root], self.filt.node)
        return log_potential(root, self.x_root)


class ControlNet(AbstractSDEControl):
    r"""Residual control ``theta(t, x)`` of an SDE edge (NBFFG), zero at initialisation.

    An MLP on ``(u, tau - t, x, r~)`` with ``u = t / tau`` whose last layer starts at zero, so
    the untrained model is the BFFG guided process. Acts on one state; vmap for batches.
    """

    mlp: eqx.nn.MLP
    noise_dim: int = eqx.field(static=True)

    def __init__(
        self, dim: int, noise_dim: int, width: int = 64, depth: int = 2, *, key: PRNGKeyArray
    ):
        dim = check_positive_int(dim, "dim")
        self.noise_dim = check_positive_int(noise_dim, "noise_dim")
        width = check_positive_int(width, "width")
        depth = check_positive_int(depth, "depth", minimum=0)
        mlp = eqx.nn.MLP(2 * dim + 2, noise_dim, width, depth, jax.nn.silu, key=key)
        self.mlp = _zero_last(mlp)

    def __call__(
        self,
        u: Float[Array, ""],
        remaining: Float[Array, ""],
        x: Float[Array, " dim"],
        r: Float[Array, " dim"],
    ) -> Float[Array, " w"]:
        """``theta`` at unit time ``u``, time to the child ``remaining``, state ``x``, ``r~``."""
        dt = self.mlp.layers[0].weight.dtype
        inp = jnp.concatenate([jnp.stack([u, remaining]), x, r]).astype(dt)
        return self.mlp(inp).astype(x.dtype)


class ResidualFlow(AbstractKernelResidual):
    r"""Conditional affine-coupling residual of a discrete edge (NBFFG), identity at init.

    Acts on the whitened guided draw ``xi = L°^{-1}(x° - m°)``: each layer keeps the coordinates
    with ``mask = 1`` and maps the others by ``xi <- xi exp(s) + t``, ``(s, t)`` from an MLP of
    the kept coordinates and the context ``kappa = (x_pa, m°, log diag P°, tau_v)``, with
    tanh-bounded log-scales ``s``. Masks alternate between layers (in ``dim = 1`` every other
    layer is a context-only affine map). Last layers start at zero, so the untrained flow is the
    identity and the sampler is exactly BFFG. Acts on one state; vmap for batches.

    References:
        Dinh, Sohl-Dickstein, Bengio, "Density estimation using Real NVP", arXiv 1605.08803;
        Yang, van der Meulen, Sommer, arXiv 2601.23030 (the residual of discrete edges).
    """

    nets: tuple[eqx.nn.MLP, ...]
    dim: int = eqx.field(static=True)

    def __init__(
        self, dim: int, num_layers: int = 4, width: int = 64, depth: int = 2, *, key: PRNGKeyArray
    ):
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"`dim` must be an int >= 1, got {dim!r}.")
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"`num_layers` must be an int >= 1, got {num_layers!r}.")
        check_positive_int(width, "width")
        check_positive_int(depth, "depth", minimum=0)
        self.dim = dim
        nets = []
        for k in jr.split(key, num_layers):
            mlp = eqx.nn.MLP(4 * dim + 1, 2 * dim, width, depth, jax.nn.silu, key=k)
            nets.append(_zero_last(mlp))
        self.nets = tuple(nets)

    def __call__(
        self, xi: Float[Array, " dim"], context: Float[Array, " c"]
    ) -> tuple[Float[Array, " dim"], Float[Array, ""]]:
        """``(T(xi; kappa), log |det dT/dxi|)``."""
        d = self.dim
        dt = self.nets[0].layers[0].weight.dtype
        logdet = jnp.zeros((), xi.dtype)
        for layer, net in enumerate(self.nets):
            # Fixed (not trainable) alternating mask: 1 = kept, 0 = transformed.
            mask = jnp.asarray((np.arange(d) + layer) % 2, xi.dtype)
            h = net(jnp.concatenate([mask * xi, context]).astype(dt)).astype(xi.dtype)
            s = jnp.tanh(h[:d]) * (1 - mask)
            t = h[d:] * (1 - mask)
            xi = mask * xi + (1 - mask) * (xi * jnp.exp(s) + t)
            logdet = logdet + jnp.sum(s)
        return xi, logdet


def _zero_last(mlp: eqx.nn.MLP) -> eqx.nn.MLP:
    last = mlp.layers[-1]
    last = eqx.tree_at(
        lambda m: (m.weight, m.bias), last, (jnp.zeros_like(last.weight), jnp.zeros_like(last.bias))
    )
    return eqx.tree_at(lambda m: m.layers[-1], mlp, last)


# -- edges ------------------------------------------------------------------------------------


def _discrete_edge(gt: GuidedTree, flow, x_pa, v, key):
    """One guided discrete edge: (x_v, l_v, l_v) (training and IS losses are equal).

    Without a residual ``l_v = log h~_{v->pa}(x_pa) - log h^_v(x_pa)`` exactly (a constant given
    x_pa); with a `ResidualFlow` ``l_v = log q_theta(x_v|x_pa) - log p_v(x_v|x_pa)
    - log h~_v(x_v) + log h~_{v->pa}(x_pa)`` at the drawn ``x_v``.
    """
    tau = jnp.asarray(np.append(gt.topo.branch_length, 1.0), x_pa.dtype)[v]
    msg = jax.tree_util.tree_map(lambda a: _padded(a)[v], gt.filt.node)
    emsg = jax.tree_util.tree_map(lambda a: _padded(a)[v], gt.filt.edge)
    mu = gt.model.mean(x_pa, tau)  # type: ignore[union-attr]
    Q = gt.model.cov(x_pa, tau)  # type: ignore[union-attr]
    d = x_pa.shape[0]
    eye = jnp.eye(d, dtype=x_pa.dtype)
    IQH = eye + Q @ msg.H
    sol = jnp.linalg.solve(IQH, jnp.concatenate([Q, (mu + Q @ msg.F)[:, None]], axis=1))
    P, m = _sym(sol[:, :d]), sol[:, d]
    L = jnp.linalg.cholesky(P + 1e-9 * jnp.trace(P) / d * eye)
    xi = jr.normal(key, (d,), x_pa.dtype)
    if flow is None:
        x_v = m + L @ xi
        log_hhat = pullback(msg, eye, mu, Q).c
        ell = log_potential(emsg, x_pa) - log_hhat
        return x_v, ell, ell
    ctx = jnp.concatenate([x_pa, m, jnp.log(jnp.diagonal(P)), tau[None]])
    xi2, logdet = flow(xi, ctx)
    x_v = m + L @ xi2
    log_q = jnp.sum(jax.scipy.stats.norm.logpdf(xi)) - jnp.sum(jnp.log(jnp.diagonal(L))) - logdet
    log_p = jax.scipy.stats.multivariate_normal.logpdf(x_v, mu, Q)
    ell = log_q - log_p - log_potential(msg, x_v) + log_potential(emsg, x_pa)
    return x_v, ell, ell


def _padded(a: Array) -> Array:
    return jnp.concatenate([a, jnp.zeros((1, *a.shape[1:]), a.dtype)])


def _interp(grid: Array, u: Array) -> Array:
    K = grid.shape[0] - 1
    kf = u * K
    k0 = jnp.clip(jnp.floor(kf), 0, K - 1).astype(jnp.int32)
    w = jnp.clip(kf - k0, 0.0, 1.0)
    return (1 - w) * grid[k0] + w * grid[k0 + 1]


def _sde_edge(gt: GuidedTree, control, x_pa, v, key):
    """One guided SDE edge by Euler-Maruyama on the time-changed grid.

    Time is ``t = tau phi(u)``, ``phi(u) = 1 - (1 - u)^2``, and u runs over K equal steps, so
    the Euler nodes are the guiding grid of the filter. The vector fields are scaled by the
    grid's difference quotient ``(phi(u + 1/K) - phi(u)) K tau = tau (2 (1 - u) - 1/K)`` (not
    the derivative ``phi'(u) tau``), so each Euler step spans exactly ``t_{k+1} - t_k``: the
    clock ends at ``tau`` (with ``phi'`` it ran to ``tau (1 + 1/K)``, and the last guided step
    doubled ``a r~``, reflecting the state across the target instead of landing on it); a
    Brownian edge is then simulated exactly. The state is augmented with
    ``int (|theta|^2 / 2 - G) dt`` and ``int theta^T dW``.

    Returns:
        ``(x_v, l_train, l_is)``: the end state, the pathwise training loss
        ``int (|theta|^2/2 - G) dt`` and the exact log-ratio ``l_train + int theta^T dW``.
    """
    model: AbstractTreeSDE = gt.model  # type: ignore[assignment]
    proxy: LinearSDEs = gt.proxy  # type: ignore[assignment]
    dtype = x_pa.dtype
    d = x_pa.shape[0]
    tau = jnp.asarray(np.append(gt.topo.branch_length, 1.0), dtype)[v]
    H_g = _padded(gt.filt.H_t)[v]  # type: ignore[arg-type]
    F_g = _padded(gt.filt.F_t)[v]  # type: ignore[arg-type]
    B, beta, a0, a1 = (_padded(a)[v] for a in proxy)
    K = gt.num_steps

    def parts(u, x):
        t = tau * (1 - (1 - u) ** 2)
        dt_du = tau * (2 * (1 - u) - 1 / K)  # = (t_{k+1} - t_k) / du at the Euler node u_k
        sigma = model.diffusion(t, x)
        a = sigma @ sigma.T
        b = model.drift(t, x)
        H = _interp(H_g, u)
        r = _interp(F_g, u) - H @ x
        bt = B @ x + beta
        at = a0 + (t / tau) * (a1 - a0)
        da = a - at
        G = (b - bt) @ r - 0.5 * jnp.sum(da * H) + 0.5 * r @ da @ r
        theta = (
            jnp.zeros((sigma.shape[1],), dtype) if control is None else control(u, tau - t, x, r)
        )
        return dt_du, sigma, a, b, r, G, theta

    def drift(u, y, args):
        x = y[:d]
        dt_du, sigma, a, b, r, G, theta = parts(u, x)
        dx = guide(b, a, r) + sigma @ theta
        dcost = 0.5 * theta @ theta - G
        return jnp.concatenate([dx, jnp.stack([dcost, jnp.zeros((), dtype)])]) * dt_du

    def diffusion(u, y, args):
        x = y[:d]
        dt_du, sigma, _, _, _, _, theta = parts(u, x)
        w = sigma.shape[1]
        rows = jnp.concatenate([sigma, jnp.zeros((1, w), dtype), theta[None, :]], axis=0)
        return rows * jnp.sqrt(dt_du)

    y0 = jnp.concatenate([x_pa, jnp.zeros((2,), dtype)])
    sol = solve_sde(drift, diffusion, y0, key=key, t0=0.0, t1=1.0, steps=gt.num_steps)
    yT = sol.ys[-1]
    return yT[:d], yT[d], yT[d] + yT[d + 1]


def _check_control(gt: GuidedTree, control) -> None:
    if control is None:
        return
    # SDE edges: an AbstractSDEControl (ControlNet); discrete: an AbstractKernelResidual
    # (ResidualFlow); None is plain BFFG.
    check_module(control, AbstractSDEControl if gt.is_sde else AbstractKernelResidual, "control")
    if not gt.is_sde and control.dim != gt.x_root.shape[0]:
        raise ValueError(
            f"`control` acts in dim {control.dim}, but the states have dim {gt.x_root.shape[0]}."
        )


def _edge(gt: GuidedTree, control, x_pa, v, key):
    if gt.is_sde:
        return _sde_edge(gt, control, x_pa, v, key)
    return _discrete_edge(gt, control, x_pa, v, key)


# -- whole tree and paths ---------------------------------------------------------------------


class GuidedSample(NamedTuple):
    """One guided draw of the whole tree.

    Attributes:
        states: ``(N, dim)`` node states (row root = x_root).
        edge_loss: ``(N,)`` exact per-edge log-ratios l_v (0 at the root); the importance
            log-weight of the draw is ``-sum(edge_loss)``.
        train_loss: ``(N,)`` the pathwise per-edge training losses (equal to ``edge_loss``
            for discrete edges; without the zero-mean ``int theta^T dW`` term for SDE edges).
    """

    states: Float[Array, "N dim"]
    edge_loss: Float[Array, " N"]
    train_loss: Float[Array, " N"]


def guided_sample(
    key: PRNGKeyArray,
    gt: GuidedTree,
    control: AbstractSDEControl | AbstractKernelResidual | None = None,
) -> GuidedSample:
    r"""Sample every node root to leaves under the guided (and optionally controlled) process.

    Levels are processed by a `jax.lax.scan` over the padded level schedule, every edge of a
    level by one vmapped call. Edge ``v`` uses the key ``fold_in(key, v)``, so a root-to-leaf
    path simulated by `path_loss` reproduces the same states.

    Args:
        key: PRNG key.
        gt: the `GuidedTree`.
        control: optional residual: an `AbstractSDEControl` (SDE edges, e.g. `ControlNet`) or an
            `AbstractKernelResidual` (discrete edges, e.g. `ResidualFlow`); ``None`` is BFFG.

    Returns:
        `GuidedSample`.
    """
    _check_control(gt, control)
    topo = gt.topo
    n = topo.num_nodes
    dtype = gt.x_root.dtype
    states = jnp.zeros((n + 1, gt.x_root.shape[0]), dtype).at[topo.root].set(gt.x_root)
    zeros = jnp.zeros((n + 1,), dtype)

    def level(carry, sched):
        states, l_is, l_tr = carry
        idx, par = sched
        keys = jax.vmap(lambda v: jr.fold_in(key, v))(idx)
        x, e_is, e_tr = jax.vmap(lambda xp, v, k: _edge(gt, control, xp, v, k))(
            states[par], idx, keys
        )
        states = states.at[idx].set(x).at[n].set(0)
        return (states, l_is.at[idx].set(e_is), l_tr.at[idx].set(e_tr)), None

    sched = (jnp.asarray(topo.level_schedule), jnp.asarray(topo.level_schedule_parent))
    (states, l_is, l_tr), _ = jax.lax.scan(level, (states, zeros, zeros), sched)
    return GuidedSample(states[:n], l_is[:n], l_tr[:n])


def path_loss(
    key: PRNGKeyArray,
    gt: GuidedTree,
    leaf_rows: Int[Array, " B"],
    control: AbstractSDEControl | AbstractKernelResidual | None = None,
) -> Float[Array, ""]:
    r"""Unbiased path-subsampled estimate of the full-tree training loss ``sum_v l_v``.

    For each leaf (row of ``topo.leaves``) only the root-to-leaf path is simulated and
    ``L = sum_{v in path} (N_L / n_L(v)) l_v``; since edge v lies on the paths of exactly
    ``n_L(v)`` leaves, ``E_lambda[L] = sum_v l_v`` for a uniform leaf, and the mean over the
    given leaves is unbiased when each is marginally uniform. Cost O(B D) edges instead of O(N).
    Uses the same per-edge keys as `guided_sample`.

    Args:
        key: PRNG key (the key of the full-tree draw these paths are part of).
        gt: the `GuidedTree`.
        leaf_rows: ``(B,)`` leaf rows in ``[0, N_L)``.
        control: optional residual.

    Returns:
        The mean of L over the given leaves.
    """
    _check_control(gt, control)
    topo = gt.topo
    n = topo.num_nodes
    leaf_rows = check_labels(
        check_shape(leaf_rows, (None,), "leaf_rows"), "leaf_rows", topo.num_leaves
    )
    paths = jnp.asarray(topo.leaf_paths)[leaf_rows]  # (B, D+1), -1 padded
    weight = jnp.asarray(np.append(topo.num_leaves / topo.n_leaves_below, 0.0), gt.x_root.dtype)
    x0 = jnp.broadcast_to(gt.x_root, (leaf_rows.shape[0], gt.x_root.shape[0]))

    def step(carry, nodes):
        x, total = carry
        valid = nodes >= 0
        v = jnp.where(valid, nodes, n)
        keys = jax.vmap(lambda vv: jr.fold_in(key, vv))(v)
        xv, _, e_tr = jax.vmap(lambda xp, vv, k: _edge(gt, control, xp, vv, k))(x, v, keys)
        x = jnp.where(valid[:, None], xv, x)
        total = total + jnp.where(valid, weight[v] * e_tr, 0.0)
        return (x, total), None

    init = (x0, jnp.zeros(leaf_rows.shape, gt.x_root.dtype))
    (_, total), _ = jax.lax.scan(step, init, paths[:, 1:].T)
    return jnp.mean(total)


class ImportanceSample(NamedTuple):
    """Self-normalised importance sampling with guided proposals.

    Attributes:
        states: ``(M, N, dim)`` proposals.
        log_weights: ``(M,)`` unnormalised log-weights ``-sum_v l_v``.
        log_evidence: ``log p^(y | x_r) = log h~_r(x_r) + logmeanexp(log_weights)``.
        ess: effective sample size ``(sum w)^2 / sum w^2`` (= M when the proxy is exact).
        elbo: ``log h~_r(x_r) + mean(log_weights)``, a lower bound on the log-evidence.
        posterior_mean: ``(N, dim)`` self-normalised posterior mean of every node.
    """

    states: Float[Array, "M N dim"]
    log_weights: Float[Array, " M"]
    log_evidence: Float[Array, ""]
    ess: Float[Array, ""]
    elbo: Float[Array, ""]
    posterior_mean: Float[Array, "N dim"]


def importance_sample(
    key: PRNGKeyArray,
    gt: GuidedTree,
    num_samples: int,
    control: AbstractSDEControl | AbstractKernelResidual | None = None,
    *,
    mesh: Mesh | None = None,
) -> ImportanceSample:
    r"""Draw ``num_samples`` whole trees with `guided_sample` and weight them.

    ``log w = -sum_v l_v``, ``log p^(y|x_r) = log h~_r(x_r) + log mean exp(log w)``,
    ESS ``= (sum w)^2 / sum w^2``. With ``mesh``, the particles are drawn across its devices
    (`jaxgen.core.sharded_vmap`; ``num_samples`` a multiple of ``mesh.size``): particle ``i``
    uses the ``i``-th split of ``key`` either way, so the result equals the one-device one.
    """
    if not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"`num_samples` must be an int >= 1, got {num_samples!r}.")
    keys = jr.split(key, num_samples)
    draws = sharded_vmap(lambda k: guided_sample(k, gt, control), mesh)(keys)
    logw = -jnp.sum(draws.edge_loss, axis=1)
    lse = jax.scipy.special.logsumexp(logw)
    log_h = gt.root_log_h()
    log_ev = log_h + lse - jnp.log(num_samples)
    ess = jnp.exp(2 * lse - jax.scipy.special.logsumexp(2 * logw))
    wn = jnp.exp(logw - lse)
    mean = jnp.einsum("m,mnd->nd", wn, draws.states)
    return ImportanceSample(draws.states, logw, log_ev, ess, log_h + jnp.mean(logw), mean)


# -- proxies from anchors ---------------------------------------------------------------------


def proxy_posterior_mean(gt: GuidedTree) -> Float[Array, "N dim"]:
    r"""Posterior means of the linear-Gaussian proxy itself, top-down (used as anchors).

    Discrete: ``m_v = (I + Q H_v)^{-1} (Phi m_pa + beta + Q F_v)``. SDE proxies use their exact
    transition when driftless (``Phi = I``, ``Q = \int a~``); a drift is ignored here.
    """
    topo = gt.topo
    n = topo.num_nodes
    dtype = gt.x_root.dtype
    d = gt.x_root.shape[0]
    tau = jnp.asarray(np.append(topo.branch_length, 1.0), dtype)
    if gt.is_sde:
        B, beta, a0, a1 = (_padded(a) for a in gt.proxy)
        Phi = jnp.broadcast_to(jnp.eye(d, dtype=dtype), B.shape)
        Q = 0.5 * tau[:, None, None] * (a0 + a1)
        beta = jnp.zeros_like(beta)
    else:
        Phi, beta, Q = (_padded(a) for a in gt.proxy)
    Hn, Fn = _padded(gt.filt.node.H), _padded(gt.filt.node.F)
    means = jnp.zeros((n + 1, d), dtype).at[topo.root].set(gt.x_root)

    def level(means, sched):
        idx, par = sched
        mu = jnp.einsum("bij,bj->bi", Phi[idx], means[par]) + beta[idx]
        rhs = mu + jnp.einsum("bij,bj->bi", Q[idx], Fn[idx])
        IQH = jnp.eye(d, dtype=dtype)[None] + Q[idx] @ Hn[idx]  # explicit broadcast
        m = jnp.linalg.solve(IQH, rhs[..., None])[..., 0]
        return means.at[idx].set(m).at[n].set(0), None

    sched = (jnp.asarray(topo.level_schedule), jnp.asarray(topo.level_schedule_parent))
    means, _ = jax.lax.scan(level, means, sched)
    return means[:n]


def sde_proxy_from_anchors(
    topo: TreeTopology, sde: AbstractTreeSDE, anchors: Float[Array, "N dim"]
) -> LinearSDEs:
    r"""Driftless proxy ``b~ = 0``, ``a~`` interpolated between ``a(anchor_pa)`` and
    ``a(anchor_v)``.

    ``a0_v = a(0, anchor_{pa(v)})``, ``a1_v = a(tau_v, anchor_v)``; the root row copies itself.
    """
    n, d = anchors.shape
    if n != topo.num_nodes:
        raise ValueError(f"`anchors` must have shape ({topo.num_nodes}, dim), got {anchors.shape}.")
    tau = jnp.asarray(topo.branch_length, anchors.dtype)
    par = jnp.asarray(np.where(topo.parent < 0, topo.root, topo.parent))

    def a_at(t, x):
        s = sde.diffusion(t, x)
        return s @ s.T

    a0 = jax.vmap(a_at)(jnp.zeros_like(tau), anchors[par])
    a1 = jax.vmap(a_at)(tau, anchors)
    # On the output: a diffusion that ignores the state would drop a check on `anchors`.
    a1 = eqx.error_if(a1, ~jnp.all(jnp.isfinite(anchors)), "`anchors` must be finite (no NaN/inf).")
    z = jnp.zeros((n, d, d), anchors.dtype)
    return LinearSDEs(z, jnp.zeros((n, d), anchors.dtype), a0, a1)


def simulate_tree(
    key: PRNGKeyArray,
    topo: TreeTopology,
    sde: AbstractTreeSDE,
    x_root: Float[Array, " dim"],
    num_steps: int = 50,
) -> Float[Array, "N dim"]:
    """Unconditioned forward simulation of every node (Euler-Maruyama, ``num_steps`` per edge).

    Runs `guided_sample` with an uninformative filter (``H = F = 0``, so ``r~ = 0``): the
    steps are the same time-changed grid as guided sampling.

    Raises:
        ValueError: if ``num_steps`` is not an int >= 1.
    """
    if not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"`num_steps` must be an int >= 1, got {num_steps!r}.")
    x_root = check_rank(x_root, 1, "x_root", layout="(dim,)")
    n, d = topo.num_nodes, x_root.shape[0]
    dtype = x_root.dtype
    z = jnp.zeros((n, d, d), dtype)
    zero = Canonical(jnp.zeros((n,), dtype), jnp.zeros((n, d), dtype), z)
    filt = TreeFilter(
        zero,
        zero,
        jnp.zeros((n, num_steps + 1, d, d), dtype),
        jnp.zeros((n, num_steps + 1, d), dtype),
    )
    px = LinearSDEs(z, jnp.zeros((n, d), dtype), z, z)
    gt = GuidedTree(topo=topo, model=sde, filt=filt, proxy=px, x_root=x_root)
    return guided_sample(key, gt).states
