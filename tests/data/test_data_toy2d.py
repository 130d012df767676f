"""sample_toy_2d: shapes, the documented moments and support, bad names."""

import numpy as np
import pytest

from jaxgen.data import TOY_2D, sample_toy_2d


@pytest.mark.parametrize("name", TOY_2D)
def test_toy_2d_shapes_and_support(getkey, name):
    x = np.asarray(sample_toy_2d(getkey(), name, 4000))
    assert x.shape == (4000, 2) and np.all(np.isfinite(x))
    if name == "8gaussians":
        # radius 2, sd 0.1: |x| within 2 +- 5 sd; mean 0 within 5 SE (SE = 2 / sqrt(n))
        r = np.linalg.norm(x, axis=1)
        assert np.all(np.abs(r - 2) < 0.5) and abs(r.mean() - 2.0025) < 5 * 0.1 / np.sqrt(4000)
        assert np.all(np.abs(x.mean(0)) < 5 * 1.42 / np.sqrt(4000))
    if name == "checkerboard":
        assert np.all(np.abs(x) <= 2)
        cells = np.floor(x + 2).astype(int)
        assert np.all((cells.sum(1) % 2) == 0)
        assert len({tuple(c) for c in cells}) == 8


def test_toy_2d_errors(getkey):
    with pytest.raises(ValueError, match="unknown toy"):
        sample_toy_2d(getkey(), "spirals", 10)
    with pytest.raises(ValueError, match="num"):
        sample_toy_2d(getkey(), "two_moons", 0)
