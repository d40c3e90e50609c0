"""Logical column types shared by every dialect, and their Arrow / Spark forms.

Each dialect maps its own type names to a :class:`SqlType` when it reflects a table and back to DDL
when it creates one, so a PostgreSQL publisher can have SQLite subscribers and the reverse.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from dataclasses import dataclass
from enum import StrEnum

import pyarrow as pa


class Kind(StrEnum):
    BOOLEAN = "boolean"
    SMALLINT = "smallint"
    INTEGER = "integer"
    BIGINT = "bigint"
    REAL = "real"
    DOUBLE = "double"
    DECIMAL = "decimal"
    TEXT = "text"
    BYTES = "bytes"
    DATE = "date"
    TIME = "time"
    TIMESTAMP = "timestamp"
    TIMESTAMPTZ = "timestamptz"
    UUID = "uuid"
    JSON = "json"


_FAMILY = {
    Kind.SMALLINT: "int", Kind.INTEGER: "int", Kind.BIGINT: "int",
    Kind.REAL: "float", Kind.DOUBLE: "float",
}

DEFAULT_DECIMAL = (38, 10)


@dataclass(frozen=True)
class SqlType:
    """A column type independent of any database: a kind plus length or precision/scale."""

    kind: Kind
    length: int | None = None
    precision: int | None = None
    scale: int | None = None

    def __str__(self) -> str:
        if self.kind is Kind.DECIMAL:
            return f"decimal({self.precision},{self.scale})"
        if self.length is not None:
            return f"{self.kind.value}({self.length})"
        return self.kind.value

    @property
    def family(self) -> str:
        return _FAMILY.get(self.kind, self.kind.value)

    def compatible_with(self, other: "SqlType") -> bool:
        """Same family of values (integers of any width are compatible, as are floats)."""
        return self.family == other.family

    def to_arrow(self) -> pa.DataType:
        return _ARROW[self.kind](self)

    def to_spark(self) -> str:
        return _SPARK[self.kind](self)

    def to_dict(self) -> dict:
        d: dict = {"kind": self.kind.value}
        for k in ("length", "precision", "scale"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "SqlType":
        return cls(Kind(d["kind"]), d.get("length"), d.get("precision"), d.get("scale"))


def decimal_type(precision: int | None, scale: int | None) -> SqlType:
    if precision is None:
        precision, scale = DEFAULT_DECIMAL
    precision = min(int(precision), 38)
    return SqlType(Kind.DECIMAL, precision=precision, scale=int(scale or 0))


_ARROW = {
    Kind.BOOLEAN: lambda t: pa.bool_(),
    Kind.SMALLINT: lambda t: pa.int16(),
    Kind.INTEGER: lambda t: pa.int32(),
    Kind.BIGINT: lambda t: pa.int64(),
    Kind.REAL: lambda t: pa.float32(),
    Kind.DOUBLE: lambda t: pa.float64(),
    Kind.DECIMAL: lambda t: pa.decimal128(t.precision, t.scale),
    Kind.TEXT: lambda t: pa.string(),
    Kind.BYTES: lambda t: pa.binary(),
    Kind.DATE: lambda t: pa.date32(),
    Kind.TIME: lambda t: pa.string(),
    Kind.TIMESTAMP: lambda t: pa.timestamp("us"),
    Kind.TIMESTAMPTZ: lambda t: pa.timestamp("us", tz="UTC"),
    Kind.UUID: lambda t: pa.string(),
    Kind.JSON: lambda t: pa.string(),
}

_SPARK = {
    Kind.BOOLEAN: lambda t: "BOOLEAN",
    Kind.SMALLINT: lambda t: "SMALLINT",
    Kind.INTEGER: lambda t: "INT",
    Kind.BIGINT: lambda t: "BIGINT",
    Kind.REAL: lambda t: "FLOAT",
    Kind.DOUBLE: lambda t: "DOUBLE",
    Kind.DECIMAL: lambda t: f"DECIMAL({t.precision},{t.scale})",
    Kind.TEXT: lambda t: "STRING",
    Kind.BYTES: lambda t: "BINARY",
    Kind.DATE: lambda t: "DATE",
    Kind.TIME: lambda t: "STRING",
    Kind.TIMESTAMP: lambda t: "TIMESTAMP_NTZ",
    Kind.TIMESTAMPTZ: lambda t: "TIMESTAMP",
    Kind.UUID: lambda t: "STRING",
    Kind.JSON: lambda t: "STRING",
}


class ValueError_(ValueError):
    """A stored value that does not fit its declared type."""


def _to_bool(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.lower() in ("true", "false", "t", "f", "1", "0"):
        return v.lower() in ("true", "t", "1")
    raise ValueError_(f"{v!r} is not a boolean")


def _to_int(v):
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, decimal.Decimal) and v == v.to_integral_value():
        return int(v)
    raise ValueError_(f"{v!r} is not an integer")


def _to_float(v):
    if isinstance(v, (int, float, decimal.Decimal)) and not isinstance(v, bool):
        return float(v)
    raise ValueError_(f"{v!r} is not a number")


_DECIMAL_CONTEXT = decimal.Context(prec=80)


def _decimal(t: SqlType):
    q = decimal.Decimal(1).scaleb(-t.scale)

    def conv(v):
        if isinstance(v, bool):
            raise ValueError_(f"{v!r} is not a decimal")
        if isinstance(v, (int, decimal.Decimal)):
            d = decimal.Decimal(v)
        elif isinstance(v, float):
            d = decimal.Decimal(repr(v))
        elif isinstance(v, str):
            try:
                d = decimal.Decimal(v)
            except decimal.InvalidOperation:
                raise ValueError_(f"{v!r} is not a decimal") from None
        else:
            raise ValueError_(f"{v!r} is not a decimal")
        if not d.is_finite():
            raise ValueError_(f"{v!r} is not a finite decimal")
        try:
            d = d.quantize(q, rounding=decimal.ROUND_HALF_EVEN, context=_DECIMAL_CONTEXT)
        except decimal.InvalidOperation:      # more digits than the context holds: far too big
            d = None
        if d is None or len(d.as_tuple().digits) > t.precision:
            raise ValueError_(f"{v!r} does not fit decimal({t.precision},{t.scale})")
        return d

    return conv


def _to_text(v):
    if isinstance(v, str):
        return v
    if isinstance(v, (int, float, decimal.Decimal)) and not isinstance(v, bool):
        return str(v)
    raise ValueError_(f"{v!r} is not text")


def _to_bytes(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8")
    raise ValueError_(f"{v!r} is not binary")


def _to_date(v):
    if isinstance(v, dt.datetime):
        return v.date()
    if isinstance(v, dt.date):
        return v
    if isinstance(v, str):
        try:
            return dt.date.fromisoformat(v[:10])
        except ValueError:
            pass
    raise ValueError_(f"{v!r} is not a date")


def _to_time(v):
    if isinstance(v, dt.time):
        return v.isoformat()
    if isinstance(v, str):
        return v
    raise ValueError_(f"{v!r} is not a time")


def _parse_ts(v) -> dt.datetime:
    if isinstance(v, dt.datetime):
        return v
    if isinstance(v, dt.date):
        return dt.datetime(v.year, v.month, v.day)
    if isinstance(v, str):
        try:
            return dt.datetime.fromisoformat(v.strip().replace("Z", "+00:00"))
        except ValueError:
            pass
    raise ValueError_(f"{v!r} is not a timestamp")


def _to_timestamp(v):
    ts = _parse_ts(v)
    if ts.tzinfo is not None:
        ts = ts.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return ts


def _to_timestamptz(v):
    ts = _parse_ts(v)
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.timezone.utc)
    return ts.astimezone(dt.timezone.utc)


def _to_uuid(v):
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, (bytes, bytearray)) and len(v) == 16:
        return str(uuid.UUID(bytes=bytes(v)))
    if isinstance(v, str):
        try:
            return str(uuid.UUID(v))
        except ValueError:
            pass
    raise ValueError_(f"{v!r} is not a uuid")


def _to_json(v):
    if isinstance(v, str):
        return v
    return json.dumps(v, sort_keys=True, default=str)


_CONVERTERS = {
    Kind.BOOLEAN: lambda t: _to_bool,
    Kind.SMALLINT: lambda t: _to_int,
    Kind.INTEGER: lambda t: _to_int,
    Kind.BIGINT: lambda t: _to_int,
    Kind.REAL: lambda t: _to_float,
    Kind.DOUBLE: lambda t: _to_float,
    Kind.DECIMAL: _decimal,
    Kind.TEXT: lambda t: _to_text,
    Kind.BYTES: lambda t: _to_bytes,
    Kind.DATE: lambda t: _to_date,
    Kind.TIME: lambda t: _to_time,
    Kind.TIMESTAMP: lambda t: _to_timestamp,
    Kind.TIMESTAMPTZ: lambda t: _to_timestamptz,
    Kind.UUID: lambda t: _to_uuid,
    Kind.JSON: lambda t: _to_json,
}


def arrow_converter(t: SqlType):
    """A function turning a driver value (from either dialect) into the Python value Arrow expects."""
    conv = _CONVERTERS[t.kind](t)

    def convert(v):
        return None if v is None else conv(v)

    return convert


def rows_to_record_batch(rows, columns: list[tuple[str, SqlType]], schema: pa.Schema, where: str) -> pa.RecordBatch:
    """Build an Arrow batch from driver rows, converting each value to its column's logical type.

    A value that does not fit raises ``ValueError_`` naming ``where`` and the column.
    """
    convs = [arrow_converter(t) for _, t in columns]
    arrays = []
    for i, ((name, t), conv) in enumerate(zip(columns, convs)):
        try:
            values = [conv(r[i]) for r in rows]
            arrays.append(pa.array(values, type=schema.field(i).type))
        except ValueError_ as e:
            raise ValueError_(f"{where}, column {name} ({t}): {e}") from None
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
            raise ValueError_(f"{where}, column {name} ({t}): a value does not fit: {e}") from None
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
