"""The notebooks under notebooks/: each runs top to bottom (make test), and each is stored with the
outputs of its current code cells (fast, nothing executed)."""

import importlib.util
import os
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").rglob("*.ipynb"))
PARAMS = [pytest.param(p, id=p.relative_to(ROOT / "notebooks").as_posix()) for p in NOTEBOOKS]


def _load_tool():
    spec = importlib.util.spec_from_file_location("_nbtool", ROOT / "tools" / "notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tool = _load_tool()


@pytest.mark.parametrize("path", PARAMS)
def test_notebook_runs(path):
    # Outputs are not compared with the stored ones: they vary across machines (timings, BLAS).
    nb = nbformat.read(path, as_version=4)
    env_path = os.environ.get("PYTHONPATH", "")
    # The kernel imports the jaxgen of this checkout, not another installed copy.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env_path) if p)
    try:
        client = nbclient.NotebookClient(
            nb,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        )
        client.execute()
    finally:
        os.environ["PYTHONPATH"] = env_path


@pytest.mark.parametrize("path", PARAMS)
def test_notebook_outputs_current(path):
    why = tool.problems(nbformat.read(path, as_version=4))
    assert not why, f"{path.name}: " + "; ".join(why) + " (run `make notebooks`)"


def test_notebook_size():
    # Stored figures are base64 PNGs: modest figure sizes keep the repository small.
    big = {p.name: p.stat().st_size for p in NOTEBOOKS if p.stat().st_size > 300_000}
    assert not big, f"notebooks over 300 kB: {big}"


def test_checker_rejects_edited_cell(tmp_path):
    src = NOTEBOOKS[0]
    nb = nbformat.read(src, as_version=4)
    assert tool.problems(nb) == []
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.source += "\nx_edited = 1"
    path = tmp_path / src.name
    nbformat.write(nb, path)
    why = tool.problems(nbformat.read(path, as_version=4))
    assert any("code_sha256 mismatch" in w for w in why), why
    assert tool.main(["--check", str(path)]) == 1


def test_checker_rejects_missing_outputs(tmp_path):
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    why = tool.problems(nb)
    assert any("no execution_count" in w for w in why), why
    assert any("no figure" in w for w in why), why
    del nb.metadata["jaxgen"]
    assert any("no metadata.jaxgen.code_sha256" in w for w in tool.problems(nb))


def test_checker_rejects_out_of_order_run():
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    cells[-1].execution_count = len(cells) + 3  # a cell re-run by hand after the others
    assert any("top-to-bottom" in w for w in tool.problems(nb))


def test_tool_uses_conftest_xla_flags():
    # `make notebooks` and `make test` run the kernels with the same XLA flags.
    from tests import conftest

    assert tuple(tool.FAST_COMPILE) == tuple(conftest._FAST_COMPILE)
    assert all(f in tool.kernel_env()["XLA_FLAGS"] for f in conftest._FAST_COMPILE)
