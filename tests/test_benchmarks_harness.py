"""The benchmark harness: command-line errors, smoke configurations, reference results."""

import glob
import json
import os
import subprocess
import sys

import pytest

from benchmarks._harness import _OPS, benchmark_names, load, merge_config, smoke_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTRACT_KEYS = {
    "name",
    "paper",
    "mode",
    "seed",
    "env",
    "wall_s",
    "config",
    "metrics",
    "peers",
    "claims",
}


def _run(*args, timeout=600):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
    )


def test_smoke_without_full_and_unknown_config_are_errors():
    name = benchmark_names()[0]
    proc = _run("run", name, "--smoke")
    assert proc.returncode != 0 and "add --full" in proc.stderr
    proc = _run("run", name, "--config", "no_such_config")
    assert proc.returncode != 0 and "available: quick, full" in proc.stderr


def test_every_benchmark_has_a_valid_smoke_configuration():
    for name in benchmark_names():
        module = load(name)
        config = smoke_config(module)  # every override names a key of the full configuration
        assert set(config) == set(module.CONFIGS["full"]), name


def test_merge_config_refuses_unknown_keys():
    assert merge_config({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"c": 5}}) == {
        "a": 1,
        "b": {"c": 5, "d": 3},
    }
    with pytest.raises(KeyError, match="'z'"):
        merge_config({"a": 1}, {"z": 2})


def _check_contract(res):
    missing = CONTRACT_KEYS - set(res)
    assert not missing, f"{res.get('name')}: missing keys {missing}"
    for c in res["claims"]:
        assert {"id", "statement", "value", "threshold", "op", "holds"} <= set(c), c
        value, threshold = c["value"], c["threshold"]
        holds = value is not None and _OPS[c["op"]](value, threshold)
        assert c["holds"] == holds, (
            f"{res['name']}: claim {c['id']} holds is not value op threshold"
        )


@pytest.mark.parametrize(
    "path",
    sorted(glob.glob(os.path.join(ROOT, "benchmarks", "reference", "*.json")))
    + sorted(glob.glob(os.path.join(ROOT, "benchmarks", "quick", "*.json"))),
)
def test_reference_results_follow_the_contract(path):
    """Committed runs (reference and quick, read by the docs' Results pages) are complete."""
    with open(path) as f:
        res = json.load(f)
    _check_contract(res)
    assert res["mode"] in load(res["name"]).CONFIGS, res["mode"]
    assert os.path.basename(path) == f"{res['name']}.json"
    if os.path.basename(os.path.dirname(path)) == "quick":
        assert res["mode"] == "quick" and not res.get("smoke")
        assert {"date", "machine", "commit"} <= set(res["env"]), res["env"]
    base = os.path.splitext(path)[0]
    assert os.path.exists(base + ".md"), f"{path}: no Markdown beside the JSON"
    for fig in res.get("figures", []):
        assert os.path.exists(os.path.join(os.path.dirname(path), fig)), fig


@pytest.mark.slow
@pytest.mark.benchmark
@pytest.mark.parametrize("name", benchmark_names())
def test_full_configuration_smoke_run(name, tmp_path):
    proc = _run("run", name, "--full", "--smoke", "--out", str(tmp_path), timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "smoke" / f"{name}.json") as f:
        res = json.load(f)
    assert res["smoke"] is True and res["mode"] == "full"
    _check_contract(res)
