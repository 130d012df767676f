"""The shipped text stands alone: it cites papers, never the project's private notes.

Every docstring, comment, note, page and notebook of the package, its tests, benchmarks
(committed results included), docs and tools must be readable without the design notes that
are not shipped: no "spec §2.4", "the spec's value", ``STYLE.md`` or a ``shared/`` folder, and
no absolute path of a developer's machine. Cite the paper and its equation instead, or say
what the choice is ("a jaxgen choice: ...").

Python files are read through `tokenize`, so only comments and strings count: a variable named
``spec`` (an importlib spec, a sharding spec) is code, not a citation. Backticked identifiers
(``specs``) are allowed for the same reason.
"""

import io
import json
import pathlib
import re
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
TREES = ("jaxgen", "benchmarks", "tests", "docs", "notebooks", "tools")
FILES = ("README.md", "Makefile", "pyproject.toml", "mkdocs.yml")
SUFFIXES = {".py", ".md", ".json", ".ipynb", ".toml", ".yml", ".yaml", ".txt", ".js", ".html"}
SKIP_DIRS = {"__pycache__", ".ipynb_checkpoints", "results", "site", ".cache", "checkpoints"}

# "spec" / "specs" as a word (not PartitionSpec, spec_from_file_location or ``spec``), the
# style guide, benchmark contract and data list of the design notes, the shared folder, and
# their bare "(choice)" marker.
CITATION = re.compile(
    r"(?<![A-Za-z0-9_`.])[Ss]pecs?(?![A-Za-z0-9_`(])|(?<![A-Za-z0-9_/])STYLE\.md"
    r"|(?<![A-Za-z0-9_/])(?:BENCHMARKS|DATA)\.md|(?<![A-Za-z0-9_])shared/|\(choice\)"
)
ABSOLUTE_PATH = re.compile(r"(?<![A-Za-z0-9_.])/work/")


def _shipped_files():
    files = [ROOT / name for name in FILES if (ROOT / name).is_file()]
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            if SKIP_DIRS.intersection(path.relative_to(ROOT).parts):
                continue
            if path.is_file() and path.suffix in SUFFIXES:
                files.append(path)
    return [f for f in files if f.resolve() != pathlib.Path(__file__).resolve()]


def _python_prose(source):
    """(line, text) of every comment and string literal of a Python source."""
    out = []
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    for tok in tokens:
        if tok.type in (tokenize.COMMENT, tokenize.STRING):
            out.append((tok.start[0], tok.string))  # line of the token's start
    return out


def _prose(path, text):
    """(line, text) pairs to search: prose only for Python, everything for other files."""
    if path.suffix == ".py":
        return _python_prose(text)
    if path.suffix == ".ipynb":
        out = []
        for i, cell in enumerate(json.loads(text)["cells"]):
            body = "".join(cell.get("source", []))
            if cell["cell_type"] == "code":
                out += [(f"cell {i}, line {n}", s) for n, s in _python_prose(body + "\n")]
            else:
                out.append((f"cell {i}", body))
        return out
    return [(n, line) for n, line in enumerate(text.splitlines(), 1)]


def _offences(pattern, prose_only):
    found = []
    for path in _shipped_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        pieces = _prose(path, text) if prose_only else list(enumerate(text.splitlines(), 1))
        rel = path.relative_to(ROOT)
        for where, piece in pieces:
            for match in pattern.finditer(piece):
                k = piece[: match.start()].count("\n")
                line = piece.splitlines()[k].strip()
                at = where + k if isinstance(where, int) else f"{where} (+{k})"
                found.append(f"{rel}:{at}: {line[:120]}")
    return found


def test_pattern_catches_citations_and_spares_code():
    hits = [
        "see spec §2.4",
        "(spec section 2.2)",
        "the spec's value",
        "Spec §2.6 table",
        "checks 3, 4 of the spec",
        "spec: 0.5",
        "specs/DATA.md",
        "STYLE.md: args",
        "see BENCHMARKS.md",
        "../shared/specs",
        "depth at 0 (choice).",
    ]
    spared = [
        "PartitionSpec(None)",
        "spec_from_file_location",
        "TargetSpec",
        "returns ``spec``",
        "specified",
        "a jaxgen choice: zero",
        "is_spec(x)",
        "docs/concepts/benchmarks.md",
    ]
    assert [s for s in hits if not CITATION.search(s)] == []
    assert [s for s in spared if CITATION.search(s)] == []
    assert [c for _, c in _python_prose("spec = 1  # spec §2\nx = 'the spec'\n")] == [
        "# spec §2",
        "'the spec'",
    ]


def test_no_citation_of_unshipped_notes():
    found = _offences(CITATION, prose_only=True)
    if found:
        pytest.fail(
            f"{len(found)} citations of the unshipped design notes (cite the paper and "
            "equation, or state the choice):\n" + "\n".join(found)
        )


def test_no_absolute_path_of_this_machine():
    found = _offences(ABSOLUTE_PATH, prose_only=False)
    assert found == [], "\n".join(found)
