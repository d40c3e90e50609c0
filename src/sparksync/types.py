"""Logical column types shared by every dialect, and their Arrow / Spark forms.

Each dialect maps its own type names to a :class:`SqlType` when it reflects a table and back to DDL
when it creates one, so a PostgreSQL publisher can have SQLite subscribers and the reverse.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
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


@dataclass(frozen=True)
class SqlType:
    """A column type independent of any database: a kind plus length or precision/scale."""

    kind: Kind
    length: int | None = None
    precision: int | None = None     # DECIMAL: None is an unconstrained numeric (any digits, kept exactly)
    scale: int | None = None
    fixed: bool = False              # TEXT: blank-padded to ``length`` (PostgreSQL's character(n))

    def __str__(self) -> str:
        if self.kind is Kind.DECIMAL:
            return "decimal" if self.precision is None else f"decimal({self.precision},{self.scale})"
        if self.length is not None:
            return f"{self.kind.value}({self.length})"
        return self.kind.value

    @property
    def family(self) -> str:
        return _FAMILY.get(self.kind, self.kind.value)

    def compatible_with(self, other: SqlType) -> bool:
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
        if self.fixed:
            d["fixed"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict) -> SqlType:
        return cls(Kind(d["kind"]), d.get("length"), d.get("precision"), d.get("scale"), bool(d.get("fixed", False)))


def decimal_type(precision: int | None, scale: int | None) -> SqlType:
    """numeric(p,s); without a precision an unconstrained numeric (kept exactly, any number of digits).
    A precision above 38 (what Arrow's decimal128 holds) is unconstrained too: its values keep every digit."""
    if precision is None or int(precision) > 38:
        return SqlType(Kind.DECIMAL)
    return SqlType(Kind.DECIMAL, precision=int(precision), scale=int(scale or 0))


_ARROW = {
    Kind.BOOLEAN: lambda t: pa.bool_(),
    Kind.SMALLINT: lambda t: pa.int16(),
    Kind.INTEGER: lambda t: pa.int32(),
    Kind.BIGINT: lambda t: pa.int64(),
    Kind.REAL: lambda t: pa.float32(),
    Kind.DOUBLE: lambda t: pa.float64(),
    Kind.DECIMAL: lambda t: pa.string() if t.precision is None else pa.decimal128(t.precision, t.scale),
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
    Kind.DECIMAL: lambda t: "STRING" if t.precision is None else f"DECIMAL({t.precision},{t.scale})",
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


def canonical_real(v):
    """A single-precision value as the shortest decimal that reads back to the same float4 (1.1, not
    1.100000023841858): the same whether it was read from the table (widened by the driver) or from
    the log (PostgreSQL's text form), so every path stores the same value."""
    f = _to_float(v)
    if f != f or f in (float("inf"), float("-inf")):
        return f
    import numpy as np

    return float(str(np.float32(f)))


_DECIMAL_CONTEXT = decimal.Context(prec=80)


def _any_decimal(v):
    """An unconstrained numeric's value as text, digit for digit (NaN and infinities included)."""
    if isinstance(v, bool):
        raise ValueError_(f"{v!r} is not a decimal")
    if isinstance(v, (int, decimal.Decimal)):
        return str(decimal.Decimal(v))
    if isinstance(v, float):
        return repr(v) if v == v and abs(v) != float("inf") else {"nan": "NaN", "inf": "Infinity",
                                                                   "-inf": "-Infinity"}[repr(v)]
    if isinstance(v, str):
        try:
            return str(decimal.Decimal(v.strip()))
        except decimal.InvalidOperation:
            raise ValueError_(f"{v!r} is not a decimal") from None
    raise ValueError_(f"{v!r} is not a decimal")


def _decimal(t: SqlType):
    if t.precision is None:
        return _any_decimal
    q = decimal.Decimal(1).scaleb(-(t.scale or 0))   # NUMERIC(p) means NUMERIC(p, 0)
    scale, whole = t.scale or 0, t.precision - (t.scale or 0)
    # text already in the column's exact form (the scale's digits, no leading zero, fits the precision):
    # quantizing it changes nothing, so it is read as it is
    integer = f"-?(?:0|[1-9][0-9]{{0,{whole - 1}}})" if whole > 0 else "-?0"
    exact = re.compile(integer + (rf"\.[0-9]{{{scale}}}" if scale else "")).fullmatch

    def conv(v):
        if type(v) is str and exact(v):
            return decimal.Decimal(v)
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
    if isinstance(v, str) and (len(v) == 10 or (len(v) > 10 and v[10] in "T ")) and not v.endswith(" BC"):
        try:
            return dt.date.fromisoformat(v[:10]) if len(v) == 10 else _parse_ts(v).date()
        except (ValueError, ValueError_):
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
        ts = ts.astimezone(dt.UTC).replace(tzinfo=None)
    return ts


def _to_timestamptz(v):
    ts = _parse_ts(v)
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)
    return ts.astimezone(dt.UTC)


_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").fullmatch


def _to_uuid(v):
    if type(v) is str and _CANONICAL_UUID(v):      # already as str(uuid.UUID(v)) writes it (SQLite's rowguids)
        return v
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
    Kind.REAL: lambda t: canonical_real,
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


# the kinds whose values of these Python types the converters return unchanged (a column of only those is not converted)
_AS_IS = {Kind.SMALLINT: {int, type(None)}, Kind.INTEGER: {int, type(None)}, Kind.BIGINT: {int, type(None)},
          Kind.DOUBLE: {float, type(None)}, Kind.TEXT: {str, type(None)}, Kind.BOOLEAN: {bool, type(None)}}


def arrow_converter(t: SqlType):
    """A function turning a driver value (from either dialect) into the Python value Arrow expects."""
    conv = _CONVERTERS[t.kind](t)

    def convert(v):
        return None if v is None else conv(v)

    return convert


def rows_to_record_batch(rows, columns: list[tuple[str, SqlType]], schema: pa.Schema, where: str,
                         key: list[str] | None = None) -> pa.RecordBatch:
    """Build an Arrow batch from driver rows, converting each value to its column's logical type.

    A value that does not fit raises ``ValueError_`` naming ``where``, the row (by ``key``, its key
    columns) and the column.
    """
    convs = [arrow_converter(t) for _, t in columns]
    arrays = []
    for i, ((name, t), conv) in enumerate(zip(columns, convs)):
        try:
            values = [r[i] for r in rows]
            exact = _AS_IS.get(t.kind)
            if exact is None or not set(map(type, values)) <= exact:    # else every value is its own canonical form
                values = [conv(v) for v in values]
            arrays.append(pa.array(values, type=schema.field(i).type))
        except (ValueError_, pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
            raise ValueError_(f"{where}, {_bad_row(rows, i, conv, columns, key)}column {name} ({t}): {e}") from None
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _bad_row(rows, i: int, conv, columns, key) -> str:
    """'row id=7 (value 'infinity')' for the first row whose column ``i`` does not convert."""
    names = [n for n, _ in columns]
    for r in rows:
        try:
            conv(r[i])
        except (ValueError_, OverflowError):
            where = ", ".join(f"{k}={r[names.index(k)]!r}" for k in (key or []) if k in names)
            return f"row {where}, " if where else ""
    return ""


# -- the bounds a declared type puts on its values --------------------------------------------------
_INTEGER_BITS = {Kind.SMALLINT: 16, Kind.INTEGER: 32, Kind.BIGINT: 64}


def digest_arrow(t: SqlType) -> pa.DataType:
    """The Arrow type ``t``'s values are read as to be digested (validation): its own, but an integer of any width as
    a 64-bit one, so a value stored outside its declared width (SQLite stores what it is given) is digested as what
    it is, the same text as any in range, instead of failing the read."""
    return pa.int64() if t.kind in _INTEGER_BITS else t.to_arrow()


def bounded(t: SqlType) -> bool:
    """Whether a value of ``t``'s Python form may still not fit it: an integer outside its width, a text longer
    than its length. SQLite stores such a value as it comes (its type affinity refuses nothing), so every
    destination checks them itself (``misfits``), the same way whatever database it is."""
    return t.kind in _INTEGER_BITS or (t.kind is Kind.TEXT and t.length is not None)


def misfit(t: SqlType, v) -> str | None:
    """Why the value ``v`` (its Python form, as a row decodes it) does not fit ``t``, or None."""
    if v is None:
        return None
    bits = _INTEGER_BITS.get(t.kind)
    if bits is not None:
        if isinstance(v, int) and not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
            return f"{v} is out of range for {t}"
        return None
    if t.kind is Kind.TEXT and t.length is not None and isinstance(v, str) and len(v) > t.length:
        return f"a text of {len(v)} characters is too long for {t}"
    return None


def misfits(t: SqlType, values: list) -> list[int]:
    """The positions of ``values`` (one column's, in their Python form) that do not fit ``t``: none for a type
    with no bound; one pass in C over the column when every value fits."""
    bits = _INTEGER_BITS.get(t.kind)
    if bits is not None:
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        present = [v for v in values if v is not None]
        if not present or (lo <= min(present) and max(present) <= hi):
            return []
    elif t.kind is Kind.TEXT and t.length is not None:
        lengths = [len(v) for v in values if v is not None]
        if not lengths or max(lengths) <= t.length:
            return []
    else:
        return []
    return [i for i, v in enumerate(values) if misfit(t, v) is not None]
