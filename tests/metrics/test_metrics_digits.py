"""The shipped digits feature network (held-out accuracy), digits_fd and the digits split."""

import importlib.resources

import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.data import DIGITS_TEST_SIZE, digits_split
from jaxgen.metrics import digits_fd, digits_features, digits_logits

pytest.importorskip("sklearn")

# The network of tools/train_digits_features.py: measured 0.98+ on the held-out 360 images of
# the seed-0 split it never saw; a net that learned little (or wrong weights) falls far below.
ACCURACY_BAR = 0.97


@pytest.fixture(scope="module")
def split():
    return digits_split(seed=0)


def test_split_is_the_one_recipe(split):
    x_tr, y_tr, x_te, y_te = split
    assert x_tr.shape == (1797 - DIGITS_TEST_SIZE, 8, 8) and x_te.shape == (DIGITS_TEST_SIZE, 8, 8)
    assert x_tr.dtype == np.float32 and x_tr.min() == -1.0 and x_tr.max() == 1.0
    pixels = (np.concatenate([x_tr, x_te]) + 1) * 8  # exact integers 0..16
    np.testing.assert_array_equal(pixels, np.round(pixels))
    # the same permutation every time; a different seed gives another split of the same data
    again = digits_split(seed=0)
    np.testing.assert_array_equal(again.x_test, x_te)
    other = digits_split(seed=1)
    assert not np.array_equal(other.y_test, y_te)
    assert sorted(np.concatenate([other.y_train, other.y_test])) == sorted(
        np.concatenate([y_tr, y_te])
    )
    with pytest.raises(TypeError, match="seed"):
        digits_split(seed=0.5)


def test_shipped_network_held_out_accuracy(split):
    pred = np.asarray(jnp.argmax(digits_logits(split.x_test), -1))
    acc = float(np.mean(pred == split.y_test))
    assert acc >= ACCURACY_BAR, acc
    # the package data stays small (a few hundred KB at most)
    ref = importlib.resources.files("jaxgen.metrics") / "_data" / "digits_features.eqx"
    assert len(ref.read_bytes()) < 300_000


def test_digits_fd(split):
    x_tr, _, x_te, _ = split
    f = digits_features(x_te)
    assert f.shape == (DIGITS_TEST_SIZE, 64) and bool(jnp.all(jnp.isfinite(f)))
    # flat input is the same map
    np.testing.assert_allclose(digits_features(x_te.reshape(-1, 64)), f, rtol=1e-6)
    same = float(digits_fd(x_te, x_te[::-1]))  # a permutation of the same set: FD = 0
    assert abs(same) < 1e-3, same
    real = float(digits_fd(x_tr[:DIGITS_TEST_SIZE], x_te))
    noise = jr.uniform(jr.key(0), x_te.shape, minval=-1.0, maxval=1.0)
    fake = float(digits_fd(noise, x_te))
    blur = float(digits_fd(0.5 * x_te + 0.5 * x_te[:, ::-1], x_te))  # mirrored overlay
    # real digits are much closer to held-out digits than degraded ones, and noise is farthest
    assert real < 0.2 * blur and blur < fake, (real, blur, fake)
    np.testing.assert_allclose(float(digits_fd(x_te, x_tr[:360])), real, rtol=1e-3)  # symmetric


def test_bad_input(split):
    with pytest.raises(ValueError, match="`x`"):
        digits_fd(split.x_test[:, :4], split.x_test)
    with pytest.raises(ValueError, match="`y`"):
        digits_fd(split.x_test, split.x_test[:1])
    with pytest.raises(TypeError, match="floating"):
        digits_features(np.zeros((4, 8, 8), np.int32))
