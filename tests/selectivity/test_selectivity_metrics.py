"""Selectivity metrics: invariances, closed forms, null calibration, peers."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import scipy.integrate
import scipy.stats

from jaxgen.selectivity import (
    bootstrap_ci,
    cross_target_auroc,
    diagonal_dominance,
    hit_frequency,
    off_aggregate,
    on_target_rank,
    panel_hits,
    selective_hit_rate,
    selectivity_gap,
    success_rate,
    summarize,
    to_energy,
    top1_rate,
    zscore_scores,
)


def _random_scores(key, n=64, t=5):
    S = -7.0 + jr.normal(key, (n, t))
    S = jnp.round(S * 4) / 4  # ties on purpose
    valid = jr.uniform(jr.fold_in(key, 1), (n, t)) > 0.15
    return jnp.where(valid, S, jnp.nan), valid


@jax.jit  # every hand-case metric in one compiled program (eager == jit: see below)
def _hand_metrics(S, valid, tie):
    return dict(
        rank=on_target_rank(S, valid),
        gap=selectivity_gap(S, valid),
        mean=off_aggregate(S, valid, how="mean"),
        top1=top1_rate(S, valid),
        top1_tie=top1_rate(tie),
        panel=panel_hits(S, valid, margin=0.0),
        panel_abs=panel_hits(S, valid, absolute=-8.5),
        success=success_rate(S, valid, margin=1.0, on_threshold=-7.0),
        shr=selective_hit_rate(S, valid),
        shr_off=selective_hit_rate(S, valid, off_threshold=-7.5),
        freq=hit_frequency(S, valid),
    )


def test_hand_cases_ties_nan_and_failures():
    S = jnp.array([[-8.0, -8.0, -9.0], [-9.0, -7.0, jnp.nan], [jnp.nan, -7.0, -6.0]])
    valid = ~jnp.isnan(S)
    m = _hand_metrics(S, valid, jnp.array([[-8.0, -8.0, -7.0]]))
    np.testing.assert_allclose(m["rank"][:2], [2.5, 1.0])
    assert jnp.isnan(m["rank"][2])  # on-target failed: not evaluable
    np.testing.assert_allclose(m["gap"][:2], [-1.0, 2.0])
    np.testing.assert_allclose(m["mean"][:2], [-8.5, -7.0])
    # top-1: row 0 has a better off-target (0), row 1 is best (1): rate over 2 evaluable rows
    np.testing.assert_allclose(m["top1"], 0.5)
    np.testing.assert_allclose(m["top1_tie"], 0.5)  # a tie halves
    np.testing.assert_allclose(m["panel"][:2], [2.0, 0.0])
    np.testing.assert_allclose(m["panel_abs"][:2], [1.0, 0.0])
    np.testing.assert_allclose(m["success"], 0.5)
    np.testing.assert_allclose(m["shr"], 0.0)  # -7 is not > -7
    np.testing.assert_allclose(m["shr_off"], 0.5)
    np.testing.assert_allclose(m["freq"], [0.5, 1.0])
    out = summarize(S, valid)
    assert out["num_evaluable"] == 2 and out["failures_per_target"] == [1, 0, 1]
    with pytest.raises(ValueError, match="no molecule has a valid on-target"):
        summarize(jnp.array([[jnp.nan, -7.0]]))


def test_soft_aggregate_limits():
    S = jnp.array([[-7.0, -9.0, -6.0, -8.0]])
    np.testing.assert_allclose(off_aggregate(S, how="soft", tau=1e-3), -9.0, atol=1e-2)
    np.testing.assert_allclose(off_aggregate(S, how="soft", tau=1e4), -23 / 3, atol=1e-3)
    mins = off_aggregate(S, how="min")
    means = off_aggregate(S, how="mean")
    soft = off_aggregate(S, how="soft", tau=0.5)
    assert float(mins[0]) <= float(soft[0]) <= float(means[0])


def test_row_shift_and_off_permutation_invariance(getkey):
    S, valid = _random_scores(getkey())
    # exactly representable shifts: ties and threshold equalities survive the shift bit for bit
    shift = jnp.round(4 * jr.normal(getkey(), (S.shape[0], 1))) / 4
    perm = jnp.concatenate([jnp.array([0]), 1 + jr.permutation(getkey(), S.shape[1] - 1)])
    fns = [
        lambda s, v: selectivity_gap(s, v),
        lambda s, v: on_target_rank(s, v),
        lambda s, v: panel_hits(s, v, margin=0.5),
        lambda s, v: top1_rate(s, v),
        lambda s, v: success_rate(s, v, margin=0.5, on_threshold=None),
    ]
    # the five metrics of the three score matrices in one compiled vmapped call
    batch = (jnp.stack([S, S + shift, S[:, perm]]), jnp.stack([valid, valid, valid[:, perm]]))
    outs = jax.jit(jax.vmap(lambda s, v: [fn(s, v) for fn in fns]))(*batch)
    for out in outs:
        base, shifted, permuted = out
        np.testing.assert_allclose(shifted, base, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(permuted, base, rtol=1e-12, atol=1e-12)


def test_rates_are_monotone(getkey):
    S, valid = _random_scores(getkey(), n=200)
    margins = jnp.linspace(-2, 3, 21)
    rates = jnp.array([success_rate(S, valid, margin=float(m)) for m in margins])
    assert np.all(np.diff(np.asarray(rates)) <= 1e-12)
    sh = [
        selective_hit_rate(S, valid, on_threshold=-7.0, off_threshold=float(o))
        for o in (-9.0, -8.0, -7.0, -6.0)
    ]
    assert np.all(np.diff(np.asarray(sh)) <= 1e-12)


def test_exchangeable_null_calibration():
    n, t = 20000, 5
    S = jr.normal(jr.key(11), (n, t))
    labels = jr.randint(jr.key(12), (n,), 0, t)
    top1, rank, (per, macro), counts = jax.jit(
        lambda S, labels: (
            top1_rate(S),
            on_target_rank(S),
            cross_target_auroc(S, labels),
            jnp.sum(labels[:, None] == jnp.arange(t)[None, :], 0),
        )
    )(S, labels)  # one compiled program
    se = 4 * np.sqrt(0.16 / n)
    assert abs(float(top1) - 0.2) <= se
    assert abs(float(jnp.mean(rank)) - 3.0) <= 0.05
    for a in range(t):
        n_pos = int(counts[a])
        n_neg = n - n_pos
        tol = 4 * np.sqrt((n_pos + n_neg + 1) / (12 * n_pos * n_neg))
        assert abs(float(per[a]) - 0.5) <= tol


def test_gap_tail_closed_form_and_quadrature():
    n, mu0, mu1, sigma, m = 40000, -8.0, -7.5, 0.8, 0.25
    key = jr.key(5)
    s = mu0 + sigma * jr.normal(key, (n, 1))
    for K in (1, 3):
        o = mu1 + sigma * jr.normal(jr.fold_in(key, K), (n, K))
        S = jnp.concatenate([s, o], axis=1)
        rate = float(success_rate(S, margin=m, on_threshold=None))
        if K == 1:
            exact = scipy.stats.norm.cdf((mu1 - mu0 - m) / (sigma * np.sqrt(2)))
        else:

            def integrand(x, K=K):
                tail = 1 - scipy.stats.norm.cdf((x + m - mu1) / sigma)
                return scipy.stats.norm.pdf(x, mu0, sigma) * tail**K

            exact = scipy.integrate.quad(integrand, mu0 - 10 * sigma, mu0 + 10 * sigma)[0]
        se = np.sqrt(exact * (1 - exact) / n)
        assert abs(rate - exact) <= 4 * se, (K, rate, exact)


def test_auroc_and_ranks_match_sklearn_and_scipy(getkey):
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    n, T = 300, 4
    C = jnp.round(jr.normal(getkey(), (n, T)) * 2) / 2  # many ties
    labels = jr.randint(getkey(), (n,), 0, T)
    per, macro = jax.jit(cross_target_auroc)(C, labels)
    C_np, lab = np.asarray(C), np.asarray(labels)
    ref = [sklearn_metrics.roc_auc_score(lab == a, -C_np[:, a]) for a in range(T)]
    np.testing.assert_allclose(per, ref, atol=1e-12)
    np.testing.assert_allclose(macro, np.mean(ref), atol=1e-12)
    from jaxgen.selectivity._metrics import _mid_ranks

    x = jnp.round(jr.normal(getkey(), (50,)) * 3)
    np.testing.assert_allclose(_mid_ranks(x), scipy.stats.rankdata(np.asarray(x)), atol=1e-12)
    G = jnp.array([[-9.0, -8.0, -7.0], [-8.0, -8.5, -8.4], [-7.0, -7.5, -7.2]])
    np.testing.assert_allclose(diagonal_dominance(G), 2 / 3)


def test_eager_equals_jit_vmap_and_bootstrap(getkey):
    S, valid = _random_scores(getkey())
    eager = selectivity_gap(S, valid, how="soft")
    np.testing.assert_allclose(
        jax.jit(lambda s, v: selectivity_gap(s, v, how="soft"))(S, valid), eager, rtol=1e-12
    )
    stacked = jnp.stack([S, S + 1.0])
    rates = jax.vmap(lambda s: top1_rate(s, valid))(stacked)
    np.testing.assert_allclose(rates, [top1_rate(S, valid)] * 2, rtol=1e-12)
    lo, hi = bootstrap_ci(getkey(), top1_rate, S, valid, n_boot=200)
    point = float(top1_rate(S, valid))
    assert lo <= point <= hi and hi - lo < 0.5
    np.testing.assert_allclose(to_energy(-S, higher_is_better=True), S)
    z = zscore_scores(S, jnp.full(5, -7.0), jnp.full(5, 2.0))
    np.testing.assert_allclose(z, (S + 7.0) / 2.0)


def test_bad_inputs():
    S = jnp.array([[-8.0, -7.0], [-9.0, -6.0]])
    with pytest.raises((ValueError, TypeError), match="S"):
        top1_rate(jnp.zeros((3,)))
    with pytest.raises((ValueError, TypeError), match="S"):
        top1_rate(jnp.zeros((3, 1)))
    with pytest.raises((ValueError, TypeError), match="valid"):
        top1_rate(S, jnp.ones((2, 3), bool))
    with pytest.raises(Exception, match="marked valid"):
        top1_rate(S.at[0, 1].set(jnp.nan), jnp.ones((2, 2), bool))
    with pytest.raises(ValueError, match="`how` must be one of"):
        off_aggregate(S, how="max")
    with pytest.raises(ValueError, match="`tau` must be finite and > 0"):
        off_aggregate(S, how="soft", tau=0.0)
    with pytest.raises(Exception, match="labels"):
        cross_target_auroc(S, jnp.array([0, 2]))
    with pytest.raises(Exception, match="ref_std"):
        zscore_scores(S, jnp.zeros(2), jnp.array([1.0, 0.0]))
