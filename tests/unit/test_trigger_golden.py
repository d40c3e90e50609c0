"""Golden tests of the merge tracking trigger SQL rendered by each dialect.

The expected SQL lives in tests/golden/<dialect>/<case>.sql. After an intended change to a template,
regenerate them with ``SPARKSYNC_UPDATE_GOLDEN=1 pytest tests/unit/test_trigger_golden.py`` and review the diff.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from sparksync.dialects.model import Column, TableInfo
from sparksync.dialects.postgres.dialect import PostgresDialect
from sparksync.dialects.sqlite.dialect import SQLiteDialect
from sparksync.dialects.templates import STATEMENT_SEPARATOR
from sparksync.merge.tracking.tracked import TrackedArticle, trigger_context
from sparksync.names import TableName
from sparksync.types import Kind, SqlType

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "golden"
UPDATE = os.environ.get("SPARKSYNC_UPDATE_GOLDEN") == "1"

ARTID = "0f9b2c1e-1234-4abc-8def-000000000001"
TRIGGER_ID = "0F9B2C1E12344ABC8DEF000000000001"
REPLICA_NICKNAME = 7
ROWGUID = "row_guid"   # not "rowguid", so it cannot be confused with the metadata column of that name

DIALECTS = {"sqlite": SQLiteDialect(), "postgres": PostgresDialect()}


def customer(schema: str | None) -> TableInfo:
    return TableInfo(
        name=TableName(schema, "Customer"),
        columns=(
            Column("CustomerID", SqlType(Kind.INTEGER), nullable=False),
            Column("Full Name", SqlType(Kind.TEXT, length=50)),
            Column("Notes", SqlType(Kind.JSON)),
            Column(ROWGUID, SqlType(Kind.UUID), nullable=False),
        ),
        primary_key=("CustomerID",),
    )


def order_line(schema: str | None) -> TableInfo:
    return TableInfo(
        name=TableName(schema, "Order Line"),
        columns=(
            Column("OrderID", SqlType(Kind.BIGINT), nullable=False),
            Column("Line No", SqlType(Kind.SMALLINT), nullable=False),
            Column("Qty", SqlType(Kind.DECIMAL, precision=10, scale=2)),
            Column(ROWGUID, SqlType(Kind.UUID), nullable=False),
        ),
        primary_key=("OrderID", "Line No"),
    )


# case name -> (table factory, schema per dialect, nickname, column_tracking)
CASES = {
    "column_tracking_off": (customer, {"sqlite": None, "postgres": "Sales"}, 30, False),
    "column_tracking_on": (customer, {"sqlite": None, "postgres": "Sales"}, 30, True),
    "composite_pk": (order_line, {"sqlite": None, "postgres": None}, 40, True),
}


def article(dialect_name: str, case: str) -> TrackedArticle:
    make, schemas, nick, tracking = CASES[case]
    info = make(schemas[dialect_name])
    return TrackedArticle(artid=ARTID, table=info.name, nickname=nick, rowguid_column=ROWGUID,
                          column_tracking=tracking, info=info)


def render(dialect_name: str, case: str) -> list[str]:
    dialect = DIALECTS[dialect_name]
    fake_replica = SimpleNamespace(dialect=dialect)   # trigger_context only uses replica.dialect
    ctx = trigger_context(fake_replica, article(dialect_name, case), REPLICA_NICKNAME)
    return dialect.render_merge_triggers(ctx)


def render_flush(dialect_name: str, case: str) -> list[str]:
    dialect = DIALECTS[dialect_name]
    ctx = trigger_context(SimpleNamespace(dialect=dialect), article(dialect_name, case), REPLICA_NICKNAME)
    return dialect.render_flush({**ctx, "source": '"claimed"'})


def as_text(statements: list[str]) -> str:
    return f"\n{STATEMENT_SEPARATOR}\n".join(statements) + "\n"


PARAMS = [(d, c) for d in DIALECTS for c in CASES]
IDS = [f"{d}-{c}" for d, c in PARAMS]


# -- golden files --------------------------------------------------------------------------------

@pytest.mark.parametrize("dialect_name, case", PARAMS, ids=IDS)
def test_rendered_triggers_match_golden(dialect_name, case):
    text = as_text(render(dialect_name, case))
    path = GOLDEN_DIR / dialect_name / f"{case}.sql"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"missing golden file {path}; create it with SPARKSYNC_UPDATE_GOLDEN=1"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, (f"{path} differs from the rendered SQL; if the change is intended, "
                              "regenerate with SPARKSYNC_UPDATE_GOLDEN=1 and review the diff")


@pytest.mark.parametrize("dialect_name, case", PARAMS, ids=IDS)
def test_rendered_flush_matches_golden(dialect_name, case):
    text = as_text(render_flush(dialect_name, case))
    path = GOLDEN_DIR / dialect_name / f"{case}.flush.sql"
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"missing golden file {path}; create it with SPARKSYNC_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), (f"{path} differs from the rendered SQL; if the change is "
                                                      "intended, regenerate with SPARKSYNC_UPDATE_GOLDEN=1")


@pytest.mark.parametrize("dialect_name, case", PARAMS, ids=IDS)
def test_rendering_is_deterministic(dialect_name, case):
    assert render(dialect_name, case) == render(dialect_name, case)


# -- structure (independent of the golden text) --------------------------------------------------

def test_trigger_context_for_sqlite():
    ctx = trigger_context(SimpleNamespace(dialect=SQLiteDialect()), article("sqlite", "column_tracking_on"), 7)
    assert ctx["table"] == '"Customer"'
    assert ctx["artid"] == TRIGGER_ID
    assert (ctx["tablenick"], ctx["replnick"]) == (30, 7)
    assert ctx["rowguid"] == '"row_guid"'
    assert ctx["pk"] == ["CustomerID"]
    assert [c["name"] for c in ctx["columns"]] == ["CustomerID", "Full Name", "Notes"]
    assert ctx["column_tracking"] is True
    assert ctx["contents"] == '"MSmerge_contents"' and ctx["tombstone"] == '"MSmerge_tombstone"'


def test_trigger_context_for_postgres():
    ctx = trigger_context(SimpleNamespace(dialect=PostgresDialect()), article("postgres", "column_tracking_off"), 7)
    assert ctx["table"] == '"Sales"."Customer"'
    assert ctx["contents"] == '"sparksync"."msmerge_contents"'


def test_postgres_triggers_compare_json_as_text():
    update = next(s for s in render("postgres", "column_tracking_off") if "IS DISTINCT FROM" in s)
    assert 'o."Notes"::text IS DISTINCT FROM n."Notes"::text' in update
    assert 'o."Full Name" IS DISTINCT FROM n."Full Name" OR' in update


def test_postgres_schema_less_table_goes_to_public():
    stmts = render("postgres", "composite_pk")
    assert stmts[0] == f'DROP TRIGGER IF EXISTS "MSmerge_ins_{TRIGGER_ID}" ON "public"."Order Line"'


@pytest.mark.parametrize("dialect_name, case", PARAMS, ids=IDS)
def test_statement_shape(dialect_name, case):
    stmts = render(dialect_name, case)
    ops = ("ins", "upd", "del")
    drops = [s for s in stmts if s.startswith("DROP TRIGGER")]
    creates = [s for s in stmts if s.startswith("CREATE TRIGGER")]
    assert [f"MSmerge_{op}_{TRIGGER_ID}" in s for op, s in zip(ops, drops)] == [True] * 3
    assert [f'"MSmerge_{op}_{TRIGGER_ID}"' in s for op, s in zip(ops, creates)] == [True] * 3
    expected = 9 if dialect_name == "postgres" else 6     # PostgreSQL adds one function per trigger
    assert len(stmts) == expected
    assert all(STATEMENT_SEPARATOR not in s and s == s.strip() for s in stmts)


@pytest.mark.parametrize("dialect_name", DIALECTS)
def test_column_tracking_changes_only_colv(dialect_name):
    off = as_text(render(dialect_name, "column_tracking_off"))
    on = as_text(render(dialect_name, "column_tracking_on"))
    assert off != on
    assert "THEN '1' ELSE '0'" in on and "'1'" not in off     # the changed-column mask only with tracking
    off = as_text(render_flush(dialect_name, "column_tracking_off"))
    on = as_text(render_flush(dialect_name, "column_tracking_on"))
    assert "'Full Name'" in on and "'Full Name'" not in off   # per-column versions only with tracking
    if dialect_name == "postgres":
        assert "colv_bump" in on and "colv_bump" not in off
    else:
        assert "json_patch" in on and "json_patch" not in off


@pytest.mark.parametrize("case", CASES)
def test_postgres_update_trigger_skips_the_rowguid_column(case):
    upd = next(s for s in render("postgres", case) if "msmerge_upd_" in s and s.startswith("CREATE OR REPLACE"))
    assert f'o."{ROWGUID}" IS DISTINCT FROM' not in upd


# -- sqlglot: SQLite identifiers are quoted ------------------------------------------------------

def _names(case: str) -> set[str]:
    info = CASES[case][0](None)
    return {info.name.name, *info.column_names,
            "MSmerge_contents", "MSmerge_tombstone", "MSmerge_pending", "MSmerge_replica"}


@pytest.mark.parametrize("case", CASES)
def test_sqlite_drop_statements_parse_with_quoted_identifiers(case):
    drops = [s for s in render("sqlite", case) if s.startswith("DROP")]
    assert len(drops) == 3
    for stmt in drops:
        tree = sqlglot.parse_one(stmt, read="sqlite")
        assert isinstance(tree, exp.Drop)
        assert str(tree.args.get("kind")).upper() == "TRIGGER"
        idents = list(tree.find_all(exp.Identifier))
        assert idents and all(i.quoted for i in idents), stmt
        assert idents[0].name.startswith("MSmerge_") and idents[0].name.endswith(TRIGGER_ID)


@pytest.mark.parametrize("case", CASES)
def test_sqlite_table_and_column_names_only_appear_quoted(case):
    names = _names(case)
    lowered = {n.lower() for n in names}
    seen_quoted: set[str] = set()
    for stmt in render("sqlite", case) + render_flush("sqlite", case):
        tokens = sqlglot.tokenize(stmt, read="sqlite")
        for tok in tokens:
            if tok.token_type == TokenType.IDENTIFIER:          # a "quoted" identifier
                seen_quoted.add(tok.text)
            elif tok.token_type == TokenType.VAR:
                assert tok.text.lower() not in lowered, f"unquoted identifier {tok.text!r} in:\n{stmt}"
        # a name with a space would be split into two words if it were not quoted
        for n in names:
            if " " in n:
                assert n.split()[0] not in {t.text for t in tokens if t.token_type == TokenType.VAR}
    assert names <= seen_quoted, names - seen_quoted


# -- the SQLite triggers run (in memory; no server) ----------------------------------------------

def _sqlite_with_tracking(case: str):
    from sparksync.metadata import store

    dialect = DIALECTS["sqlite"]
    replica = dialect.connect("sqlite://")   # in-memory database
    for table in store.MERGE.tables:
        for stmt in store.render_metadata_ddl(replica, table):
            replica.execute(stmt)
    replica.execute('INSERT INTO "MSmerge_replica" (id, replica_id, replnickname, name, role, applying) '
                    "VALUES (1, 'r', 7, 'me', 'publisher', 0)")
    replica.execute('INSERT INTO "MSmerge_genhistory" (generation, guidsrc, genstatus, settled, nicknames, '
                    "changecount) VALUES (5, 'g', 0, 0, '[]', 0)")
    for stmt in dialect.render_create_table(article("sqlite", case).info, ROWGUID):
        replica.execute(stmt)
    for stmt in render("sqlite", case):
        replica.execute(stmt)
    return replica


def _flush(replica, case: str) -> None:
    """The flush as ``merge.tracking.pending`` runs it (this in-memory database has no publication)."""
    dialect = DIALECTS["sqlite"]
    ctx = trigger_context(replica, article("sqlite", case), 7)
    with replica.transaction():
        source, nicks, _ = dialect.claim_pending(replica, [ctx])
        if nicks:
            for stmt in dialect.render_flush({**ctx, "source": source}):
                replica.execute(stmt.replace("__GEN__", "5"))
        dialect.release_pending(replica, source)


def _contents(replica, case: str = "column_tracking_on"):
    _flush(replica, case)
    return [(nick, guid, gen, json.loads(lin), None if colv is None else json.loads(colv))
            for nick, guid, gen, lin, colv in replica.query(
                'SELECT tablenick, rowguid, generation, lineage, colv FROM "MSmerge_contents"')]


@pytest.mark.parametrize("case", CASES)
def test_sqlite_triggers_install_and_are_idempotent(case):
    replica = _sqlite_with_tracking(case)
    try:
        for stmt in render("sqlite", case):       # installing twice works (DROP ... IF EXISTS first)
            replica.execute(stmt)
        names = {r[0] for r in replica.query("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        assert names == {f"MSmerge_{op}_{TRIGGER_ID}" for op in ("ins", "upd", "del")}
    finally:
        replica.close()


def test_sqlite_triggers_track_insert_update_delete_with_column_tracking():
    replica = _sqlite_with_tracking("column_tracking_on")
    try:
        replica.execute('INSERT INTO "Customer" ("CustomerID", "Full Name", "Notes") VALUES (1, \'Ann\', \'{}\')')
        guid = replica.scalar('SELECT "row_guid" FROM "Customer" WHERE "CustomerID" = 1')
        assert guid and len(guid) == 36 and guid == guid.lower() and guid[14] == "7"
        assert replica.query('SELECT tablenick, rowguid, op, cols FROM "MSmerge_pending"') == [(30, guid, 1, None)]
        # an insert stamps every column with its version (a re-inserted row is fully explained)
        stamped = {c: [7, 1] for c in ("CustomerID", "Full Name", "Notes")}
        assert _contents(replica) == [(30, guid, 5, {"7": 1}, stamped)]
        assert replica.query('SELECT * FROM "MSmerge_pending"') == []

        replica.execute('UPDATE "Customer" SET "Full Name" = \'Anna\' WHERE "CustomerID" = 1')
        assert replica.query('SELECT op, cols FROM "MSmerge_pending"') == [(2, "010")]     # the mask: Full Name
        assert _contents(replica) == [(30, guid, 5, {"7": 2}, {**stamped, "Full Name": [7, 2]})]

        replica.execute('UPDATE "Customer" SET "Full Name" = "Full Name" WHERE "CustomerID" = 1')  # no change
        assert _contents(replica) == [(30, guid, 5, {"7": 2}, {**stamped, "Full Name": [7, 2]})]

        replica.execute('DELETE FROM "Customer" WHERE "CustomerID" = 1')
        assert _contents(replica) == []
        tomb = replica.query('SELECT tablenick, rowguid, type, lineage, generation FROM "MSmerge_tombstone"')
        assert [(n, g, t, json.loads(lin), gen) for n, g, t, lin, gen in tomb] == [(30, guid, 1, {"7": 3}, 5)]
    finally:
        replica.close()


def test_sqlite_triggers_without_column_tracking_and_with_agent_writes():
    replica = _sqlite_with_tracking("column_tracking_off")
    try:
        replica.execute('INSERT INTO "Customer" ("CustomerID", "Full Name") VALUES (1, \'Ann\')')
        replica.execute('UPDATE "Customer" SET "Notes" = \'{"a": 1}\' WHERE "CustomerID" = 1')
        [(nick, guid, gen, lineage, colv)] = _contents(replica, "column_tracking_off")   # one version a flush
        assert (nick, gen, lineage, colv) == (30, 5, {"7": 1}, None)
        replica.execute('UPDATE "Customer" SET "Notes" = \'{"a": 2}\' WHERE "CustomerID" = 1')
        [(nick, guid, gen, lineage, colv)] = _contents(replica, "column_tracking_off")
        assert (nick, gen, lineage, colv) == (30, 5, {"7": 2}, None)

        replica.execute('UPDATE "MSmerge_replica" SET applying = 1')    # the agent's own writes
        replica.execute('UPDATE "Customer" SET "Full Name" = \'Bob\' WHERE "CustomerID" = 1')
        replica.execute('INSERT INTO "Customer" ("CustomerID", "Full Name", "row_guid") '
                        "VALUES (2, 'Cy', '00000000-0000-7000-8000-000000000002')")
        assert replica.query('SELECT * FROM "MSmerge_pending"') == []
        assert [c[2:] for c in _contents(replica, "column_tracking_off")] == [(5, {"7": 2}, None)]
    finally:
        replica.close()


# -- SQLite, rowguids kept beside the table (merge/tracking/identity.py) ---------------------------

KEYED = ["column_tracking_on", "composite_pk"]


def keyed_article(case: str) -> TrackedArticle:
    return dataclasses.replace(article("sqlite", case), keyed=True)


def render_keyed(case: str) -> tuple[list[str], list[str]]:
    dialect = DIALECTS["sqlite"]
    ctx = trigger_context(SimpleNamespace(dialect=dialect), keyed_article(case), REPLICA_NICKNAME)
    return dialect.render_merge_triggers(ctx), dialect.render_flush({**ctx, "source": '"claimed"'})


@pytest.mark.parametrize("case", KEYED)
def test_rendered_keyed_triggers_and_flush_match_golden(case):
    triggers, flush = render_keyed(case)
    for text, path in ((as_text(triggers), GOLDEN_DIR / "sqlite" / f"keyed_{case}.sql"),
                       (as_text(flush), GOLDEN_DIR / "sqlite" / f"keyed_{case}.flush.sql")):
        if UPDATE:
            path.write_text(text, encoding="utf-8")
        assert path.is_file(), f"missing golden file {path}; create it with SPARKSYNC_UPDATE_GOLDEN=1"
        assert text == path.read_text(encoding="utf-8"), (f"{path} differs from the rendered SQL; if the change "
                                                          "is intended, regenerate with SPARKSYNC_UPDATE_GOLDEN=1")


@pytest.mark.parametrize("case", KEYED)
def test_keyed_names_only_appear_quoted(case):
    art = keyed_article(case)
    names = {art.table.name, *(c.name for c in art.info.columns if c.name != ROWGUID), art.ids_table, art.log_table,
             "MSmerge_contents", "MSmerge_tombstone", "MSmerge_replica"}
    lowered = {n.lower() for n in names}
    seen: set[str] = set()
    triggers, flush = render_keyed(case)
    for stmt in triggers + flush:
        for tok in sqlglot.tokenize(stmt, read="sqlite"):
            if tok.token_type == TokenType.IDENTIFIER:
                seen.add(tok.text)
            elif tok.token_type == TokenType.VAR:
                assert tok.text.lower() not in lowered, f"unquoted identifier {tok.text!r} in:\n{stmt}"
    assert names <= seen, names - seen


def test_keyed_triggers_run_on_a_composite_key_with_spaces_in_its_names():
    """The keyed triggers and flush on "Order Line" ("OrderID", "Line No"), in memory: an insert gets a rowguid at
    the flush, a changed key keeps it, a delete moves it into a tombstone, the agent's writes are not logged."""
    from sparksync.merge.tracking import identity
    from sparksync.metadata import store

    dialect = DIALECTS["sqlite"]
    art = keyed_article("composite_pk")
    r = dialect.connect("sqlite://")
    try:
        for table in store.MERGE.tables:
            for stmt in store.render_metadata_ddl(r, table):
                r.execute(stmt)
        r.execute('INSERT INTO "MSmerge_replica" (id, replica_id, replnickname, name, role, applying) '
                  "VALUES (1, 'r', 7, 'me', 'publisher', 0)")
        for stmt in [*dialect.render_create_table(art.table_info, None), *identity.ids_ddl(dialect, art),
                     *render_keyed("composite_pk")[0]]:
            r.execute(stmt)
        ctx = trigger_context(r, art, 7)

        def flushed() -> list:
            with r.transaction():
                source, nicks, _ = dialect.claim_pending(r, [ctx])
                for stmt in dialect.render_flush({**ctx, "source": source}) if nicks else []:
                    r.execute(stmt.replace("__GEN__", "5"))
                dialect.release_pending(r, source)
            return r.query(f'SELECT "OrderID", "Line No", "{ROWGUID}" FROM {r.meta(art.ids_table)} ORDER BY 1, 2')

        r.execute('INSERT INTO "Order Line" ("OrderID", "Line No", "Qty") VALUES (1, 1, 2), (1, 2, 3)')
        (a, g1), (b, g2) = [((o, n), g) for o, n, g in flushed()]
        assert (a, b) == ((1, 1), (1, 2)) and g1 < g2 and g1[14] == "7"
        r.execute('UPDATE "Order Line" SET "Line No" = 9 WHERE "Line No" = 2')
        assert flushed() == [(1, 1, g1), (1, 9, g2)]
        r.execute('DELETE FROM "Order Line" WHERE "Line No" = 1')
        assert flushed() == [(1, 9, g2)]
        tomb = r.query('SELECT rowguid, lineage FROM "MSmerge_tombstone"')
        assert [(g, json.loads(lin)) for g, lin in tomb] == [(g1, {"7": 2})]
        contents = dict(r.query('SELECT rowguid, lineage FROM "MSmerge_contents"'))
        assert {g: json.loads(lin) for g, lin in contents.items()} == {g2: {"7": 2}}
        r.execute('UPDATE "MSmerge_replica" SET applying = 1')        # the agent's own writes: not logged
        r.execute('UPDATE "Order Line" SET "Qty" = 5')
        assert r.query(f"SELECT * FROM {r.meta(art.log_table)}") == []
    finally:
        r.close()
