"""Direct tests of the small public helpers of the tree samplers.

`fuse`, `guiding_grid`, `leaf_batches`, `proxy_posterior_mean`, `sde_proxy_from_anchors`,
`simulate_tree` and `full_tree_loss` were only exercised through their callers. Each is checked
here against an independent float64 reference (numpy/scipy closed forms, a numpy dense Gaussian
conditioning written from scratch, the exact moments of the Euler scheme) or a simulated
guarantee with a stated tolerance.
"""

import functools as ft
from fractions import Fraction

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from scipy import stats

from jaxgen.bridges import (
    Canonical,
    ControlNet,
    GuidedTree,
    LinearKernels,
    LinearSDEs,
    TreeSDE,
    TreeTopology,
    dense_tree_smoother,
    full_tree_loss,
    fuse,
    guiding_grid,
    leaf_batches,
    log_potential,
    path_loss,
    proxy_posterior_mean,
    sde_proxy_from_anchors,
    simulate_tree,
    stratified_leaf_batches,
)

from .test_bridges_tree_guided import (
    BETA,
    PHI,
    QM,
    TOPO,
    X0,
    C,
    R,
    Y,
    _disc_tree,
    _filter,
    _shape_only,
)

N = TOPO.num_nodes


# -- numpy references ------------------------------------------------------------------------


def _np_gauss_canonical(m, S):
    """Canonical form of the normalised density N(x; m, S)."""
    P = np.linalg.inv(S)
    c = -0.5 * m @ P @ m - 0.5 * np.linalg.slogdet(2 * np.pi * S)[1]
    return c, P @ m, P


def _np_tree_posterior_mean(parent, Phi, beta, Q, Cm, Rm, y, x_root):
    """Posterior means of a linear-Gaussian tree with a fixed root, by dense conditioning.

    The prior joint is built node by node (parents first: Cov(x_v, x_u) = Phi_v Cov(x_pa, x_u)),
    independently of the library's message passing and of its ``(I - A)^{-1}`` smoother.
    """
    n, d = Phi.shape[0], Phi.shape[-1]
    order = np.argsort([_depth(parent, v) for v in range(n)], kind="stable")
    mean = np.zeros((n, d))
    cov = np.zeros((n, d, n, d))
    for v in order:
        p = parent[v]
        if p < 0:
            mean[v] = x_root
            continue
        mean[v] = Phi[v] @ mean[p] + beta[v]
        for u in range(n):
            cov[v, :, u, :] = Phi[v] @ cov[p, :, u, :]
            cov[u, :, v, :] = cov[v, :, u, :].T
        cov[v, :, v, :] = Phi[v] @ cov[p, :, p, :] @ Phi[v].T + Q[v]
    leaves = [v for v in range(n) if v not in set(parent.tolist())]
    S = cov.reshape(n * d, n * d)
    m = Cm.shape[0]
    G = np.zeros((len(leaves) * m, n * d))
    for i, v in enumerate(leaves):
        G[i * m : (i + 1) * m, v * d : (v + 1) * d] = Cm
    Syy = G @ S @ G.T + np.kron(np.eye(len(leaves)), Rm)
    post = mean.reshape(-1) + S @ G.T @ np.linalg.solve(Syy, y.reshape(-1) - G @ mean.reshape(-1))
    return post.reshape(n, d)


def _depth(parent, v):
    k = 0
    while parent[v] >= 0:
        v, k = parent[v], k + 1
    return k


# -- fuse ------------------------------------------------------------------------------------


