"""Import the optional peer ``confseq`` (it still uses ``np.float_``, removed in NumPy 2)."""

import warnings

import numpy as np
import pytest


def import_confseq():
    if not hasattr(np, "float_"):
        np.float_ = np.float64  # only for the peer's own annotations
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import confseq.betting
            import confseq.predmix
        except Exception as err:  # ImportError, or a broken C++ build
            pytest.skip(f"confseq not installed: {err}")
    return confseq
