"""The code of the docs' "Extending jaxgen" page runs as written (so the page cannot rot).

Every ```python block of ``docs/extending.md`` is executed in order in one namespace; the page's
own assertions (closed forms, data statistics, recorded claims) are the checks.
"""

import os
import re

import pytest

PAGE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "extending.md"
)


def _blocks() -> list[str]:
    with open(PAGE) as f:
        text = f.read()
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_page_has_code():
    assert len(_blocks()) >= 8


def test_extending_page_runs(capsys):
    pytest.importorskip("jaxgen")
    namespace: dict = {"__name__": "docs_extending"}
    for i, block in enumerate(_blocks()):
        try:
            exec(compile(block, f"{PAGE}:block{i}", "exec"), namespace)
        except Exception as err:  # name the block that failed
            raise AssertionError(f"python block {i} of docs/extending.md failed:\n{block}") from err
    assert all(c["holds"] for c in namespace["rec"].claims)
