"""``python -m benchmarks plan NAME|all``: a compile-only plan of the ``--full`` runs.

Before renting an accelerator, a user wants to know whether a ``--full`` configuration fits in
its memory and roughly how long it takes. For each benchmark this module runs the benchmark's
``run`` at its ``--full`` sizes with `jaxgen.core.fit` replaced by a probe: the probe lowers and
compiles one optimiser step of the training run it is given (``jax.jit(...).lower(abstract
inputs).compile()``, the inputs abstracted to ``jax.ShapeDtypeStruct`` from the arrays the
benchmark built) and stops the benchmark, so no training step is ever executed. The compiled
step's XLA cost analysis (FLOPs, bytes accessed) and memory analysis (argument, output and
temporary bytes) give the figures of ``results/PLAN.md``:

- parameters (inexact array entries of the model), FLOPs per step, peak memory per step,
- steps in the run (``num_steps`` of the ``fit`` call),
- a roofline estimate of the run's wall time, ``steps * max(FLOPs / peak FLOP/s, bytes /
  bandwidth)``, on an H100 (80 GB) and an H200 (141 GB), and whether the step fits on one.

A benchmark whose main training run is not its first ``fit`` call names it with
``PLAN_FIT_CALL = k`` (the k-th call, from 1; earlier calls return their model untrained); one
whose work before that call is long at ``--full`` sizes defines ``plan_stage(config, key,
rec)``, the part of ``run`` that builds and trains the main model, which is run instead. A
benchmark that trains nothing (a Monte-Carlo or solver benchmark) defines ``plan(config, key)``
returning ``[(label, fn, args, count)]``: ``fn(*args)`` is compiled the same way and counted
``count`` times. The roofline ignores kernel-launch and host overheads, which dominate the
small models of most benchmarks: it is a lower bound on wall time, and an upper bound on
nothing; the memory figure is XLA's own accounting for the compiled step.
"""

import dataclasses
import json
import math
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

# Peak dense throughput and memory of the two accelerators this plan sizes runs for. Source:
# NVIDIA H100 Tensor Core GPU datasheet (SXM5: TF32 tensor core 494.5 TFLOP/s dense, i.e. the
# 989 TFLOP/s "with sparsity" figure halved; HBM3 3.35 TB/s; 80 GB) and NVIDIA H200 datasheet
# (same compute, HBM3e 4.8 TB/s, 141 GB). jaxgen's steps are float32; XLA runs float32
# matmuls on TF32 tensor cores at the default precision.
ACCELERATORS = {
    "H100 80GB": {"flops": 494.5e12, "bandwidth": 3.35e12, "memory": 80e9},
    "H200 141GB": {"flops": 494.5e12, "bandwidth": 4.8e12, "memory": 141e9},
}


@dataclasses.dataclass
class PlanRow:
    """One compiled step of one benchmark's ``--full`` run."""

    benchmark: str
    label: str
    params: int
    flops: float
    bytes_accessed: float
    peak_bytes: float
    count: int
    compile_s: float
    note: str = ""

    def estimate_s(self, accel: dict[str, float]) -> float:
        """Roofline wall-time estimate of ``count`` steps on ``accel`` (seconds)."""
        per_step = max(self.flops / accel["flops"], self.bytes_accessed / accel["bandwidth"])
        return self.count * per_step

    def mesh_needed(self, accel: dict[str, float]) -> int:
        """Devices of a parameter-sharded mesh the step needs on ``accel`` (1: fits on one)."""
        return max(1, math.ceil(self.peak_bytes / accel["memory"]))


class _Planned(Exception):
    """Raised by the `fit` probe once it has compiled the step: stops the benchmark there."""

    def __init__(self, row: PlanRow):
        super().__init__(row.label)
        self.row = row


def _abstract(tree: Any) -> tuple[Any, Any]:
    """(abstract array leaves, static rest) of a pytree: arrays become ShapeDtypeStructs."""
    import equinox as eqx
    import jax

    arrays, static = eqx.partition(tree, eqx.is_array)
    abstract = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), arrays)
    return abstract, static


def _count_params(model: Any) -> int:
    import equinox as eqx
    import jax

    leaves = jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array))
    return int(sum(x.size for x in leaves))


