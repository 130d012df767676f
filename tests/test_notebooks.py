"""Every notebook under notebooks/ runs top to bottom (slow); the ones in FAST run by default."""

import os
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").rglob("*.ipynb"))
# Notebooks run by default (each under a minute on 2 CPU cores); the others with -m slow.
FAST = {"flows/010_straight_line_flows.ipynb", "entropy/010_entropy_rate_filtering.ipynb",
        "transformers/010_continued_fraction_lm.ipynb", "confseq/010_multivariate_cs.ipynb",
        "graphs/010_graphon_estimation.ipynb"}


def _param(path: pathlib.Path):
    rel = path.relative_to(ROOT / "notebooks").as_posix()
    marks = [] if rel in FAST else [pytest.mark.slow]
    return pytest.param(path, id=rel, marks=marks)


@pytest.mark.parametrize("path", [_param(p) for p in NOTEBOOKS])
def test_notebook_runs(path):
    nb = nbformat.read(path, as_version=4)
    env_path = os.environ.get("PYTHONPATH", "")
    # The kernel imports the jaxgen of this checkout, not another installed copy.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env_path) if p)
    try:
        client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                         resources={"metadata": {"path": str(path.parent)}})
        client.execute()
    finally:
        os.environ["PYTHONPATH"] = env_path
