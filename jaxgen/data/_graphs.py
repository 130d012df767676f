"""Small real networks shipped with networkx (offline), as numpy adjacency matrices.

Every loader returns a `GraphData` with a symmetric float64 0/1 adjacency matrix (zero diagonal),
integer labels where the graph has a ground-truth partition, and the node names in the order of
the rows. networkx is an optional dependency (extra ``data``); without it the loaders raise
`MissingDataError`.
"""

from typing import NamedTuple

import numpy as np

from ._common import require_module


class GraphData(NamedTuple):
    """A graph as arrays.

    Attributes:
        adjacency: (n, n) float64, symmetric, entries in {0, 1}, zero diagonal.
        labels: (n,) int64 ground-truth partition, or None.
        label_names: the name of each label value (index = label), or None.
        nodes: the node names, in row order.
    """

    adjacency: np.ndarray
    labels: np.ndarray | None
    label_names: list[str] | None
    nodes: list


def _to_arrays(graph, attribute: str | None) -> GraphData:
    nx = require_module("networkx")
    nodes = list(graph.nodes())
    A = nx.to_numpy_array(graph, nodelist=nodes, weight=None, dtype=np.float64)
    A = ((A + A.T) > 0).astype(np.float64)
    np.fill_diagonal(A, 0.0)
    if attribute is None:
        return GraphData(A, None, None, nodes)
    values = [graph.nodes[v][attribute] for v in nodes]
    names = sorted({str(v) for v in values})
    labels = np.array([names.index(str(v)) for v in values], dtype=np.int64)
    return GraphData(A, labels, names, nodes)


def load_karate_club() -> GraphData:
    """Zachary's karate club: n = 34, 78 edges; labels = the two factions (node attribute
    ``club``: 0 = "Mr. Hi", 1 = "Officer").

    References:
        Zachary. An information flow model for conflict and fission in small groups. 1977.
    """
    nx = require_module("networkx")
    return _to_arrays(nx.karate_club_graph(), "club")


def load_les_miserables() -> GraphData:
    """Co-appearance network of Les Misérables: n = 77, 254 edges (weights binarised); no labels.

    References:
        Knuth. The Stanford GraphBase. 1993.
    """
    nx = require_module("networkx")
    return _to_arrays(nx.les_miserables_graph(), None)


def load_florentine_families() -> GraphData:
    """Marriage ties between Renaissance Florentine families: n = 15, 20 edges; no labels.

    References:
        Breiger, Pattison. Cumulated social roles. 1986.
    """
    nx = require_module("networkx")
    return _to_arrays(nx.florentine_families_graph(), None)


def load_davis_southern_women() -> GraphData:
    """Davis southern women (bipartite women-events): n = 32 (18 women + 14 events), 89 edges;
    labels = the side (node attribute ``bipartite``: 0 = women, 1 = events).

    References:
        Davis, Gardner, Gardner. Deep South. 1941.
    """
    nx = require_module("networkx")
    return _to_arrays(nx.davis_southern_women_graph(), "bipartite")
