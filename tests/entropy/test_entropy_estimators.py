"""K2-K4, K6, K7, K9: estimators against Markov ground truth, repetition, real text, AM-HM."""

import math
import shutil

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jax.test_util import check_grads
from scipy.stats import spearmanr

from jaxgen.entropy import (
    entropy_rate,
    markov_entropy_rate,
    match_lengths,
    sample_markov,
    score_documents,
)


def _np_markov(rng, p, n):
    """numpy oracle sampler (stationary start), independent of jaxgen."""
    p = np.asarray(p)
    evals, evecs = np.linalg.eig(p.T)
    mu = np.real(evecs[:, np.argmin(np.abs(evals - 1))])
    mu = mu / mu.sum()
    cum = np.cumsum(p, axis=1)
    u = rng.random(n)
    x = np.empty(n, np.int64)
    x[0] = np.searchsorted(np.cumsum(mu), u[0], side="right")
    for t in range(1, n):
        x[t] = min(np.searchsorted(cum[x[t - 1]], u[t], side="right"), len(p) - 1)
    return x


def _np_entropy(p):
    p = np.asarray(p)
    evals, evecs = np.linalg.eig(p.T)
    mu = np.real(evecs[:, np.argmin(np.abs(evals - 1))])
    mu = mu / mu.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(p > 0, p * np.log2(p), 0.0)
    return float(-(mu * plogp.sum(1)).sum())


def _sources():
    rng = np.random.default_rng(2026)
    return {
        "iid uniform binary": np.full((2, 2), 0.5),
        "iid Bernoulli(0.2)": np.array([[0.8, 0.2], [0.8, 0.2]]),
        "binary Markov flip 0.1": np.array([[0.9, 0.1], [0.1, 0.9]]),
        "random 4-state Markov": rng.dirichlet(np.full(4, 0.7), size=4),
        "iid uniform 4-ary": np.full((4, 4), 0.25),
    }


@pytest.fixture(scope="module")
def k3_estimates():
    # jaxgen's sampler (checked against transition frequencies below) is much faster than the
    # Python-loop oracle at n = 2^16; the oracle serves the sliding-window check.
    out = {}
    for s, (name, p) in enumerate(_sources().items()):
        rows = []
        for r in range(3):
            x = np.asarray(sample_markov(jr.fold_in(jr.key(s), r), jnp.asarray(p), 2**16))
            lam = match_lengths(x)
            rows.append((entropy_rate(x, lengths=lam), entropy_rate(x, lengths=lam, form="inv")))
        out[name] = (_np_entropy(p), np.mean(rows, axis=0))
    return out


def test_k3_markov_ground_truth(k3_estimates):
    truths, means = [], []
    for name, (truth, (iw_mean, iw_inv)) in k3_estimates.items():
        assert abs(iw_mean - truth) <= 0.15 * truth, (name, truth, iw_mean)
        assert iw_inv <= iw_mean, name
        truths.append(truth)
        means.append(iw_mean)
    assert spearmanr(truths, means).statistic == pytest.approx(1.0)


def test_k3_sliding_window_close():
    rng = np.random.default_rng(1)
    p = np.array([[0.9, 0.1], [0.1, 0.9]])
    x = _np_markov(rng, p, 2**15)
    sw_mean = entropy_rate(x, window=1024)
    sw_inv = entropy_rate(x, window=1024, form="inv")
    assert abs(sw_mean - _np_entropy(p)) <= 0.15 * _np_entropy(p)
    assert sw_inv <= sw_mean


def test_k4_consistency_trend():
    rng = np.random.default_rng(4)
    err = {}
    for log_n in (12, 16):
        est = [entropy_rate(rng.integers(0, 2, 2**log_n)) for _ in range(3)]
        err[log_n] = abs(np.mean(est) - 1.0)
    assert err[16] < err[12]


def test_k2_constant_string():
    assert entropy_rate(np.zeros(1000, np.int64)) < 0.05


def test_k9_am_hm_invariant():
    rng = np.random.default_rng(9)
    for k in range(6):
        x = rng.integers(0, 2 + 3 * k, 300 + 50 * k)
        if k % 2:
            x[100:200] = x[:100]  # inject a repeat
        assert entropy_rate(x, form="inv") <= entropy_rate(x, form="mean")
        for w in (2, 16, 64):
            assert entropy_rate(x, window=w, form="inv") <= entropy_rate(x, window=w)


def _bible():
    if shutil.which("bible") is None:
        pytest.skip("needs the Debian package bible-kjv (the `bible` program)")
    from jaxgen.data import load_text_documents

    return load_text_documents("bible-kjv")


