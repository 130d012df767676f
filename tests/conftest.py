"""Test configuration: float64, strict rank promotion, fresh keys."""

import itertools

import jax
import jax.random as jr
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def getkey():
    """``getkey()`` returns a fresh PRNG key each call, deterministically from ``jr.key(0)``."""
    counter = itertools.count()
    base = jr.key(0)
    return lambda: jr.fold_in(base, next(counter))


def pytest_collection_modifyitems(config, items):
    if jax.default_backend() != "gpu":
        skip = pytest.mark.skip(reason="needs a GPU (jax.default_backend() != 'gpu')")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
