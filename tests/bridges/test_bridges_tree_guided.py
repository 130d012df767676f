import functools as ft

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.bridges import (
    ControlNet,
    GuidedTree,
    LinearKernels,
    LinearSDEs,
    ResidualFlow,
    TreeKernel,
    TreeSDE,
    TreeTopology,
    backward_filter,
    dense_tree_smoother,
    fit_nbffg,
    guided_sample,
    importance_sample,
    path_loss,
)

TOPO = TreeTopology.balanced(2, branch_length=0.5)
N = TOPO.num_nodes
PHI = jnp.array([[0.9, 0.2], [-0.1, 0.8]])
BETA = jnp.array([0.1, -0.2])
QM = jnp.array([[0.3, 0.05], [0.05, 0.2]])
C = jnp.array([[1.0, 0.5]])
R = jnp.array([[0.05]])
X0 = jnp.array([0.3, -0.2])
Y = jnp.array([[0.5], [0.2], [-0.4], [-0.9]])


def _mean(x, tau):
    return PHI @ x + BETA


def _cov(x, tau):
    return QM


_filter = eqx.filter_jit(backward_filter)


@ft.cache
def _disc_tree():
    kern = LinearKernels(
        jnp.broadcast_to(PHI, (N, 2, 2)),
        jnp.broadcast_to(BETA, (N, 2)),
        jnp.broadcast_to(QM, (N, 2, 2)),
    )
    filt = _filter(TOPO, Y, kern, C=C, R=R)
    model = TreeKernel(_mean, _cov)
    return GuidedTree(topo=TOPO, model=model, filt=filt, proxy=kern, x_root=X0), kern


@eqx.filter_jit
def _is(key, gt, m, control=None):
    return importance_sample(key, gt, m, control)


# Compiled once for the module: the importance sampler, the dense reference and the checks on
# them (the fast tests share a handful of compiled programs; eager ops would each compile).
@eqx.filter_jit
def _is_vs_dense(key, gt, kern, m):
    out = importance_sample(key, gt, m)
    means, covs, logev = dense_tree_smoother(TOPO, kern, Y, C=C, R=R, x_root=X0)
    se = jnp.sqrt(jnp.diagonal(covs, axis1=1, axis2=2) / m)[1:]
    z_mean = jnp.max(jnp.abs(out.posterior_mean - means)[1:] / se)
    dev = out.states - means[None]
    emp = jnp.einsum("mni,mnj->nij", dev, dev) / m
    rel = jnp.linalg.norm(emp - covs, axis=(1, 2))[1:] / jnp.linalg.norm(covs, axis=(1, 2))[1:]
    return out._replace(states=out.states[:2]), logev, z_mean, jnp.max(rel)


_guided_disc = eqx.filter_jit(guided_sample)
_path_disc = eqx.filter_jit(path_loss)


def test_discrete_lg_guided_posterior_equals_dense_smoother():
    gt, kern = _disc_tree()
    M = 20_000
    out, logev, z_mean, rel_cov = _is_vs_dense(jr.key(1), gt, kern, M)
    assert float(jnp.max(jnp.abs(out.log_weights))) <= 1e-9  # every l_v = 0
    np.testing.assert_allclose(out.ess, M, rtol=1e-10)
    np.testing.assert_allclose(out.log_evidence, logev, atol=1e-8)
    np.testing.assert_allclose(out.elbo, logev, atol=1e-8)
    assert float(z_mean) <= 4.0  # every node's posterior mean within 4 SE
    assert float(rel_cov) <= 0.05  # covariances within 5 %


def _perturb_flow(flow, key):
    ks = jr.split(key, len(flow.nets))

    def perturb(net, k):
        w = net.layers[-1].weight
        return eqx.tree_at(lambda m: m.layers[-1].weight, net, 0.3 * jr.normal(k, w.shape))

    return eqx.tree_at(
        lambda f: f.nets, flow, tuple(perturb(n, k) for n, k in zip(flow.nets, ks, strict=True))
    )


@eqx.filter_jit
def _flows(key):
    """The zero-initialised flow and a perturbed copy (one compile instead of eager inits)."""
    flow = ResidualFlow(2, 2, 8, 1, key=key)
    return flow, _perturb_flow(flow, jr.fold_in(key, 1))


def _random_flow(key):
    return _flows(key)[1]


