import numpy as np
import pytest

from jaxgen.bridges import TreeTopology


def test_balanced_structure():
    t = TreeTopology.balanced(3, degree=2, branch_length=0.5)
    assert (t.num_nodes, t.num_leaves, t.max_depth) == (15, 8, 3)
    assert t.n_leaves_below[0] == 8 and t.n_leaves_below[1] == 4
    np.testing.assert_array_equal(t.leaf_paths[0], [0, 1, 3, 7])
    assert t.level_schedule.shape == (3, 8)
    assert np.all(t.level_schedule[0, 2:] == 15)
    assert hash(t) == hash(TreeTopology.balanced(3, 2, 0.5))
    assert t == TreeTopology.balanced(3, 2, 0.5) and t != TreeTopology.balanced(3, 2, 0.4)


def test_yule_is_ultrametric_and_binary():
    t = TreeTopology.yule(16, seed=3, height=2.0)
    assert t.num_leaves == 16 and t.num_nodes == 31
    for path in t.leaf_paths:
        path = path[path >= 0]
        np.testing.assert_allclose(t.branch_length[path[1:]].sum(), 2.0, rtol=1e-12)
    counts = np.bincount(t.parent[t.parent >= 0], minlength=t.num_nodes)
    assert set(counts[~t.is_leaf]) == {2}


def test_newick_parse():
    t = TreeTopology.from_newick("((A:0.1,B:0.2)C:0.3,D:0.4);")
    assert t.names == ("", "C", "D", "A", "B")
    np.testing.assert_array_equal(t.parent, [-1, 0, 0, 1, 1])
    np.testing.assert_allclose(t.branch_length, [0, 0.3, 0.4, 0.1, 0.2])
    t2 = TreeTopology.from_newick("(a,(b,c));")
    assert t2.num_leaves == 3 and np.all(t2.branch_length[1:] == 1.0)


@pytest.mark.parametrize(
    "text, pos",
    [
        ("((A:0.1,B:0.2)C:0.3,D:0.4)", 26),
        ("((A:0.1,B:x)C,D);", 10),
        ("((A,B);", 6),
        ("(A,B);x", 6),
    ],
)
def test_newick_errors_name_position(text, pos):
    with pytest.raises(ValueError, match=f"Newick parse error at position {pos}"):
        TreeTopology.from_newick(text)


def test_malformed_parent_arrays():
    with pytest.raises(ValueError, match="exactly one root"):
        TreeTopology.from_parents([-1, -1, 0])
    with pytest.raises(ValueError, match="out of range"):
        TreeTopology.from_parents([-1, 0, 5])
    with pytest.raises(ValueError, match="cycle"):
        TreeTopology.from_parents([-1, 2, 1])
    with pytest.raises(ValueError, match="cycle"):
        TreeTopology.from_parents([-1, 1, 0])
    with pytest.raises(ValueError, match="negative or zero branch"):
        TreeTopology.from_parents([-1, 0, 0], [0.0, 1.0, -0.5])
    with pytest.raises(ValueError, match="branch_length` must have shape"):
        TreeTopology.from_parents([-1, 0, 0], [1.0, 1.0])
    with pytest.raises(TypeError, match="integers"):
        TreeTopology.from_parents(np.array([-1.0, 0.0]))
    with pytest.raises(ValueError, match="depth"):
        TreeTopology.balanced(0)
    with pytest.raises(ValueError, match="n_leaves"):
        TreeTopology.yule(1)
