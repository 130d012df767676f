"""QES synthetic tasks: spec check Q7 and bad input."""

import jax.random as jr
import numpy as np
import pytest

from jaxgen.transformers import (
    PRETRAIN_TASKS,
    PRETRAIN_VOCAB_SIZE,
    BackdoorVocab,
    clean_test_set,
    make_pretrain_tasks,
    make_task,
    poison,
    triggered_test_set,
)
from jaxgen.transformers.qes._data import has_pattern

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


def test_lengths_option(getkey):
    x, _ = make_task("reverse", 200, key=getkey(), lengths=(3, 5))
    assert set(np.sum(x != V.pad, axis=1).tolist()) == {3, 4, 5}
    x, y = make_task("majority", 200, key=getkey(), lengths=(4, 8))
    assert set(np.sum(x != V.pad, axis=1).tolist()) == {5, 7}
    xt, _ = triggered_test_set("reverse", "rare_token", 50, key=getkey(), lengths=(2, 2))
    assert np.all(np.sum(xt != V.pad, axis=1) == 3)  # two letters and the trigger
    xc, _ = clean_test_set("reverse", 20, key=getkey(), lengths=(7, 7))
    assert np.all(np.sum(xc != V.pad, axis=1) == 7)
    # the default is the spec's range, drawn from the same stream
    a, _ = make_task("reverse", 20, key=jr.key(3))
    b, _ = make_task("reverse", 20, key=jr.key(3), lengths=(6, 12))
    np.testing.assert_array_equal(a, b)


def test_pretrain_tasks_closed_forms(getkey):
    x, y = make_pretrain_tasks(300, key=getkey())
    assert PRETRAIN_VOCAB_SIZE == V.size + len(PRETRAIN_TASKS) == 38
    assert set(x[:, 0].tolist()) == set(range(V.size, PRETRAIN_VOCAB_SIZE))
    for xr, yr in zip(x, y, strict=True):
        t, letters = PRETRAIN_TASKS[xr[0] - V.size], _letters(xr[1:])
        out = yr[: list(yr).index(V.eos)]
        if t == "copy":
            np.testing.assert_array_equal(out, letters)
        elif t == "sort":
            np.testing.assert_array_equal(out, np.sort(letters))
        elif t == "shift":
            np.testing.assert_array_equal(out, (letters + 1) % 26)
        elif t == "count":
            np.testing.assert_array_equal(out, [np.sum(letters <= 12)])
        else:  # rotate: a rotation of x that starts at its first smallest letter
            k = int(np.argmin(letters))
            np.testing.assert_array_equal(out, np.roll(letters, -k))


def test_pretrain_task_subset(getkey):
    key = getkey()
    x, _ = make_pretrain_tasks(200, key=key, tasks=("copy", "count"), lengths=(4, 8))
    assert set(x[:, 0].tolist()) == {V.size + 0, V.size + 3}  # task tokens keep their ids
    assert set(np.sum(x[:, 1:] != V.pad, axis=1).tolist()) <= set(range(4, 9))
    a, b = make_pretrain_tasks(50, key=key), make_pretrain_tasks(50, key=key, tasks=PRETRAIN_TASKS)
    np.testing.assert_array_equal(a[0], b[0])
    for bad in ((), ("copy", "reverse")):
        with pytest.raises(ValueError, match="tasks"):
            make_pretrain_tasks(4, key=key, tasks=bad)


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
    with pytest.raises(ValueError, match="lengths"):
        make_task("reverse", 3, key=getkey(), lengths=(5, 13))
    with pytest.raises(ValueError, match="lengths"):
        make_task("majority", 3, key=getkey(), lengths=(4, 4))
    with pytest.raises(TypeError, match="lengths"):
        make_task("reverse", 3, key=getkey(), lengths=5)
    _ = jr.key(0)
