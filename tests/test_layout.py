"""The repository's layout: no module of the package is over 600 lines; no test module imports another (nor
a conftest), and what tests share lives in tests/support, with the fixtures of tests/conftest.py on top of it.

A test module imported by another is imported twice (once by pytest, once under the importer's name),
its module-level code runs twice, and the two files' fixtures, constants and builders are tied together
without anyone seeing it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
SUPPORT = TESTS / "support"


def _is_test_module(path: Path) -> bool:
    return path.suffix == ".py" and (path.name.startswith("test_") or path.name == "conftest.py")


def _module_file(dotted: str, base: Path) -> Path | None:
    """The file under tests/ that module ``dotted`` is when looked up from ``base`` (None: none is)."""
    target = base.joinpath(*dotted.split(".")) if dotted else base
    for f in ([target.with_suffix(".py")] if dotted else []) + [target / "__init__.py"]:
        if f.is_file() and f.resolve().is_relative_to(TESTS):
            return f.resolve()
    return None


def _imported_modules(path: Path, source: str) -> list[tuple[int, str, list[Path]]]:
    """Every module an import of ``source`` (the file ``path``) may name: (line, as written, the places
    to look it up). Absolute names are looked up from the repository root, from tests/ and from the
    file's own folder (pytest puts the first folder without an ``__init__.py`` on the path); relative
    ones from their package. ``from m import a`` names ``m`` and, when it is a module, ``m.a``."""
    absolute = [ROOT, TESTS, path.parent]
    out: list[tuple[int, str, list[Path]]] = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, absolute) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                bases = [path.parent.parents[node.level - 2] if node.level > 1 else path.parent]
                shown = "." * node.level + (node.module or "")
            else:
                bases, shown = absolute, node.module or ""
            if node.module:
                out.append((node.lineno, shown, bases))
            out += [(node.lineno, f"{shown}{'' if shown.endswith('.') else '.'}{a.name}", bases)
                    for a in node.names if a.name != "*"]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (isinstance(node.func, ast.Name) and node.func.id == "__import__"
                   or isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")):
            out.append((node.lineno, node.args[0].value, absolute))
    return out


def imports_of_test_modules(path: Path, source: str) -> list[str]:
    """The imports of test modules (or conftests) in ``source``, the file ``path`` under tests/."""
    found = []
    for line, shown, bases in _imported_modules(path, source):
        dotted = shown.lstrip(".")
        for base in bases:
            f = _module_file(dotted, base)
            if f is not None and _is_test_module(f) and f != path.resolve():
                found.append(f"{path.relative_to(ROOT)}:{line} imports {shown} ({f.relative_to(ROOT)})")
                break
    return found


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


MAX_LINES = 600


def test_no_module_of_the_package_is_over_600_lines():
    """A module over 600 lines holds more than one job: split it by what it does (docs/ARCHITECTURE.md)."""
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for p in (ROOT / "src" / "sparksync").rglob("*.py")}
    assert len(sizes) > 100
    assert not {p: n for p, n in sizes.items() if n > MAX_LINES}, sorted(sizes.items(), key=lambda x: -x[1])[:5]


def test_no_test_module_imports_another():
    files = _python_files()
    assert len(files) > 80
    found = [f for p in files for f in imports_of_test_modules(p, p.read_text(encoding="utf-8"))]
    assert not found, "test modules import test modules (move what they share to tests/support):\n" + "\n".join(found)


def test_shared_code_lives_in_tests_support():
    """Outside tests/support, every Python file under tests/ is a test module, a conftest or a package's
    ``__init__.py``: no second place for helpers."""
    stray = [str(p.relative_to(ROOT)) for p in _python_files()
             if not p.is_relative_to(SUPPORT) and not _is_test_module(p) and p.name != "__init__.py"]
    assert not stray, f"helpers outside tests/support: {stray}"


@pytest.mark.parametrize("importer, source, flagged", [
    ("faults/test_new.py", "from .test_command_locks import run_pair", True),
    ("faults/test_new.py", "from . import test_command_locks", True),
    ("faults/test_new.py", "from ..merge.test_cleanup import count", True),
    ("faults/test_new.py", "from tests.merge.test_filtered_publications import PAIRS", True),
    ("faults/test_new.py", "from tests.merge import test_cleanup", True),
    ("faults/test_new.py", "import tests.cli.test_cli", True),
    ("faults/test_new.py", "from tests.conftest import DB_KINDS", True),
    ("faults/test_new.py", "from merge.test_cleanup import count", True),
    ("faults/test_new.py", "def f():\n    from tests.integration.test_setup import normalized_rows", True),
    ("faults/test_new.py", "import importlib\nimportlib.import_module('tests.faults.test_messages')", True),
    ("support/new.py", "from tests.faults.test_command_locks import run_pair", True),
    ("faults/test_new.py", "from tests.support.cluster import Cluster, session", False),
    ("faults/test_new.py", "from tests.support import databases", False),
    ("support/new.py", "from .databases import Databases", False),
    ("faults/test_new.py", "import json\nfrom sparksync.dialects import connect\nimport pytest", False),
    ("unit/test_new.py", "from sparksync.merge import decide", False),
])
def test_the_check_recognizes_imports_of_test_modules(importer, source, flagged):
    assert bool(imports_of_test_modules(TESTS / importer, source)) == flagged
