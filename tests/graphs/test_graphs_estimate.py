"""srGW graphon / SBM estimation: planted recovery, rounding gap, multi-start, vmap, bad input."""

import functools

import chex
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.core import RESULTS
from jaxgen.graphs import (
    GRAPHONS,
    adjusted_rand_index,
    check_adjacency,
    estimate_graphon,
    node_mse,
    objective_of_labels,
    sample_graphon,
    sample_sbm,
)
from jaxgen.transport import srgw_objective

B3 = jnp.array([[0.8, 0.1, 0.2], [0.1, 0.7, 0.15], [0.2, 0.15, 0.6]])
PI3 = jnp.array([0.3, 0.3, 0.4])


def _fit_sbm(key, n, K, **kw):
    key_g, key_f = jr.split(key)
    A, P, z = sample_sbm(key_g, n, B3, PI3)
    est = estimate_graphon(key_f, A, K, throw=False, **kw)
    return (
        adjusted_rand_index(z, est.labels),
        node_mse(est.edge_probabilities(), P),
        est.rounding_gap,
        est.frac_deterministic,
        est.converged,
    )


N_SMALL, STARTS = 120, 3


@functools.cache
def _planted_small():
    """Ten planted SBMs (n = 120) fitted in one vmapped, jitted call, shared by the tests below:
    (graphs, fitting keys, estimates, true labels)."""

    def one(key):
        key_g, key_f = jr.split(key)
        A, P, z = sample_sbm(key_g, N_SMALL, B3, PI3)
        est = estimate_graphon(key_f, A, 3, num_starts=STARTS, throw=False)
        return A, P, z, key_f, est

    return jax.jit(jax.vmap(one))(jr.split(jr.key(0), 10))


def test_planted_sbm_recovery_small():
    # n = 120 with 3 k-means starts (one start recovers 10/10 at n = 400: slow test)
    _, P, z, _, est = _planted_small()
    ari = jax.vmap(adjusted_rand_index)(z, est.labels)
    mse = jax.vmap(node_mse)(jax.vmap(lambda e: e.edge_probabilities())(est), P)
    assert int(jnp.sum(ari > 1 - 1e-12)) >= 9
    assert float(jnp.median(mse)) < 1e-3
    assert bool(jnp.all(est.result == RESULTS.successful))
    # the relaxed solution is a vertex and argmax rounding costs (essentially) nothing
    assert float(jnp.max(est.rounding_gap * N_SMALL)) <= 1.0
    assert float(jnp.min(est.frac_deterministic)) >= 0.99


def test_estimate_fields_multistart_and_vmap_equals_loop():
    graphs, _, _, keys, batched = _planted_small()
    K = 3
    # eager calls (one compiled `_estimate`, reused by the empty-graph test) == the vmapped ones
    looped = [
        estimate_graphon(keys[b], graphs[b], K, num_starts=STARTS, throw=False) for b in range(2)
    ]
    for b, est in enumerate(looped):
        chex.assert_trees_all_equal(batched.labels[b], est.labels)
        chex.assert_trees_all_close(batched.block_matrix[b], est.block_matrix, atol=1e-12)
        chex.assert_trees_all_close(batched.start_objectives[b], est.start_objectives, rtol=1e-10)
    est = looped[0]
    A, n = graphs[0], N_SMALL
    assert est.labels.shape == (n,) and est.block_matrix.shape == (K, K)
    assert est.coupling.shape == (n, K) and est.start_objectives.shape == (STARTS,)
    assert int(est.block_sizes.sum()) == n
    # the kept start is the best one, and its objective is F(T, W)
    np.testing.assert_allclose(float(est.objective), float(est.start_objectives.min()))
    np.testing.assert_allclose(
        float(est.objective),
        float(srgw_objective(A, est.coupling, est.relaxed_block_matrix)),
        rtol=1e-10,
    )
    # the rounded objective is the least-squares SBM fit of the labels
    F_lab, W_lab = objective_of_labels(A, est.labels, K)
    np.testing.assert_allclose(float(est.rounded_objective), float(F_lab), rtol=1e-10)
    used = np.asarray(est.block_sizes) > 0
    np.testing.assert_allclose(
        np.asarray(est.block_matrix)[np.ix_(used, used)],
        np.asarray(W_lab)[np.ix_(used, used)],
        rtol=1e-10,
    )
    P_hat = est.edge_probabilities()
    chex.assert_trees_all_close(P_hat, est.block_matrix[est.labels][:, est.labels])
    assert float(P_hat.min()) >= 0.0 and float(P_hat.max()) <= 1.0


def test_multistart_keeps_the_lowest_objective():
    # the starts of the vmapped fits differ, and the kept one is always their minimum
    _, _, _, _, est = _planted_small()
    np.testing.assert_allclose(
        np.asarray(est.objective), np.asarray(jnp.min(est.start_objectives, axis=1))
    )


