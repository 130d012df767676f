"""The shared benchmark harness: discovery, recording, timing, JSON/Markdown/plots, report.

A benchmark is a module ``benchmarks/NAME.py`` that defines

- ``NAME: str`` (the module's file name) and ``PAPER: str`` (the paper it serves),
- ``CONFIGS = {"quick": {...}, "full": {...}}`` (JSON-serialisable dicts; further named
  configurations, e.g. a CPU-feasible ``"paper_cpu"``, are selected with ``--config NAME``),
- ``SMOKE = {...}``: overrides of ``CONFIGS["full"]`` (nested dicts merge key by key) that cut
  every size, step and sample count to the least that still runs each stage and each peer;
  ``run NAME --full --smoke`` runs the full code path at those sizes (writes under
  ``OUT/smoke/``, JSON marked ``"smoke": true``: its claims are not results),
- ``run(config: dict, key: jax.Array, rec: Recorder) -> None``, which calls only jaxgen's
  public API and the peers, and reports through ``rec``: ``rec.metric``, ``rec.peer``,
  ``rec.claim``, ``rec.figure``, ``rec.progress`` and ``rec.time``.

``python -m benchmarks run NAME`` builds the Recorder, calls ``run`` and writes
``NAME.json``, ``NAME.md`` and the ``NAME_*.png`` figures under ``--out``.
"""

import argparse
import contextlib
import importlib
import json
import math
import operator
import os
import pkgutil
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Any

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
}
_HERE = os.path.dirname(os.path.abspath(__file__))


def _jsonable(value: Any) -> Any:
    """Convert numpy/jax scalars and arrays to plain Python for JSON."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "tolist"):
        return _jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else (1e308 if value > 0 else -1e308)
    return value


class Recorder:
    """Collects a benchmark's metrics, peers, claims and figures while it runs."""

    def __init__(self, name: str, out_dir: str):
        self.name = name
        self.out_dir = out_dir
        self.metrics: dict[str, Any] = {}
        self.peers: dict[str, Any] = {}
        self.claims: list[dict[str, Any]] = []
        self.figures: list[str] = []
        self.notes: list[str] = []

    def metric(self, name: str, value: Any) -> None:
        """Record one metric (a number, or a list/dict of numbers for curves and tables)."""
        self.metrics[name] = _jsonable(value)

    def peer(self, name: str, value: dict[str, Any] | str) -> None:
        """Record a peer's figures (a dict), or ``"not installed"``."""
        self.peers[name] = _jsonable(value)

    def claim(
        self, claim_id: str, statement: str, value: float, op: str, threshold: float, **extra: Any
    ) -> bool:
        """Record a claim; ``holds`` is computed from ``value op threshold``. Returns ``holds``."""
        if op not in _OPS:
            raise ValueError(f"claim op must be one of {sorted(_OPS)}, got {op!r}.")
        value, threshold = float(value), float(threshold)
        holds = bool(math.isfinite(value) and _OPS[op](value, threshold))
        entry = {
            "id": claim_id,
            "statement": statement,
            "value": value,
            "threshold": threshold,
            "op": op,
            "holds": holds,
        }
        entry.update(_jsonable(extra))
        self.claims.append(_jsonable(entry))
        return holds

    def note(self, text: str) -> None:
        """A sentence for the Markdown table (what was tried, why a claim does not hold)."""
        self.notes.append(text)

    @contextlib.contextmanager
    def figure(self, suffix: str, **subplots_kw: Any) -> Iterator[Any]:
        """``with rec.figure("w2_vs_steps", ncols=2) as (fig, axes):`` saves NAME_suffix.png."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(**subplots_kw)
        try:
            yield fig, axes
            path = os.path.join(self.out_dir, f"{self.name}_{suffix}.png")
            fig.tight_layout()
            fig.savefig(path, dpi=110)
            self.figures.append(os.path.basename(path))
        finally:
            plt.close(fig)

    @staticmethod
    def progress(iterable: Iterable[Any], **kw: Any) -> Iterable[Any]:
        """A tqdm bar on a TTY, silent otherwise."""
        if not sys.stderr.isatty():
            return iterable
        from tqdm.auto import tqdm

        return tqdm(iterable, leave=False, **kw)

    @staticmethod
    def time(
        fn: Callable[..., Any], *args: Any, repeats: int = 5, **kwargs: Any
    ) -> dict[str, float]:
        """Time ``fn(*args)``: first call (compile + run) apart from the median of ``repeats``."""
        return time_call(fn, *args, repeats=repeats, **kwargs)


def time_call(
    fn: Callable[..., Any], *args: Any, repeats: int = 5, **kwargs: Any
) -> dict[str, float]:
    """``{"first_call_s", "median_s"}`` of ``fn(*args, **kwargs)``, each ending in
    block_until_ready.
    """
    import jax

    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args, **kwargs))
    first = time.perf_counter() - t0
    times = []
    for _ in range(max(repeats, 1)):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args, **kwargs))
        times.append(time.perf_counter() - t0)
    return {"first_call_s": first, "median_s": statistics.median(times)}


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``(out, seconds)`` of one call ``fn(*args, **kwargs)`` (compile included), ending in
    block_until_ready: for runs timed once (a training run, a peer), where `time_call`'s repeats
    would cost too much.
    """
    import jax

    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args, **kwargs))
    return out, time.perf_counter() - t0


