import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxgen.bridges import (
    Canonical,
    LinearKernels,
    LinearSDEs,
    TreeTopology,
    backward_filter,
    dense_tree_smoother,
    leaf_message,
    lg_sde_to_discrete,
    log_evidence,
    log_potential,
    pullback,
)

TOPO = TreeTopology.balanced(3, branch_length=0.4)
N, D = TOPO.num_nodes, 2
C = jnp.array([[1.0, 0.5]])
R = jnp.array([[0.1]])
X0 = jnp.array([0.3, -0.2])


@eqx.filter_jit
def _lg(key):
    k = jr.split(key, 3)
    Phi = 0.8 * jnp.eye(D)[None] + 0.1 * jr.normal(k[0], (N, D, D))
    beta = 0.1 * jr.normal(k[1], (N, D))
    G = jr.normal(k[2], (N, D, D))
    Q = 0.3 * G @ jnp.swapaxes(G, 1, 2) + 0.1 * jnp.eye(D)[None]
    return LinearKernels(Phi, beta, Q)


@eqx.filter_jit
def _y(key):
    return jr.normal(key, (TOPO.num_leaves, 1))


@eqx.filter_jit
def _filter_disc(kernels, y, C, R):
    return backward_filter(TOPO, y, kernels, C=C, R=R)


_dense = eqx.filter_jit(dense_tree_smoother)


def _root(filt):
    return jax.tree_util.tree_map(lambda a: a[0], filt.node)


@eqx.filter_jit
def _pullback_case(key):
    d = 3
    k = jr.split(key, 9)
    A = jr.normal(k[0], (d, d))
    H = A @ A.T + 0.5 * jnp.eye(d)
    F = jr.normal(k[1], (d,))
    msg = Canonical(jnp.array(-0.3), F, H)
    Phi = jr.normal(k[2], (d, d)) * 0.5
    beta = jr.normal(k[3], (d,))
    Bq = jr.normal(k[4], (d, d))
    Q = Bq @ Bq.T * 0.3
    x = jr.normal(k[5], (d,))
    got = log_potential(pullback(msg, Phi, beta, Q), x)
    # moment form: U(z) = exp(c) (2pi)^{d/2} det(H)^{-1/2} exp(F'H^{-1}F/2) N(z; H^{-1}F, H^{-1})
    mean, cov = jnp.linalg.solve(H, F), jnp.linalg.inv(H)
    logZ = msg.c + 0.5 * d * math.log(2 * math.pi) - 0.5 * jnp.linalg.slogdet(H)[1] + 0.5 * F @ mean
    S = Q + cov
    r = mean - (Phi @ x + beta)
    ref = logZ - 0.5 * r @ jnp.linalg.solve(S, r) - 0.5 * jnp.linalg.slogdet(2 * math.pi * S)[1]
    # singular H (rank 1) against Monte Carlo
    u = jr.normal(k[6], (d,))
    msg1 = Canonical(jnp.array(0.1), 0.7 * u, jnp.outer(u, u))
    z = (Phi @ x + beta)[None] + jr.normal(k[7], (200_000, d)) @ jnp.linalg.cholesky(Q).T
    mc = jnp.log(jnp.mean(jnp.exp(jax.vmap(lambda zz: log_potential(msg1, zz))(z))))
    return got, ref, log_potential(pullback(msg1, Phi, beta, Q), x), mc


def test_pullback_matches_moment_form_and_monte_carlo(getkey):
    got, ref, got1, mc = _pullback_case(getkey())
    np.testing.assert_allclose(got, ref, atol=1e-10)
    np.testing.assert_allclose(got1, mc, atol=2e-2)


@eqx.filter_jit
def _leaf_case():
    y = jnp.array([0.4, -1.0])
    Cm = jnp.array([[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]])
    Rm = jnp.array([[0.3, 0.1], [0.1, 0.2]])
    x = jnp.array([0.1, 0.2, -0.3])
    r = y - Cm @ x
    ref = -0.5 * r @ jnp.linalg.solve(Rm, r) - 0.5 * jnp.linalg.slogdet(2 * math.pi * Rm)[1]
    return log_potential(leaf_message(y, Cm, Rm), x), ref


def test_leaf_message_is_gaussian_likelihood():
    got, ref = _leaf_case()
    np.testing.assert_allclose(got, ref, rtol=1e-12)


