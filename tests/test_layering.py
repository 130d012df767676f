"""Families import each other only along the edges of STYLE.md section 3."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jaxgen"
ALLOWED = {
    "core": set(),
    "nn": {"core"},
    "flows": {"core", "nn"},
    "bridges": {"core", "nn"},
    "discrete": {"core", "nn"},
    "pde": {"core", "nn", "flows"},
    "transport": {"core"},
    "graphs": {"core", "transport"},
    "confseq": {"core"},
    "dictionary": {"core"},
    "energy": {"core", "nn"},
    "transformers": {"core", "nn"},
    "autoencoders": {"core", "nn"},
    "deconvolution": {"core", "nn", "flows"},
    "entropy": {"core"},
    "selectivity": {"core"},
    "data": {"core"},
    "metrics": {"core"},
}


def imported_families(path: pathlib.Path, family: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module and node.module.startswith("jaxgen."):
                found.add(node.module.split(".")[1])
            elif node.level >= 2 and node.module:  # from ..x import y inside jaxgen/<family>/
                found.add(node.module.split(".")[0])
            elif node.level >= 2:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("jaxgen."):
                    found.add(alias.name.split(".")[1])
    return found - {family}


FAMILIES = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("_"))


@pytest.mark.parametrize("family", FAMILIES)
def test_family_imports_follow_the_layering(family):
    assert family in ALLOWED, f"jaxgen/{family} is not a family of STYLE.md section 3"
    bad = {}
    for path in (ROOT / family).rglob("*.py"):
        extra = imported_families(path, family) - ALLOWED[family]
        if extra:
            bad[str(path.relative_to(ROOT))] = sorted(extra)
    assert not bad, f"imports outside the allowed edges {sorted(ALLOWED[family])}: {bad}"


def test_no_jax_config_update_inside_the_library():
    offenders = [
        str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if "jax.config.update" in p.read_text()
    ]
    assert not offenders
