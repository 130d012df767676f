"""Run by `test_core_sharded_montecarlo.py` in a process with 4 host devices.

For each family's Monte-Carlo entry point, computes the result on a 4-device mesh and on one
device and saves both to the ``.npz`` file named on the command line.
"""

import sys

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

from jaxgen.bridges import (  # noqa: E402
    GuidedTree,
    LinearKernels,
    TreeKernel,
    TreeTopology,
    backward_filter,
    importance_sample,
)
from jaxgen.confseq import miscoverage  # noqa: E402
from jaxgen.core import sample_many  # noqa: E402
from jaxgen.flows import NTM, IdentityTransporter, MLPPredictor, ntm_schedule  # noqa: E402
from jaxgen.transport import solve_srgw_couplings  # noqa: E402


def confseq_case(mesh):
    x = jr.beta(jr.key(1), 8.0, 8.0, (8, 200, 3))  # 8 runs, T = 200, d = 3, mean 0.5
    mu = jnp.full(3, 0.5)
    return {
        kind: miscoverage(x, mu, 0.2, kind=kind, mesh=mesh)
        for kind in ("portfolio", "bonferroni", "predmix_eb")
    }


def transport_case(mesh):
    n, k, b = 10, 3, 4
    upper = jnp.triu((jr.uniform(jr.key(2), (b, n, n)) < 0.4).astype(jnp.float64), 1)
    A = upper + jnp.swapaxes(upper, 1, 2)
    W = jnp.broadcast_to(jnp.eye(k) * 0.8 + 0.1, (b, k, k))
    T0 = jax.nn.softmax(jr.normal(jr.key(3), (b, n, k)), axis=-1) / n
    out = solve_srgw_couplings(A, W, T0, tol=1e-6, max_steps=200, throw=False, mesh=mesh)
    return {"coupling": out.coupling, "objective": out.objective, "steps": out.num_steps}


def bridges_case(mesh):
    topo = TreeTopology(np.array([-1, 0, 0, 1, 1, 2, 2]))
    phi, beta = jnp.array([[0.9, 0.1], [0.0, 0.8]]), jnp.array([0.1, -0.2])
    q = jnp.array([[0.3, 0.05], [0.05, 0.2]])
    kern = LinearKernels(
        jnp.broadcast_to(phi, (7, 2, 2)),
        jnp.broadcast_to(beta, (7, 2)),
        jnp.broadcast_to(q, (7, 2, 2)),
    )
    y = jnp.array([[0.5], [0.2], [-0.4], [-0.9]])
    filt = backward_filter(topo, y, kern, C=jnp.array([[1.0, 0.5]]), R=jnp.array([[0.05]]))
    model = TreeKernel(lambda x, tau: phi @ x + beta, lambda x, tau: q)
    gt = GuidedTree(topo=topo, model=model, filt=filt, proxy=kern, x_root=jnp.array([0.3, -0.2]))
    out = importance_sample(jr.key(4), gt, 16, mesh=mesh)
    return {"states": out.states, "log_weights": out.log_weights, "ess": out.ess}


def flows_case(mesh):
    model = NTM(IdentityTransporter(), MLPPredictor(2, 1, width=16, depth=2, key=jr.key(5)))
    ts = ntm_schedule(4, 2)
    return {"samples": sample_many(jr.key(6), lambda k: model.sample(k, ts)[0], 8, mesh=mesh)}


def main(path):
    assert len(jax.devices()) == 4, jax.devices()
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("data", "fsdp"))
    results = {}
    for family, case in (
        ("confseq", confseq_case),
        ("transport", transport_case),
        ("bridges", bridges_case),
        ("flows", flows_case),
    ):
        sharded, single = case(mesh), case(None)
        for name in sharded:
            devices = len(sharded[name].sharding.device_set)
            results[f"{family}/{name}/sharded"] = np.asarray(sharded[name])
            results[f"{family}/{name}/single"] = np.asarray(single[name])
            results[f"{family}/{name}/devices"] = np.asarray(devices)
    np.savez(path, **results)


if __name__ == "__main__":
    main(sys.argv[1])