@eqx.filter_jit
def _logdet_vs_jacobian(flow):
    xi, ctx = jnp.array([0.3, -0.8]), jnp.linspace(-1.0, 1.0, 7)  # (x_pa, m, log diag P, tau)
    _, logdet = flow(xi, ctx)
    J = jax.jacrev(lambda z: flow(z, ctx)[0])(xi)
    return logdet, jnp.linalg.slogdet(J)[1]


def test_residual_flow_identity_at_init_and_path_loss_telescopes():
    gt, kern = _disc_tree()
    zero, flow = _flows(jr.key(0))
    # theta = 0 is BFFG, same keys; the importance sampler's vmapped BFFG draws (keys split from
    # key(1)) against single draws with the zero flow: also vmap == loop.
    plain = _is_vs_dense(jr.key(1), gt, kern, 20_000)[0].states
    keys = jr.split(jr.key(1), 20_000)
    for i in range(2):
        same = _guided_disc(keys[i], gt, zero)
        np.testing.assert_allclose(same.states, plain[i], rtol=1e-12, atol=1e-14)
    key = keys[0]
    # exact proxy: every l_v = 0 (up to the 1e-9 relative jitter in the Cholesky of P°)
    np.testing.assert_allclose(same.edge_loss, 0.0, atol=1e-8)
    full = _guided_disc(key, gt, flow)
    assert float(jnp.max(jnp.abs(full.edge_loss))) > 1e-3  # a non-identity flow is penalised
    # Every leaf once, same key: the weights N_L / n_L(v) make the mean exactly the tree sum.
    every = _path_disc(key, gt, jnp.arange(TOPO.num_leaves), flow)
    np.testing.assert_allclose(every, jnp.sum(full.train_loss), rtol=1e-10)
    # Unbiased over random leaves (drawn with replacement) and keys: Monte Carlo, 3 SE.
    n = 60
    paths, fulls = [], []
    for i in range(n):
        k = jr.fold_in(jr.key(5), i)
        rows = jr.randint(jr.fold_in(k, 1), (TOPO.num_leaves,), 0, TOPO.num_leaves)
        paths.append(float(_path_disc(k, gt, rows, flow)))
        fulls.append(float(jnp.sum(_guided_disc(jr.fold_in(k, 2), gt, flow).train_loss)))
    paths, fulls = np.array(paths), np.array(fulls)
    se = np.sqrt(paths.var() / n + fulls.var() / n)
    assert abs(paths.mean() - fulls.mean()) <= 3 * se
    # the flow's log-determinant against autodiff of the map
    logdet, ref = _logdet_vs_jacobian(flow)
    np.testing.assert_allclose(logdet, ref, rtol=1e-10)


@pytest.mark.slow
def test_fit_discrete_flow_is_exact_fixed_point():
    # With an exact proxy the posterior is the guided kernel (identity flow, KL = 0): from a
    # perturbed flow, training must bring the loss (= KL up to a constant 0) down.
    gt, _ = _disc_tree()
    res = fit_nbffg(
        _random_flow(jr.key(4)),
        gt,
        key=jr.key(1),
        num_steps=60,
        mode="path",
        batch_size=2,
        progress=False,
    )
    assert res.losses.shape == (60,) and np.all(np.isfinite(res.losses))
    assert float(np.mean(res.losses[-10:])) < float(np.mean(res.losses[:10]))


SIG = 0.6


def _sde_drift_lin(t, x):
    return jnp.zeros_like(x)


def _sde_drift_dw(t, x):
    return x - x**3


def _sde_sigma(t, x):
    return SIG * jnp.eye(1, dtype=x.dtype)


Y1 = jnp.array([[1.0], [0.9], [-1.0], [-1.1]])
R1 = jnp.array([[0.01]])
K = 8


@ft.cache
def _sde_tree(drift):
    a = jnp.full((N, 1, 1), SIG**2)
    px = LinearSDEs(jnp.zeros((N, 1, 1)), jnp.zeros((N, 1)), a, a)
    filt = _filter(TOPO, Y1, px, R=R1, num_steps=K)
    return GuidedTree(
        topo=TOPO, model=TreeSDE(drift, _sde_sigma), filt=filt, proxy=px, x_root=jnp.zeros(1)
    )


@eqx.filter_jit
def _sde_is_vs_dense(key, gt, m):
    out = importance_sample(key, gt, m)
    kern = LinearKernels(
        jnp.ones((N, 1, 1)),
        jnp.zeros((N, 1)),
        SIG**2 * jnp.asarray(TOPO.branch_length)[:, None, None],
    )
    means, covs, logev = dense_tree_smoother(TOPO, kern, Y1, R=R1, x_root=jnp.zeros(1))
    return out._replace(states=out.states[:1]), means, covs, logev


