"""Rooted tree topologies for tree-structured guided diffusions (static under jit).

A `TreeTopology` holds only numpy arrays and Python tuples; it is hashable, so it can be a static
argument of `jax.jit` / a static field of an `equinox.Module`. Nodes are numbered ``0..N-1``; the
root is the node without a parent (``parent == -1``). Message passing runs level by level: all
nodes at the same depth are processed by one vmapped call.
"""

from __future__ import annotations

import re

import numpy as np


class TreeTopology:
    """A rooted tree with branch lengths, static for jit.

    Attributes:
        parent: ``(N,)`` int, parent of each node, ``-1`` for the root.
        branch_length: ``(N,)`` float, length tau_v of the edge pa(v) -> v (0 at the root).
        root: index of the root.
        depth: ``(N,)`` int, number of edges from the root.
        levels: tuple of ``D+1`` int arrays, the nodes at depth 0, 1, ..., D.
        is_leaf: ``(N,)`` bool.
        leaves: ``(N_L,)`` int, the leaf nodes in increasing index order (the order of the
            observation rows).
        leaf_index: ``(N,)`` int, row of each leaf in ``leaves`` (``-1`` for internal nodes).
        n_leaves_below: ``(N,)`` int, number of leaves in the subtree of each node.
        leaf_paths: ``(N_L, D+1)`` int, root-to-leaf node paths, padded with ``-1`` at the end.
        names: tuple of node names (``""`` where unnamed; filled by `from_newick`).
        level_schedule: ``(D, W)`` int, row ``k-1`` lists the nodes at depth k padded with N
            (W is the widest level); the scan schedule of the message passing.
        level_schedule_parent: ``(D, W)`` int, their parents (N for padding).

    References:
        F. van der Meulen, S. Sommer, "Backward Filtering Forward Guiding", JMLR 2025,
        arXiv 2505.18239 (message passing on directed trees).
    """

    def __init__(self, parent, branch_length=None, names=None):
        parent = np.asarray(parent)
        if parent.ndim != 1 or parent.shape[0] < 2:
            raise ValueError(
                f"`parent` must be a 1-D array with at least 2 nodes, got shape {parent.shape}."
            )
        if not np.issubdtype(parent.dtype, np.integer):
            raise TypeError(f"`parent` must hold integers, got dtype {parent.dtype}.")
        n = parent.shape[0]
        parent = parent.astype(np.int64)
        roots = np.flatnonzero(parent == -1)
        if roots.size != 1:
            raise ValueError(
                f"`parent` must have exactly one root (entry -1), got {roots.size} roots: "
                f"{roots.tolist()[:10]}."
            )
        bad = np.flatnonzero((parent < -1) | (parent >= n))
        if bad.size:
            raise ValueError(
                f"`parent` entries must lie in [-1, {n - 1}]: parent index out of range at "
                f"nodes {bad.tolist()[:10]} (values {parent[bad].tolist()[:10]})."
            )
        if np.any(parent == np.arange(n)):
            raise ValueError("`parent` has a cycle: a node is its own parent.")
        root = int(roots[0])
        # Depth by pointer jumping; a node never reaching the root lies on a cycle.
        depth = np.full(n, -1, dtype=np.int64)
        depth[root] = 0
        for _ in range(n):
            todo = depth < 0
            if not todo.any():
                break
            pd = depth[np.where(todo, parent, root)]
            ready = todo & (pd >= 0)
            if not ready.any():
                break
            depth[ready] = pd[ready] + 1
        if np.any(depth < 0):
            raise ValueError(
                "`parent` has a cycle: nodes "
                f"{np.flatnonzero(depth < 0).tolist()[:10]} never reach the root."
            )
        if branch_length is None:
            branch_length = np.ones(n)
        branch_length = np.asarray(branch_length, dtype=np.float64)
        if branch_length.shape != (n,):
            raise ValueError(f"`branch_length` must have shape ({n},), got {branch_length.shape}.")
        nonroot = np.arange(n) != root
        if np.any(~np.isfinite(branch_length)) or np.any(branch_length[nonroot] <= 0):
            raise ValueError(
                "`branch_length` must be finite and > 0 on every edge (negative or zero branch "
                f"lengths at nodes {np.flatnonzero(nonroot & ~(branch_length > 0)).tolist()[:10]})."
            )
        branch_length = np.where(nonroot, branch_length, 0.0)
        is_leaf = np.ones(n, dtype=bool)
        is_leaf[parent[nonroot]] = False
        max_depth = int(depth.max())
        levels = tuple(np.flatnonzero(depth == k) for k in range(max_depth + 1))
        n_below = is_leaf.astype(np.int64)
        for k in range(max_depth, 0, -1):
            np.add.at(n_below, parent[levels[k]], n_below[levels[k]])
        leaves = np.flatnonzero(is_leaf)
        leaf_index = np.full(n, -1, dtype=np.int64)
        leaf_index[leaves] = np.arange(leaves.size)
        paths = np.full((leaves.size, max_depth + 1), -1, dtype=np.int64)
        for i, v in enumerate(leaves):
            path = [int(v)]
            while parent[path[-1]] != -1:
                path.append(int(parent[path[-1]]))
            paths[i, : len(path)] = path[::-1]
        self.parent = parent
        self.branch_length = branch_length
        self.root = root
        self.depth = depth
        self.levels = levels
        self.is_leaf = is_leaf
        self.leaves = leaves
        self.leaf_index = leaf_index
        self.n_leaves_below = n_below
        self.leaf_paths = paths
        self.names = tuple(names) if names is not None else ("",) * n
        # Padded level schedule for lax.scan: row k-1 holds the nodes at depth k, padded with the
        # dummy index N (a scratch row that message passing keeps at zero).
        width = max(len(lv) for lv in levels[1:])
        sched = np.full((max_depth, width), n, dtype=np.int64)
        for k in range(1, max_depth + 1):
            sched[k - 1, : len(levels[k])] = levels[k]
        sched_parent = np.where(sched < n, np.append(parent, n)[sched], n)
        self.level_schedule = sched
        self.level_schedule_parent = sched_parent
        for arr in (
            parent,
            branch_length,
            depth,
            is_leaf,
            leaves,
            leaf_index,
            n_below,
            paths,
            sched,
            sched_parent,
        ):
            arr.setflags(write=False)
        self._key = (parent.tobytes(), branch_length.tobytes())

    # -- sizes ---------------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        """Number of nodes N."""
        return int(self.parent.shape[0])

    @property
    def num_leaves(self) -> int:
        """Number of leaves N_L."""
        return int(self.leaves.shape[0])

    @property
    def max_depth(self) -> int:
        """Depth D (edges on the longest root-to-leaf path)."""
        return len(self.levels) - 1

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TreeTopology) and self._key == other._key

    def __repr__(self) -> str:
        return (
            f"TreeTopology(num_nodes={self.num_nodes}, num_leaves={self.num_leaves}, "
            f"max_depth={self.max_depth})"
        )

    # -- constructors --------------------------------------------------------------------------
    @classmethod
    def from_parents(cls, parent, branch_length=None) -> TreeTopology:
        """Tree from a parent array (``-1`` marks the root) and per-node branch lengths."""
        return cls(parent, branch_length)

    @classmethod
    def balanced(cls, depth: int, degree: int = 2, branch_length: float = 1.0) -> TreeTopology:
        """Complete ``degree``-ary tree of the given depth, nodes in breadth-first order."""
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"`depth` must be an int >= 1, got {depth!r}.")
        if not isinstance(degree, int) or degree < 1:
            raise ValueError(f"`degree` must be an int >= 1, got {degree!r}.")
        n = sum(degree**k for k in range(depth + 1))
        parent = np.concatenate([[-1], (np.arange(1, n) - 1) // degree])
        return cls(parent, np.full(n, float(branch_length)))

    @classmethod
    def yule(cls, n_leaves: int, seed: int = 0, height: float = 1.0) -> TreeTopology:
        """Ultrametric pure-birth (Yule) tree with ``n_leaves`` leaves and total ``height``.

        Lineages split at rate 1; the waiting time with k lineages is Exp(k). The tree is then
        scaled so every leaf is at distance ``height`` from the root. Nodes are renumbered in
        breadth-first order.
        """
        if not isinstance(n_leaves, int) or n_leaves < 2:
            raise ValueError(f"`n_leaves` must be an int >= 2, got {n_leaves!r}.")
        rng = np.random.default_rng(seed)
        parent, birth = [-1], [0.0]
        t = 0.0
        t += rng.exponential(1.0)
        split_time = {0: t}
        active = []
        for _ in range(2):
            parent.append(0)
            birth.append(t)
            active.append(len(parent) - 1)
        while len(active) < n_leaves:
            t += rng.exponential(1.0 / len(active))
            i = int(rng.integers(len(active)))
            v = active.pop(i)
            split_time[v] = t
            for _ in range(2):
                parent.append(v)
                birth.append(t)
                active.append(len(parent) - 1)
        t_end = t + rng.exponential(1.0 / len(active))
        end = np.array([split_time.get(v, t_end) for v in range(len(parent))])
        length = (end - np.array(birth)) * (height / (t_end - split_time[0]))
        length[0] = 0.0
        return _bfs_relabel(np.array(parent), length)

    @classmethod
    def from_newick(cls, text: str) -> TreeTopology:
        """Parse a Newick string such as ``"((A:0.1,B:0.2)C:0.3,D:0.4);"``.

        Missing branch lengths default to 1. Nodes are renumbered in breadth-first order and
        their names kept in ``names``.

        Raises:
            ValueError: on malformed text, naming the character position of the error.
        """
        if not isinstance(text, str):
            raise TypeError(f"`text` must be a str, got {type(text).__name__}.")
        parent, length, names = _parse_newick(text)
        return _bfs_relabel(np.array(parent), np.array(length), names)


def _bfs_relabel(parent: np.ndarray, length: np.ndarray, names=None) -> TreeTopology:
    n = parent.shape[0]
    children: list[list[int]] = [[] for _ in range(n)]
    root = int(np.flatnonzero(parent == -1)[0])
    for v in range(n):
        if parent[v] >= 0:
            children[parent[v]].append(v)
    order = [root]
    for v in order:
        order.extend(children[v])
    new = np.empty(n, dtype=np.int64)
    new[np.array(order)] = np.arange(n)
    new_parent = np.array([-1 if parent[v] < 0 else new[parent[v]] for v in order])
    new_names = None if names is None else [names[v] for v in order]
    return TreeTopology(new_parent, length[np.array(order)], new_names)


_TOKEN = re.compile(r"\s*(?:([(),;:])|([^(),;:\s]+))")


def _parse_newick(text: str) -> tuple[list[int], list[float], list[str]]:
    parent: list[int] = []
    length: list[float] = []
    names: list[str] = []
    pos = 0

    def err(msg: str, at: int) -> ValueError:
        return ValueError(f"Newick parse error at position {at}: {msg} (in `text`).")

    def peek() -> tuple[str | None, int]:
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == m.start() or not (m.group(1) or m.group(2)):
            return None, len(text.rstrip()) if pos >= len(text.rstrip()) else pos
        return m.group(1) or m.group(2), m.start(m.lastindex)

    def take() -> tuple[str | None, int]:
        nonlocal pos
        m = _TOKEN.match(text, pos)
        if m is None or not (m.group(1) or m.group(2)):
            return None, pos
        pos = m.end()
        return m.group(1) or m.group(2), m.start(m.lastindex)

    def node(par: int) -> None:
        me = len(parent)
        parent.append(par)
        length.append(1.0)
        names.append("")
        tok, at = peek()
        if tok == "(":
            take()
            while True:
                node(me)
                tok, at = take()
                if tok == ",":
                    continue
                if tok == ")":
                    break
                raise err(f"expected ',' or ')', got {tok!r}", at)
            tok, at = peek()
        if tok is not None and tok not in "(),;:":
            names[me] = tok
            take()
            tok, at = peek()
        if tok == ":":
            take()
            tok, at = take()
            try:
                length[me] = float(tok)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise err(f"expected a branch length after ':', got {tok!r}", at) from None
            if not length[me] > 0 and par >= 0:
                raise err(f"branch lengths must be > 0, got {tok}", at)

    node(-1)
    tok, at = take()
    if tok != ";":
        raise err(f"expected ';' at the end of the tree, got {tok!r}", at)
    rest = text[pos:].strip()
    if rest:
        raise err(f"unexpected text after ';': {rest[:20]!r}", pos + text[pos:].find(rest[0]))
    if len(parent) < 2:
        raise err("a tree needs at least one edge", 0)
    length[0] = 0.0
    return parent, length, names
