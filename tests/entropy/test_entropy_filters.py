"""K8 and the filters: diversity metrics by hand, H_K / log-prob / random selection."""

import jax.random as jr
import numpy as np
import pytest

from jaxgen.entropy import (
    diversity_metrics,
    filter_by_entropy,
    filter_by_logprob,
    filter_random,
    score_documents,
)


def test_k8_metrics_by_hand():
    m = diversity_metrics(["a b a b a b a b"])
    assert m["vocabulary"] == 2 and m["unique_trigrams"] == 2
    assert m["repetition"] == pytest.approx(1 - 2 / 5)
    assert m["distinct_1"] == pytest.approx(2 / 8) and m["distinct_3"] == pytest.approx(2 / 6)
    distinct = diversity_metrics(["one two three four five six"])
    assert distinct["repetition"] == 0.0 and distinct["distinct_2"] == 1.0
    # n-grams never cross documents; case and punctuation are normalised.
    two = diversity_metrics(["The cat sat.", b"the CAT sat", "on"])
    assert two["unique_trigrams"] == 1 and two["vocabulary"] == 4 and two["num_words"] == 7
    assert two["repetition"] == 0.0  # fewer than 4 words: no 4-grams


def _docs():
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"]
    varied = [" ".join(rng.choice(words, 60)) for _ in range(4)]
    repetitive = [("alpha beta " * 40)[: len(varied[0])], ("gamma " * 80)[: len(varied[0])]]
    return [varied[0], repetitive[0], varied[1], repetitive[1], varied[2], varied[3]]


def test_filter_by_entropy_keeps_varied_text():
    docs = _docs()
    res = filter_by_entropy(docs, 4)
    np.testing.assert_array_equal(res.indices, [0, 2, 4, 5])
    assert res.documents == [docs[i] for i in (0, 2, 4, 5)]
    np.testing.assert_allclose(res.scores, score_documents(docs), rtol=1e-12)
    assert filter_by_entropy(docs, 0.5).indices.shape == (3,)
    # Quality guard: everything above the guard goes last.
    guard = np.sort(res.scores)[-2]
    guarded = filter_by_entropy(docs, 1, max_score=guard - 1e-12)
    assert res.scores[guarded.indices[0]] <= guard - 1e-12


def test_filter_by_logprob_and_random():
    docs = ["aaa", "bbbb", "c", "dd"]
    res = filter_by_logprob(docs, lambda d: -float(len(d)), 2)
    np.testing.assert_array_equal(res.indices, [2, 3])
    batched = filter_by_logprob(docs, lambda ds: -np.array([len(d) for d in ds]), 0.5, batched=True)
    np.testing.assert_array_equal(batched.indices, res.indices)
    r1 = filter_random(jr.key(1), docs, 2)
    r2 = filter_random(jr.key(1), docs, 2)
    np.testing.assert_array_equal(r1.indices, r2.indices)
    assert len(set(r1.indices.tolist())) == 2
    # Uniform: each of 4 documents is kept with probability 1/2.
    counts = np.zeros(4)
    for s in range(200):
        counts[filter_random(jr.key(s), docs, 2).indices] += 1
    assert np.all(np.abs(counts / 200 - 0.5) < 5 * np.sqrt(0.25 / 200))


def test_filter_bad_input():
    docs = ["abcdefgh", "ijklmnop"]
    with pytest.raises(ValueError, match=r"`keep` as a count must be in \[1, 2\]"):
        filter_by_entropy(docs, 3)
    with pytest.raises(ValueError, match=r"`keep` as a fraction must be in \(0, 1\]"):
        filter_by_entropy(docs, 1.5)
    with pytest.raises(ValueError, match="`docs` is empty"):
        filter_random(jr.key(0), [], 1)
    with pytest.raises(TypeError, match="parameter .model."):  # jaxtyping hook first
        filter_by_logprob(docs, "not a model", 1)
    with pytest.raises(ValueError, match="scores must be finite"):
        filter_by_logprob(docs, lambda d: float("nan"), 1)
    with pytest.raises(ValueError, match="one score per document"):
        filter_by_logprob(docs, lambda ds: np.zeros(3), 1, batched=True)
    with pytest.raises(TypeError, match="parameter .docs."):
        diversity_metrics([np.arange(5)])
    with pytest.raises(ValueError, match="`repetition_n` must be an int >= 1"):
        diversity_metrics(docs, repetition_n=0)
    with pytest.raises(ValueError, match="`docs` is empty"):
        diversity_metrics([])
