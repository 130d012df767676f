"""Match lengths from a suffix array, vectorised in host numpy.

Why numpy and not JAX: every step below (sorting with data-dependent round counts, pointer
jumping until convergence, gathers whose sizes depend on the data) has a data-dependent number of
iterations and ragged intermediate sizes. Under ``jit`` these would need fixed worst-case bounds
(``log2 n`` sorting rounds, ``n`` jumping rounds) and would run no faster on an accelerator than a
vectorised numpy pass on the host, while the texts being scored live on the host anyway. The
estimators are therefore host functions; the language models that generate the texts stay in JAX.

Algorithm (all passes are whole-array numpy operations, no Python loop over positions):

1. Suffix array by prefix doubling (Manber-Myers): ``rank_k[i]`` is the rank of the length-``2^k``
   prefix of suffix ``i`` (truncated at the end of the string); one ``argsort`` of the pair key
   ``(rank_k[i], rank_k[i + 2^k])`` per round, ``ceil(log2(max LCP + 1)) + 1`` rounds. Every
   level is kept, so the longest common prefix of ANY two positions is found by binary lifting
   over the levels in ``O(log n)`` (no LCP array or range-minimum structure is needed).
2. Increasing window (longest previous factor, Crochemore-Ilie 2008): the longest match of
   suffix ``i`` with an earlier suffix is attained at one of its two rank neighbours among
   suffixes starting before ``i``: the previous / next *smaller value* of ``SA`` around
   ``rank[i]``. These are found for all ranks at once by pointer jumping.
3. Sliding window ``w``: positions are cut into blocks of ``w``. For ``i`` in block ``b`` the
   window ``[i - w, i - 1]`` is the head of block ``b`` before ``i`` (nearest smaller values of
   the block's rank-sorted positions, as in 2.) plus the tail of block ``b - 1`` from ``i - w``
   (nearest rank neighbours with position ``>= i - w``, found by a descent over sparse tables of
   maxima, ``O(n log w)``).

Cost: ``O(n log n)`` per sorting round, ``O(n log n)`` overall for Markov-like sources (the number
of rounds grows with ``log`` of the longest repeat), ``O(n log w)`` memory for the sliding window.
"""

import numpy as np


