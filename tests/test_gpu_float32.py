"""float32 numerics of each family's core function against its float64 result on the CPU.

Marked ``gpu``: skipped in ``make test`` and run by ``python -m benchmarks device-check`` on
whatever backend is present (an accelerator runs the float32 side there; on a CPU the check
still runs both precisions). Each case states its tolerance: ``1e-4`` relative for closed forms
and single matrix factorisations, ``1e-3`` for iterative solvers, special functions and deep
compositions (float32 has ~7 significant digits; errors compound through iterations).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import jaxgen.bridges as bridges
import jaxgen.confseq as confseq
import jaxgen.core as core
import jaxgen.deconvolution as deconvolution
import jaxgen.dictionary as dictionary
import jaxgen.discrete as discrete
import jaxgen.energy as energy
import jaxgen.entropy as entropy
import jaxgen.flows as flows
import jaxgen.graphs as graphs
import jaxgen.metrics as metrics
import jaxgen.nn as nn
import jaxgen.pde as pde
import jaxgen.selectivity as selectivity
import jaxgen.transformers as transformers
import jaxgen.transport as transport

pytestmark = pytest.mark.gpu

KEY = jr.key(20261205)


def _spd(key, dim):
    a = jr.normal(key, (dim, dim))
    return a @ a.T / dim + jnp.eye(dim)


def _simplex(key, shape):
    return jax.nn.softmax(jr.normal(key, shape), axis=-1)


def _adjacency(key, n):
    upper = jnp.triu((jr.uniform(key, (n, n)) < 0.4).astype(jnp.float64), 1)
    return upper + upper.T


def _transformer_nll():
    model = nn.Transformer(17, 16, 2, 2, 12, key=jr.fold_in(KEY, 1))
    tokens = jr.randint(jr.fold_in(KEY, 2), (12,), 0, 17)
    return transformers.token_nll, (model, tokens)


def _ou_transition():
    return (
        pde.exact_log_transition,
        (
            pde.OrnsteinUhlenbeck(),
            jnp.asarray(0.3),
            jnp.array([0.4]),
            jnp.array([-0.2]),
            jnp.array([1.5, 0.1, 0.7]),
        ),
    )


def _gmm_convmmd():
    k = jr.split(KEY, 3)
    gmm = deconvolution.GaussianMixture(
        jnp.array([0.3, 0.7]), jr.normal(k[0], (2, 2)), jnp.stack([jnp.eye(2), 0.5 * jnp.eye(2)])
    )
    x = jr.normal(k[1], (24, 2))
    scales = 0.3 * jnp.ones((24, 2))
    return (
        lambda gmm, x, s, h: deconvolution.convmmd_loss_gmm_closed(gmm, (x, s), bandwidths=h),
        (gmm, x, scales, jnp.array([0.5, 1.0, 2.0])),
    )


def _ode():
    rate = jnp.array([0.5, 1.0, 2.0])

    def solve(y0, rate):
        return core.solve_ode(lambda t, y, args: -args * y, y0, args=rate).ys[-1]

    return solve, (jnp.array([1.0, -2.0, 0.5]), rate)


# name -> (factory returning (fn, float64 args), rtol, atol)
CASES = {
    "core.solve_ode (Tsit5, adaptive)": (_ode, 1e-3, 1e-5),
    "core.mmd2_unbiased": (
        lambda: (
            lambda x, y, h: core.mmd2_unbiased(x, y, h),
            (
                jr.normal(KEY, (32, 3)),
                1.0 + jr.normal(jr.fold_in(KEY, 1), (28, 3)),
                jnp.array([0.5, 1.0, 2.0]),
            ),
        ),
        1e-3,
        1e-5,
    ),
    "metrics.gaussian_w2": (
        lambda: (
            metrics.gaussian_w2,
            (jnp.zeros(3), _spd(KEY, 3), jnp.ones(3), _spd(jr.fold_in(KEY, 1), 3)),
        ),
        1e-4,
        1e-5,
    ),
    "metrics.energy_distance": (
        lambda: (
            metrics.energy_distance,
            (jr.normal(KEY, (40, 2)), 0.5 + jr.normal(jr.fold_in(KEY, 1), (40, 2))),
        ),
        1e-4,
        1e-5,
    ),
    "flows.matrix_geometric_mean": (
        lambda: (flows.matrix_geometric_mean, (_spd(KEY, 3), _spd(jr.fold_in(KEY, 1), 3))),
        1e-4,
        1e-5,
    ),
    "flows.trajectory_covariance": (
        lambda: (flows.trajectory_covariance, (jnp.linspace(0.05, 1.0, 6),)),
        1e-4,
        1e-6,
    ),
    "bridges.gaussian_kl": (
        lambda: (
            bridges.gaussian_kl,
            (jnp.zeros(3), _spd(KEY, 3), jnp.ones(3), _spd(jr.fold_in(KEY, 1), 3)),
        ),
        1e-4,
        1e-5,
    ),
    "bridges.follmer_drift_gaussian": (
        lambda: (
            bridges.follmer_drift_gaussian,
            (jnp.asarray(0.4), jnp.array([0.3, -0.1]), jnp.array([1.0, 2.0]), _spd(KEY, 2)),
        ),
        1e-4,
        1e-5,
    ),
    "discrete.categorical_kl": (
        lambda: (
            discrete.categorical_kl,
            (_simplex(KEY, (5, 7)), jax.nn.log_softmax(jr.normal(jr.fold_in(KEY, 1), (5, 7)))),
        ),
        1e-4,
        1e-6,
    ),
    "pde.exact_log_transition (OU)": (_ou_transition, 1e-4, 1e-5),
    "pde.log_ncx2_pdf (CIR transition)": (
        lambda: (pde.log_ncx2_pdf, (jnp.asarray(3.2), jnp.asarray(4.5), jnp.asarray(2.0))),
        1e-3,
        1e-5,
    ),
    "transport.srgw_objective": (
        lambda: (
            transport.srgw_objective,
            (
                _adjacency(KEY, 12),
                _simplex(jr.fold_in(KEY, 1), (12, 3)) / 12,
                jr.uniform(jr.fold_in(KEY, 2), (3, 3)),
            ),
        ),
        1e-4,
        1e-6,
    ),
    "graphs.usvt": (
        lambda: (graphs.usvt, (_adjacency(KEY, 20),)),
        1e-3,
        1e-4,
    ),
    "confseq.log_wealth": (
        lambda: (
            lambda x, m: confseq.log_wealth(x, m),
            (jr.uniform(KEY, (200, 3)), jnp.array([0.4, 0.5, 0.6])),
        ),
        1e-3,
        1e-4,
    ),
    "dictionary.fista_codes": (
        lambda: (
            lambda X, D, R0: dictionary.fista_codes(X, D, R0, 0.1, 0.0, jnp.ones(6, bool)),
            (
                jr.normal(KEY, (8, 30)),
                jr.normal(jr.fold_in(KEY, 1), (8, 6)) / 3,
                jnp.zeros((6, 30)),
            ),
        ),
        1e-3,
        1e-4,
    ),
    "energy.energy_joint": (
        lambda: (energy.energy_joint, (jr.normal(KEY, (6, 4)), jnp.arange(6) % 4)),
        1e-4,
        1e-6,
    ),
    "entropy.markov_entropy_rate": (
        lambda: (entropy.markov_entropy_rate, (_simplex(KEY, (5, 5)),)),
        1e-4,
        1e-6,
    ),
    "selectivity.selectivity_gap": (
        lambda: (selectivity.selectivity_gap, (jr.normal(KEY, (10, 4)),)),
        1e-4,
        1e-6,
    ),
    "deconvolution.convmmd_loss_gmm_closed": (_gmm_convmmd, 1e-3, 1e-5),
    "nn.cf_value (continued fraction)": (
        lambda: (nn.cf_value, (1.0 + jr.uniform(KEY, (4, 6)),)),
        1e-4,
        1e-6,
    ),
    "transformers.token_nll (Transformer forward)": (_transformer_nll, 1e-3, 1e-4),
}


def _to(dtype, tree):
    return jax.tree_util.tree_map(lambda x: x.astype(dtype) if eqx.is_inexact_array(x) else x, tree)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_on_the_default_device_matches_float64_on_cpu(name):
    factory, rtol, atol = CASES[name]
    fn, args = factory()
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        reference = eqx.filter_jit(fn)(*jax.device_put(_to(jnp.float64, args), cpu))
    result = eqx.filter_jit(fn)(*_to(jnp.float32, args))
    for got, want in zip(
        jax.tree_util.tree_leaves(result), jax.tree_util.tree_leaves(reference), strict=True
    ):
        if jnp.issubdtype(want.dtype, jnp.inexact):
            assert got.dtype == jnp.float32, f"{name} did not keep float32: {got.dtype}"
        np.testing.assert_allclose(
            np.asarray(got, np.float64), np.asarray(want), rtol=rtol, atol=atol, err_msg=name
        )