def interleaved_times(calls: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Medians of alternately timed, already-compiled thunks (robust to load drift).

    ``calls`` maps a name to a zero-argument function; each is run once (compile), then
    ``rounds`` times in turn, the order alternating per round. Returns the median seconds per
    name and, for every pair, the median of the per-round ratios ``"a/b"``: a ratio measured
    inside one run survives a loaded machine, a wall-clock time does not.
    """
    import jax
    import numpy as np

    names = list(calls)
    for fn in calls.values():
        jax.block_until_ready(fn())
    times: dict[str, list[float]] = {n: [] for n in names}
    for i in range(rounds):
        for n in names if i % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            jax.block_until_ready(calls[n]())
            times[n].append(time.perf_counter() - t0)
    out = {n: float(np.median(v)) for n, v in times.items()}
    for a in names:
        for b in names:
            if a != b:
                out[f"{a}/{b}"] = float(np.median(np.asarray(times[a]) / np.asarray(times[b])))
    return out


def environment(seed: int) -> dict[str, Any]:
    """Versions, git commit, backend, device kind and x64 flag for every result file."""
    import jax

    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                cwd=_HERE,
                check=False,
            ).stdout.strip()
            or "unknown"
        )
    except OSError:
        commit = "unknown"
    try:
        import jaxgen

        version = getattr(jaxgen, "__version__", "unknown")
    except ImportError:
        version = "unknown"
    devices = jax.devices()
    try:
        load_1min = round(os.getloadavg()[0], 2)
    except OSError:
        load_1min = None
    return {
        # When and where: the Results page of the docs states both beside every claim.
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "load_1min": load_1min,
        "jax": jax.__version__,
        "jaxgen": version,
        "python": platform.python_version(),
        "commit": commit,
        "backend": jax.default_backend(),
        "device_kind": devices[0].device_kind,
        "devices": len(devices),
        "float64": bool(jax.config.jax_enable_x64),
        "seed": seed,
    }


def benchmark_names() -> list[str]:
    """Every benchmark module in this package (files not starting with an underscore)."""
    return sorted(m.name for m in pkgutil.iter_modules([_HERE]) if not m.name.startswith("_"))


def load(name: str) -> Any:
    """Import ``benchmarks.NAME`` and check it has the contract's attributes."""
    if name not in benchmark_names():
        raise SystemExit(f"unknown benchmark {name!r}; known: {', '.join(benchmark_names())}")
    module = importlib.import_module(f"benchmarks.{name}")
    for attr in ("NAME", "PAPER", "CONFIGS", "run"):
        if not hasattr(module, attr):
            raise SystemExit(f"benchmarks/{name}.py lacks {attr}")
    return module


def _num(value: float | None) -> str:
    """A claim figure for a table; ``None`` is how JSON stores a NaN value."""
    return "nan" if value is None else f"{value:.4g}"


def _markdown(res: dict[str, Any]) -> str:
    lines = [
        f"# {res['name']} ({res['mode']}{', smoke' if res.get('smoke') else ''})",
        "",
        f"Paper: {res['paper']}",
        "",
        f"wall {res['wall_s']:.1f} s, backend {res['env']['backend']}, seed {res['seed']}",
        "",
    ]
    if res.get("smoke"):
        lines += [
            "**Smoke run**: the full configuration's code path at minimal sizes. Its claims show "
            "that every stage runs; they are not results.",
            "",
        ]
    lines += [
        "## Claims",
        "",
        "| id | statement | value | op | threshold | holds |",
        "|---|---|---|---|---|---|",
    ]
    for c in res["claims"]:
        mark = "yes" if c["holds"] else "**NO**"
        lines.append(
            f"| {c['id']} | {c['statement']} | {_num(c['value'])} | {c['op']} | "
            f"{_num(c['threshold'])} | {mark} |"
        )
    lines += ["", "## Metrics", "", "| metric | value |", "|---|---|"]
    for k, v in res["metrics"].items():
        text = f"{v:.4g}" if isinstance(v, float) else json.dumps(v)
        lines.append(f"| {k} | {text[:300]} |")
    lines += ["", "## Peers", "", "| peer | figures |", "|---|---|"]
    for k, v in res["peers"].items():
        lines.append(f"| {k} | {json.dumps(v)[:300]} |")
    if res.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in res["notes"]]
    if res.get("figures"):
        lines += ["", "## Plots", ""] + [f"![{f}]({f})" for f in res["figures"]]
    return "\n".join(lines) + "\n"


