"""A column changed in place: ``--alter-column`` read clause by clause, which type changes a replica can follow, the
SQL condition of a value a narrowed column would not hold (run on SQLite), and SQLite's in-place redefinition of a
column (its other clauses kept word for word, its rows untouched, a NOT NULL refused while a NULL is there)."""

from __future__ import annotations

import sqlite3

import pytest

from sparksync.dialects import connect
from sparksync.dialects.column_changes import (
    UNCHANGED,
    Alteration,
    not_fitting,
    parse_alteration,
    parse_rename,
    type_change_problem,
)
from sparksync.dialects.model import Column
from sparksync.dialects.sqlite.redefine import redefine_column
from sparksync.errors import ConfigurationError, SchemaError
from sparksync.names import TableName
from sparksync.types import Kind, SqlType


@pytest.mark.parametrize("text, expected", [
    ("Phone varchar(40)", Alteration("Phone", "varchar(40)")),
    ("Phone NOT NULL", Alteration("Phone", None, False)),
    ("Phone null", Alteration("Phone", None, True)),
    ("Phone DEFAULT 'a b' NOT NULL", Alteration("Phone", None, False, "'a b'")),
    ("Phone NOT NULL DEFAULT -1", Alteration("Phone", None, False, "-1")),
    ("Phone numeric(12, 2) DROP DEFAULT", Alteration("Phone", "numeric(12, 2)", None, None)),
    ("Phone DEFAULT NULL", Alteration("Phone", None, None, "NULL")),
])
def test_an_alteration_is_read_clause_by_clause(text, expected):
    assert parse_alteration(text, "here") == expected


@pytest.mark.parametrize("text, said", [
    ("Phone", "changes nothing"), ("", "--alter-column takes"), ("Phone varchar(40", "is not a type"),
    ("Phone varchar(40) CHECK (x > 0)", "is not a type"), ("Pho'ne text", "not allowed"),
])
def test_an_alteration_that_is_not_one_is_refused_by_what_it_is(text, said):
    with pytest.raises(ConfigurationError, match=said):
        parse_alteration(text, "here")


def test_a_rename_takes_two_names():
    assert parse_rename(" Phone  PhoneNumber ", "here") == ("Phone", "PhoneNumber")
    with pytest.raises(ConfigurationError, match="takes 'old new'"):
        parse_rename("Phone", "here")
    assert UNCHANGED is Alteration("x").default


def test_only_a_type_of_the_same_family_is_a_change_every_replica_follows():
    int4, int8, text = SqlType(Kind.INTEGER), SqlType(Kind.BIGINT), SqlType(Kind.TEXT, 10)
    assert type_change_problem(int4, int8) is None and type_change_problem(int8, int4) is None
    assert type_change_problem(text, SqlType(Kind.TEXT)) is None
    assert type_change_problem(SqlType(Kind.DECIMAL, None, 8, 2), SqlType(Kind.DECIMAL, None, 12, 4)) is None
    assert "not of one family" in type_change_problem(text, int8)
    assert "blank-padded" in type_change_problem(text, SqlType(Kind.TEXT, 10, fixed=True))


def test_the_condition_of_a_value_that_does_not_fit_counts_exactly_those():
    c = sqlite3.connect(":memory:")
    c.execute("CREATE TABLE t (i INTEGER, s TEXT, d NUMERIC)")
    c.executemany("INSERT INTO t VALUES (?, ?, ?)", [(40000, "abcdef", 123.456), (5, "abc", 1.5), (None, None, None)])

    def count(old: Column, new: Column, col: str) -> int:
        cond = not_fitting(old, new, col)
        return -1 if cond is None else c.execute(f"SELECT count(*) FROM t WHERE {cond}").fetchone()[0]

    assert count(Column("i", SqlType(Kind.INTEGER)), Column("i", SqlType(Kind.SMALLINT)), "i") == 1
    assert count(Column("i", SqlType(Kind.SMALLINT)), Column("i", SqlType(Kind.BIGINT)), "i") == -1     # widening
    assert count(Column("s", SqlType(Kind.TEXT, 10)), Column("s", SqlType(Kind.TEXT, 4)), "s") == 1
    assert count(Column("d", SqlType(Kind.DECIMAL, None, 8, 3)), Column("d", SqlType(Kind.DECIMAL, None, 8, 1)),
                 "d") == 1
    assert count(Column("d", SqlType(Kind.DECIMAL, None, 8, 3)), Column("d", SqlType(Kind.DECIMAL, None, 4, 3)),
                 "d") == 1
    assert count(Column("s", SqlType(Kind.TEXT)), Column("s", SqlType(Kind.TEXT), nullable=False), "s") == 1


def test_sqlite_redefines_one_column_in_place_keeping_its_other_clauses_and_its_rows(tmp_path):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with connect(url) as r:
        r.execute('CREATE TABLE "P" (id INTEGER PRIMARY KEY AUTOINCREMENT, "Phone" VARCHAR(20) NOT NULL DEFAULT '
                  '\'x\' CHECK (length("Phone") < 100) COLLATE NOCASE, "n" numeric(10,2), z BLOB)')
        r.execute('CREATE TABLE c (id INTEGER PRIMARY KEY, pid INTEGER REFERENCES "P"(id))')
        r.execute('CREATE INDEX ip ON "P"("Phone")')
        r.execute("INSERT INTO \"P\"(\"Phone\", n) VALUES ('ABC', 1.5)")
        r.execute("INSERT INTO c VALUES (1, 1)")
        with r.transaction():
            sql = redefine_column(r, "P", Column("Phone", SqlType(Kind.TEXT, 20), False, "'x'"),
                                  Column("Phone", SqlType(Kind.TEXT, 40), True, "'y'"), "VARCHAR(40)")
        assert sql is not None and 'CHECK (length("Phone") < 100) COLLATE NOCASE' in sql and "AUTOINCREMENT" in sql
        phone = r.reflect(TableName(None, "P")).column("Phone")
        assert (phone.type.length, phone.nullable, phone.default) == (40, True, "'y'")
        assert r.scalar("SELECT count(*) FROM \"P\" WHERE \"Phone\" = 'abc'") == 1      # COLLATE NOCASE kept
        r.execute('INSERT INTO "P"(id) VALUES (5)')
        assert r.scalar('SELECT "Phone" FROM "P" WHERE id = 5') == "y"
        with pytest.raises(SchemaError, match="column z cannot be made NOT NULL: 2 row"), r.transaction():
            redefine_column(r, "P", Column("z", SqlType(Kind.BYTES)), Column("z", SqlType(Kind.BYTES), False), "BLOB")
        assert r.query("PRAGMA integrity_check") == [("ok",)]
        assert r.query("PRAGMA foreign_key_check") == []