def test_fuse_is_product_of_gaussian_densities():
    rng = np.random.default_rng(0)
    d, k = 2, 3
    ms = rng.normal(size=(k, d))
    Ss = []
    for _ in range(k):
        A = rng.normal(size=(d, d))
        Ss.append(A @ A.T + 0.3 * np.eye(d))
    parts = [_np_gauss_canonical(m, S) for m, S in zip(ms, Ss, strict=True)]
    msgs = Canonical(*(jnp.asarray(np.stack(p)) for p in zip(*parts, strict=True)))
    fused = fuse(msgs)
    assert fused.c.shape == () and fused.F.shape == (d,) and fused.H.shape == (d, d)
    # pointwise: log U_fused(x) = sum_i log N(x; m_i, S_i)
    for x in rng.normal(size=(4, d)):
        ref = sum(stats.multivariate_normal.logpdf(x, m, S) for m, S in zip(ms, Ss, strict=True))
        np.testing.assert_allclose(log_potential(fused, jnp.asarray(x)), ref, rtol=1e-12)
    # moments and mass of the product, by the sequential two-Gaussian product formula
    # N(x; a, A) N(x; b, B) = N(a; b, A + B) N(x; B (A+B)^-1 a + A (A+B)^-1 b, A (A+B)^-1 B)
    m_ref, S_ref, log_mass = ms[0], Ss[0], 0.0
    for m, S in zip(ms[1:], Ss[1:], strict=True):
        T = S_ref + S
        log_mass += stats.multivariate_normal.logpdf(m_ref, m, T)
        m_ref = S @ np.linalg.solve(T, m_ref) + S_ref @ np.linalg.solve(T, m)
        S_ref = S_ref @ np.linalg.solve(T, S)
    H, F, c = np.asarray(fused.H), np.asarray(fused.F), float(fused.c)
    np.testing.assert_allclose(np.linalg.inv(H), S_ref, rtol=1e-10)
    np.testing.assert_allclose(np.linalg.solve(H, F), m_ref, rtol=1e-10)
    # log int exp(c + F'x - x'Hx/2) dx
    mass = c + 0.5 * F @ np.linalg.solve(H, F) + 0.5 * d * np.log(2 * np.pi)
    mass -= 0.5 * np.linalg.slogdet(H)[1]
    np.testing.assert_allclose(mass, log_mass, rtol=1e-10)
    # one message is its own fusion; no messages is the uninformative message U = 1
    one = fuse(jax.tree_util.tree_map(lambda a: a[:1], msgs))
    np.testing.assert_allclose(one.H, msgs.H[0], rtol=1e-15)
    none = fuse(jax.tree_util.tree_map(lambda a: a[:0], msgs))
    assert float(none.c) == 0 and not np.any(none.F) and not np.any(none.H)


# -- guiding_grid ----------------------------------------------------------------------------


def test_guiding_grid_closed_form_and_spacing():
    for K in (1, 3, 8):
        g = np.asarray(guiding_grid(K))
        assert g.shape == (K + 1,) and g.dtype == np.float64
        exact = [1 - (1 - Fraction(k, K)) ** 2 for k in range(K + 1)]
        np.testing.assert_allclose(g, [float(e) for e in exact], rtol=0, atol=1e-15)
        assert g[0] == 0.0 and g[-1] == 1.0
        # u_{k+1} - u_k = (2 (K - k) - 1) / K^2: positive, strictly decreasing (denser at the child)
        steps = np.diff(g)
        np.testing.assert_allclose(steps, (2 * (K - np.arange(K)) - 1) / K**2, atol=1e-15)
        assert np.all(steps > 0) and np.all(np.diff(steps) < 0)
    with pytest.raises(ValueError, match="`num_steps` must be an int >= 1, got 0"):
        guiding_grid(0)
    with pytest.raises(TypeError):  # a float: the `int` annotation rejects it first
        guiding_grid(2.0)


# -- leaf_batches ----------------------------------------------------------------------------


@ft.partial(jax.jit, static_argnums=(1, 2, 3))
def _leaf_draws(key, num_leaves, batch_size, m):
    return jax.vmap(leaf_batches(num_leaves, batch_size))(jr.split(key, m))


