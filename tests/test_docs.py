"""docs/cli.md documents every command and option of the CLI (its reference generated from the app); the README
gives both set-up commands and points to every page of docs/; docs/ARCHITECTURE.md names code that exists."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import typer.main

from sparksync.cli.app import app

ROOT = Path(__file__).resolve().parents[1]


def test_the_protocol_section_of_web_sync_is_what_the_models_say():
    """docs/web-sync.md's protocol section is generated from the wire models (web/protocol.py)."""
    from sparksync.web.protocol import with_protocol

    doc = (ROOT / "docs" / "web-sync.md").read_text(encoding="utf-8")
    assert with_protocol(doc) == doc, "docs/web-sync.md is out of date: run .venv/bin/python -m sparksync.web.protocol"


def test_the_cli_reference_is_what_the_cli_says():
    """The reference block of docs/cli.md is generated from the typer app (cog --check style)."""
    from sparksync.cli.reference import with_reference

    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert with_reference(doc) == doc, "docs/cli.md is out of date: run .venv/bin/python -m sparksync.cli.reference"


def test_every_command_is_described():
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    group = typer.main.get_command(app)
    assert hasattr(group, "commands")
    for name in group.commands:
        assert f"### `sparksync {name}`" in doc, f"command {name} is not in the reference of docs/cli.md"
        assert f"**`{name}`**" in doc, f"command {name} has no description in docs/cli.md"


def test_the_readme_links_every_page_of_docs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in (ROOT / "docs").glob("*.md"):
        assert f"docs/{page.name}" in readme, f"docs/{page.name} is not linked from the README"


def test_readme_gives_the_two_setup_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"^make demo\b", readme, re.M) and re.search(r"^make test\b", readme, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_architecture_names_files_that_exist():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    names = set(re.findall(r"`((?:[a-z_]+/)*[a-z_0-9]+\.(?:py|sql|properties))", text))
    assert len(names) > 15
    src = ROOT / "src" / "sparksync"
    missing = [n for n in names if not (src / n).exists() and not (ROOT / n).exists()
               and not list(src.rglob(Path(n).name))]
    assert not missing, f"ARCHITECTURE.md names files that do not exist: {missing}"


# -- names in docs/ARCHITECTURE.md ---------------------------------------------------------------

SRC = ROOT / "src" / "sparksync"
_NOT_CODE = ("py", "sql", "md", "properties", "toml", "json", "txt", "db", "parquet")


def _defines(text: str, name: str) -> bool:
    """``name`` is a function, class, constant, field or method defined in this source text."""
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b|^\s*{re.escape(name)}\s*[:=]", text,
                     re.M) is not None


def _sources(module: str) -> list[Path]:
    """The source files a doc's module name may mean: ``merge/publish`` exactly, ``publish`` any."""
    if "/" in module:
        return [p for p in [SRC / f"{module}.py", SRC / module / "__init__.py"] if p.exists()]
    return sorted(SRC.rglob(f"{module}.py"))


@functools.cache
def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@functools.cache
def _classes() -> dict[str, set[str]]:
    """Every class of the sources by name -> the names defined in its body (methods, properties, nested
    classes, fields and class attributes), classes of one name together. Parsed once."""
    found: dict[str, set[str]] = {}
    for p in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(_text(p))):
            if isinstance(node, ast.ClassDef):
                names = found.setdefault(node.name, set())
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        names.add(item.name)
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        names.add(item.target.id)
                    elif isinstance(item, ast.Assign):
                        names.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return found


def _class_members(cls: str) -> set[str] | None:
    """The names defined in the body of every class ``cls`` of the sources; None when no class has that name."""
    return _classes().get(cls)


def _resolves(dotted: str, in_file: Path | None = None) -> bool:
    """``module.name``, ``Class.member`` or (with ``in_file``) a bare name of that file."""
    if in_file is not None and "." not in dotted:
        return _defines(_text(in_file), dotted)
    owner, _, name = dotted.rpartition(".")
    members = _class_members(owner) if owner.lstrip("_")[:1].isupper() else None
    if members is not None:                   # Class.member: a member of that class, not any name of its file
        return name in members
    files = _sources(owner)
    return any(_defines(_text(p), name) for p in files)


def test_architecture_names_functions_that_exist():
    """Every ``module.function`` / ``Class.method`` named, and every name listed after a file
    (`` `merge/session/agent.py` (`MergeAgent`, `make_batches`) ``), is defined where the page says."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    missing, checked = [], 0
    for m in re.finditer(r"`((?:[a-z_]+/)*[a-z_0-9]+)\.py` \(([^)]*)\)", text):
        files = _sources(m.group(1))
        assert files, f"{m.group(1)}.py does not exist"
        for name in re.findall(r"`([A-Za-z_][\w.]*)`", m.group(2)):
            checked += 1
            if not any(_resolves(name, f) for f in files):
                missing.append(f"{m.group(1)}.py: {name}")
    for dotted in set(re.findall(r"`([A-Za-z_][\w/]*\.[A-Za-z_]\w*)`", text)):
        if dotted.rsplit(".", 1)[1] in _NOT_CODE or re.match(r"(MS|sys)\w+\.", dotted) or dotted == "schema.table":
            continue                # a file, a metadata table's column, a placeholder
        checked += 1
        if not _resolves(dotted):
            missing.append(dotted)
    assert checked > 60
    assert not missing, f"ARCHITECTURE.md names code that does not exist: {sorted(missing)}"


def test_architecture_links_nothing_outside_the_repository():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert "../" not in text
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        assert not target.startswith(("http:", "https:", "/")) and (ROOT / "docs" / target).resolve().is_relative_to(ROOT), \
            f"ARCHITECTURE.md links {target}, outside the repository"


@functools.cache
def _defined() -> tuple[set[str], set[str]]:
    """Every name the sources define (classes, functions, methods, assigned names and fields, module names), and
    every string literal in them (statements: a setting or a column named as a database sees it)."""
    names: set[str] = set()
    strings: set[str] = set()
    for p in SRC.rglob("*.py"):
        names.add(p.stem)
        for node in ast.walk(ast.parse(_text(p))):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.add(node.value)
    return names, strings


def test_architecture_names_classes_and_functions_that_exist():
    """Every name in backticks that reads as code — a class (``CamelCase``) or a function (``snake_case``) — is
    defined in the sources, wherever the page names it (not only after a file)."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    names = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", text))
    code = {n for n in names if re.fullmatch(r"_?[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+", n)
            or re.fullmatch(r"_?[a-z][a-z0-9]*(?:_[a-z0-9]+)+", n)}
    assert len(code) > 300
    defined, strings = _defined()
    said = "\n".join(strings)                  # a name inside a statement: a setting the code sets or reads
    missing = sorted(n for n in code if n not in defined and n not in said)
    assert not missing, f"ARCHITECTURE.md names code that does not exist: {missing}"