@pytest.mark.slow
def test_sde_lg_exact_proxy_has_equal_weights_and_exact_evidence():
    gt = _sde_tree(_sde_drift_lin)
    M = 256
    out, means, covs, logev = _sde_is_vs_dense(jr.key(2), gt, M)
    assert float(jnp.max(jnp.abs(out.log_weights))) <= 1e-10  # G == 0 when b = b~, a = a~
    np.testing.assert_allclose(out.ess, M, rtol=1e-10)
    np.testing.assert_allclose(out.log_evidence, logev, atol=1e-10)
    se = jnp.sqrt(covs[:, 0, 0] / M)[1:]
    err = jnp.abs(out.posterior_mean[1:, 0] - means[1:, 0])
    assert bool(jnp.all(err <= 4 * se + 0.02))  # Euler-Maruyama, 8 steps per edge


def _random_control(key):
    ctrl = ControlNet(1, 1, 16, 2, key=key)
    w = ctrl.mlp.layers[-1].weight
    return eqx.tree_at(lambda c: c.mlp.layers[-1].weight, ctrl, 0.3 * jr.normal(key, w.shape))


_guided = eqx.filter_jit(guided_sample)
_path = eqx.filter_jit(path_loss)


@eqx.filter_jit
def _control_case(key):
    ctrl = ControlNet(2, 3, 8, 1, key=key)
    args = (jnp.asarray(0.3), jnp.asarray(0.2), jnp.array([0.1, -0.4]), jnp.array([1.0, 2.0]))
    one = jnp.ones(1)
    return ctrl(*args), _random_control(key)(jnp.asarray(0.3), jnp.asarray(0.2), one, one)


def test_control_net_starts_at_zero():
    zero, out = _control_case(jr.key(0))
    np.testing.assert_array_equal(zero, jnp.zeros(3))
    assert out.shape == (1,) and float(jnp.abs(out[0])) > 0


@pytest.mark.slow
def test_zero_control_is_bffg_and_path_loss_telescopes():
    gt = _sde_tree(_sde_drift_dw)
    key = jr.key(3)
    plain = _guided(key, gt, None)
    zero = _guided(key, gt, ControlNet(1, 1, 16, 2, key=jr.key(0)))
    np.testing.assert_array_equal(plain.states, zero.states)
    np.testing.assert_array_equal(plain.edge_loss, zero.edge_loss)
    ctrl = _random_control(jr.key(4))
    full = _guided(key, gt, ctrl)
    # Every leaf once, same key: the weights N_L / n_L(v) make the mean exactly the tree sum.
    every = _path(key, gt, jnp.arange(TOPO.num_leaves), ctrl)
    np.testing.assert_allclose(every, jnp.sum(full.train_loss), rtol=1e-10)
    # vmap == loop
    keys = jr.split(key, 2)
    batched = jax.vmap(lambda k: _guided(k, gt, ctrl))(keys)
    for i in range(2):
        np.testing.assert_allclose(batched.states[i], _guided(keys[i], gt, ctrl).states, rtol=1e-12)


@pytest.mark.slow
def test_path_subsampling_is_unbiased():
    gt = _sde_tree(_sde_drift_dw)
    ctrl = _random_control(jr.key(4))
    M = 4000
    keys = jr.split(jr.key(7), M)
    fulls = jax.jit(jax.vmap(lambda k: jnp.sum(guided_sample(k, gt, ctrl).train_loss)))(keys)
    leaves = jr.randint(jr.key(8), (M, 1), 0, TOPO.num_leaves)
    keys2 = jr.split(jr.key(9), M)
    paths = jax.jit(jax.vmap(lambda k, lf: path_loss(k, gt, lf, ctrl)))(keys2, leaves)
    se = jnp.sqrt(jnp.var(fulls) / M + jnp.var(paths) / M)
    assert abs(float(jnp.mean(fulls) - jnp.mean(paths))) <= 3 * float(se)
    grad_full = eqx.filter_grad(
        lambda c: jnp.mean(
            jax.vmap(lambda k: jnp.sum(guided_sample(k, gt, c).train_loss))(keys[:1000])
        )
    )(ctrl)
    grad_path = eqx.filter_grad(
        lambda c: jnp.mean(
            jax.vmap(lambda k, lf: path_loss(k, gt, lf, c))(keys2[:1000], leaves[:1000])
        )
    )(ctrl)

    def flat(g):
        return jnp.concatenate([x.ravel() for x in jax.tree_util.tree_leaves(g)])

    g1 = flat(eqx.filter(grad_full, eqx.is_array))
    g2 = flat(eqx.filter(grad_path, eqx.is_array))
    assert float(g1 @ g2 / jnp.linalg.norm(g1) / jnp.linalg.norm(g2)) >= 0.9