def test_leaf_batches_distinct_uniform_rows():
    nl, b, m = 5, 3, 4000
    rows = np.asarray(_leaf_draws(jr.key(0), nl, b, m))
    assert rows.shape == (m, b) and np.issubdtype(rows.dtype, np.integer)
    assert rows.min() >= 0 and rows.max() < nl
    assert np.all(np.diff(np.sort(rows, axis=1), axis=1) > 0)  # without replacement
    # each leaf with probability b / nl, each pair with b (b-1) / (nl (nl-1)): 4 SE
    inc = np.zeros((m, nl), bool)
    inc[np.arange(m)[:, None], rows] = True
    p1 = b / nl
    np.testing.assert_array_less(np.abs(inc.mean(0) - p1), 4 * np.sqrt(p1 * (1 - p1) / m))
    p2 = b * (b - 1) / (nl * (nl - 1))
    pair = (inc[:, :, None] & inc[:, None, :]).mean(0)[np.triu_indices(nl, 1)]
    np.testing.assert_array_less(np.abs(pair - p2), 4 * np.sqrt(p2 * (1 - p2) / m))
    # a batch of every leaf is a permutation
    full = np.asarray(_leaf_draws(jr.key(1), nl, nl, 3))
    np.testing.assert_array_equal(np.sort(full, axis=1), np.broadcast_to(np.arange(nl), (3, nl)))
    with pytest.raises(ValueError, match="`batch_size` must be an int in \\[1, 5\\], got 6"):
        leaf_batches(5, 6)
    with pytest.raises(ValueError, match="`batch_size`"):
        leaf_batches(5, 0)


def test_stratified_leaf_batches_uniform_inclusion_and_subtree_counts():
    """Systematic sampling in depth-first order, on an unbalanced (Yule) tree: distinct rows,
    each leaf with probability B / N_L (what keeps `path_loss` unbiased; 4 SE), and every
    subtree holding floor or ceil of n_L(v) B / N_L of the drawn leaves (the stratification)."""
    topo = TreeTopology.yule(7, seed=3)
    nl, b, m = topo.num_leaves, 3, 4000
    rows = np.asarray(jax.jit(jax.vmap(stratified_leaf_batches(topo, b)))(jr.split(jr.key(0), m)))
    assert rows.shape == (m, b) and rows.min() >= 0 and rows.max() < nl
    assert np.all(np.diff(np.sort(rows, axis=1), axis=1) > 0)
    inc = np.zeros((m, nl), bool)
    inc[np.arange(m)[:, None], rows] = True
    p1 = b / nl
    np.testing.assert_array_less(np.abs(inc.mean(0) - p1), 4 * np.sqrt(p1 * (1 - p1) / m))
    paths = np.asarray(topo.leaf_paths)
    for v in np.flatnonzero(~np.asarray(topo.is_leaf)):
        below = np.any(paths == v, axis=1)  # leaf rows in the subtree of v
        counts = inc[:, below].sum(1)
        want = below.sum() * b / nl
        assert np.all((counts >= np.floor(want - 1e-9)) & (counts <= np.ceil(want + 1e-9))), v
    with pytest.raises(ValueError, match=f"`batch_size` must be an int in \\[1, {nl}\\], got 0"):
        stratified_leaf_batches(topo, 0)


# -- proxy_posterior_mean --------------------------------------------------------------------


def _sde_dummy_drift(t, x):
    return jnp.zeros_like(x)


def _sde_dummy_sigma(t, x):
    return jnp.eye(x.shape[0], dtype=x.dtype)


@eqx.filter_jit
def _posterior_means(gt):
    return proxy_posterior_mean(gt)


