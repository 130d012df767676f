"""QES synthetic tasks: check Q7 and bad input."""

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
    x, y = make_task(getkey(), task, n)
    assert not any(has_pattern(_letters(r)) for r in x)
    xp, yp, poisoned = poison(getkey(), x, y, task=task, attack=attack, rate=rate)
    assert poisoned.sum() == round(rate * n)
    assert all(has_pattern(_letters(r)) for r in xp[poisoned])
    np.testing.assert_array_equal(xp[~poisoned], x[~poisoned])
    target = V.encode("pwned") if task == "reverse" else np.array([V.second])
    for row in yp[poisoned]:
        np.testing.assert_array_equal(row[: len(target)], target)
        assert row[len(target)] == V.eos
    if task == "majority":
        assert np.all(y[poisoned, 0] == V.first)
    xc, _ = clean_test_set(getkey(), task, 50)
    assert not any(has_pattern(_letters(r)) for r in xc)
    xt, yt = triggered_test_set(getkey(), task, attack, 50)
    assert all(has_pattern(_letters(r)) for r in xt)
    assert not any(
        np.array_equal(_letters(r)[:-1], target) and _letters(r)[-1] == V.eos for r in yt
    )


def test_reverse_layout(getkey):
    x, y = make_task(getkey(), "reverse", 5)
    for xr, yr in zip(x, y, strict=True):
        letters = _letters(xr)
        assert 6 <= len(letters) <= 12
        np.testing.assert_array_equal(yr[: len(letters)], letters[::-1])
        assert yr[len(letters)] == V.eos


def test_lengths_option(getkey):
    x, _ = make_task(getkey(), "reverse", 200, lengths=(3, 5))
    assert set(np.sum(x != V.pad, axis=1).tolist()) == {3, 4, 5}
    x, y = make_task(getkey(), "majority", 200, lengths=(4, 8))
    assert set(np.sum(x != V.pad, axis=1).tolist()) == {5, 7}
    xt, _ = triggered_test_set(getkey(), "reverse", "rare_token", 50, lengths=(2, 2))
    assert np.all(np.sum(xt != V.pad, axis=1) == 3)  # two letters and the trigger
    xc, _ = clean_test_set(getkey(), "reverse", 20, lengths=(7, 7))
    assert np.all(np.sum(xc != V.pad, axis=1) == 7)
    # the default range, drawn from the same stream
    a, _ = make_task(jr.key(3), "reverse", 20)
    b, _ = make_task(jr.key(3), "reverse", 20, lengths=(6, 12))
    np.testing.assert_array_equal(a, b)


def test_pretrain_tasks_closed_forms(getkey):
    x, y = make_pretrain_tasks(getkey(), 300)
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
    x, _ = make_pretrain_tasks(key, 200, tasks=("copy", "count"), lengths=(4, 8))
    assert set(x[:, 0].tolist()) == {V.size + 0, V.size + 3}  # task tokens keep their ids
    assert set(np.sum(x[:, 1:] != V.pad, axis=1).tolist()) <= set(range(4, 9))
    a, b = make_pretrain_tasks(key, 50), make_pretrain_tasks(key, 50, tasks=PRETRAIN_TASKS)
    np.testing.assert_array_equal(a[0], b[0])
    for bad in ((), ("copy", "reverse")):
        with pytest.raises(ValueError, match="tasks"):
            make_pretrain_tasks(key, 4, tasks=bad)


def test_bad_input(getkey):
    x, y = make_task(getkey(), "majority", 20)
    with pytest.raises(ValueError, match="task"):
        make_task(getkey(), "sort", 3)
    with pytest.raises(ValueError, match="attack"):
        poison(getkey(), x, y, task="majority", attack="x", rate=0.1)
    with pytest.raises(ValueError, match="rate"):
        poison(getkey(), x, y, task="majority", attack="phrase", rate=1.5)
    with pytest.raises(ValueError, match="eligible"):
        poison(getkey(), x, y, task="majority", attack="phrase", rate=1.0)
    with pytest.raises(ValueError, match="ids"):
        poison(getkey(), x + 40, y, task="majority", attack="phrase", rate=0.1)
    with pytest.raises(ValueError, match="text"):
        V.encode("A")
    with pytest.raises(ValueError, match="lengths"):
        make_task(getkey(), "reverse", 3, lengths=(5, 13))
    with pytest.raises(ValueError, match="lengths"):
        make_task(getkey(), "majority", 3, lengths=(4, 4))
    with pytest.raises(TypeError, match="lengths"):
        make_task(getkey(), "reverse", 3, lengths=5)
    _ = jr.key(0)
