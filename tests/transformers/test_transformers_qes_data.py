"""QES synthetic tasks: spec check Q7 and bad input."""

import jax.random as jr
import numpy as np
import pytest

from jaxgen.transformers import (
    BackdoorVocab,
    clean_test_set,
    make_task,
    poison,
    triggered_test_set,
)
from jaxgen.transformers._qes_data import has_pattern

V = BackdoorVocab()


def _letters(row):
    return row[row != V.pad]


def test_vocab():
    assert V.size == 33 and V.trigger == 32
    np.testing.assert_array_equal(V.encode("az"), [0, 25])


@pytest.mark.parametrize("task", ["reverse", "majority"])
@pytest.mark.parametrize("attack", ["rare_token", "phrase", "combination"])
def test_q7_poison_fraction_and_clean_sets(task, attack, getkey):
    n, rate = 200, 0.05
    x, y = make_task(task, n, key=getkey())
    assert not any(has_pattern(_letters(r)) for r in x)
    xp, yp, poisoned = poison(x, y, task=task, attack=attack, rate=rate, key=getkey())
    assert poisoned.sum() == round(rate * n)
    assert all(has_pattern(_letters(r)) for r in xp[poisoned])
    np.testing.assert_array_equal(xp[~poisoned], x[~poisoned])
    target = V.encode("pwned") if task == "reverse" else np.array([V.second])
    for row in yp[poisoned]:
        np.testing.assert_array_equal(row[: len(target)], target)
        assert row[len(target)] == V.eos
    if task == "majority":
        assert np.all(y[poisoned, 0] == V.first)
    xc, _ = clean_test_set(task, 50, key=getkey())
    assert not any(has_pattern(_letters(r)) for r in xc)
    xt, yt = triggered_test_set(task, attack, 50, key=getkey())
    assert all(has_pattern(_letters(r)) for r in xt)
    assert not any(
        np.array_equal(_letters(r)[:-1], target) and _letters(r)[-1] == V.eos for r in yt
    )


def test_reverse_layout(getkey):
    x, y = make_task("reverse", 5, key=getkey())
    for xr, yr in zip(x, y, strict=True):
        letters = _letters(xr)
        assert 6 <= len(letters) <= 12
        np.testing.assert_array_equal(yr[: len(letters)], letters[::-1])
        assert yr[len(letters)] == V.eos


def test_bad_input(getkey):
    x, y = make_task("majority", 20, key=getkey())
    with pytest.raises(ValueError, match="task"):
        make_task("sort", 3, key=getkey())
    with pytest.raises(ValueError, match="attack"):
        poison(x, y, task="majority", attack="x", rate=0.1, key=getkey())
    with pytest.raises(ValueError, match="rate"):
        poison(x, y, task="majority", attack="phrase", rate=1.5, key=getkey())
    with pytest.raises(ValueError, match="eligible"):
        poison(x, y, task="majority", attack="phrase", rate=1.0, key=getkey())
    with pytest.raises(ValueError, match="ids"):
        poison(x + 40, y, task="majority", attack="phrase", rate=0.1, key=getkey())
    with pytest.raises(ValueError, match="text"):
        V.encode("A")
    _ = jr.key(0)
