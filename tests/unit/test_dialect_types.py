"""Unit tests of the dialects' type mapping and URL redaction (no database server needed)."""

from __future__ import annotations

import pytest

from sparksync.dialects.postgres.dialect import PostgresDialect
from sparksync.dialects.replica import redact_url
from sparksync.dialects.sqlite.dialect import SQLiteDialect
from sparksync.errors import SchemaError
from sparksync.types import Kind, SqlType

PG = PostgresDialect()
SL = SQLiteDialect()

ALL_TYPES = [
    SqlType(Kind.BOOLEAN), SqlType(Kind.SMALLINT), SqlType(Kind.INTEGER), SqlType(Kind.BIGINT),
    SqlType(Kind.REAL), SqlType(Kind.DOUBLE), SqlType(Kind.DECIMAL, precision=19, scale=4),
    SqlType(Kind.DECIMAL, precision=38, scale=10), SqlType(Kind.TEXT), SqlType(Kind.TEXT, length=50),
    SqlType(Kind.BYTES), SqlType(Kind.DATE), SqlType(Kind.TIME), SqlType(Kind.TIMESTAMP),
    SqlType(Kind.TIMESTAMPTZ), SqlType(Kind.UUID), SqlType(Kind.JSON),
]
IDS = [str(t) for t in ALL_TYPES]


def test_all_types_cover_every_kind():
    assert {t.kind for t in ALL_TYPES} == set(Kind)


# -- PostgreSQL ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected, rendered", [
    ("numeric(19,4)", SqlType(Kind.DECIMAL, precision=19, scale=4), "numeric(19,4)"),
    ("numeric(5)", SqlType(Kind.DECIMAL, precision=5, scale=0), "numeric(5,0)"),
    ("numeric", SqlType(Kind.DECIMAL), "numeric"),              # unconstrained: kept digit for digit
    ("numeric(50,2)", SqlType(Kind.DECIMAL), "numeric"),        # more than Arrow's 38 digits: unconstrained
    ("character varying(50)", SqlType(Kind.TEXT, length=50), "varchar(50)"),
    ("character varying", SqlType(Kind.TEXT), "text"),
    ("character(3)", SqlType(Kind.TEXT, length=3, fixed=True), "character(3)"),   # padding semantics kept
    ("bpchar", SqlType(Kind.TEXT), "text"),
    ("varchar(20)", SqlType(Kind.TEXT, length=20), "varchar(20)"),
    ("text", SqlType(Kind.TEXT), "text"),
    ("citext", SqlType(Kind.TEXT), "text"),
    ("timestamp with time zone", SqlType(Kind.TIMESTAMPTZ), "timestamptz"),
    ("timestamp without time zone", SqlType(Kind.TIMESTAMP), "timestamp"),
    ("time without time zone", SqlType(Kind.TIME), "time"),
    ("date", SqlType(Kind.DATE), "date"),
    ("jsonb", SqlType(Kind.JSON), "jsonb"),
    ("json", SqlType(Kind.JSON), "jsonb"),
    ("uuid", SqlType(Kind.UUID), "uuid"),
    ("boolean", SqlType(Kind.BOOLEAN), "boolean"),
    ("smallint", SqlType(Kind.SMALLINT), "smallint"),
    ("integer", SqlType(Kind.INTEGER), "integer"),
    ("bigint", SqlType(Kind.BIGINT), "bigint"),
    ("real", SqlType(Kind.REAL), "real"),
    ("double precision", SqlType(Kind.DOUBLE), "double precision"),
    ("bytea", SqlType(Kind.BYTES), "bytea"),
    ("  integer  ", SqlType(Kind.INTEGER), "integer"),
])
def test_pg_parse_and_render(text, expected, rendered):
    t = PG.parse_type(text)
    assert t == expected
    assert PG.render_type(t) == rendered


@pytest.mark.parametrize("t", [t for t in ALL_TYPES if t.kind not in (Kind.TIME, Kind.TIMESTAMP, Kind.TIMESTAMPTZ)],
                         ids=[i for t, i in zip(ALL_TYPES, IDS) if t.kind not in (Kind.TIME, Kind.TIMESTAMP,
                                                                                   Kind.TIMESTAMPTZ)])