@pytest.mark.slow
def test_fit_nbffg_full_mode_improves_elbo():
    """Eight whole-tree draws per step: 300 Adam steps raise the IS ELBO above BFFG's (same IS
    key for both, so the comparison uses common random numbers; measured -2.709 -> -2.663)."""
    gt = _sde_tree(_sde_drift_dw)
    ctrl0 = ControlNet(1, 1, 32, 2, key=jr.key(0))
    before = _is(jr.key(11), gt, 2048, ctrl0)
    res = fit_nbffg(ctrl0, gt, key=jr.key(1), num_steps=300, mode="full", batch_size=8)
    after = _is(jr.key(11), gt, 2048, res.model)
    assert res.losses.shape == (300,)
    assert float(after.elbo) > float(before.elbo) + 0.02


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason=(
        "known shortfall: path mode shares one tree draw across its B leaves (per-edge keys), so a "
        "step's gradient comes from a single draw; at lr 1e-3 that noise makes the IS ELBO worse "
        "than BFFG's (-2.818 vs -2.709; full mode with one draw per step: -2.881, with eight: "
        "-2.663). Independent per-leaf draws were tried and do not fix it (B = 2: -2.819, B = 4: "
        "-2.732). Still fails with the 3e-3 / 5% warm-up default and stratified leaves at 300 "
        "steps; the benchmark's path model needs 2000 steps of B = 4 (ablation note)."
    ),
)
def test_fit_nbffg_path_mode_improves_elbo():
    gt = _sde_tree(_sde_drift_dw)
    ctrl0 = ControlNet(1, 1, 32, 2, key=jr.key(0))
    before = _is(jr.key(11), gt, 2048, ctrl0)
    res = fit_nbffg(ctrl0, gt, key=jr.key(1), num_steps=300, mode="path", batch_size=2)
    after = _is(jr.key(11), gt, 2048, res.model)
    assert float(after.elbo) > float(before.elbo)


def _shape_only(cls, *args, **kw):
    # The module with ShapeDtypeStruct leaves: enough for the type/dim checks, and no compile.
    return eqx.filter_eval_shape(ft.partial(cls, *args, **kw), key=jr.key(0))


def test_guided_bad_input():
    gt, kern = _disc_tree()
    sgt = eqx.filter_eval_shape(_sde_tree.__wrapped__, _sde_drift_dw)  # shapes suffice
    with pytest.raises(TypeError, match="must agree"):
        GuidedTree(
            topo=TOPO, model=TreeSDE(_sde_drift_dw, _sde_sigma), filt=gt.filt, proxy=kern, x_root=X0
        )
    with pytest.raises(ValueError, match="`x_root` must have shape"):
        GuidedTree(topo=TOPO, model=gt.model, filt=gt.filt, proxy=kern, x_root=jnp.zeros(3))
    with pytest.raises(TypeError, match="`control` must be a AbstractKernelResidual"):
        fit_nbffg(_shape_only(ControlNet, 2, 2, 8, 1), gt, key=jr.key(0), num_steps=1)
    with pytest.raises(TypeError, match="`control` must be a AbstractSDEControl"):
        guided_sample(jr.key(0), sgt, _shape_only(ResidualFlow, 1))
    with pytest.raises(ValueError, match="`control` acts in dim 3"):
        guided_sample(jr.key(0), gt, _shape_only(ResidualFlow, 3))
    with pytest.raises(ValueError, match="`num_layers` must be"):
        ResidualFlow(2, 0, key=jr.key(0))
    ctrl = _shape_only(ControlNet, 1, 1, 8, 1)
    with pytest.raises(ValueError, match="`mode`"):
        fit_nbffg(ctrl, sgt, key=jr.key(0), num_steps=1, mode="tree")
    with pytest.raises(ValueError, match="`batch_size`"):
        fit_nbffg(ctrl, sgt, key=jr.key(0), num_steps=1, batch_size=9)
    with pytest.raises(ValueError, match="`leaf_sampling` must be 'stratified' or 'uniform'"):
        fit_nbffg(ctrl, sgt, key=jr.key(0), num_steps=1, leaf_sampling="random")
    with pytest.raises(ValueError, match="`num_samples`"):
        importance_sample(jr.key(0), gt, 0)
