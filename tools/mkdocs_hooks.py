"""mkdocs hooks of the jaxgen site: what is generated rather than written by hand.

- Family pages: a line ``<!-- api: jaxgen.FAMILY -->`` becomes one mkdocstrings entry
  (``::: jaxgen.FAMILY.Name``) for every name the family's ``__init__.py`` re-exports
  (``from ._x import Name as Name``), read with ``ast`` at build time, so a new or renamed export
  appears without editing the page; the page ends with links to its tutorials and benchmarks.
- Tutorials: every ``notebooks/**/*.ipynb`` is added at its own path (``notebooks/FAMILY/NAME``) and
  rendered by mkdocs-jupyter from its stored outputs (never executed here).
- Results: ``results/index.md`` and one page per benchmark, from the committed JSON
  (``tools/docs_results.py``), with the figures copied beside them.
- KaTeX (pinned, from the npm registry, cached in ``.cache/``) is copied into ``assets/katex``.
"""

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import tarfile

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "jaxgen")
NOTEBOOKS = os.path.join(ROOT, "notebooks")
API_MARKER = "<!-- api: "


def _results_module():
    spec = importlib.util.spec_from_file_location(
        "docs_results", os.path.join(ROOT, "tools", "docs_results.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def exported_names(module: str) -> list[str]:
    """Names that ``jaxgen.X/__init__.py`` re-exports as ``Name as Name``, in source order."""
    path = os.path.join(ROOT, *module.split("."), "__init__.py")
    with open(path) as f:
        tree = ast.parse(f.read())
    names = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            names += [a.asname for a in node.names if a.asname and a.asname == a.name]
    return [n for n in dict.fromkeys(names) if not n.startswith("_")]


def notebooks() -> list[tuple[str, str, str]]:
    """``(docs path, absolute path, title)`` of every notebook, sorted by path."""
    out = []
    for dirpath, _, files in os.walk(NOTEBOOKS):
        if ".ipynb_checkpoints" in dirpath:
            continue
        for f in files:
            if f.endswith(".ipynb"):
                abs_path = os.path.join(dirpath, f)
                rel = os.path.relpath(abs_path, NOTEBOOKS).replace(os.sep, "/")
                out.append((f"notebooks/{rel}", abs_path, _notebook_title(abs_path, f)))
    return sorted(out)


def _notebook_title(path: str, fallback: str) -> str:
    with open(path) as f:
        nb = json.load(f)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            for line in "".join(cell.get("source", [])).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def on_config(config):
    """Fill the Tutorials and Results sections of the nav."""
    results = _results_module()
    tutorials = [{"Overview": "tutorials.md"}] + [{title: path} for path, _, title in notebooks()]
    bench = [{"Overview": "results/index.md"}] + [
        {name: f"results/{name}.md"} for name in results.benchmark_names()
    ]
    for entry in config["nav"]:
        if isinstance(entry, dict) and "Tutorials" in entry:
            entry["Tutorials"] = tutorials
        if isinstance(entry, dict) and "Results" in entry:
            entry["Results"] = bench
    return config


@event_priority(100)  # before mkdocs-jupyter wraps the notebooks
def on_files(files, config):
    """Add the notebooks, the Results pages and their figures."""
    for path, _, _ in notebooks():
        # docs path = repository path (notebooks/FAMILY/NAME.ipynb), read in place
        files.append(File(path, ROOT, config["site_dir"], config["use_directory_urls"]))
    files.append(File.generated(config, "tutorials.md", content=_tutorials_page()))
    pages, figures = _results_module().results_pages()
    for path, text in pages.items():
        files.append(File.generated(config, path, content=text))
    for path, src in figures.items():
        files.append(File.generated(config, path, abs_src_path=src))
    return files


def _tutorials_page() -> str:
    """The Tutorials overview: every notebook with its family page."""
    lines = [
        "# Tutorials",
        "",
        "One executed notebook per method, rendered with its stored outputs and figures (the "
        "site never executes them; `make notebooks` does). Each states the idea and the key "
        "equation, builds the object, checks it against a closed form or a peer, trains a small "
        "model where the method learns, plots, and points to its benchmark. The `.ipynb` files "
        "live under `notebooks/` and open in Jupyter as they are.",
        "",
        "| tutorial | family |",
        "|---|---|",
    ]
    for path, _, title in notebooks():
        family = path.split("/")[1]
        fam = (
            f"[{family}](families/{family}.md)"
            if os.path.isdir(os.path.join(PACKAGE, family))
            else family
        )
        lines.append(f"| [{title}]({path}) | {fam} |")
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown, page, config, files):
    """Expand the API marker of a family page; link its tutorials and benchmarks."""
    if API_MARKER not in markdown:
        return markdown
    out = []
    for line in markdown.splitlines():
        if line.strip().startswith(API_MARKER):
            module = line.strip()[len(API_MARKER) :].split("-->")[0].strip()
            out += _links(module)
            out += ["## API reference", ""]
            out += [
                f"Every name that `{module}` exports, in the order of its `__init__.py`.",
                "",
            ]
            for name in exported_names(module):
                out += [f"::: {module}.{name}", ""]
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def _links(module: str) -> list[str]:
    family = module.split(".")[-1]
    results = _results_module()
    tuts = [(p, t) for p, _, t in notebooks() if p.startswith(f"notebooks/{family}/")]
    benches = [b for b, fams in results.BENCHMARK_FAMILIES.items() if family in fams]
    lines = ["## Tutorials and results", ""]
    for path, title in tuts:
        lines.append(f"- Tutorial: [{title}](../{path})")
    for b in sorted(benches):
        lines.append(f"- Benchmark `{b}`: [results](../results/{b}.md)")
    if not tuts and not benches:
        lines.append("- Used by the other families' tutorials and benchmarks.")
    return lines + [""]


KATEX_VERSION = "0.16.47"


def _katex_dist() -> str:
    """The ``dist`` folder of the pinned katex npm package, fetched once into ``.cache/``."""
    cache = os.path.join(ROOT, ".cache", f"katex-{KATEX_VERSION}")
    dist = os.path.join(cache, "package", "dist")
    if not os.path.exists(os.path.join(dist, "katex.min.js")):
        os.makedirs(cache, exist_ok=True)
        try:
            subprocess.run(
                ["npm", "pack", f"katex@{KATEX_VERSION}", "--pack-destination", cache, "--silent"],
                check=True,
                capture_output=True,
            )
        except (OSError, subprocess.CalledProcessError) as err:
            raise PluginError(
                f"KaTeX {KATEX_VERSION} could not be fetched with npm ({err}); install Node.js "
                "and npm, or unpack the katex npm package into " + cache
            ) from err
        with tarfile.open(os.path.join(cache, f"katex-{KATEX_VERSION}.tgz")) as tar:
            tar.extractall(cache, filter="data")
    return dist


def on_post_build(config):
    """Copy KaTeX (script, auto-render, stylesheet, fonts) into the site."""
    dist = _katex_dist()
    dst = os.path.join(config["site_dir"], "assets", "katex")
    os.makedirs(os.path.join(dst, "contrib"), exist_ok=True)
    for f in ("katex.min.js", "katex.min.css", os.path.join("contrib", "auto-render.min.js")):
        shutil.copy2(os.path.join(dist, f), os.path.join(dst, f))
    shutil.copytree(os.path.join(dist, "fonts"), os.path.join(dst, "fonts"), dirs_exist_ok=True)
