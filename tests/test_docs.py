"""The code shown in the docs runs as written, so the pages cannot rot.

Every ```python block of ``docs/extending.md`` is executed in order in one namespace; the page's
own assertions (closed forms, data statistics, recorded claims) are the checks. The example of
the home page and of the README runs too and prints what it says it prints.
"""

import contextlib
import io
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _blocks(path: str) -> list[str]:
    with open(os.path.join(ROOT, path)) as f:
        text = f.read()
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def _run(path: str) -> tuple[dict, str]:
    namespace: dict = {"__name__": "docs_page"}
    out = io.StringIO()
    for i, block in enumerate(_blocks(path)):
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(block, f"{path}:block{i}", "exec"), namespace)
        except Exception as err:  # name the block that failed
            raise AssertionError(f"python block {i} of {path} failed:\n{block}") from err
    return namespace, out.getvalue()


def test_extending_page_runs():
    assert len(_blocks("docs/extending.md")) >= 8
    namespace, _ = _run("docs/extending.md")
    assert namespace["rec"].claims and all(c["holds"] for c in namespace["rec"].claims)


def test_home_and_readme_examples_run():
    for path in ("docs/index.md", "README.md"):
        (block,) = _blocks(path)
        assert block == _blocks("README.md")[0]  # one example, the same on both
    _, printed = _run("README.md")
    first, second = printed.splitlines()
    assert first == "True"
    assert abs(float(second.strip("[]").split()[0])) < 1e-12
