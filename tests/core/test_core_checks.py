"""The shared argument checks of `jaxgen.core.checks` that no family test reaches directly."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxgen.core.checks import check_tuple


def test_check_tuple_names_the_argument_the_length_and_what_was_given():
    x, s = jnp.zeros((3, 2)), jnp.ones((3, 2))
    out = check_tuple([x, s], 2, "batch", layout="(x, scales)")  # a list is accepted ...
    assert isinstance(out, tuple) and out[0] is x and out[1] is s  # ... and returned as a tuple
    with pytest.raises(TypeError, match=r"^`batch` must be a tuple \(x, scales\) of 2 entries, "
                       r"got a tuple of 3 entries\.$"):  # fmt: skip
        check_tuple((x, s, s), 2, "batch", layout="(x, scales)")
    with pytest.raises(TypeError, match=r"`batch` must be a tuple of 2 entries, got an array of "
                       r"shape \(3, 2\)\."):  # fmt: skip
        check_tuple(x, 2, "batch")
    with pytest.raises(
        TypeError, match=r"`data` must be a tuple of 2 entries, got an array of shape \(2,\)"
    ):
        check_tuple(np.zeros(2), 2, "data")
    with pytest.raises(TypeError, match=r"`pair` must be a tuple of 2 entries, got dict"):
        check_tuple({"x": x}, 2, "pair")