def doubling_ranks(x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Suffix array and the prefix-doubling rank levels of an integer sequence.

    Args:
        x: integer array ``(n,)``, ``n >= 1``.

    Returns:
        ``(sa, levels)``: ``sa`` int64 ``(n,)`` (``sa[r]`` is the start of the ``r``-th smallest
        suffix); ``levels[k]`` int32/int64 ``(n,)`` are dense ranks of the (end-truncated)
        length-``2^k`` prefixes. Equal ranks at two different positions mean the two
        length-``2^k`` substrings are equal and both lie inside the string. The last level has
        ``n`` distinct ranks.
    """
    n = x.shape[0]
    idx_dtype = np.int32 if n < 2**31 - 1 else np.int64
    _, rank = np.unique(x, return_inverse=True)
    rank = rank.reshape(-1).astype(np.int64)
    distinct = int(rank.max()) + 1
    levels = [rank.astype(idx_dtype)]
    h = 1
    order = None
    while distinct < n:
        second = np.zeros(n, np.int64)
        second[: n - h] = rank[h:] + 1  # 0 = "past the end", sorts first
        key = rank * (n + 1) + second
        order = np.argsort(key)  # ties get equal ranks: no stability needed
        sorted_key = key[order]
        new = np.empty(n, np.int64)
        steps = np.empty(n, np.int64)
        steps[0] = 0
        np.cumsum(sorted_key[1:] != sorted_key[:-1], out=steps[1:])
        new[order] = steps
        rank = new
        distinct = int(steps[-1]) + 1
        levels.append(rank.astype(idx_dtype))
        h *= 2
    sa = np.empty(n, np.int64)
    sa[rank] = np.arange(n, dtype=np.int64)
    return sa, levels


def lcp_pairs(levels: list[np.ndarray], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Longest common prefix of suffixes ``a[k]`` and ``b[k]`` (``a[k] != b[k]``), int64.

    Binary lifting over the doubling levels: from the longest block length down, extend the match
    by ``2^k`` whenever the next length-``2^k`` blocks have equal rank (equal rank implies both
    blocks lie inside the string). Exact as long as ``2^(len(levels)) - 1 >= max LCP``, which
    holds because the last level has all-distinct ranks.
    """
    n = levels[0].shape[0]
    lcp = np.zeros(a.shape, np.int64)
    if a.size == 0:
        return lcp
    for k in range(len(levels) - 1, -1, -1):
        step = 1 << k
        ia, ib = a + lcp, b + lcp
        fits = (ia + step <= n) & (ib + step <= n)
        rank = levels[k]
        same = fits & (rank[np.minimum(ia, n - 1)] == rank[np.minimum(ib, n - 1)])
        lcp += step * same
    return lcp


def nearest_smaller(
    values: np.ndarray, seg_start: np.ndarray, seg_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Previous and next smaller value indices of distinct ``values`` inside segments.

    ``prev[k] = max{k' in [seg_start[k], k) : values[k'] < values[k]}`` (``-1`` if none) and
    ``next[k] = min{k' in (k, seg_end[k]) : values[k'] < values[k]}`` (``-1`` if none), by
    pointer jumping: a candidate ``c`` that fails (``values[c] > values[k]``) is replaced by
    ``c``'s own candidate, which is valid because everything ``c``'s candidate skipped exceeds
    ``values[c] > values[k]``. Simultaneous updates double the distance covered per round.
    """
    m = values.shape[0]
    out = []
    for direction in (-1, 1):
        ptr = np.arange(m, dtype=np.int64) + direction
        inside = (ptr >= seg_start) & (ptr < seg_end)
        ptr[~inside] = -1
        active = np.nonzero(ptr >= 0)[0]
        while active.size:
            cand = ptr[active]
            bad = values[cand] > values[active]
            active = active[bad]
            ptr[active] = ptr[ptr[active]]
            active = active[ptr[active] >= 0]
        out.append(ptr)
    return out[0], out[1]


def _sparse_max(values: np.ndarray, levels: int, forward: bool) -> list[np.ndarray]:
    """``table[k][p] = max values[p-2^k+1 .. p]`` (backward) or ``values[p .. p+2^k-1]``."""
    tables = [values]
    for k in range(1, levels):
        prev, half = tables[-1], 1 << (k - 1)
        cur = prev.copy()
        if forward:
            cur[:-half] = np.maximum(prev[:-half], prev[half:])
        else:
            cur[half:] = np.maximum(prev[half:], prev[:-half])
        tables.append(cur)
    return tables


def _last_at_least(
    tables: list[np.ndarray], q: np.ndarray, lo: np.ndarray, t: np.ndarray
) -> np.ndarray:
    """Largest ``p`` in ``[lo, q]`` with ``values[p] >= t`` (``-1`` if none); backward tables."""
    cur = q.copy()
    for k in range(len(tables) - 1, -1, -1):
        ok = cur >= lo
        skip = ok & (tables[k][np.maximum(cur, 0)] < t)
        cur = cur - skip * (1 << k)
    valid = (cur >= lo) & (tables[0][np.maximum(cur, 0)] >= t)
    return np.where(valid, cur, -1)


def _first_at_least(
    tables: list[np.ndarray], q: np.ndarray, hi: np.ndarray, t: np.ndarray
) -> np.ndarray:
    """Smallest ``p`` in ``[q, hi)`` with ``values[p] >= t`` (``-1`` if none); forward tables."""
    m = tables[0].shape[0]
    cur = q.copy()
    for k in range(len(tables) - 1, -1, -1):
        ok = cur < hi
        skip = ok & (tables[k][np.minimum(cur, m - 1)] < t)
        cur = cur + skip * (1 << k)
    valid = (cur < hi) & (tables[0][np.minimum(cur, m - 1)] >= t)
    return np.where(valid, cur, -1)


def _best_of(levels: list[np.ndarray], pos: np.ndarray, *cands: np.ndarray) -> np.ndarray:
    """``max_c LCP(pos, c)`` over candidate positions (``-1`` = no candidate, LCP 0)."""
    best = np.zeros(pos.shape, np.int64)
    for c in cands:
        has = c >= 0
        best[has] = np.maximum(best[has], lcp_pairs(levels, pos[has], c[has]))
    return best


def longest_previous_factor(x: np.ndarray) -> np.ndarray:
    """``L_i(i)``: longest match of ``x[i:]`` starting at an earlier position (overlap allowed)."""
    n = x.shape[0]
    sa, levels = doubling_ranks(x)
    zero, end = np.zeros(n, np.int64), np.full(n, n, np.int64)
    prev, nxt = nearest_smaller(sa, zero, end)
    cand_prev = np.where(prev >= 0, sa[np.maximum(prev, 0)], -1)
    cand_next = np.where(nxt >= 0, sa[np.maximum(nxt, 0)], -1)
    lengths = np.empty(n, np.int64)
    lengths[sa] = _best_of(levels, sa, cand_prev, cand_next)
    return lengths


def sliding_match(x: np.ndarray, w: int) -> np.ndarray:
    """``L_i(w)``: longest match of ``x[i:]`` starting in ``[max(0, i - w), i - 1]``."""
    n = x.shape[0]
    if w >= n - 1:
        return longest_previous_factor(x)
    sa, levels = doubling_ranks(x)
    rank = np.empty(n, np.int64)
    rank[sa] = np.arange(n)
    block_of_sa = sa // w
    t_pos = sa[np.argsort(block_of_sa, kind="stable")]  # positions by (block, rank)
    t_block = t_pos // w
    num_blocks = int(t_block[-1]) + 1
    seg_start_of_block = np.searchsorted(t_block, np.arange(num_blocks), side="left")
    seg_end_of_block = np.searchsorted(t_block, np.arange(num_blocks), side="right")
    seg_start, seg_end = seg_start_of_block[t_block], seg_end_of_block[t_block]
    # Head: earlier positions of the same block (nearest smaller positions in rank order).
    prev, nxt = nearest_smaller(t_pos, seg_start, seg_end)
    head_prev = np.where(prev >= 0, t_pos[np.maximum(prev, 0)], -1)
    head_next = np.where(nxt >= 0, t_pos[np.maximum(nxt, 0)], -1)
    best = _best_of(levels, t_pos, head_prev, head_next)
    # Tail: positions >= i - w of the previous block, nearest in rank on either side of i.
    q = np.nonzero(t_block >= 1)[0]
    if q.size:
        pos_q, blk_q = t_pos[q], t_block[q]
        t_key = t_block * n + rank[t_pos]  # strictly increasing along t_pos
        ins = np.searchsorted(t_key, (blk_q - 1) * n + rank[pos_q])
        lo, hi = seg_start_of_block[blk_q - 1], seg_end_of_block[blk_q - 1]
        num_levels = max(1, int(w).bit_length() + 1)
        thresh = pos_q - w
        back = _sparse_max(t_pos, num_levels, forward=False)
        p_prev = _last_at_least(back, ins - 1, lo, thresh)
        del back
        fwd = _sparse_max(t_pos, num_levels, forward=True)
        p_next = _first_at_least(fwd, ins, hi, thresh)
        del fwd
        tail_prev = np.where(p_prev >= 0, t_pos[np.maximum(p_prev, 0)], -1)
        tail_next = np.where(p_next >= 0, t_pos[np.maximum(p_next, 0)], -1)
        best[q] = np.maximum(best[q], _best_of(levels, pos_q, tail_prev, tail_next))
    lengths = np.empty(n, np.int64)
    lengths[t_pos] = best
    return lengths


def bruteforce_match(x: np.ndarray, w: int | None) -> np.ndarray:
    """Reference ``L_i(w)`` by direct comparison at every shift ``d = i - j`` (``O(n w)``)."""
    n = x.shape[0]
    lengths = np.zeros(n, np.int64)
    max_shift = n - 1 if w is None else min(w, n - 1)
    for d in range(1, max_shift + 1):
        eq = x[d:] == x[:-d]  # eq[k]: x[k + d] == x[k], i.e. position i = k + d vs j = k
        m = eq.shape[0]
        idx = np.arange(m)
        first_false = np.where(eq, m, idx)
        first_false = np.minimum.accumulate(first_false[::-1])[::-1]
        np.maximum(lengths[d:], first_false - idx, out=lengths[d:])
    return lengths