def test_pg_render_then_parse_round_trips(t):
    assert PG.parse_type(PG.render_type(t)) == t


@pytest.mark.parametrize("t", [SqlType(Kind.TIME), SqlType(Kind.TIMESTAMP), SqlType(Kind.TIMESTAMPTZ)],
                         ids=["time", "timestamp", "timestamptz"])
def test_pg_render_then_parse_round_trips_time_types(t):
    assert PG.parse_type(PG.render_type(t)) == t


@pytest.mark.parametrize("text", ["integer[]", "text[]", "point", "interval", "time with time zone", "bit(1)",
                                  "tsvector", "inet", "xml", "", "numeric(10,2)[]", "user-defined"])
def test_pg_unsupported_types_raise_schema_error(text):
    with pytest.raises(SchemaError, match="unsupported PostgreSQL column type"):
        PG.parse_type(text)


@pytest.mark.parametrize("text, kind", [
    ("timestamp(3) without time zone", Kind.TIMESTAMP),
    ("timestamp(0) with time zone", Kind.TIMESTAMPTZ),
    ("time(6) without time zone", Kind.TIME),
])
def test_pg_parses_timestamps_with_precision(text, kind):
    assert PG.parse_type(text).kind is kind


# -- SQLite --------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("INTEGER", SqlType(Kind.BIGINT)),
    ("int", SqlType(Kind.BIGINT)),
    ("BIGINT", SqlType(Kind.BIGINT)),
    ("UNSIGNED BIG INT", SqlType(Kind.BIGINT)),
    ("SMALLINT", SqlType(Kind.SMALLINT)),
    ("TINYINT", SqlType(Kind.SMALLINT)),
    ("INT4", SqlType(Kind.INTEGER)),
    ("VARCHAR(50)", SqlType(Kind.TEXT, length=50)),
    ("nvarchar(10)", SqlType(Kind.TEXT, length=10)),
    ("TEXT", SqlType(Kind.TEXT)),
    ("CLOB", SqlType(Kind.TEXT)),
    ("NUMERIC(10,2)", SqlType(Kind.DECIMAL, precision=10, scale=2)),
    ("DECIMAL( 10 , 2 )", SqlType(Kind.DECIMAL, precision=10, scale=2)),
    ("NUMERIC", SqlType(Kind.DECIMAL)),                        # unconstrained
    ("MONEY", SqlType(Kind.DECIMAL, precision=19, scale=4)),
    ("BOOLEAN", SqlType(Kind.BOOLEAN)),
    ("bool", SqlType(Kind.BOOLEAN)),
    ("UUID", SqlType(Kind.UUID)),
    ("uniqueidentifier", SqlType(Kind.UUID)),
    ("", SqlType(Kind.BYTES)),
    ("BLOB", SqlType(Kind.BYTES)),
    ("REAL", SqlType(Kind.DOUBLE)),
    ("FLOAT", SqlType(Kind.DOUBLE)),
    ("DOUBLE PRECISION", SqlType(Kind.DOUBLE)),
    ("DATE", SqlType(Kind.DATE)),
    ("TIME", SqlType(Kind.TIME)),
    ("DATETIME", SqlType(Kind.TIMESTAMP)),
    ("TIMESTAMP", SqlType(Kind.TIMESTAMP)),
    ("TIMESTAMPTZ", SqlType(Kind.TIMESTAMPTZ)),
    ("timestamp with time zone", SqlType(Kind.TIMESTAMPTZ)),
    ("JSON", SqlType(Kind.JSON)),
    ("jsonb", SqlType(Kind.JSON)),
])
def test_sqlite_parse_type(text, expected):
    assert SL.parse_type(text) == expected