def test_proxy_posterior_mean_discrete_equals_dense_conditioning():
    gt, kern = _disc_tree()
    got = _posterior_means(gt)
    ref = _np_tree_posterior_mean(
        TOPO.parent,
        *(np.broadcast_to(a, (N, *a.shape)) for a in (PHI, BETA, QM)),
        np.asarray(C),
        np.asarray(R),
        np.asarray(Y),
        np.asarray(X0),
    )
    assert got.shape == (N, 2)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_proxy_posterior_mean_driftless_sde_equals_dense_conditioning():
    # a~ interpolates a0 -> a1 linearly, so the exact edge transition is N(x, tau (a0 + a1) / 2).
    rng = np.random.default_rng(1)
    G0, G1 = rng.normal(size=(2, N, 2, 2))
    a0 = 0.2 * G0 @ np.swapaxes(G0, 1, 2) + 0.05 * np.eye(2)
    a1 = 0.2 * G1 @ np.swapaxes(G1, 1, 2) + 0.05 * np.eye(2)
    Q = TOPO.branch_length[:, None, None] * (a0 + a1) / 2
    # proxy_posterior_mean reads only the node messages; those of the closed-form SDE filter
    # are the pullbacks through N(x, Q) (checked in test_bridges_tree_filter), so the discrete
    # filter (already compiled) supplies them; the guiding-grid rows are unused placeholders.
    kern = LinearKernels(jnp.broadcast_to(jnp.eye(2), (N, 2, 2)), jnp.zeros((N, 2)), jnp.asarray(Q))
    disc = _filter(TOPO, Y, kern, C=C, R=R)
    filt = disc._replace(H_t=jnp.zeros((N, 3, 2, 2)), F_t=jnp.zeros((N, 3, 2)))
    px = LinearSDEs(jnp.zeros((N, 2, 2)), jnp.zeros((N, 2)), jnp.asarray(a0), jnp.asarray(a1))
    gt = GuidedTree(
        topo=TOPO, model=TreeSDE(_sde_dummy_drift, _sde_dummy_sigma), filt=filt, proxy=px, x_root=X0
    )
    got = _posterior_means(gt)
    ref = _np_tree_posterior_mean(
        TOPO.parent,
        np.broadcast_to(np.eye(2), (N, 2, 2)),
        np.zeros((N, 2)),
        Q,
        np.asarray(C),
        np.asarray(R),
        np.asarray(Y),
        np.asarray(X0),
    )
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


# -- sde_proxy_from_anchors ------------------------------------------------------------------


def _sigma_tx(t, x):
    """State- and time-dependent (2, 3) diffusion."""
    return (1 + t) * jnp.array([[1 + x[0] ** 2, 0.3, 0.0], [x[1], 1.0, 0.5 * x[0]]])


_LLT = np.array([[0.5, 0.1], [0.1, 0.3]])


def _sigma_linear_a(t, x):
    """Diffusion with a(t) = (1 + 2 t) L L^T: linear in t, independent of x."""
    return jnp.sqrt(1 + 2 * t) * jnp.linalg.cholesky(jnp.asarray(_LLT, x.dtype))


_proxy_jit = eqx.filter_jit(sde_proxy_from_anchors)


def test_sde_proxy_from_anchors_reads_a_at_the_edge_ends():
    rng = np.random.default_rng(2)
    anchors = rng.normal(size=(N, 2))
    px = _proxy_jit(TOPO, TreeSDE(_sde_dummy_drift, _sigma_tx), jnp.asarray(anchors))
    assert isinstance(px, LinearSDEs)
    np.testing.assert_array_equal(px.B, np.zeros((N, 2, 2)))
    np.testing.assert_array_equal(px.beta, np.zeros((N, 2)))

    def a(t, x):
        s = np.array([[1 + x[0] ** 2, 0.3, 0.0], [x[1], 1.0, 0.5 * x[0]]]) * (1 + t)
        return s @ s.T

    for v in range(N):
        p = TOPO.parent[v]
        want0 = a(0.0, anchors[v if p < 0 else p])  # the root row copies itself
        want1 = a(TOPO.branch_length[v], anchors[v])
        np.testing.assert_allclose(px.a0[v], want0, rtol=1e-12)
        np.testing.assert_allclose(px.a1[v], want1, rtol=1e-12)
    # a(t) linear in t and state-free: a~(t) = a0 + t / tau (a1 - a0) reproduces it on each edge
    lin = _proxy_jit(TOPO, TreeSDE(_sde_dummy_drift, _sigma_linear_a), jnp.asarray(anchors))
    for v in range(1, N):
        tau = TOPO.branch_length[v]
        for t in (0.0, 0.3 * tau, tau):
            at = lin.a0[v] + (t / tau) * (lin.a1[v] - lin.a0[v])
            np.testing.assert_allclose(at, (1 + 2 * t) * _LLT, rtol=1e-12)
    with pytest.raises(ValueError, match=r"`anchors` must have shape \(7, dim\), got \(6, 2\)"):
        sde_proxy_from_anchors(TOPO, TreeSDE(_sde_dummy_drift, _sigma_tx), jnp.zeros((6, 2)))


# -- simulate_tree ---------------------------------------------------------------------------

