"""Match lengths and the Kontoyiannis entropy-rate estimators (bits per symbol).

For ``x = x_0 ... x_{n-1}`` and a look-back window ``w``,

    L_i(w) = max{l >= 0 : x[j:j+l] == x[i:i+l] for some j in [max(0, i-w), i-1], i + l <= n},
    Lambda_i(w) = L_i(w) + 1,

the length of the shortest string starting at ``i`` that does not start in the previous ``w``
positions (the earlier copy may overlap ``i``, as in LZ77). For stationary ergodic sources with
entropy rate ``H``, ``Lambda_i(w) / log2 w -> 1 / H`` (Wyner-Ziv, Ornstein-Weiss), which gives
the estimators of `entropy_rate`.

The match lengths are host-side numpy (see `jaxgen.entropy._suffix` for why); the Markov
ground-truth helpers `markov_entropy_rate` and `sample_markov` are JAX.
"""

import math
import re
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from ._suffix import bruteforce_match, longest_previous_factor, sliding_match

FORMS = ("mean", "inv")
UNITS = ("bytes", "words")
_WORD = re.compile(r"[a-z']+")

# What a "sequence" may be: text (scored on its UTF-8 bytes), bytes, or 1-D integer symbols.
SymbolsLike = str | bytes | bytearray | np.ndarray | Array | list[int] | tuple[int, ...]


def to_symbols(seq: SymbolsLike, *, unit: str = "bytes", name: str = "seq") -> np.ndarray:
    """Integer symbols ``int64 (n,)`` of a text or an integer sequence.

    Args:
        seq: ``str`` (UTF-8 encoded), ``bytes``, or a 1-D integer array / list.
        unit: for ``str``: ``"bytes"`` (its UTF-8 bytes, the default H_K unit) or ``"words"``
            (lower-cased ``[a-z']+`` words mapped to ids in order of first appearance).
        name: argument name used in error messages.

    Raises:
        TypeError: non-integer arrays (floats, booleans) or other objects.
        ValueError: empty input, wrong rank, unknown ``unit``, negative symbols.
    """
    if unit not in UNITS:
        raise ValueError(f"`unit` must be one of {UNITS}, got {unit!r}.")
    if isinstance(seq, str):
        if unit == "words":
            ids: dict[str, int] = {}
            arr = np.asarray(
                [ids.setdefault(t, len(ids)) for t in _WORD.findall(seq.lower())], dtype=np.int64
            )
        else:
            arr = np.frombuffer(seq.encode("utf-8"), dtype=np.uint8).astype(np.int64)
    elif isinstance(seq, bytes | bytearray):
        arr = np.frombuffer(bytes(seq), dtype=np.uint8).astype(np.int64)
    elif isinstance(seq, np.ndarray | jax.Array | list | tuple):
        empty_list = isinstance(seq, list | tuple) and not seq
        arr = np.zeros((0,), np.int64) if empty_list else np.asarray(seq)
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(
                f"`{name}` must hold integer symbols (or be text), got dtype {arr.dtype}."
            )
        if arr.ndim != 1:
            raise ValueError(f"`{name}` must be 1-D, got shape {arr.shape}.")
        arr = arr.astype(np.int64)
        if arr.size and arr.min() < 0:
            raise ValueError(f"`{name}` symbols must be >= 0, got min {arr.min()}.")
    else:
        raise TypeError(
            f"`{name}` must be a str, bytes or a 1-D integer array, got {type(seq).__name__}."
        )
    if arr.size == 0:
        raise ValueError(f"`{name}` is empty; need at least one symbol.")
    return arr


def _check_window(window: Any, minimum: int = 1) -> int | None:
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, int | np.integer):
        raise TypeError(f"`window` must be an int or None, got {type(window).__name__}.")
    if window < minimum:
        raise ValueError(
            f"`window` must be >= {minimum} (or None for the increasing window), got {window}."
        )
    return int(window)