def compile_row(
    benchmark: str, label: str, fn: Callable[..., Any], args: tuple, count: int, params: int = 0
) -> PlanRow:
    """Lower and compile ``fn(*args)`` on abstract inputs; never run it."""
    import equinox as eqx
    import jax

    abstract, static = _abstract(args)

    def on_arrays(arrays: Any) -> Any:
        return eqx.filter(fn(*eqx.combine(arrays, static)), eqx.is_array)

    t0 = time.perf_counter()
    compiled = jax.jit(on_arrays).lower(abstract).compile()
    compile_s = time.perf_counter() - t0
    cost = compiled.cost_analysis()
    if isinstance(cost, list | tuple):  # older jax: one dict per computation
        cost = cost[0] if cost else {}
    cost = cost or {}
    memory = compiled.memory_analysis()
    peak = float("nan")
    if memory is not None:
        peak = float(
            memory.argument_size_in_bytes
            + memory.output_size_in_bytes
            + memory.temp_size_in_bytes
            - getattr(memory, "alias_size_in_bytes", 0)
        )
    return PlanRow(
        benchmark=benchmark,
        label=label,
        params=params,
        flops=float(cost.get("flops", float("nan"))),
        bytes_accessed=float(cost.get("bytes accessed", float("nan"))),
        peak_bytes=peak,
        count=int(count),
        compile_s=compile_s,
    )


def _fit_probe(benchmark: str, target: int) -> Callable[..., Any]:
    """A stand-in for `jaxgen.core.fit` that compiles the ``target``-th run's step and stops."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxgen.core import FitResult
    from jaxgen.core.train import _sampled_step

    calls = [0]

    def probe(loss_fn, model, batches, optimizer, *, num_steps, key, state=None, **options):
        calls[0] += 1
        opt_state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
        if calls[0] < target:  # an earlier, auxiliary run: hand its model back untrained
            return FitResult(model, opt_state, np.zeros(num_steps), 0, state, ())
        step_kwargs = dict(
            loss_fn=loss_fn,
            batches=batches,
            optimizer=optimizer,
            mesh=None,
            stateful=state is not None,
            pass_step=bool(options.get("pass_step", False)),
        )

        def one_step(model, opt_state, key, state):
            return _sampled_step(model, opt_state, key, jnp.int32(0), state, **step_kwargs)

        label = f"fit call {calls[0]}: {_callable_name(loss_fn)} step"
        row = compile_row(
            benchmark,
            label,
            one_step,
            (model, opt_state, jax.random.key_data(key) if _typed(key) else key, state),
            num_steps,
            params=_count_params(model),
        )
        raise _Planned(row)

    return probe


def _callable_name(fn: Any) -> str:
    """``fn``'s name, seen through ``functools.partial`` / ``eqx.Partial`` wrappers."""
    while not hasattr(fn, "__name__") and hasattr(fn, "func"):
        fn = fn.func
    return getattr(fn, "__name__", type(fn).__name__)


def _typed(key: Any) -> bool:
    import jax
    import jax.numpy as jnp

    return jnp.issubdtype(key.dtype, jax.dtypes.prng_key)


def _patch_fit(probe: Callable[..., Any]) -> list[tuple[Any, str, Any]]:
    """Bind ``probe`` wherever `jaxgen.core.fit` is bound (``from ..core import fit``)."""
    import jaxgen.core
    import jaxgen.core.train

    original = jaxgen.core.train.fit
    patched = []
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "") or ""
        if not (name.startswith("jaxgen") or name.startswith("benchmarks")):
            continue
        for attr in ("fit",):
            if getattr(module, attr, None) is original:
                patched.append((module, attr, original))
                setattr(module, attr, probe)
    return patched


def plan_benchmark(name: str) -> list[PlanRow]:
    """The compiled step(s) of benchmark ``name`` at its ``--full`` sizes."""
    import jax.random as jr

    from ._harness import load

    module = load(name)
    config = dict(module.CONFIGS["full"])
    if hasattr(module, "plan"):
        import equinox as eqx

        return [
            compile_row(
                name,
                label,
                fn,
                args,
                count,
                params=sum(_count_params(a) for a in args if isinstance(a, eqx.Module)),
            )
            for label, fn, args, count in module.plan(config, jr.key(0))
        ]
    probe = _fit_probe(name, getattr(module, "PLAN_FIT_CALL", 1))
    patched = _patch_fit(probe)

    import tempfile

    from ._harness import Recorder

    rec = Recorder(name, tempfile.mkdtemp(prefix=f"plan-{name}-"))
    stage = getattr(module, "plan_stage", module.run)
    try:
        stage(config, jr.key(0), rec)
    except _Planned as planned:
        return [planned.row]
    finally:
        for module_, attr, original in patched:
            setattr(module_, attr, original)
    raise RuntimeError(
        f"benchmark {name} ran to the end without calling jaxgen.core.fit: give it a "
        "`plan(config, key)` hook"
    )


def _gb(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x / 1e9:.3g}"


def _duration(s: float) -> str:
    if not math.isfinite(s):
        return "n/a"
    return f"{s:.3g} s" if s < 120 else f"{s / 60:.3g} min" if s < 7200 else f"{s / 3600:.3g} h"


