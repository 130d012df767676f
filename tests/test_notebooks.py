"""Every notebook under notebooks/ runs top to bottom, by default (make test)."""

import os
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").rglob("*.ipynb"))


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=p.relative_to(ROOT / "notebooks").as_posix()) for p in NOTEBOOKS]
)
def test_notebook_runs(path):
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