def test_k6_repetition_sensitivity():
    doc = _bible()[0][:1200]
    original = entropy_rate(doc)
    repeated = entropy_rate(doc[:200] * 6)
    assert repeated < 0.5 * original
    rng = np.random.default_rng(6)
    gibberish = bytes(rng.integers(97, 123, 1200).astype(np.uint8))
    h_gib = entropy_rate(gibberish)
    # Short documents are biased down (truth log2 26 = 4.70) but gibberish still beats prose.
    assert original < h_gib < math.log2(26)


def test_k7_corpus_sanity():
    docs = [d[:1200] for d in _bible()[:40]]
    scores = score_documents(docs)
    # English prose at ~1,200 characters: a news corpus has mean 2.83 (range 2.44-3.10).
    assert 2.4 <= scores.mean() <= 3.0
    assert scores.std() < 0.3
    # A longer text finds more (and longer) earlier matches: lower estimate than its documents.
    assert entropy_rate("".join(docs)) < scores.mean()


_markov_entropy_jit = jax.jit(markov_entropy_rate)


def test_markov_entropy_closed_forms():
    p = jnp.array([[0.7, 0.2, 0.1]] * 3)
    expected = -sum(q * math.log2(q) for q in (0.7, 0.2, 0.1))
    assert float(markov_entropy_rate(p)) == pytest.approx(expected, rel=1e-12)
    flip = 0.1
    sym = jnp.array([[1 - flip, flip], [flip, 1 - flip]])
    h = -(flip * math.log2(flip) + (1 - flip) * math.log2(1 - flip))
    assert float(_markov_entropy_jit(sym)) == pytest.approx(h, rel=1e-12)
    assert float(_markov_entropy_jit(jnp.array([[0.0, 1.0], [1.0, 0.0]]))) == 0.0  # 0 log 0 = 0
    for name, p_np in _sources().items():
        assert float(_markov_entropy_jit(jnp.asarray(p_np))) == pytest.approx(
            _np_entropy(p_np), rel=1e-10
        ), name


def test_markov_entropy_grad_and_dtype():
    logits = jnp.array([[0.3, -0.2, 0.5], [1.0, 0.1, -0.4], [0.0, 0.2, 0.9]])

    def h(z):
        return markov_entropy_rate(jax.nn.softmax(z, axis=1))

    check_grads(jax.jit(h), (logits,), order=1, modes=["rev"], atol=1e-4, rtol=1e-4)
    p32 = jnp.asarray(_sources()["random 4-state Markov"], jnp.float32)
    h32 = markov_entropy_rate(p32)
    assert h32.dtype == jnp.float32
    assert float(h32) == pytest.approx(_np_entropy(_sources()["random 4-state Markov"]), rel=1e-5)


def test_sample_markov_transitions(getkey):
    p = jnp.array([[0.9, 0.1], [0.3, 0.7]])
    n = 10000
    x = np.asarray(sample_markov(getkey(), p, n))
    assert x.shape == (n,) and x.dtype == np.int32
    counts = np.zeros((2, 2))
    np.add.at(counts, (x[:-1], x[1:]), 1)
    freq = counts / counts.sum(1, keepdims=True)
    se = np.sqrt(np.asarray(p) * (1 - np.asarray(p)) / counts.sum(1, keepdims=True))
    assert np.all(np.abs(freq - np.asarray(p)) < 5 * se)
    keys = jr.split(getkey(), 3)
    batched = jax.vmap(lambda k: sample_markov(k, p, 50))(keys)
    looped = jnp.stack([sample_markov(k, p, 50) for k in keys])
    np.testing.assert_array_equal(batched, looped)


def test_estimator_bad_input():
    with pytest.raises(ValueError, match="needs n >= 4"):
        entropy_rate("abc")
    with pytest.raises(ValueError, match=r"needs n >= 2 \* window \+ 1"):
        entropy_rate("abcdefgh", window=4)
    with pytest.raises(ValueError, match="`form` must be one of"):
        entropy_rate("abcdefgh", form="median")
    with pytest.raises(ValueError, match=r"`window` must be >= 2"):
        entropy_rate("abcdefgh", window=1)
    with pytest.raises(ValueError, match="`lengths` must have shape"):
        entropy_rate("abcdefgh", lengths=np.ones(3, np.int64))
    with pytest.raises(ValueError, match="document 1: the increasing-window"):
        score_documents(["abcdefgh", "ab"])
    with pytest.raises(TypeError, match="parameter 'transition'"):  # jaxtyping first
        markov_entropy_rate(jnp.ones((2, 3)) / 3)
    with pytest.raises(TypeError, match="parameter 'transition'"):
        markov_entropy_rate(jnp.ones((2, 2), jnp.int32))
    with pytest.raises(eqx.EquinoxRuntimeError, match="stochastic matrix"):
        markov_entropy_rate(jnp.array([[0.5, 0.6], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="`length` must be an int >= 1"):
        sample_markov(jr.key(0), jnp.full((2, 2), 0.5), 0)