def write_plan(
    rows: list[PlanRow], failures: dict[str, str], out_dir: str, empty: list[str] = ()
) -> str:
    """``OUT/PLAN.md`` from the compiled rows (and the benchmarks that could not be planned)."""
    lines = [
        "# Compile-only plan of the `--full` runs",
        "",
        "Each row is one optimiser step (or one Monte-Carlo call) of a benchmark's `--full` run,",
        "lowered and compiled on the CPU from abstract inputs and never executed. Roofline:",
        "`steps x max(FLOPs / peak FLOP/s, bytes / bandwidth)`; peaks from the NVIDIA H100 and",
        "H200 datasheets (494.5 TFLOP/s dense TF32; 3.35 / 4.8 TB/s; 80 / 141 GB). It ignores",
        "launch and host overheads: a lower bound on wall time. `mesh` is the number of devices",
        "a parameter-sharded mesh (`jaxgen.core.fit(..., mesh=..., shard_params=...)`) needs when",
        "the step does not fit on one.",
        "",
        "| benchmark | step | params | GFLOP/step | GB accessed/step | peak GB/step | steps |"
        " H100 est. | H200 est. | fits H100 | fits H200 | mesh (H100) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    h100, h200 = ACCELERATORS["H100 80GB"], ACCELERATORS["H200 141GB"]
    for r in rows:
        lines.append(
            f"| {r.benchmark} | {r.label} | {r.params:,} | {r.flops / 1e9:.4g} | "
            f"{_gb(r.bytes_accessed)} | {_gb(r.peak_bytes)} | {r.count:,} | "
            f"{_duration(r.estimate_s(h100))} | {_duration(r.estimate_s(h200))} | "
            f"{'yes' if r.peak_bytes <= h100['memory'] else 'no'} | "
            f"{'yes' if r.peak_bytes <= h200['memory'] else 'no'} | {r.mesh_needed(h100)} |"
        )
    if empty:
        lines += ["", "Nothing to compile (the run does its work outside JAX): "]
        lines[-1] += ", ".join(f"`{name}`" for name in empty) + "."
    if failures:
        lines += ["", "## Not planned", ""]
        lines += [f"- `{name}`: {why}" for name, why in sorted(failures.items())]
    text = "\n".join(lines) + "\n"
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "PLAN.md")
    with open(path, "w") as f:
        f.write(text)
    return path


def plan_one(name: str, out_dir: str) -> int:
    """Plan benchmark ``name`` in this process; its rows go to ``OUT/plan/NAME.json``."""
    t0 = time.perf_counter()
    os.makedirs(os.path.join(out_dir, "plan"), exist_ok=True)
    record: dict[str, Any] = {"name": name}
    try:
        rows = plan_benchmark(name)
        record["rows"] = [dataclasses.asdict(r) for r in rows]
    except Exception as err:  # recorded, so one benchmark never hides the others
        traceback.print_exc()
        first = str(err).splitlines()[0] if str(err) else ""
        record["error"] = f"{type(err).__name__}: {first}"
        rows = []
    record["plan_s"] = time.perf_counter() - t0
    with open(os.path.join(out_dir, "plan", f"{name}.json"), "w") as f:
        json.dump(record, f, indent=1)
    for r in rows:
        print(
            f"{name}: {r.label}: {r.params:,} params, {r.flops / 1e9:.4g} GFLOP/step, "
            f"peak {_gb(r.peak_bytes)} GB, {r.count} steps (planned in {record['plan_s']:.1f} s)"
        )
    return 0 if "error" not in record else 1


def main_plan(names: list[str], out_dir: str, timeout_s: float = 240.0) -> int:
    """Plan each benchmark in its own process (their global JAX settings differ), then write
    ``OUT/PLAN.md`` from every ``OUT/plan/NAME.json``.
    """
    status = 0
    for name in names:
        cmd = [sys.executable, "-m", "benchmarks", "plan", name, "--out", out_dir, "--one"]
        stale = os.path.join(out_dir, "plan", f"{name}.json")
        if os.path.exists(stale):
            os.remove(stale)
        try:
            status |= subprocess.run(cmd, check=False, timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            status = 1
            print(f"{name}: not planned within {timeout_s} s", file=sys.stderr)
    rows: list[PlanRow] = []
    failures: dict[str, str] = {}
    empty: list[str] = []
    for name in names:
        path = os.path.join(out_dir, "plan", f"{name}.json")
        if not os.path.exists(path):
            failures[name] = (
                f"no compiled step within {timeout_s} s (the benchmark's work before its first "
                "`fit` call is too long at --full sizes on this machine, or it trains nothing and "
                "has no `plan(config, key)` hook)"
            )
            continue
        with open(path) as f:
            record = json.load(f)
        if "error" in record:
            failures[name] = record["error"]
        elif not record.get("rows"):
            empty.append(name)
        rows += [PlanRow(**r) for r in record.get("rows", [])]
    path = write_plan(rows, failures, out_dir, empty)
    print(f"plan of {len(rows)} steps from {len(names) - len(failures)} benchmarks -> {path}")
    return 1 if failures or status else 0