def merge_config(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` applied; nested dicts merge key by key (unknown keys refused)."""
    out = dict(base)
    for k, v in overrides.items():
        if k not in base:
            raise KeyError(f"override {k!r} is not a key of the configuration")
        out[k] = (
            merge_config(base[k], v) if isinstance(v, dict) and isinstance(base[k], dict) else v
        )
    return out


def smoke_config(module: Any) -> dict[str, Any]:
    """``CONFIGS["full"]`` with the module's ``SMOKE`` overrides (minimal sizes, same code path)."""
    if not hasattr(module, "SMOKE"):
        raise SystemExit(f"benchmarks/{module.NAME}.py defines no SMOKE overrides for --smoke")
    return merge_config(module.CONFIGS["full"], module.SMOKE)


def run_one(
    name: str, mode: str, seed: int, out_dir: str, *, smoke: bool = False
) -> dict[str, Any]:
    """Run benchmark ``name`` in configuration ``mode`` and write its JSON, Markdown and plots.

    ``smoke=True`` (with ``mode="full"``) runs the full configuration's code path at the sizes of
    the module's ``SMOKE`` overrides; the JSON is marked ``"smoke": true``.
    """
    import jax
    import jax.random as jr

    os.environ.setdefault("EQX_ON_ERROR", "nan")
    module = load(name)
    if mode not in module.CONFIGS:
        raise SystemExit(
            f"benchmark {name} has no {mode!r} configuration; available: "
            f"{', '.join(module.CONFIGS)}"
        )
    if smoke and mode != "full":
        raise SystemExit("--smoke runs the full configuration's code path: use it with --full")
    config = smoke_config(module) if smoke else module.CONFIGS[mode]
    os.makedirs(out_dir, exist_ok=True)
    rec = Recorder(name, out_dir)
    t0 = time.perf_counter()
    module.run(dict(config), jr.key(seed), rec)
    wall = time.perf_counter() - t0
    res = {
        "name": name,
        "paper": module.PAPER,
        "mode": mode,
        "seed": seed,
        "env": environment(seed),
        "wall_s": wall,
        "config": _jsonable(config),
        "metrics": rec.metrics,
        "peers": rec.peers,
        "claims": rec.claims,
        "figures": rec.figures,
        "notes": rec.notes,
    }
    if smoke:
        res["smoke"] = True
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(out_dir, f"{name}.md"), "w") as f:
        f.write(_markdown(res))
    held = sum(c["holds"] for c in rec.claims)
    print(
        f"{name}: {held}/{len(rec.claims)} claims hold, wall {wall:.1f} s, "
        f"{len(rec.figures)} plots -> {out_dir} (devices: {jax.devices()[0].device_kind})"
    )
    return res


REFERENCE_DIR = os.path.join(_HERE, "reference")


def _load_results(directory: str) -> list[dict[str, Any]]:
    """Every benchmark JSON (a dict with ``claims``) directly under ``directory``."""
    results = []
    for fname in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        if fname.endswith(".json"):
            with open(os.path.join(directory, fname)) as f:
                with contextlib.suppress(json.JSONDecodeError):
                    res = json.load(f)
                    if isinstance(res, dict) and "claims" in res:
                        results.append(res)
    return results


def report(out_dir: str) -> str:
    """Aggregate every ``*.json`` under ``out_dir`` into ``REPORT.md``; return its path."""
    results = [r for r in _load_results(out_dir) if not r.get("smoke")]
    references = _load_results(REFERENCE_DIR)
    for r in references:
        r["_md"] = os.path.relpath(os.path.join(REFERENCE_DIR, f"{r['name']}.md"), out_dir)
        r["name"] = f"{r['name']} (reference)"
        r["figures"] = [
            os.path.relpath(os.path.join(REFERENCE_DIR, f), out_dir) for f in r.get("figures", [])
        ]
    results += references
    lines = ["# jaxgen benchmark report", ""]
    total = sum(len(r["claims"]) for r in results)
    held = sum(c["holds"] for r in results for c in r["claims"])
    lines += [
        f"{len(results)} benchmarks, {held}/{total} claims hold. Failing claims are marked "
        "**NO**: they are reported, not hidden.",
        "",
    ]
    lines += ["| benchmark | mode | wall s | claims held | failing |", "|---|---|---|---|---|"]
    for r in results:
        failing = [c["id"] for c in r["claims"] if not c["holds"]]
        n_ok = len(r["claims"]) - len(failing)
        lines.append(
            f"| [{r['name']}]({r.get('_md', r['name'] + '.md')}) | {r['mode']} | "
            f"{r['wall_s']:.1f} | "
            f"{n_ok}/{len(r['claims'])} | {', '.join(failing) or '-'} |"
        )
    for r in results:
        lines += [
            "",
            f"## {r['name']}",
            "",
            f"Paper: {r['paper']}",
            "",
            "| claim | value | op | threshold | holds |",
            "|---|---|---|---|---|",
        ]
        for c in r["claims"]:
            mark = "yes" if c["holds"] else "**NO**"
            lines.append(
                f"| {c['id']}: {c['statement']} | {_num(c['value'])} | {c['op']} | "
                f"{_num(c['threshold'])} | {mark} |"
            )
        if r["peers"]:
            lines += [
                "",
                "Peers: "
                + "; ".join(f"`{k}`: {json.dumps(v)[:200]}" for k, v in r["peers"].items()),
            ]
        for n in r.get("notes", []):
            lines.append(f"\n> {n}")
        lines += [""] + [f"![{f}]({f})" for f in r.get("figures", [])]
    path = os.path.join(out_dir, "REPORT.md")
    os.makedirs(out_dir, exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {path}: {len(results)} benchmarks, {held}/{total} claims hold")
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks list | run NAME|all [--quick|--full] [--seed] [--out] | report``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["device-check"]:  # its own options (--out, --skip): argparse's REMAINDER
        from ._device_check import main as device_check  # drops a leading optional

        return device_check(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="benchmark names and the paper each serves")
    run_p = sub.add_parser("run", help="run one benchmark, or all")
    run_p.add_argument("name")
    group = run_p.add_mutually_exclusive_group()
    group.add_argument("--quick", dest="mode", action="store_const", const="quick")
    group.add_argument("--full", dest="mode", action="store_const", const="full")
    group.add_argument(
        "--config", dest="mode", help="a named configuration of CONFIGS (e.g. paper_cpu)"
    )
    run_p.add_argument(
        "--smoke",
        action="store_true",
        help="with --full: the full code path at the module's SMOKE sizes (claims not results)",
    )
    run_p.add_argument("--seed", type=int, default=0)
    run_p.add_argument("--out", default="results")
    plan_p = sub.add_parser(
        "plan", help="compile (never run) each --full training step: results/PLAN.md"
    )
    plan_p.add_argument("name")
    plan_p.add_argument("--out", default="results")
    plan_p.add_argument(
        "--timeout", type=float, default=240.0, help="seconds one benchmark may take to plan"
    )
    plan_p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    sub.add_parser(
        "device-check",
        help="gpu tests, every --full --smoke, three quick runs: results/device (--out, --skip)",
    )
    rep_p = sub.add_parser("report", help="write REPORT.md from every JSON under --out")
    rep_p.add_argument("--out", default="results")
    args = parser.parse_args(argv)
    if args.command == "list":
        for name in benchmark_names():
            print(f"{name}\t{load(name).PAPER}")
        return 0
    if args.command == "plan":
        from ._plan import main_plan, plan_one

        if args.one:
            return plan_one(args.name, args.out)
        names = benchmark_names() if args.name == "all" else [args.name]
        for name in names:
            load(name)  # an unknown name fails here, before any planning
        names = [n for n in names if "full" in load(n).CONFIGS]
        return main_plan(names, args.out, args.timeout)
    if args.command == "report":
        report(args.out)
        return 0
    mode = args.mode or "quick"
    if args.smoke and mode != "full":
        parser.error("--smoke runs the full configuration's code path at minimal sizes: add --full")
    out = os.path.join(args.out, "smoke") if args.smoke else args.out
    if args.name != "all":
        module = load(args.name)
        if mode not in module.CONFIGS:
            parser.error(
                f"benchmark {args.name} has no configuration {mode!r}; available: "
                f"{', '.join(module.CONFIGS)}"
            )
        try:
            run_one(args.name, mode, args.seed, out, smoke=args.smoke)
        except Exception:
            traceback.print_exc()
            return 1
        return 0
    # `run all`: each benchmark in its own process, so global JAX settings (x64, caches) of one
    # cannot leak into the next, and one broken benchmark does not hide the others.
    failed = []
    for name in benchmark_names():
        if mode not in load(name).CONFIGS:
            continue  # a named configuration (e.g. paper_cpu) that only some benchmarks define
        selector = [f"--{mode}"] if mode in ("quick", "full") else ["--config", mode]
        cmd = [sys.executable, "-m", "benchmarks", "run", name, *selector]
        cmd += ["--seed", str(args.seed), "--out", args.out] + (["--smoke"] if args.smoke else [])
        if subprocess.run(cmd, check=False).returncode != 0:
            failed.append(name)
    if failed:
        print(f"benchmarks that could not run: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
