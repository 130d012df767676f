"""Samplers, graphons, baselines (USVT, SAS, network histogram), metrics and the graph loaders."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.graphs import (
    GRAPHONS,
    adjusted_rand_index,
    graphon,
    graphon_l2_sorted,
    hold_out_pairs,
    link_auc,
    network_histogram,
    node_mse,
    sample_graphon,
    sample_sbm,
    sas,
    tv_denoise,
    usvt,
)


def test_thirteen_graphons_in_unit_square_and_symmetric():
    assert len(GRAPHONS) == 13
    x = jnp.linspace(0.0, 1.0, 41)
    for name, fn in GRAPHONS.items():
        G = fn(x[:, None], x[None, :])
        assert float(G.min()) >= 0.0 and float(G.max()) <= 1.0, name
        np.testing.assert_allclose(np.asarray(G), np.asarray(G.T), atol=1e-12, err_msg=name)
    np.testing.assert_allclose(float(graphon("abs_diff")(0.2, 0.7)), 0.5)
    with pytest.raises(ValueError, match="unknown graphon"):
        graphon("nope")


def test_sample_sbm_frequencies_match_b():
    B = jnp.array([[0.6, 0.1], [0.1, 0.3]])
    A, P, z = jax.jit(sample_sbm, static_argnums=1)(jr.key(0), 300, B, jnp.array([0.5, 0.5]))
    assert A.shape == (300, 300) and bool(jnp.all(A == A.T))
    assert float(jnp.abs(jnp.diagonal(A)).sum()) == 0.0
    Z = jax.nn.one_hot(z, 2)
    counts = Z.T @ A @ Z
    pairs = Z.T @ (1 - jnp.eye(300)) @ Z
    freq = counts / pairs
    se = jnp.sqrt(B * (1 - B) / (pairs / 2))
    assert bool(jnp.all(jnp.abs(freq - B) < 5 * se))
    with pytest.raises(TypeError):  # the jaxtyping hook catches the shape mismatch
        sample_sbm(jr.key(0), 10, B, jnp.ones(3) / 3)
    with pytest.raises(ValueError, match="`n` must be"):
        sample_sbm(jr.key(0), 1, B, jnp.ones(2) / 2)


def test_sample_graphon_edge_frequency():
    A, P, xi = sample_graphon(jr.key(1), 200, GRAPHONS["mean"])
    np.testing.assert_allclose(np.asarray(P[0, 1]), 0.5 * (xi[0] + xi[1]), rtol=1e-12)
    n_pairs = 200 * 199
    se = np.sqrt(0.25 / (n_pairs / 2))
    assert abs(float(A.sum() / n_pairs) - float(P.sum() / n_pairs)) < 5 * se


def test_usvt_recovers_low_rank_and_beats_raw_adjacency():
    P = jnp.full((100, 100), 0.8)  # rank one, eigenvalue 80 > (2 + eta) sqrt(100)
    np.testing.assert_allclose(np.asarray(usvt(P)), np.asarray(P), atol=1e-10)
    A, P, _ = sample_graphon(jr.key(2), 200, GRAPHONS["product"])
    assert float(node_mse(usvt(A), P)) < 0.2 * float(node_mse(A, P))
    assert float(node_mse(usvt(A, regime="sparse"), P)) < float(node_mse(A, P))
    with pytest.raises(TypeError):  # Literal annotation
        usvt(A, regime="other")


def test_tv_denoise_matches_skimage_chambolle():
    restoration = pytest.importorskip("skimage.restoration")
    rng = np.random.default_rng(0)
    img = np.kron(np.array([[0.2, 0.8], [0.5, 0.1]]), np.ones((6, 6))) + 0.1 * rng.normal(
        size=(12, 12)
    )
    ours = tv_denoise(jnp.asarray(img), 1.0 / 0.1, num_steps=2000)
    ref = restoration.denoise_tv_chambolle(img, weight=0.1, eps=1e-12, max_num_iter=2000)
    np.testing.assert_allclose(np.asarray(ours), ref, atol=2e-3)


def test_sas_on_monotone_graphon_and_network_histogram_on_sbm():
    A, P, _ = sample_graphon(jr.key(3), 200, GRAPHONS["mean"])
    P_sas = sas(A)
    assert P_sas.shape == (200, 200)
    assert float(node_mse(P_sas, P)) < 0.5 * float(node_mse(A, P))
    with pytest.raises(ValueError, match="`h` must satisfy"):
        sas(A, h=0)
    # two planted blocks of exactly 50 nodes, nodes shuffled
    B = jnp.array([[0.7, 0.1], [0.1, 0.7]])
    z = jr.permutation(jr.key(4), jnp.repeat(jnp.arange(2), 50))
    P = B[z][:, z] * (1 - jnp.eye(100))
    upper = jnp.triu(jr.uniform(jr.key(5), (100, 100)) < P, k=1)
    A = (upper | upper.T).astype(P.dtype)
    P_nh, labels = network_histogram(jr.key(6), A, 2)
    assert float(adjusted_rand_index(z, labels)) == 1.0
    assert float(node_mse(P_nh, P)) < 0.1 * float(node_mse(A, P))


def test_metrics_against_sklearn_and_closed_forms(getkey):
    sk = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 3, 40), rng.integers(0, 4, 40)
    np.testing.assert_allclose(
        float(adjusted_rand_index(jnp.asarray(a), jnp.asarray(b))),
        sk.adjusted_rand_score(a, b),
        rtol=1e-10,
    )
    assert float(adjusted_rand_index(jnp.asarray(a), jnp.asarray((a + 1) % 3))) == 1.0
    A, P, _ = sample_graphon(getkey(), 40, GRAPHONS["product"])
    A_train, mask = hold_out_pairs(getkey(), A, 0.3)
    assert bool(jnp.all(mask == mask.T)) and bool(jnp.all(jnp.where(mask, A_train, 0) == 0))
    scores = jnp.round(P, 1)  # ties on purpose
    iu = np.triu_indices(40, 1)
    sel = np.asarray(mask)[iu]
    ref = sk.roc_auc_score(np.asarray(A)[iu][sel], np.asarray(scores)[iu][sel])
    np.testing.assert_allclose(float(link_auc(scores, A, mask)), ref, rtol=1e-10)
    # node MSE: closed form for a constant shift
    np.testing.assert_allclose(float(node_mse(P + 0.1, P)), 0.01, rtol=1e-10)
    np.testing.assert_allclose(float(node_mse(P + 0.1, P, include_diag=True)), 0.01, rtol=1e-10)
    # graphon L2 of an exact two-block step function is zero (up to the grid)
    W = jnp.array([[0.7, 0.2], [0.2, 0.4]])
    step = lambda u, v: W[(u >= 0.3).astype(int), (v >= 0.3).astype(int)]  # noqa: E731
    l2 = graphon_l2_sorted(W, jnp.array([0.3, 0.7]), step, r=200)
    assert float(l2) < 1e-12
    assert float(graphon_l2_sorted(W, jnp.array([0.5, 0.5]), step, r=200)) > 0.05


def test_graph_loaders():
    pytest.importorskip("networkx")
    from jaxgen.data import (
        load_davis_southern_women,
        load_florentine_families,
        load_karate_club,
        load_les_miserables,
    )

    expected = {
        load_karate_club: (34, 78),
        load_les_miserables: (77, 254),
        load_florentine_families: (15, 20),
        load_davis_southern_women: (32, 89),
    }
    for loader, (n, m) in expected.items():
        g = loader()
        assert g.adjacency.shape == (n, n) and g.adjacency.dtype == np.float64
        assert int(g.adjacency.sum()) == 2 * m
        np.testing.assert_array_equal(g.adjacency, g.adjacency.T)
        assert np.all(np.diagonal(g.adjacency) == 0)
    karate = load_karate_club()
    assert karate.label_names == ["Mr. Hi", "Officer"] and karate.labels.sum() == 17
    assert load_davis_southern_women().labels.sum() == 14


def test_graph_loader_without_networkx(monkeypatch):
    import sys

    from jaxgen.data import MissingDataError, load_karate_club

    monkeypatch.setitem(sys.modules, "networkx", None)
    with pytest.raises(MissingDataError, match="networkx"):
        load_karate_club()
