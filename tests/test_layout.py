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


SESSION_INTERNALS = ("ApplyContext", "DestinationInfo", "ArticleAt", "route_table", "routes_by_key")


def test_only_the_session_package_builds_a_sessions_internals():
    """A merge session's apply side is made in one place (merge/session/context.py): no module outside
    merge/session/ (nor merge/apply/, which they are given to) constructs ApplyContext, DestinationInfo or ArticleAt,
    or builds a routing table (merge/session/plan.route_table, routes_by_key)."""
    src = ROOT / "src" / "sparksync"
    found = []
    for path in src.rglob("*.py"):
        rel = path.relative_to(src).as_posix()
        if rel.startswith(("merge/session/", "merge/apply/")):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = getattr(node.func, "id", getattr(node.func, "attr", None)) if isinstance(node, ast.Call) else None
            if name in SESSION_INTERNALS:
                found.append(f"{rel}:{node.lineno}")
    assert not found, f"built outside the session package: {found}"


def _cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_in_the_package():
    """No two modules of sparksync import each other, even through others: every import counts, those inside
    functions and under TYPE_CHECKING too (a cycle hidden inside a function is still a cycle)."""
    import grimp

    graph = grimp.build_graph("sparksync", cache_dir=None)
    assert len(graph.modules) > 150
    assert not _cycles(graph), f"import cycles: {_cycles(graph)}"


def test_the_cycle_check_finds_a_cycle():
    """The check above, on a graph with one cycle through three modules (and a module outside it)."""
    import grimp

    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.d", "p.a")]:
        graph.add_import(importer=importer, imported=imported)
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]
