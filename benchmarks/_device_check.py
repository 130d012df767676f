"""``python -m benchmarks device-check``: one prepared check for a machine with an accelerator.

In order, each stage timed and logged under ``OUT/device/`` (default ``results/device/``):

1. the devices JAX sees (``devices.txt``); without an accelerator it says so and runs the same
   code paths on the CPU;
2. the tests marked ``gpu`` (float32 numerics of every family's core function against the
   float64 result at stated tolerances), run on whatever backend is present
   (``JAXGEN_RUN_GPU_TESTS=1`` lifts the CPU skip of ``tests/conftest.py``): ``gpu_tests.log``;
3. every benchmark's ``--full --smoke`` (the accelerator configuration's code path at minimal
   sizes): ``smoke/NAME.json``;
4. the quick runs of the three heaviest benchmarks (``HEAVIEST``): ``quick/NAME.json``;

then ``SUMMARY.md`` with each stage's status and wall time. On an H100 the whole check is sized
to finish in under 10 minutes; on a 2-core CPU it takes about half an hour. It exits non-zero
when a stage failed (a benchmark that could not run, a failing test); claims that do not hold
are reported by the benchmarks, not counted as failures.
"""

import argparse
import os
import subprocess
import sys
import time

#: The three benchmarks with the longest quick runs (2-core CPU figures of their JSON, ~230-300 s).
HEAVIEST = ("splitmeanflow_sr", "neural_ctmc", "normalizing_trajectory_models")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _stage(name: str, cmd: list[str], log_path: str, env: dict[str, str]) -> tuple[int, float]:
    print(f"== {name}: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, cwd=_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    with open(log_path) as log:
        tail = log.read().splitlines()[-3:]
    print("\n".join(f"   {line}" for line in tail))
    print(f"   -> exit {proc.returncode} in {wall:.0f} s (log: {log_path})", flush=True)
    return proc.returncode, wall


def main(argv: list[str] | None = None) -> int:
    """Run the stages; ``--skip`` leaves some out (e.g. ``--skip smoke quick`` on a laptop)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks device-check")
    parser.add_argument("--out", default="results")
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=["tests", "smoke", "quick"], help="stages to skip"
    )
    args = parser.parse_args(argv)
    out = os.path.join(args.out, "device")
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, JAXGEN_RUN_GPU_TESTS="1", PYTHONUNBUFFERED="1")
    py = sys.executable

    import jax

    devices = jax.devices()
    backend = jax.default_backend()
    lines = [f"backend: {backend}", *(f"{d.id}: {d.device_kind} ({d.platform})" for d in devices)]
    if backend == "cpu":
        lines.append(
            "no accelerator found: the same code paths run on the CPU (timings are not "
            "accelerator timings)"
        )
    with open(os.path.join(out, "devices.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)

    rows = []
    if "tests" not in args.skip:
        cmd = [py, "-m", "pytest", "-q", "-p", "no:xdist", "-m", "gpu", "tests"]
        rows.append(("gpu-marked tests", *_stage("tests", cmd, f"{out}/gpu_tests.log", env)))
    if "smoke" not in args.skip:
        cmd = [py, "-m", "benchmarks", "run", "all", "--full", "--smoke", "--out", out]
        rows.append(
            ("every benchmark --full --smoke", *_stage("smoke", cmd, f"{out}/smoke.log", env))
        )
    if "quick" not in args.skip:
        for name in HEAVIEST:
            cmd = [py, "-m", "benchmarks", "run", name, "--quick", "--out", f"{out}/quick"]
            rows.append((f"{name} --quick", *_stage(name, cmd, f"{out}/quick_{name}.log", env)))
    summary = [
        "# Device check",
        "",
        *(f"- {line}" for line in lines),
        "",
        "| stage | exit | wall s |",
        "|---|---|---|",
        *(f"| {name} | {code} | {wall:.0f} |" for name, code, wall in rows),
    ]
    with open(os.path.join(out, "SUMMARY.md"), "w") as f:
        f.write("\n".join(summary) + "\n")
    failed = [name for name, code, _ in rows if code != 0]
    print(f"device check: {len(rows) - len(failed)}/{len(rows)} stages passed -> {out}/SUMMARY.md")
    return 1 if failed else 0
