"""Test configuration: float64, strict rank promotion, fresh keys."""

import itertools
import os

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


# Families whose fast suites have not yet been timed within budget on an idle 2-core machine
# (they were written on a heavily loaded one): their tests run with `-m slow` until trimmed.
# `JAXGEN_TIMED_FAMILIES=pde,nn pytest ...` runs those families' fast selection as CI will.
UNTIMED_FAMILIES = {"bridges", "dictionary", "discrete", "pde"} - set(os.environ.get("JAXGEN_TIMED_FAMILIES", "").split(","))


NOTEBOOK_TESTS = "tests/test_notebooks.py::"


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent in serial runs (-p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    # `make test` runs under pytest-xdist: one test module is one unit of work (its module-scoped
    # fixtures and compiled functions are built once), and each notebook is a unit of its own.
    from xdist.scheduler import LoadScopeScheduling

    class ModuleOrNotebookScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return nodeid if nodeid.startswith(NOTEBOOK_TESTS) else nodeid.split("::", 1)[0]

    return ModuleOrNotebookScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    # The notebooks (the longest units) are scheduled first so the two workers finish together.
    items.sort(key=lambda item: not item.nodeid.startswith(NOTEBOOK_TESTS))
    for item in items:
        parts = item.nodeid.split("/")
        if len(parts) > 2 and parts[0] == "tests" and parts[1] in UNTIMED_FAMILIES:
            item.add_marker(pytest.mark.slow)
    if jax.default_backend() != "gpu":
        skip = pytest.mark.skip(reason="needs a GPU (jax.default_backend() != 'gpu')")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