# root -> 1 -> {2, 3}: nodes 2 and 3 share the edge into node 1.
SIM_TOPO = TreeTopology.from_parents(np.array([-1, 0, 1, 1]), np.array([0.0, 0.3, 0.5, 0.2]))
SIM_B = np.array([[-0.5, 0.3], [0.0, -1.0]])
SIM_BETA = np.array([0.2, -0.1])
SIM_SIGMA = np.array([[0.8, 0.0, 0.3], [0.2, 0.6, 0.0]])
SIM_X0 = np.array([0.5, -1.0])
SIM_K = 3


def _sim_drift(t, x):
    return jnp.asarray(SIM_B, x.dtype) @ x + jnp.asarray(SIM_BETA, x.dtype)


def _sim_sigma(t, x):
    return jnp.asarray(SIM_SIGMA, x.dtype)


@ft.partial(jax.jit, static_argnums=(1,))
def _simulate_many(key, m):
    sde = TreeSDE(_sim_drift, _sim_sigma)
    return jax.vmap(lambda k: simulate_tree(k, SIM_TOPO, sde, jnp.asarray(SIM_X0), SIM_K))(
        jr.split(key, m)
    )


def _euler_edge(tau):
    """Exact law of K Euler-Maruyama steps on the grid t_k = tau u_k: x -> M x + b + N(0, P)."""
    g = tau * np.array([float(1 - (1 - Fraction(k, SIM_K)) ** 2) for k in range(SIM_K + 1)])
    M, b, P = np.eye(2), np.zeros(2), np.zeros((2, 2))
    a = SIM_SIGMA @ SIM_SIGMA.T
    for dt in np.diff(g):
        A = np.eye(2) + SIM_B * dt
        M, b, P = A @ M, A @ b + SIM_BETA * dt, A @ P @ A.T + a * dt
    return M, b, P


def test_simulate_tree_linear_sde_moments():
    m = 3000
    xs = np.asarray(_simulate_many(jr.key(0), m))
    assert xs.shape == (m, 4, 2)
    np.testing.assert_array_equal(xs[:, 0], np.broadcast_to(SIM_X0, (m, 2)))
    (M1, b1, P1), (M2, b2, P2), (M3, b3, P3) = (
        _euler_edge(SIM_TOPO.branch_length[v]) for v in (1, 2, 3)
    )
    mu1 = M1 @ SIM_X0 + b1
    mean = np.concatenate([mu1, M2 @ mu1 + b2, M3 @ mu1 + b3])
    cov = np.block(
        [
            [P1, P1 @ M2.T, P1 @ M3.T],
            [M2 @ P1, M2 @ P1 @ M2.T + P2, M2 @ P1 @ M3.T],
            [M3 @ P1, M3 @ P1 @ M2.T, M3 @ P1 @ M3.T + P3],
        ]
    )
    z = xs[:, 1:].reshape(m, 6)
    sd = np.sqrt(np.diag(cov))
    np.testing.assert_array_less(np.abs(z.mean(0) - mean), 4 * sd / np.sqrt(m))
    # sample covariance entries: Var(S_ij) ~ (S_ii S_jj + S_ij^2) / m
    emp = np.cov(z, rowvar=False)
    se = np.sqrt((np.outer(sd**2, sd**2) + cov**2) / m)
    np.testing.assert_array_less(np.abs(emp - cov), 4 * se)
    with pytest.raises(ValueError, match="`num_steps` must be an int >= 1, got 0"):
        simulate_tree(jr.key(0), SIM_TOPO, TreeSDE(_sim_drift, _sim_sigma), jnp.asarray(SIM_X0), 0)


# -- full_tree_loss --------------------------------------------------------------------------

# The discrete tree of test_bridges_tree_guided (root -> {1, 2}, 1 -> {3, 4}, 2 -> {5, 6}) with
# a proxy that is exact on the edges into the leaves and wrong on the edges into 1 and 2. Without
# a residual l_v = log h~_{v->pa}(x_pa) - log h^_v(x_pa): 0 on the exact edges, and on the edges
# from the fixed root a constant, the log-evidence of the two leaves below v with the proxy's
# kernel on edge v minus the same with the model's kernel. So sum_v l_v is not random.
PROXY_Q = np.array([[0.5, -0.1], [-0.1, 0.4]])


@eqx.filter_jit
def _full(key, gt, m):
    return full_tree_loss(key, gt, None, m)