@pytest.mark.parametrize("t, rendered", [
    (SqlType(Kind.TEXT, length=50), "VARCHAR(50)"),
    (SqlType(Kind.TEXT), "TEXT"),
    (SqlType(Kind.DECIMAL, precision=10, scale=2), "NUMERIC(10,2)"),
    (SqlType(Kind.BOOLEAN), "BOOLEAN"),
    (SqlType(Kind.UUID), "UUID"),
    (SqlType(Kind.BYTES), "BLOB"),
    (SqlType(Kind.TIMESTAMPTZ), "TIMESTAMPTZ"),
    (SqlType(Kind.JSON), "JSON"),
])
def test_sqlite_render_type(t, rendered):
    assert SL.render_type(t) == rendered


@pytest.mark.parametrize("t", ALL_TYPES, ids=IDS)
def test_sqlite_render_then_parse_keeps_the_family(t):
    back = SL.parse_type(SL.render_type(t))
    assert back.compatible_with(t)
    if t.kind not in (Kind.INTEGER, Kind.REAL):     # SQLite widens these (64-bit integers, 8-byte floats)
        assert back == t


@pytest.mark.parametrize("text", ["STRING", "geometry", "XML", "ARRAY"])
def test_sqlite_unsupported_types_raise_schema_error(text):
    with pytest.raises(SchemaError, match="unsupported SQLite column type"):
        SL.parse_type(text)


# -- across dialects -----------------------------------------------------------------------------

@pytest.mark.parametrize("t", ALL_TYPES, ids=IDS)
def test_pg_rendered_type_parsed_by_sqlite_keeps_the_family(t):
    back = SL.parse_type(PG.render_type(t))
    assert back.compatible_with(t), (t, PG.render_type(t), back)
    assert back.kind is t.kind or back.family == t.family


@pytest.mark.parametrize("text", ["numeric(19,4)", "character varying(50)", "timestamp with time zone", "jsonb",
                                  "uuid", "bytea", "double precision", "boolean", "smallint", "date"])
def test_pg_column_copied_to_sqlite_keeps_the_type(text):
    t = PG.parse_type(text)
    assert SL.parse_type(SL.render_type(t)) == t


@pytest.mark.parametrize("text", ["INTEGER", "VARCHAR(50)", "NUMERIC(10,2)", "BOOLEAN", "UUID", "", "JSON", "REAL"])
def test_sqlite_column_copied_to_pg_keeps_the_family(text):
    t = SL.parse_type(text)
    assert PG.parse_type(PG.render_type(t)).compatible_with(t)


# -- redact_url ----------------------------------------------------------------------------------

@pytest.mark.parametrize("url, expected", [
    ("postgresql://u:secret@h/db", "postgresql://u:***@h/db"),
    ("postgresql://u:secret@h:5432/db?sslmode=require", "postgresql://u:***@h:5432/db?sslmode=require"),
    ("postgres://app:p%40ss@db.example/sales", "postgres://app:***@db.example/sales"),
    ("postgresql://h/db?user=u&password=secret&sslmode=require",
     "postgresql://h/db?user=u&password=***&sslmode=require"),
    ("host=h user=u password=secret dbname=d", "host=h user=u password=*** dbname=d"),
    ("host=h PASSWORD=secret", "host=h PASSWORD=***"),
    ("postgresql://u@h/db", "postgresql://u@h/db"),
    ("sqlite:///data/hq.db", "sqlite:///data/hq.db"),
])
def test_redact_url(url, expected):
    out = redact_url(url)
    assert out == expected
    assert "secret" not in out and "p%40ss" not in out


def test_redact_url_quoted_libpq_password():
    assert "secret" not in redact_url("host=h password='my secret' dbname=d")


def test_a_short_secret_does_not_blank_out_ordinary_words():
    from sparksync.redaction import redact, register_url

    register_url("postgresql://u:sec@h/db")
    register_url("postgresql://u:Longer-Secret-9@h/db")
    assert redact('{"seconds": 1.5}') == '{"seconds": 1.5}'
    assert redact("connect to postgresql://u:sec@h/db failed") == "connect to postgresql://u:***@h/db failed"
    assert redact("the server said Longer-Secret-9 is wrong") == "the server said *** is wrong"
