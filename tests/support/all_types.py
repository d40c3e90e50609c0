"""A table of every logical type (``AllTypes``: ``COLS``) with rows at each type's edges and NULLs
(``ROWS``), made at a publisher by ``make_publisher``."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid

from sparksync.dialects import connect
from sparksync.types import Kind, SqlType, decimal_type

COLS = [("id", SqlType(Kind.INTEGER)), ("b", SqlType(Kind.BOOLEAN)), ("s", SqlType(Kind.SMALLINT)),
        ("big", SqlType(Kind.BIGINT)), ("r", SqlType(Kind.REAL)), ("f", SqlType(Kind.DOUBLE)),
        ("money", decimal_type(19, 4)), ("wide", decimal_type(38, 10)), ("t", SqlType(Kind.TEXT, length=200)),
        ("blob", SqlType(Kind.BYTES)), ("d", SqlType(Kind.DATE)), ("tm", SqlType(Kind.TIME)),
        ("ts", SqlType(Kind.TIMESTAMP)), ("tz", SqlType(Kind.TIMESTAMPTZ)), ("g", SqlType(Kind.UUID)),
        ("doc", SqlType(Kind.JSON))]

ROWS = [
    (1, True, 32767, 9_223_372_036_854_775_807, 1.5, 1e308, decimal.Decimal("123456789012345.1234"),
     decimal.Decimal("1234567890123456789012345678.0123456789"), "héllo wörld ☃ 𝄞 'quote' \"dq\"", b"\x00\xff\x10",
     dt.date(1999, 12, 31), "23:59:59.999999", dt.datetime(2024, 2, 29, 12, 34, 56, 123456),
     dt.datetime(2024, 3, 31, 1, 30, tzinfo=dt.UTC), str(uuid.UUID(int=1)), {"a": [1, 2, {"b": None}], "ü": "x"}),
    (2, False, -32768, -9_223_372_036_854_775_808, -0.25, -2.5e-300, decimal.Decimal("-0.0001"),
     decimal.Decimal("-0.0000000001"), "", b"", dt.date(1, 1, 1), "00:00:00", dt.datetime(1970, 1, 1),
     dt.datetime(2000, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=-5))), str(uuid.uuid4()), []),
    (3,) + (None,) * (len(COLS) - 1),
]


def make_publisher(url: str) -> None:
    from sparksync.dialects.model import Column, TableInfo
    from sparksync.names import TableName

    with connect(url) as r:
        info = TableInfo(TableName(None, "AllTypes"), tuple(Column(n, t, n != "id") for n, t in COLS), ("id",))
        for stmt in r.dialect.render_create_table(info, rowguid=None):
            r.execute(stmt)
        rows = [tuple(json.dumps(v) if n == "doc" and v is not None else v for (n, _), v in zip(COLS, row))
                for row in ROWS]
        r.dialect.bulk_load(r, info.name, [n for n, _ in COLS], [t for _, t in COLS], rows)
