"""docs/python-api.md's examples run as they are written: its ```python blocks in order, in one namespace, in an
empty folder (a SQLite publisher with two subscribers set up and merged from Python; a device synced from Python,
in the background, against the door of ``serve`` in a thread)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"

pytestmark = pytest.mark.spark


def test_the_examples_of_the_python_api_run_as_written(tmp_path, monkeypatch, spark):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 3, "docs/python-api.md lost its examples"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "python_api_example"}
    for i, block in enumerate(blocks, 1):
        exec(compile(block, f"docs/python-api.md, example {i}", "exec"), namespace)   # noqa: S102 - the doc's own code