def test_empty_graph_reports_empty_blocks_without_nan(getkey):
    A = jnp.zeros((N_SMALL, N_SMALL))  # the shapes above: the compiled solver is reused
    est = estimate_graphon(getkey(), A, 3, num_starts=STARTS, throw=False)
    assert int(est.num_blocks) < 3
    assert bool(jnp.all(jnp.isfinite(est.block_matrix)))
    assert float(est.rounded_objective) == 0.0


def test_bad_input(getkey):
    key = getkey()
    A = np.zeros((6, 6))
    A[0, 1] = A[1, 0] = 1.0
    with pytest.raises(ValueError, match="square"):
        estimate_graphon(key, np.zeros((4, 5)), 2)
    directed = A.copy()
    directed[2, 3] = 1.0
    with pytest.raises(ValueError, match="symmetric"):
        estimate_graphon(key, directed, 2)
    with pytest.raises(ValueError, match=r"entries in \[0, 1\]"):
        estimate_graphon(key, 2 * A, 2)
    with pytest.raises(ValueError, match="NaN"):
        estimate_graphon(key, np.where(A > 0, np.nan, 0.0), 2)
    loops = A.copy()
    loops[3, 3] = 1.0
    with pytest.raises(ValueError, match="self-loops"):
        estimate_graphon(key, loops, 2)
    with pytest.raises(ValueError, match="1 <= K <= n"):
        estimate_graphon(key, A, 0)
    with pytest.raises(ValueError, match="1 <= K <= n"):
        estimate_graphon(key, A, 7)
    with pytest.raises(TypeError):  # jaxtyping hook: K is annotated int
        estimate_graphon(key, A, 2.0)
    with pytest.raises(TypeError):  # Literal annotation (the jaxtyping hook)
        estimate_graphon(key, A, 2, init="louvain")
    with pytest.raises(TypeError):
        estimate_graphon(key, A, 2, rounding="nearest")
    with pytest.raises(ValueError, match="`num_starts` must be"):
        estimate_graphon(key, A, 2, num_starts=0)
    with pytest.raises(ValueError, match="`max_steps` must be"):
        estimate_graphon(key, A, 2, max_steps=0)
    with pytest.raises(ValueError, match="`tol` must be"):
        estimate_graphon(key, A, 2, tol=-1.0)
    with pytest.raises(ValueError, match="at least 2 nodes"):
        check_adjacency(np.zeros((1, 1)))
    # under jit the value checks go through eqx.error_if
    with pytest.raises(Exception, match="must be symmetric"):
        jax.block_until_ready(jax.jit(check_adjacency)(jnp.asarray(directed)))


@pytest.mark.slow
def test_planted_sbm_recovery_n400():
    fit = jax.jit(jax.vmap(lambda k: _fit_sbm(k, 400, 3)))
    ari, mse, gap, frac, _ = fit(jr.split(jr.key(1), 10))
    assert int(jnp.sum(ari > 1 - 1e-12)) >= 9
    assert float(jnp.median(mse)) < 1e-4
    assert float(jnp.max(gap * 400)) <= 1.0


@pytest.mark.slow
def test_over_specified_k_is_a_refinement():
    key_g, key_f = jr.split(jr.key(2))
    A, P, z = sample_sbm(key_g, 400, B3, PI3)
    est = estimate_graphon(key_f, A, 10, throw=False)
    labels, z = np.asarray(est.labels), np.asarray(z)
    for k in np.unique(labels):
        counts = np.bincount(z[labels == k], minlength=3)
        assert counts.max() / counts.sum() >= 0.95
    assert float(node_mse(est.edge_probabilities(), P)) < 5e-3


@pytest.mark.slow
def test_mse_shrinks_with_n_on_lipschitz_graphon():
    mses = {}
    for n in (400, 800):
        errs = []
        for r in range(3):
            key_g, key_f = jr.split(jr.fold_in(jr.key(3), 10 * n + r))
            A, P, _ = sample_graphon(key_g, n, GRAPHONS["abs_diff"])
            est = estimate_graphon(key_f, A, int(np.sqrt(n)), throw=False)
            errs.append(float(node_mse(est.edge_probabilities(), P)))
        mses[n] = np.mean(errs)
    assert mses[800] < 0.6 * mses[400]


@pytest.mark.slow
def test_real_graphs_davis_and_karate():
    pytest.importorskip("networkx")
    from jaxgen.data import load_davis_southern_women, load_karate_club

    davis = load_davis_southern_women()
    est = estimate_graphon(jr.key(0), davis.adjacency, 2, init="random", num_starts=30, throw=False)
    assert float(adjusted_rand_index(jnp.asarray(davis.labels), est.labels)) == 1.0
    karate = load_karate_club()
    est = estimate_graphon(jr.key(0), karate.adjacency, 4, num_starts=10, throw=False)
    assert float(adjusted_rand_index(jnp.asarray(karate.labels), est.labels)) >= 0.5


def test_error_if_under_vmap_is_usable():
    # a traced NaN adjacency is caught by eqx.error_if, not turned into a silent NaN estimate
    A = jnp.full((2, 4, 4), jnp.nan)
    with pytest.raises(Exception, match="NaN"):
        jax.block_until_ready(eqx.filter_jit(jax.vmap(check_adjacency))(A))
