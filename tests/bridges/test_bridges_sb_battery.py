"""jit / vmap / grad battery for the public entry points of the Schrödinger-bridge family."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxgen.bridges import (
    BoundedMLPLogPotential,
    OUReference,
    doob_drift,
    gauss_hermite,
    log_h,
    log_terminal_density,
)

REF, T = OUReference(1), 1.0
PSI = eqx.filter_jit(lambda key: BoundedMLPLogPotential(1, 8, 1, key=key, init_kappa=0.3))(
    jr.key(5)
)
GH = gauss_hermite(1, 12)
XS = jnp.array([[-0.7], [0.1], [0.9]])


def _log_h(x):
    return log_h(PSI, REF, x, 0.3, T, GH)


def _drift(x):
    return doob_drift(PSI, REF, T, GH)(0.3, x, None)


def _logp(y):
    return log_terminal_density(PSI, REF, y, T, outer=GH, inner=GH)


@pytest.mark.slow
def test_eager_jit_vmap_grad():
    for f in (_log_h, _drift, _logp):
        jf = jax.jit(f)
        loop = jnp.stack([jf(x) for x in XS])
        np.testing.assert_allclose(f(XS[0]), loop[0], rtol=1e-12)  # eager == jit
        np.testing.assert_allclose(jax.jit(jax.vmap(f))(XS), loop, rtol=1e-12)  # vmap == loop
        check_grads(jf, (XS[1],), order=1, modes=("rev",))


@eqx.filter_jit
def _battery(psi, xs):
    """vmap == loop and reverse-mode grad == central difference (log_h and doob_drift)."""
    fns = (
        lambda x: log_h(psi, REF, x, 0.3, T, GH),
        lambda x: doob_drift(psi, REF, T, GH)(0.3, x, None)[0],
    )
    h = 1e-5
    out = []
    for f in fns:
        batched = jax.vmap(f)(xs[:2])
        loop = jnp.stack([f(xs[0]), f(xs[1])])
        g = jax.grad(f)(xs[1])
        fd = jnp.diff(jax.vmap(f)(xs[1][None] + jnp.array([[-h], [h]])))[0] / (2 * h)
        out.append((batched, loop, g, fd))
    return out


def test_vmap_and_grad_battery_fast():
    for batched, loop, g, fd in _battery(PSI, XS):
        np.testing.assert_allclose(batched, loop, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(g, fd[None], rtol=1e-6, atol=1e-8)
