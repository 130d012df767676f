"""Monte Carlo across a mesh: each family's replicate axis on 4 host devices equals one device.

One subprocess (4 host devices must be set before JAX starts) runs every family's entry point
with and without a mesh; one test per family reads its results.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    path = tmp_path_factory.mktemp("sharded_mc") / "results.npz"
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        PYTHONPATH=ROOT,
        XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tests.core.sharded_montecarlo", str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def _check(results, family, rtol):
    names = sorted({k.split("/")[1] for k in results if k.startswith(family + "/")})
    assert names, f"no results for {family}"
    for name in names:
        prefix = f"{family}/{name}"
        assert int(results[f"{prefix}/devices"]) == 4, f"{prefix} did not run on 4 devices"
        sharded, single = results[f"{prefix}/sharded"], results[f"{prefix}/single"]
        assert sharded.shape == single.shape
        # atol: round-off of O(1) quantities (the exact-proxy log-weights are ~1e-16, not 0)
        np.testing.assert_allclose(
            sharded, single, rtol=rtol, atol=1e-12 if rtol else 0, err_msg=prefix
        )


def test_confseq_miscoverage_sharded_equals_one_device(results):
    _check(results, "confseq", rtol=0)  # booleans


def test_transport_srgw_batch_sharded_equals_one_device(results):
    _check(results, "transport", rtol=1e-12)


def test_bridges_importance_sample_sharded_equals_one_device(results):
    _check(results, "bridges", rtol=1e-12)


def test_flows_sample_many_sharded_equals_one_device(results):
    _check(results, "flows", rtol=1e-12)
