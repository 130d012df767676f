"""A user's own equinox modules in the tree slots (`AbstractTreeKernel` for the edge model,
`AbstractKernelResidual` for the NBFFG residual): guided sampling, the loss, `fit_nbffg` and
importance sampling take them like the built-ins."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

from jaxgen.bridges import (
    AbstractKernelResidual,
    AbstractTreeKernel,
    GuidedTree,
    LinearKernels,
    TreeKernel,
    TreeTopology,
    backward_filter,
    fit_nbffg,
    full_tree_loss,
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


class LinearGaussianKernel(AbstractTreeKernel):
    """A user's edge model: ``x_v ~ N(Phi x_pa + beta, Q)`` with array fields."""

    phi: jax.Array
    beta: jax.Array
    q: jax.Array

    def mean(self, x_pa, tau):
        return self.phi @ x_pa + self.beta

    def cov(self, x_pa, tau):
        return self.q


class DiagonalAffine(AbstractKernelResidual):
    """A user's residual: ``T(xi) = xi exp(s) + b`` with context-free ``s, b``."""

    s: jax.Array
    b: jax.Array
    dim: int = eqx.field(static=True)

    def __call__(self, xi, context):
        return xi * jnp.exp(self.s) + self.b, jnp.sum(self.s)


def _tree(model):
    kern = LinearKernels(
        jnp.broadcast_to(PHI, (N, 2, 2)),
        jnp.broadcast_to(BETA, (N, 2)),
        jnp.broadcast_to(QM, (N, 2, 2)),
    )
    filt = eqx.filter_jit(backward_filter)(TOPO, Y, kern, C=C, R=R)
    return GuidedTree(topo=TOPO, model=model, filt=filt, proxy=kern, x_root=X0)


@eqx.filter_jit
def _draws(key, gt, control):
    return guided_sample(key, gt, control), path_loss(key, gt, jnp.arange(2), control)


def test_user_kernel_and_residual_sample_fit_importance():
    builtin = _tree(TreeKernel(lambda x, tau: PHI @ x + BETA, lambda x, tau: QM))
    gt = _tree(LinearGaussianKernel(PHI, BETA, QM))
    # the user's kernel is the built-in one: same guided draws with the same key
    (a, _), (b, _) = _draws(jr.key(0), gt, None), _draws(jr.key(0), builtin, None)
    np.testing.assert_allclose(a.states, b.states, rtol=1e-6)
    np.testing.assert_allclose(a.edge_loss, b.edge_loss, rtol=1e-5, atol=1e-7)
    # The proxy is exact, so the identity residual is optimal: from a perturbed one, training
    # the user's residual must bring the loss down.
    ctrl0 = DiagonalAffine(s=jnp.array([0.4, -0.3]), b=jnp.array([0.5, -0.5]), dim=2)
    draw, loss = _draws(jr.key(1), gt, ctrl0)
    assert draw.states.shape == (N, 2) and np.isfinite(float(loss))
    res = fit_nbffg(
        ctrl0,
        gt,
        key=jr.key(2),
        num_steps=30,
        mode="full",
        batch_size=4,
        optimizer=optax.adam(5e-2),
        progress=False,
    )
    assert isinstance(res.model, DiagonalAffine) and np.all(np.isfinite(res.losses))
    # common random numbers: the same 256 whole-tree draws score both residuals
    kl = eqx.filter_jit(full_tree_loss)
    before, after = kl(jr.key(3), gt, ctrl0, 256), kl(jr.key(3), gt, res.model, 256)
    assert float(after) < 0.5 * float(before)
    elbo = eqx.filter_jit(lambda c: importance_sample(jr.key(4), gt, 64, c).elbo)
    assert np.isfinite(float(elbo(res.model)))


def test_tree_slots_reject_non_conforming_modules():
    class Plain(eqx.Module):
        def __call__(self, xi, context):
            return xi, jnp.zeros(())

    gt = _tree(LinearGaussianKernel(PHI, BETA, QM))
    with pytest.raises(TypeError, match=r"control[\s\S]*AbstractKernelResidual"):
        guided_sample(jr.key(0), gt, Plain())
    with pytest.raises(TypeError, match=r"model[\s\S]*AbstractTreeKernel"):
        _tree(Plain())
