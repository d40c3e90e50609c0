"""The dialect protocols (dialects/protocols.py): each dialect is every concern's protocol, every member of a
dialect belongs to exactly one concern, each mixin a dialect is composed of (its own in ``sqlite/`` and
``postgres/``, the shared ones of ``defaults.py``) implements one concern, and the foundations learn what they
need of a database as a value.

mypy checks the same statically (``dialects/__init__.py``: ``_satisfies_every_protocol``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sparksync.dialects import protocols
from sparksync.dialects.base import DialectBase
from sparksync.dialects.postgres.dialect import PostgresDialect
from sparksync.dialects.protocols import CONCERNS, Dialect
from sparksync.dialects.sqlite.dialect import SQLiteDialect

DIALECTS = [SQLiteDialect(), PostgresDialect()]
SHARED = {"capabilities"}       # every concern may read what the database can do


def _members(proto: type) -> set[str]:
    return {n for n in (*vars(proto), *vars(proto).get("__annotations__", {})) if not n.startswith("_")}


def _public(klass: type) -> set[str]:
    return {n for n in vars(klass) if not n.startswith("_") and n.islower()}


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.capabilities.name)
def test_each_dialect_satisfies_every_protocol(dialect):
    for proto in (*CONCERNS, Dialect):
        assert isinstance(dialect, proto), f"{type(dialect).__name__} is not a {proto.__name__}"


def test_each_member_belongs_to_one_concern():
    owners: dict[str, list[str]] = {}
    for proto in CONCERNS:
        for name in _members(proto) - SHARED:
            owners.setdefault(name, []).append(proto.__name__)
    assert not {n: o for n, o in owners.items() if len(o) > 1}, "a member declared by two concerns"
    public = set()
    for cls in (DialectBase, *(type(d) for d in DIALECTS)):
        for klass in cls.__mro__:
            if klass.__module__.startswith("sparksync.dialects"):
                public |= {n for n in vars(klass) if not n.startswith("_") and n.islower()}
    assert public - set(owners) - SHARED == set(), "dialect members no protocol declares"
    assert set(owners) - public == set(), "protocol members no dialect defines"


def _concern_of(klass: type) -> list[str]:
    """The concerns whose members ``klass`` defines (one, for a mixin of one concern)."""
    return [proto.__name__ for proto in CONCERNS if (_public(klass) - SHARED) & _members(proto)]


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.capabilities.name)
def test_each_mixin_implements_one_concern(dialect):
    """A dialect is its mixins composed: the class itself and ``DialectBase`` define nothing but what every
    concern shares; each mixin defines members of exactly one concern, and none a member another of the same
    dialect's own mixins defines (one place per member: nothing is shadowed by the order of the bases)."""
    composed = (type(dialect), DialectBase)
    for klass in composed:
        assert _public(klass) <= SHARED, f"{klass.__name__} defines {_public(klass) - SHARED}"
    mixins = [k for k in type(dialect).__mro__ if k.__module__.startswith("sparksync.dialects") and k not in composed]
    for klass in mixins:
        concerns = _concern_of(klass)
        assert len(concerns) == 1, f"{klass.__module__}.{klass.__name__} implements {concerns or 'no concern'}"
        stray = _public(klass) - SHARED - _members(getattr(protocols, concerns[0]))
        assert not stray, f"{klass.__name__} ({concerns[0]}) defines {stray}, not members of its concern"
    own = [k for k in mixins if k.__module__.startswith(type(dialect).__module__.rpartition(".")[0] + ".")]
    assert own, "the dialect has no mixins of its own"
    seen: dict[str, str] = {}
    for klass in own:
        for name in _public(klass) - SHARED:
            assert name not in seen, f"{name} is defined by both {seen[name]} and {klass.__name__}"
            seen[name] = klass.__name__


def test_capabilities_tell_the_filters_their_sql():
    assert SQLiteDialect.capabilities.sql.sqlglot == "sqlite" and not SQLiteDialect.capabilities.sql.typed_booleans
    assert PostgresDialect.capabilities.sql.sqlglot == "postgres" and PostgresDialect.capabilities.sql.typed_booleans


def test_the_foundations_import_no_dialect():
    """filters.py gets a ``SqlFlavor`` value; it never imports (or asks the name of) a dialect."""
    src = Path(__file__).resolve().parents[2] / "src" / "sparksync" / "filters.py"
    tree = ast.parse(src.read_text(encoding="utf-8"))
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if "dialects" in m]
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not strings & {"postgres", "postgresql", "sqlite"}
