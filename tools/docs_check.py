"""Load every page of the built site in headless Chromium and fail on what a reader would hit.

``python tools/docs_check.py --site site --out results/docs-check`` serves ``site/`` on
127.0.0.1 (a free port), opens every page in Debian's ``chromium`` driven by playwright (never a
browser that playwright downloads) and fails when

- a page logs a console error, raises a JavaScript error or gets a failed / >= 400 response;
- a family page (``families/NAME``) lacks the heading of a name its ``__init__.py`` exports, or a
  function / class among them lacks its signature (exceptions, warnings, TypedDicts,
  enumerations and ``Abstract*``
  interfaces have no constructor of their own and are exempt from the signature check);
- a tutorial page (``notebooks/...``) shows no rendered figure (an ``<img>`` of the notebook's
  outputs that the browser decoded);
- the search index lacks one of a sample of public names, or the search box does not find one.

It saves screenshots of the home page and of one tutorial (its top and its first figure) under
``--out``, and prints the time the check took.
"""

import argparse
import ast
import contextlib
import functools
import http.server
import json
import os
import socket
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Names the search index must hold (plus every 25th exported name, so the sample moves with the
# exports); the first is also typed into the search box.
SEARCH_SAMPLE = ["solve_ode", "fit", "solve_sde", "GaussianStraightProcess", "betting_cs"]


def exported(family: str) -> list[str]:
    """Names re-exported as ``Name as Name`` by ``jaxgen/FAMILY/__init__.py``."""
    with open(os.path.join(ROOT, "jaxgen", family, "__init__.py")) as f:
        tree = ast.parse(f.read())
    names = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            names += [a.asname for a in node.names if a.asname and a.asname == a.name]
    return list(dict.fromkeys(names))


def families() -> list[str]:
    """The sub-packages of jaxgen (one family page each)."""
    pkg = os.path.join(ROOT, "jaxgen")
    return sorted(
        d
        for d in os.listdir(pkg)
        if os.path.exists(os.path.join(pkg, d, "__init__.py")) and not d.startswith("_")
    )


def site_pages(site: str) -> list[str]:
    """URL paths of every HTML page of the site (directory URLs), home first."""
    pages = []
    for dirpath, dirs, files in os.walk(site):
        dirs[:] = [d for d in dirs if d not in ("assets", "search", "javascripts", "stylesheets")]
        if "index.html" in files:
            rel = os.path.relpath(dirpath, site).replace(os.sep, "/")
            pages.append("/" if rel == "." else f"/{rel}/")
    return sorted(pages, key=lambda p: (p != "/", p))


@contextlib.contextmanager
def serve(site: str):
    """Serve ``site`` on 127.0.0.1 at a free port, in a thread; yield the base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=site)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        httpd.shutdown()
        httpd.server_close()


# In the page: every exported name's heading, and whether its object shows a signature.
_FAMILY_JS = """(ids) => ids.map((id) => {
  const h = document.getElementById(id);
  if (!h) return [id, 'missing'];
  const obj = h.closest('.doc-object');
  const kind = obj ? obj.className : '';
  // a class built by its own __init__ or its fields shows a signature; exceptions, enumerations
  // and abstract interfaces have no constructor of their own to show
  const bases = (obj && obj.querySelector('.doc-class-bases') || {}).textContent || '';
  const exempt = /Exception|Error|Warning|Enumeration|ABC|Protocol|TypedDict|dict/.test(bases)
    || /(^|\.)Abstract/.test(id);
  const callable = /doc-function/.test(kind) || (/doc-class/.test(kind) && !exempt);
  const sig = obj && obj.querySelector(
    ':scope > .doc-signature, :scope > .doc-contents > .doc-signature');
  if (callable && !sig) return [id, 'no signature'];
  return [id, 'ok'];
})"""

_FIGURE_SELECTOR = ".jp-OutputArea-output img, .jp-RenderedImage img, .output_png img"
_FIGURE_JS = (
    f"() => Array.from(document.querySelectorAll('{_FIGURE_SELECTOR}'))"
    ".filter((im) => im.complete && im.naturalWidth > 0).length"
)


def check(site: str, out: str) -> list[str]:
    """Run every check; return the failures (empty when the site passes)."""
    from playwright.sync_api import sync_playwright

    failures: list[str] = []
    os.makedirs(out, exist_ok=True)
    pages = site_pages(site)
    fams = set(families())
    shot_tutorial = None
    with serve(site) as base, tempfile.TemporaryDirectory() as profile, sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1280, "height": 900},
        )
        page = browser.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
        # ERR_ABORTED: a request of the previous page cut by navigating on, not a reader's error
        page.on(
            "requestfailed",
            lambda r: (
                errors.append(f"request failed: {r.url} ({r.failure})")
                if "ERR_ABORTED" not in (r.failure or "")
                else None
            ),
        )
        page.on(
            "response", lambda r: errors.append(f"{r.status}: {r.url}") if r.status >= 400 else 0
        )
        for path in pages:
            errors.clear()
            page.goto(base + path, wait_until="load")
            page.wait_for_load_state("networkidle")
            parts = path.strip("/").split("/")
            if len(parts) == 2 and parts[0] == "families" and parts[1] in fams:
                ids = [f"jaxgen.{parts[1]}.{n}" for n in exported(parts[1])]
                bad = [f"{i} ({s})" for i, s in page.evaluate(_FAMILY_JS, ids) if s != "ok"]
                if bad:  # a loaded machine can be slow to lay out a long page: look once more
                    page.wait_for_timeout(3000)
                    bad = [f"{i} ({s})" for i, s in page.evaluate(_FAMILY_JS, ids) if s != "ok"]
                if bad:
                    failures.append(f"{path}: exported names not documented: {', '.join(bad)}")
            if parts[0] == "notebooks":
                n_fig = page.evaluate(_FIGURE_JS)
                if n_fig == 0:
                    failures.append(f"{path}: tutorial shows no rendered figure")
                elif shot_tutorial is None:
                    shot_tutorial = path
                    page.screenshot(path=os.path.join(out, "tutorial.png"))
                    # and its first figure, scrolled into view
                    page.locator(_FIGURE_SELECTOR).first.scroll_into_view_if_needed()
                    page.screenshot(path=os.path.join(out, "tutorial_figure.png"))
            if path == "/":
                page.screenshot(path=os.path.join(out, "home.png"))
            failures += [f"{path}: {e}" for e in errors]
        # The search index holds a sample of public names, and the search box finds one.
        with open(os.path.join(site, "search", "search_index.json")) as f:
            index = json.load(f)
        # a heading's title is its name, then a label such as <code>module-attribute</code>
        titles = {d["title"].split()[0] for d in index["docs"] if d["title"].strip()}
        sample = list(SEARCH_SAMPLE)
        for fam in sorted(fams):
            sample += exported(fam)[::25]
        missing = [n for n in dict.fromkeys(sample) if n not in titles]
        if missing:
            failures.append(f"search index lacks: {', '.join(missing)}")
        page.goto(base + "/", wait_until="networkidle")
        # The search worker builds its index after the page loads; a query typed before it is
        # ready stays unanswered, so type it again until results come (up to a minute).
        found = False
        for _ in range(6):
            page.keyboard.press("/")  # material's search shortcut focuses the box
            page.fill("input.md-search__input", "")
            page.type("input.md-search__input", SEARCH_SAMPLE[0], delay=30)
            try:
                page.wait_for_selector(
                    f".md-search-result__item :text('{SEARCH_SAMPLE[0]}')", timeout=10000
                )
                found = True
                break
            except Exception:
                continue
        if not found:
            failures.append(f"the search box finds no result for {SEARCH_SAMPLE[0]!r}")
        browser.close()
    if shot_tutorial is None:
        print("no tutorial with a figure: no tutorial screenshot", file=sys.stderr)
    print(f"checked {len(pages)} pages; screenshots in {out}: home.png, tutorial*.png")
    return failures


def main() -> int:
    """Check the site; exit 1 on any failure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", default=os.path.join(ROOT, "site"))
    parser.add_argument("--out", default=os.path.join(ROOT, "results", "docs-check"))
    args = parser.parse_args()
    if not os.path.exists(CHROMIUM):
        print(f"{CHROMIUM} not found: apt-get install chromium (make docs-check does)")
        return 2
    start = time.perf_counter()
    failures = check(os.path.abspath(args.site), args.out)
    print(f"docs-check: {time.perf_counter() - start:.1f} s")
    for f in failures:
        print("FAIL", f)
    n_pages = len(site_pages(os.path.abspath(args.site)))
    print(f"docs-check: {max(n_pages - len(failures), 0)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
