"""docs/python-api.md's examples run as they are written (docs/web-sync.md's after them): their ```python blocks
in order, in one namespace, in an empty folder (a SQLite publisher with two subscribers set up and merged from
Python; a device synced from Python, in the background, against the door of ``serve`` in a thread). The page
names every call of the API, and the commands reach the library through the API only."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from sparksync import api

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "python-api.md"
WEB_DOC = ROOT / "docs" / "web-sync.md"


@pytest.mark.spark
def test_the_examples_of_the_python_api_run_as_written(tmp_path, monkeypatch, spark):
    """docs/python-api.md's examples, then docs/web-sync.md's (which continue them)."""
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "python_api_example"}
    for doc, least in ((DOC, 3), (WEB_DOC, 1)):
        blocks = re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
        assert len(blocks) >= least, f"{doc.name} lost its examples"
        for i, block in enumerate(blocks, 1):
            exec(compile(block, f"docs/{doc.name}, example {i}", "exec"), namespace)   # noqa: S102 - the doc's own code


def _public(obj) -> list[str]:
    return [n for n, v in vars(obj).items() if not n.startswith("_") and inspect.isfunction(v)
            and v.__module__.startswith(api.__name__)]


def test_the_page_names_every_call_of_the_api():
    """Every public function of sparksync.api and every method of Publisher and Device is named on the page."""
    doc = DOC.read_text(encoding="utf-8")
    names = _public(api) + _public(api.Publisher) + _public(api.Device)
    assert {"merge", "sync", "start", "partitions", "schema_change", "tracer_token", "serve"} <= set(names)
    missing = sorted({n for n in names if f"{n}(" not in doc})
    assert not missing, f"docs/python-api.md does not name: {missing}"


# What a command may call of the library beside sparksync.api: how the CLI starts Spark, shows an error, waits for
# a lock, reads a device's token from the environment or a file, and adds up a summary it prints.
CLI_OWN = {"spark_session", "RedactingStream", "recover", "spark_error_message", "locks", "read_token",
           "ConfigurationError", "DirectionStats"}


def test_the_commands_call_the_library_through_the_api():
    """A command parses, calls sparksync.api and prints: no cli/ module (but the demo's scenario, which shows
    the API at work) calls a name it imported from elsewhere in the package, CLI_OWN aside."""
    found = []
    for path in sorted((ROOT / "src" / "sparksync" / "cli").glob("*.py")):
        if path.name == "demo_scenario.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {a.asname or a.name: node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                    and (node.module or "").startswith("sparksync") and not (node.module or "").startswith(
                        ("sparksync.cli", "sparksync.api")) for a in node.names if a.name != "api"}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            base = f.id if isinstance(f, ast.Name) else \
                f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else None
            if base in imported and base not in CLI_OWN:
                found.append(f"{path.name}:{node.lineno} {base} ({imported[base]})")
    assert not found, f"commands calling the library around sparksync.api: {found}"
