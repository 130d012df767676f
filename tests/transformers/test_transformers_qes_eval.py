"""QES evaluation: LM layout, greedy decoding (eager == jit, teacher-forcing consistency),
exact-match metrics and routing AUROC against scikit-learn.
"""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.nn import Transformer
from jaxgen.transformers import (
    BackdoorVocab,
    attack_success_rate,
    clean_accuracy,
    greedy_decode,
    lm_tokens,
    make_task,
    routing_auroc,
)
from jaxgen.transformers.qes._eval import PROMPT_LEN, SEQ_LEN

V = BackdoorVocab()


def test_lm_tokens_layout(getkey):
    x, y = make_task(getkey(), "majority", 3)
    tokens, w = lm_tokens(x, y)
    assert tokens.shape == (3, SEQ_LEN) and w.shape == (3, SEQ_LEN - 1)  # next-token weights
    assert np.all(tokens[:, 0] == V.bos) and np.all(tokens[:, PROMPT_LEN - 1] == V.sep)
    # majority: label and eos are the two weighted targets
    np.testing.assert_array_equal(w.sum(1), 2.0)
    np.testing.assert_array_equal(w[:, PROMPT_LEN - 1 : PROMPT_LEN + 1], 1.0)


def test_greedy_decode_consistent(getkey):
    model = Transformer(V.size, 16, 1, 2, SEQ_LEN, key=getkey())
    x, _ = make_task(getkey(), "reverse", 2)
    pred = greedy_decode(model, x, max_len=3)
    np.testing.assert_array_equal(jax.jit(lambda x: greedy_decode(model, x, max_len=3))(x), pred)
    # Teacher forcing on the decoded prefix reproduces each greedy choice.
    tokens, _ = lm_tokens(x, jnp.full((2, 15), V.pad, x.dtype))
    fwd = jax.jit(lambda s: model(s))
    for i in range(2):
        seq = tokens[i]
        for j in range(3):
            nxt = jnp.argmax(fwd(seq)[PROMPT_LEN - 1 + j]).astype(seq.dtype)
            if pred[i, j] != V.pad:
                assert nxt == pred[i, j]
            seq = seq.at[PROMPT_LEN + j].set(nxt)


def test_metrics():
    eos, pad = V.eos, V.pad
    y = np.array([[1, 2, eos, pad], [3, eos, pad, pad]])
    pred = np.array([[1, 2, eos, pad], [3, 4, eos, pad]])
    assert clean_accuracy(pred, y) == 0.5
    pw = list(V.encode("pwned"))
    assert attack_success_rate(np.array([pw + [eos], pw[:4] + [eos, pad]]), "reverse") == 0.5
    assert attack_success_rate(np.array([[V.second, eos], [V.first, eos]]), "majority") == 0.5


def test_routing_auroc_closed_form():
    # pairs (a, b): 0.9 beats 0.1, 0.5; 0.5 ties 0.5 and beats 0.1 -> (2 + 1.5) / 4
    auc = routing_auroc(jnp.array([0.9, 0.5]), jnp.array([0.1, 0.5]))
    np.testing.assert_allclose(auc, 3.5 / 4, atol=1e-12)


@pytest.mark.slow  # sklearn import; fast twin: test_routing_auroc_closed_form
def test_routing_auroc_vs_sklearn(getkey):
    metrics = pytest.importorskip("sklearn.metrics")
    a = jnp.round(jr.normal(getkey(), (30,)) + 1, 1)
    b = jnp.round(jr.normal(getkey(), (40,)), 1)
    ref = metrics.roc_auc_score(np.r_[np.ones(30), np.zeros(40)], np.r_[a, b])
    np.testing.assert_allclose(routing_auroc(a, b), ref, atol=1e-12)


def test_bad_input(getkey):
    model = Transformer(V.size, 16, 1, 2, SEQ_LEN, key=getkey())
    x, _ = make_task(getkey(), "reverse", 1)
    with pytest.raises(ValueError, match="max_len"):
        greedy_decode(model, x, max_len=0)
