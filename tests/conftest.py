"""Test configuration: float64, strict rank promotion, fresh keys."""

import itertools
import os

# The suite compiles hundreds of small programs and runs them on tiny shapes: LLVM's expensive
# optimisation passes cost more than they save (about 40% of the CPU time of the tests and of the
# notebooks, whose kernels inherit this environment). Set before jax initialises its backend.
_FAST_COMPILE = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", "")]
    + [f for f in _FAST_COMPILE if f not in os.environ.get("XLA_FLAGS", "")]
).strip()

import jax  # noqa: E402
import jax.random as jr  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def getkey():
    """``getkey()`` returns a fresh PRNG key each call, deterministically from ``jr.key(0)``."""
    counter = itertools.count()
    base = jr.key(0)
    return lambda: jr.fold_in(base, next(counter))


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
    # `python -m benchmarks device-check` sets JAXGEN_RUN_GPU_TESTS=1 to run the `gpu` tests on
    # whatever backend is present (the CPU included), so the check runs the same code paths.
    if jax.default_backend() != "gpu" and os.environ.get("JAXGEN_RUN_GPU_TESTS") != "1":
        skip = pytest.mark.skip(reason="needs a GPU (jax.default_backend() != 'gpu')")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