@eqx.filter_jit
def _evidence_case(kern, y, R):
    """Filter log-evidence (fixed root and root prior) against the dense smoother: one compile."""
    root = _root(backward_filter(TOPO, y, kern, C=C, R=R))
    prior = (X0, 0.5 * jnp.eye(D))
    out = (log_evidence(root, x_root=X0), log_evidence(root, prior=prior))
    refs = (
        dense_tree_smoother(TOPO, kern, y, C=C, R=R, x_root=X0)[2],
        dense_tree_smoother(TOPO, kern, y, C=C, R=R, prior=prior)[2],
    )
    return out, refs


def test_discrete_filter_equals_dense_smoother(getkey):
    kern, y = _lg(getkey()), _y(getkey())
    (fixed, with_prior), (ref, ref_p) = _evidence_case(kern, y, R)
    np.testing.assert_allclose(fixed, ref, atol=1e-8)
    np.testing.assert_allclose(with_prior, ref_p, atol=1e-8)


@pytest.mark.slow
def test_filter_eager_equals_jit(getkey):
    kern, y = _lg(getkey()), _y(getkey())
    filt = _filter_disc(kern, y, C, R)
    eager = backward_filter(TOPO, y, kern, C=C, R=R)
    np.testing.assert_allclose(eager.node.H, filt.node.H, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(eager.edge.c, filt.edge.c, rtol=1e-12)


@pytest.mark.slow
def test_filter_gradient_in_observations(getkey):
    kern, y = _lg(getkey()), _y(getkey())
    f = jax.jit(lambda yy: log_evidence(_root(_filter_disc(kern, yy, C, R)), x_root=X0))
    check_grads(f, (y,), order=1, modes=("rev",), atol=1e-4, rtol=1e-4)


def _filter_sde(proxy, y, method, rtol=1e-8):
    return backward_filter(
        TOPO, y, proxy, C=C, R=R, method=method, num_steps=8, rtol=rtol, atol=1e-11
    )


_filter_sde_jit = eqx.filter_jit(_filter_sde)


@pytest.mark.slow
def test_sde_filter_ode_vs_closed_form_vs_discrete(getkey):
    """ODE == closed form (Brownian proxy, interpolated a~), and ODE == Van Loan pullback (OU)."""
    y = _y(getkey())
    a0 = jnp.broadcast_to(jnp.array([[0.5, 0.1], [0.1, 0.3]]), (N, D, D))
    z = jnp.zeros((N, D, D))
    bm = LinearSDEs(z, jnp.zeros((N, D)), a0, 1.5 * a0)
    closed = _filter_sde_jit(bm, y, "closed")
    ode = _filter_sde_jit(bm, y, "ode", 1e-10)
    np.testing.assert_allclose(ode.H_t, closed.H_t, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ode.F_t, closed.F_t, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ode.node.c, closed.node.c, rtol=1e-7)
    B = jnp.broadcast_to(jnp.array([[-0.5, 0.2], [0.0, -0.3]]), (N, D, D))
    beta = jnp.broadcast_to(jnp.array([0.1, 0.2]), (N, D))
    ou = LinearSDEs(B, beta, a0, a0)
    ode = _filter_sde_jit(ou, y, "ode", 1e-10)
    tau = jnp.asarray(TOPO.branch_length)
    disc = LinearKernels(*jax.vmap(lg_sde_to_discrete)(B, beta, a0, tau))
    ref = _filter_disc(disc, y, C, R)
    np.testing.assert_allclose(ode.node.c, ref.node.c, rtol=1e-7)
    np.testing.assert_allclose(ode.node.F, ref.node.F, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ode.edge.H, ref.edge.H, rtol=1e-7, atol=1e-9)
    _, _, le = _dense(TOPO, disc, y, C=C, R=R, x_root=X0)
    np.testing.assert_allclose(log_evidence(_root(ode), x_root=X0), le, rtol=1e-7)


TOPO2 = TreeTopology.from_parents(np.array([-1, 0]), np.array([0.0, 0.7]))


@eqx.filter_jit
def _brownian_case(px, y, Rm):
    ode = backward_filter(TOPO2, y, px, R=Rm, method="ode", num_steps=4, rtol=1e-10, atol=1e-12)
    closed = backward_filter(TOPO2, y, px, R=Rm, method="closed", num_steps=4)
    return ode, closed


@eqx.filter_jit
def _brownian_closed(px, y, Rm):
    return backward_filter(TOPO2, y, px, R=Rm, method="closed", num_steps=4)


def _brownian_check(filters):
    t = 0.7 * (1 - (1 - jnp.arange(5) / 4) ** 2)
    Hs = 1 / (0.7 - t + 0.2)
    c0 = -0.5 * math.log(2 * math.pi * 0.9) - 0.64 / 0.9 / 2
    for filt in filters:
        np.testing.assert_allclose(filt.H_t[1, :, 0, 0], Hs, rtol=1e-8)
        np.testing.assert_allclose(filt.F_t[1, :, 0], 0.8 * Hs, rtol=1e-8)
        np.testing.assert_allclose(filt.edge.c[1], c0, rtol=1e-8)


Y2, R2, ONE2 = jnp.array([[0.8]]), jnp.array([[0.2]]), jnp.ones((2, 1, 1))


def test_brownian_edge_closed_form():
    """1-D Brownian edge, leaf variance R: H(t) = 1/(tau - t + R), closed-form c."""
    _brownian_check([_brownian_closed(LinearSDEs(0 * ONE2, jnp.zeros((2, 1)), ONE2, ONE2), Y2, R2)])
    with pytest.raises(Exception, match="driftless proxy"):
        _brownian_closed(LinearSDEs(ONE2, jnp.zeros((2, 1)), ONE2, ONE2), Y2, R2)


@pytest.mark.slow
def test_brownian_edge_ode_and_closed_form():
    """The backward ODE (`core.solve_ode`) and the closed-form filter both reproduce it."""
    _brownian_check(_brownian_case(LinearSDEs(0 * ONE2, jnp.zeros((2, 1)), ONE2, ONE2), Y2, R2))


@eqx.filter_jit
def _van_loan_case(B, beta, a, tau):
    return lg_sde_to_discrete(B, beta, a, tau)


def test_lg_sde_to_discrete_ou_closed_form():
    """Diagonal OU dX = -k (X - mu) dt + s dW: Phi = e^{-k tau}, b = mu (1 - e^{-k tau}),
    Q = s^2 (1 - e^{-2 k tau}) / (2 k) (the discrete side of the check)."""
    k, mu, s2, tau = jnp.array([0.5, 1.5]), jnp.array([0.3, -1.0]), jnp.array([0.4, 2.0]), 0.7
    Phi, b, Q = _van_loan_case(-jnp.diag(k), k * mu, jnp.diag(s2), jnp.asarray(tau))
    np.testing.assert_allclose(Phi, jnp.diag(jnp.exp(-k * tau)), atol=1e-12)
    np.testing.assert_allclose(b, mu * (1 - jnp.exp(-k * tau)), rtol=1e-10)
    np.testing.assert_allclose(
        Q, jnp.diag(s2 * (1 - jnp.exp(-2 * k * tau)) / (2 * k)), rtol=1e-10, atol=1e-14
    )


def test_filter_bad_input(getkey):
    kern, y = _lg(getkey()), _y(getkey())
    with pytest.raises(ValueError, match="num_leaves=8"):
        backward_filter(TOPO, y[:5], kern, C=C, R=R)
    with pytest.raises(ValueError, match="`C` must have shape"):
        backward_filter(TOPO, y, kern, C=jnp.ones((1, 3)), R=R)
    with pytest.raises(TypeError):  # m disagrees with y: caught by the jaxtyping annotation
        backward_filter(TOPO, y, kern, C=jnp.eye(2), R=R)
    with pytest.raises(ValueError, match="one row per node"):
        backward_filter(TOPO, y, LinearKernels(kern.Phi[:3], kern.beta, kern.Q), C=C, R=R)
    with pytest.raises(TypeError):  # not a proxy: the annotation rejects it
        backward_filter(TOPO, y, (1, 2, 3), C=C, R=R)
    with pytest.raises(ValueError, match="`method`"):
        z = jnp.zeros((N, D, D))
        backward_filter(TOPO, y, LinearSDEs(z, jnp.zeros((N, D)), z, z), C=C, R=R, method="x")
    with pytest.raises(Exception, match="`R` must be symmetric positive semi-definite"):
        _evidence_case(kern, y, -R)
    with pytest.raises(Exception, match="`proxy.Q` must be symmetric positive semi-definite"):
        _evidence_case(kern._replace(Q=-kern.Q), y, R)
    with pytest.raises(Exception, match="`R` must be symmetric positive definite"):
        eqx.filter_jit(leaf_message)(jnp.ones(1), jnp.ones((1, 2)), jnp.zeros((1, 1)))
    with pytest.raises(ValueError, match="exactly one of"):
        log_evidence(Canonical(jnp.zeros(()), jnp.zeros(D), jnp.eye(D)))