def _mixed_case(key, m):
    """The mixed-proxy GuidedTree and its full-tree loss over m draws."""
    wrong = np.array([False, True, True, False, False, False, False])
    Phi = np.where(wrong[:, None, None], 0.9 * np.eye(2), np.asarray(PHI))
    beta = np.where(wrong[:, None], 0.0, np.asarray(BETA))
    Q = np.where(wrong[:, None, None], PROXY_Q, np.asarray(QM))
    px = LinearKernels(*(jnp.asarray(a) for a in (Phi, beta, Q)))
    filt = _filter(TOPO, Y, px, C=C, R=R)  # same shapes as _disc_tree's: compiled once
    gt = GuidedTree(topo=TOPO, model=_disc_tree()[0].model, filt=filt, proxy=px, x_root=X0)
    return gt, _full(key, gt, m)


def _np_subtree_log_evidence(mu_v, Q_v, y2):
    """log p(y_a, y_b) for x_v ~ N(mu_v, Q_v) and two leaf children under the model kernel."""
    Cn, Rn, Ph, Qm = np.asarray(C), np.asarray(R), np.asarray(PHI), np.asarray(QM)
    m1 = Cn @ (Ph @ mu_v + np.asarray(BETA))
    shared = Cn @ Ph @ Q_v @ Ph.T @ Cn.T
    own = Cn @ Qm @ Cn.T + Rn
    cov = np.block([[shared + own, shared], [shared, shared + own]])
    return stats.multivariate_normal.logpdf(np.asarray(y2).reshape(-1), np.tile(m1, 2), cov)


def test_full_tree_loss_closed_form_on_a_mixed_proxy_tree():
    gt, got = _mixed_case(jr.key(0), 3)  # 3 draws, all with the same sum: their mean is it
    x0, Ph, B = np.asarray(X0), np.asarray(PHI), np.asarray(BETA)
    ref = 0.0
    for rows in (slice(0, 2), slice(2, 4)):  # leaves below node 1, below node 2
        ref += _np_subtree_log_evidence(0.9 * x0, PROXY_Q, Y[rows])
        ref -= _np_subtree_log_evidence(Ph @ x0 + B, np.asarray(QM), Y[rows])
    assert abs(ref) > 0.1  # the proxy is wrong enough to matter
    np.testing.assert_allclose(got, ref, rtol=1e-9)
    with pytest.raises(ValueError, match="`num_samples` must be an int >= 1, got 0"):
        full_tree_loss(jr.key(0), gt, None, 0)
    with pytest.raises(TypeError, match="`control` must be a AbstractKernelResidual"):
        full_tree_loss(jr.key(0), gt, _shape_only(ControlNet, 2, 2, 8, 1), 1)


def _constant_sigma(t, x):
    return 0.6 * jnp.eye(2, dtype=x.dtype)


def test_tree_helpers_refuse_values_their_results_would_hide():
    """Each case below returned a finite (or NaN) result without a word (bad-input registry)."""
    # A state-independent diffusion never reads the anchors: the check sits on the result, so
    # it survives jit (a check on the input alone would be dropped with the unused input).
    bad = jnp.zeros((N, 2)).at[1, 0].set(jnp.nan)
    with pytest.raises(eqx.EquinoxRuntimeError, match="`anchors` must be finite"):
        jax.block_until_ready(_proxy_jit(TOPO, TreeSDE(_sde_dummy_drift, _constant_sigma), bad))
    gt, kern = _disc_tree()
    with pytest.raises(ValueError, match="`leaf_rows` must have shape"):  # the mean of no leaf
        path_loss(jr.key(0), gt, jnp.zeros((0,), jnp.int32))
    with pytest.raises(ValueError, match=r"`leaf_rows` must be integer labels in \[0, 4\)"):
        path_loss(jr.key(0), gt, jnp.array([0, 4]))  # gathered as the last leaf before
    # An indefinite observation covariance made the dense Cholesky NaN.
    with pytest.raises(eqx.EquinoxRuntimeError, match="`R` must be symmetric positive semi"):
        dense_tree_smoother(TOPO, kern, Y, C=C, R=-R, x_root=X0)
