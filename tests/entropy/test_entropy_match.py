"""K1, K2, K5: suffix-array match lengths against brute force, test vectors, invariances."""

import numpy as np
import pytest

from jaxgen.entropy import match_lengths, match_lengths_bruteforce


def _oracle(x, w):
    """Lambda_i(w) straight from the definition (pure Python, tiny inputs only)."""
    n = len(x)
    out = []
    for i in range(n):
        best = 0
        lo = 0 if w is None else max(0, i - w)
        for j in range(lo, i):
            length = 0
            while i + length < n and x[j + length] == x[i + length]:
                length += 1
            best = max(best, length)
        out.append(best + 1)
    return np.asarray(out)


@pytest.mark.parametrize("alphabet", [1, 2, 3, 26])
def test_bruteforce_matches_definition(alphabet):
    rng = np.random.default_rng(alphabet)
    x = rng.integers(0, alphabet, 60)
    for w in (None, 1, 3, 7, 59):
        np.testing.assert_array_equal(match_lengths_bruteforce(x, window=w), _oracle(x, w))


@pytest.mark.parametrize("alphabet", [2, 3, 26])
def test_k1_fast_equals_bruteforce(alphabet):
    rng = np.random.default_rng(100 + alphabet)
    n = 400
    x = rng.integers(0, alphabet, n)
    np.testing.assert_array_equal(match_lengths(x), match_lengths_bruteforce(x))
    for w in (1, 5, 17, 64, n - 1):
        np.testing.assert_array_equal(
            match_lengths(x, window=w), match_lengths_bruteforce(x, window=w), err_msg=f"w={w}"
        )


def test_k1_structured_strings():
    # Repeats, periodic runs and text: long matches and many equal ranks.
    rng = np.random.default_rng(7)
    block = rng.integers(0, 3, 37)
    cases = [
        np.tile(block, 9),
        np.tile([0, 1], 150),
        np.zeros(200, np.int64),
        np.frombuffer(b"the cat sat on the mat; the cat sat on the hat. " * 5, np.uint8),
    ]
    for x in cases:
        x = np.asarray(x, np.int64)
        for w in (None, 2, 13, 40, len(x) + 3):
            np.testing.assert_array_equal(
                match_lengths(x, window=w), match_lengths_bruteforce(x, window=w)
            )


def test_k2_abracadabra_and_constant():
    np.testing.assert_array_equal(
        match_lengths("abracadabra") - 1, [0, 0, 0, 1, 0, 1, 0, 4, 3, 2, 1]
    )
    n = 50
    lam = match_lengths(np.zeros(n, np.int64))
    # Overlapping copy one position back: Lambda_i(i) = n - i + 1 for i >= 1.
    np.testing.assert_array_equal(lam[1:], n - np.arange(1, n) + 1)
    assert lam[0] == 1


def test_pydivsufsort_reference():
    pds = pytest.importorskip("pydivsufsort")
    rng = np.random.default_rng(3)
    x = rng.integers(0, 4, 3000).astype(np.uint8)
    sa = pds.divsufsort(x)
    lpf = pds.longest_previous_factor(x, sa, pds.kasai(x, sa))
    np.testing.assert_array_equal(match_lengths(x) - 1, lpf)


def test_k5_relabelling_invariance():
    rng = np.random.default_rng(5)
    x = rng.integers(0, 5, 500)
    perm = np.array([3, 0, 4, 1, 2]) * 7 + 100  # a bijection onto other labels
    for w in (None, 30):
        np.testing.assert_array_equal(match_lengths(x, window=w), match_lengths(perm[x], window=w))


def test_input_forms_agree():
    text = "héllo wörld hello"
    ref = match_lengths(text)
    np.testing.assert_array_equal(ref, match_lengths(text.encode("utf-8")))
    np.testing.assert_array_equal(ref, match_lengths(list(text.encode("utf-8"))))
    import jax.numpy as jnp

    np.testing.assert_array_equal(ref, match_lengths(jnp.asarray(list(text.encode("utf-8")))))
    assert ref.shape == (len(text.encode("utf-8")),) and ref.dtype == np.int64


def test_bad_input():
    with pytest.raises(ValueError, match="is empty"):
        match_lengths("")
    with pytest.raises(ValueError, match="is empty"):
        match_lengths([])
    with pytest.raises(TypeError, match="integer symbols"):
        match_lengths(np.array([0.5, 1.0]))
    with pytest.raises(TypeError, match="integer symbols"):
        match_lengths(np.array([True, False]))
    with pytest.raises(TypeError, match="parameter 'seq'"):  # the jaxtyping hook comes first
        match_lengths(3.0)
    with pytest.raises(ValueError, match="must be 1-D"):
        match_lengths(np.zeros((2, 3), np.int64))
    with pytest.raises(ValueError, match="must be >= 0"):
        match_lengths(np.array([1, -1]))
    with pytest.raises(ValueError, match=r"`window` must be >= 1"):
        match_lengths("abc", window=0)
    with pytest.raises(TypeError, match="parameter 'window'"):
        match_lengths("abc", window=2.0)
    np.testing.assert_array_equal(
        match_lengths("abcab", window=np.int64(2)), match_lengths("abcab", window=2)
    )
    with pytest.raises(ValueError, match="`unit` must be one of"):
        from jaxgen.entropy import to_symbols

        to_symbols("abc", unit="chars")
