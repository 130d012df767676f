"""Execute the tutorial notebooks in place, and check that their stored outputs are current.

The notebooks under ``notebooks/`` are stored executed, so that GitHub and the documentation site
(mkdocs-jupyter, which does not execute them) show their outputs and figures. Each executed
notebook records in ``metadata.jaxgen.code_sha256`` the SHA-256 of its code cells, so a fast check
(no execution) can tell when a code cell was edited after the outputs were produced.

Usage::

    python tools/notebooks.py                      # re-execute every notebook in place
    python tools/notebooks.py notebooks/flows      # the notebooks under a folder, or single files
    python tools/notebooks.py --stale              # only those whose code changed since they ran
    python tools/notebooks.py --jobs 2             # two kernels at a time
    python tools/notebooks.py --check              # no execution: exit 1 if any is not current

The kernels run in the environment of ``tests/test_notebooks.py``: the jaxgen of this checkout
first on ``PYTHONPATH`` and the fast-compile XLA flags of ``tests/conftest.py``. Precision is the
notebook's own business (each one that needs float64 switches it on in its first code cell).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import os
import pathlib
import resource
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
# The same flags as tests/conftest.py (a test checks that the two lists agree): LLVM's expensive
# passes cost more than they save on the notebooks' small programs.
FAST_COMPILE = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")
CELL_TIMEOUT_S = 600


def code_sha256(nb) -> str:
    """SHA-256 of the code cells' sources, in order (cells separated by a NUL byte)."""
    sources = [cell.source for cell in nb.cells if cell.cell_type == "code"]
    return hashlib.sha256("\0".join(sources).encode()).hexdigest()


def problems(nb) -> list[str]:
    """Why the stored outputs of ``nb`` may not come from its current code cells (empty if none).

    Checks: the recorded hash equals the hash of the code cells; every non-empty code cell has an
    execution count, counts run 1, 2, ... in cell order (one top-to-bottom run); no stored error;
    at least one PNG figure.
    """
    out = []
    recorded = nb.metadata.get("jaxgen", {}).get("code_sha256")
    if recorded is None:
        out.append("no metadata.jaxgen.code_sha256: the notebook was not run by tools/notebooks.py")
    elif recorded != code_sha256(nb):
        out.append(
            "code cells changed since the outputs were stored (code_sha256 mismatch); "
            "re-run `make notebooks`"
        )
    counts = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        if cell.get("execution_count") is None:
            out.append(f"code cell {i} has no execution_count (not executed)")
        else:
            counts.append(cell.execution_count)
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                out.append(f"code cell {i} stored an error: {output.get('ename')}")
    if counts and counts != list(range(1, len(counts) + 1)):
        out.append(f"execution counts {counts} are not one top-to-bottom run (1, 2, ...)")
    if not any(
        "image/png" in output.get("data", {})
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    ):
        out.append("no figure (image/png output)")
    return out


def kernel_env() -> dict[str, str]:
    """The environment of the kernels: this checkout first on PYTHONPATH, fast-compile XLA."""
    env = dict(os.environ)
    flags = env.get("XLA_FLAGS", "")
    env["XLA_FLAGS"] = " ".join([flags] + [f for f in FAST_COMPILE if f not in flags]).strip()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def execute(path: pathlib.Path) -> dict:
    """Execute the notebook at ``path`` in a fresh kernel and store it with outputs and hash.

    The file is rewritten only when every cell ran; on error it is left as it was.

    Returns:
        ``{"path", "wall_s", "cpu_s", "bytes"}``; ``cpu_s`` is the kernel's user+system time.
    """
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            cell.metadata.pop("execution", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    os.environ.update(kernel_env())  # jupyter_client starts the kernel with this process's env
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()  # the kernel is shut down and reaped before it returns
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    nb.metadata["jaxgen"] = {"code_sha256": code_sha256(nb)}
    nbformat.write(nb, path)
    return {"path": path, "wall_s": wall, "cpu_s": cpu, "bytes": path.stat().st_size}


def _execute_or_error(path: pathlib.Path):
    try:
        return execute(path)
    except Exception as err:  # report and go on with the other notebooks
        return {"path": path, "error": f"{type(err).__name__}: {str(err)[-2000:]}"}


def find(args: list[str]) -> list[pathlib.Path]:
    """The notebooks named by ``args`` (files or folders); every notebook when empty."""
    paths = []
    for arg in args or [str(NOTEBOOK_DIR)]:
        p = pathlib.Path(arg).resolve()
        if p.is_dir():
            paths += sorted(q for q in p.rglob("*.ipynb") if ".ipynb_checkpoints" not in q.parts)
        elif p.suffix == ".ipynb" and p.exists():
            paths.append(p)
        else:
            raise SystemExit(f"not a notebook or folder: {arg}")
    return paths


def _rel(path: pathlib.Path) -> str:
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def main(argv=None) -> int:
    """Command-line entry point; returns the exit status."""
    import nbformat

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="notebooks or folders (default: notebooks/)")
    parser.add_argument("--check", action="store_true", help="check only, execute nothing")
    parser.add_argument("--stale", action="store_true", help="execute only outdated notebooks")
    parser.add_argument("--jobs", "-j", type=int, default=1, help="kernels run at a time")
    args = parser.parse_args(argv)
    paths = find(args.paths)

    if args.check or args.stale:
        bad = {p: problems(nbformat.read(p, as_version=4)) for p in paths}
        bad = {p: why for p, why in bad.items() if why}
        if args.check:
            for p, why in bad.items():
                print(f"{_rel(p)}:\n  " + "\n  ".join(why))
            print(f"{len(paths) - len(bad)} of {len(paths)} notebooks current")
            return 1 if bad else 0
        paths = [p for p in paths if p in bad]

    t0 = time.perf_counter()
    failed = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for res in pool.map(_execute_or_error, paths):
            if "error" in res:
                failed.append(res["path"])
                print(f"FAILED {_rel(res['path'])}\n{res['error']}", flush=True)
            else:
                print(
                    f"{_rel(res['path']):60s} wall {res['wall_s']:6.1f} s  "
                    f"kernel CPU {res['cpu_s']:6.1f} s  {res['bytes'] / 1024:6.0f} KiB",
                    flush=True,
                )
    print(
        f"{len(paths) - len(failed)} of {len(paths)} notebooks executed in "
        f"{time.perf_counter() - t0:.1f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