def match_lengths(seq: SymbolsLike, *, window: int | np.integer | None = None) -> np.ndarray:
    """Match lengths ``Lambda_i(w) = L_i(w) + 1`` for every position ``i`` (``int64 (n,)``).

    ``window=None`` is the increasing window ``w = i`` (the whole past; ``L_i(i)`` is the
    longest previous factor, LPF); an int is the sliding window of that size. Computed from a
    suffix array by prefix doubling in host numpy: ``O(n log n)`` for sources whose longest
    repeat grows like ``log n`` (each doubling round is one sort), plus ``O(n log w)`` time and
    memory for the sliding window. Host numpy, not JAX, because suffix sorting and the
    nearest-smaller-value passes run a data-dependent number of rounds over ragged arrays that
    ``jit`` cannot express without worst-case padding.

    Args:
        seq: text (UTF-8 bytes are the symbols), bytes, or a 1-D integer array ``(n,)``.
        window: look-back ``w >= 1``, or ``None`` for the increasing window.

    Returns:
        ``int64 (n,)`` with ``Lambda_0 = 1`` (no past).

    Examples:
        >>> match_lengths("abracadabra") - 1
        array([0, 0, 0, 1, 0, 1, 0, 4, 3, 2, 1])

    References:
        Kontoyiannis, Algoet, Suhov, Wyner, "Nonparametric entropy estimation for stationary
        processes and random fields", IEEE Trans. Inf. Theory 44(3), 1998. Crochemore, Ilie,
        "Computing Longest Previous Factor in linear time and applications", IPL 106(2), 2008.
    """
    x = to_symbols(seq)
    w = _check_window(window)
    lengths = longest_previous_factor(x) if w is None else sliding_match(x, w)
    return lengths + 1


def match_lengths_bruteforce(
    seq: SymbolsLike, *, window: int | np.integer | None = None
) -> np.ndarray:
    """Reference `match_lengths` by direct comparison at every shift (``O(n w)``, ``O(n^2)``).

    For each shift ``d = i - j`` it compares ``x[d:]`` with ``x[:-d]`` and takes run lengths of
    equal symbols; no suffix structure. For tests and the speed comparison of the benchmark.
    """
    x = to_symbols(seq)
    w = _check_window(window)
    return bruteforce_match(x, w) + 1


