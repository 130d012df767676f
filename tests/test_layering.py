"""Families import each other only along the layering edges of the package (the table below)."""

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


def _absolute(path: pathlib.Path, node: ast.ImportFrom) -> list[str]:
    """The absolute modules an ``ImportFrom`` names (relative ones resolved from ``path``)."""
    if node.level == 0:
        return [node.module or ""]
    package = ["jaxgen", *path.relative_to(ROOT).parent.parts]
    base = package[: len(package) - (node.level - 1)]
    if node.module:
        return [".".join([*base, node.module])]
    return [".".join([*base, alias.name]) for alias in node.names]


def imported_families(path: pathlib.Path, family: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            for module in _absolute(path, node):
                parts = module.split(".")
                if parts[0] == "jaxgen" and len(parts) > 1:
                    found.add(parts[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("jaxgen."):
                    found.add(alias.name.split(".")[1])
    return found - {family}


def _module_graph() -> dict[str, set[str]]:
    """Module -> the jaxgen modules it imports at module level (for the import-cycle test)."""
    graph: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = ["jaxgen", *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        deps = set()
        for node in ast.parse(
            path.read_text()
        ).body:  # module level only: lazy imports break cycles
            if isinstance(node, ast.ImportFrom):
                for module in _absolute(path, node):
                    if module.startswith("jaxgen"):
                        # importing a.b.c runs a.b's __init__ first (but not our own ancestors')
                        chain = module.split(".")
                        deps.update(
                            ".".join(chain[:i])
                            for i in range(2, len(chain))
                            if not ".".join(parts).startswith(".".join(chain[:i]))
                        )
                        deps.add(module)
                        deps.update(f"{module}.{alias.name}" for alias in node.names)
        graph[".".join(parts)] = deps
    return {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}


FAMILIES = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("_"))


@pytest.mark.parametrize("family", FAMILIES)
def test_family_imports_follow_the_layering(family):
    assert family in ALLOWED, f"jaxgen/{family} is not a family of the layering table"
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


def test_no_import_cycle_between_private_modules():
    # A package's __init__ importing its own submodules is not a cycle; a private module that
    # imports (through any chain) a module importing it back is.
    graph = _module_graph()
    private = {m for m in graph if m.rsplit(".", 1)[-1].startswith("_")}

    def reach(start: str) -> set[str]:
        seen, stack = set(), [start]
        while stack:
            for nxt in graph[stack.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    cycles = sorted(m for m in private if m in reach(m))
    assert not cycles, f"import cycles through: {cycles}"