def entropy_rate(
    seq: SymbolsLike,
    *,
    window: int | np.integer | None = None,
    form: str = "mean",
    lengths: np.ndarray | None = None,
) -> float:
    """Kontoyiannis match-length entropy-rate estimate ``H_K`` in bits per symbol.

    Increasing window (``window=None``), positions ``I = {1, ..., floor(n/2) - 1}`` (the second
    half is look-ahead room so matches are rarely cut by the end):

        mean:  H = (1/|I|) sum_i log2(i + 1) / Lambda_i(i)            (Gao et al. 2008)
        inv:   H = [(1/|I|) sum_i Lambda_i(i) / log2(i + 1)]^(-1)      (Kontoyiannis et al. 1998)

    Sliding window ``w`` (``window=w``), positions ``I = {w, ..., n - w - 1}``:

        mean:  H = (1/|I|) sum_i log2(w) / Lambda_i(w)
        inv:   H = [(1/|I|) sum_i Lambda_i(w) / log2(w)]^(-1)

    By the AM-HM inequality ``inv <= mean`` always. The mean forms are consistent for
    stationary ergodic sources; both are biased downwards at practical ``n`` (bias
    ``O(1 / log n)``: 10-25% for ~1,000-symbol documents), so compare values only between
    sequences of similar length.

    Args:
        seq: text (UTF-8 bytes), bytes, or a 1-D integer array ``(n,)``.
        window: ``None`` (increasing window) or a sliding window ``w >= 2``.
        form: ``"mean"`` (default H_K) or ``"inv"``.
        lengths: precomputed ``match_lengths(seq, window=window)`` (skips recomputation).

    Returns:
        The estimate (a Python float).

    Raises:
        ValueError: ``n < 4`` (increasing window) or ``n < 2w + 1`` (sliding window): too short
            for any evaluated position; unknown ``form``; ``window < 2``.

    References:
        Kontoyiannis, Algoet, Suhov, Wyner, IEEE Trans. Inf. Theory 44(3):1319-1327, 1998.
        Gao, Kontoyiannis, Bienenstock, "Estimating the entropy of binary time series:
        methodology, some theory and a simulation study", Entropy 10(2):71-99, 2008.
    """
    if form not in FORMS:
        raise ValueError(f"`form` must be one of {FORMS}, got {form!r}.")
    x = to_symbols(seq)
    w = _check_window(window, minimum=2)
    n = x.shape[0]
    if w is None:
        if n < 4:
            raise ValueError(
                f"the increasing-window estimator needs n >= 4 symbols (positions "
                f"1..n/2-1), got n = {n}."
            )
        idx = np.arange(1, n // 2)
        scale = np.log2(idx + 1.0)
    else:
        if n < 2 * w + 1:
            raise ValueError(
                f"the sliding-window estimator needs n >= 2 * window + 1 = "
                f"{2 * w + 1} symbols, got n = {n}."
            )
        idx = np.arange(w, n - w)
        scale = np.full(idx.shape, math.log2(w))
    if lengths is None:
        lengths = match_lengths(x, window=w)
    elif np.shape(lengths) != (n,):
        raise ValueError(f"`lengths` must have shape ({n},), got {np.shape(lengths)}.")
    lam = np.asarray(lengths, dtype=np.float64)[idx]
    if form == "mean":
        return float(np.mean(scale / lam))
    return float(1.0 / np.mean(lam / scale))


def markov_entropy_rate(transition: Float[ArrayLike, "S S"]) -> Float[Array, ""]:
    """Entropy rate (bits/symbol) of a stationary Markov chain, ``-sum_i mu_i sum_j P_ij lg P_ij``.

    ``mu`` is the stationary law (``mu P = mu``, ``sum mu = 1``, rows of a high power of the lazy
    chain ``(P + I) / 2``); ``0 log 0 = 0``. An i.i.d. source is the case of identical
    rows. The chain must be irreducible for ``mu`` to be unique.

    References:
        Cover, Thomas, "Elements of Information Theory", 2nd ed., Thm 4.2.4.
    """
    p = _check_transition(transition)
    mu = _stationary(p)
    plogp = jnp.where(p > 0, p * jnp.log2(jnp.where(p > 0, p, 1.0)), 0.0)
    return -jnp.sum(mu * jnp.sum(plogp, axis=1))


def _check_transition(transition: Any) -> Array:
    p = jnp.asarray(transition)
    if p.ndim != 2 or p.shape[0] != p.shape[1] or p.shape[0] < 1:
        raise ValueError(f"`transition` must be a square (S, S) matrix, got shape {p.shape}.")
    if not jnp.issubdtype(p.dtype, jnp.floating):
        raise TypeError(f"`transition` must be floating point, got {p.dtype}.")
    tol = 10 * jnp.finfo(p.dtype).eps * p.shape[0]
    # NaN compares false: test the finiteness explicitly (a NaN row would sample state S - 1).
    bad = ~jnp.all(jnp.isfinite(p)) | jnp.any(p < 0)
    bad = bad | jnp.any(jnp.abs(jnp.sum(p, axis=1) - 1) > jnp.sqrt(tol))
    return eqx.error_if(
        p,
        bad,
        "`transition` must be a stochastic matrix: finite entries >= 0 and rows summing to 1.",
    )


def _normalise_rows(m: Array) -> Array:
    return m / jnp.sum(m, axis=1, keepdims=True)


def _stationary(p: Array) -> Array:
    # Rows of Q^(2^60), Q = (P + I) / 2 (the lazy chain: same stationary law, aperiodic), by
    # repeated squaring; converges for every irreducible chain and compiles to a tiny loop.
    q = 0.5 * (p + jnp.eye(p.shape[0], dtype=p.dtype))
    # Renormalise the rows after each squaring: in float32 a row-sum error of 1e-7 would
    # otherwise grow like (1 + 1e-7)^(2^k).
    q = jax.lax.fori_loop(0, 60, lambda _, m: _normalise_rows(m @ m), q)
    mu = jnp.mean(q, axis=0)
    return mu / jnp.sum(mu)


def sample_markov(
    key: PRNGKeyArray, transition: Float[ArrayLike, "S S"], length: int
) -> Int[Array, " L"]:
    """A stationary Markov chain path ``int32 (length,)``: ``x_0 ~ mu``, ``x_{t+1} ~ P[x_t]``.

    Inverse-CDF sampling in a ``lax.scan`` (one uniform per step); jit with ``length`` static.
    """
    p = _check_transition(transition)
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"`length` must be an int >= 1, got {length!r}.")
    return _sample_markov(key, p, length)


@eqx.filter_jit
def _sample_markov(key: PRNGKeyArray, p: Array, length: int) -> Array:
    u = jr.uniform(key, (length,), dtype=p.dtype)
    x0 = jnp.minimum(jnp.sum(u[0] >= jnp.cumsum(_stationary(p))), p.shape[0] - 1)
    cum = jnp.cumsum(p, axis=1)

    def step(x: Array, ut: Array) -> tuple[Array, Array]:
        nxt = jnp.minimum(jnp.sum(ut >= cum[x]), p.shape[0] - 1).astype(jnp.int32)
        return nxt, nxt

    _, path = jax.lax.scan(step, x0.astype(jnp.int32), u[1:])
    return jnp.concatenate([x0.astype(jnp.int32)[None], path])
