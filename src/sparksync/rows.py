"""Rows as JSON text: the one form a row takes between databases (merge changes, transactional
commands), typed by its table's logical column types on both ends, so decimals, timestamps and bytes
survive exactly; and the helpers that name a row or a value in messages."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import re
from collections.abc import Sequence
from json.encoder import encode_basestring as _json_string  # a str as JSONEncoder(ensure_ascii=False) writes it
from typing import Any

from sparksync.types import Kind, SqlType, ValueError_, arrow_converter


def _jsonable(v: Any, t: SqlType) -> Any:
    if v is None:
        return None
    if t.kind is Kind.BYTES:
        return base64.b64encode(v).decode("ascii")
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v).replace("inf", "Infinity").replace("nan", "NaN")   # strict JSON: a string
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    return v


_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode   # built once, not per row
# Values PostgreSQL holds that Python's types cannot ('infinity', '10000-01-01', '0044-03-15 BC',
# numeric 'NaN', time '24:00:00'): the log reader keeps PostgreSQL's text form of them ("verbatim"), a
# PostgreSQL subscriber reads that text with the column's own input function, exactly; a SQLite
# subscriber stores the text.
VERBATIM_KINDS = frozenset({Kind.DATE, Kind.TIME, Kind.TIMESTAMP, Kind.TIMESTAMPTZ, Kind.DECIMAL})
# kinds whose JSON value is a string converted by a pure function: worth a memo per batch
_MEMO_KINDS = frozenset({Kind.DECIMAL, Kind.DATE, Kind.TIME, Kind.TIMESTAMP, Kind.TIMESTAMPTZ})
_PLAIN = {Kind.SMALLINT: int, Kind.INTEGER: int, Kind.BIGINT: int, Kind.TEXT: str}
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class RowCodec:
    """One article's rows to and from the change JSON, with each column's converter built once.

    The JSON is strict (no NaN/Infinity literals), so either database's JSON functions can read it:
    the set-based apply (``merge/apply/staging.py``) extracts values from it in SQL.
    """

    def __init__(self, columns: Sequence[tuple[str, SqlType]]):
        self.columns = list(columns)
        self._enc = [(name, t, _PLAIN.get(t.kind), arrow_converter(t)) for name, t in self.columns]
        # encode(values) -> JSON text: {"column": value, ...} in column order, each value as
        # value_json writes it (json.dumps of _jsonable(convert(v)), compact, not ASCII-escaped).
        self.encode = _compile_encoder(self)

    def value_json(self, i: int, v: Any) -> str:
        """Column ``i``'s value ``v`` (a driver value) as the JSON that :meth:`encode` writes for it."""
        name, t, plain, conv = self._enc[i]
        if v is None:
            return "null"
        if plain is not None and type(v) is plain:
            return _ENCODE(v)
        return _ENCODE(_jsonable(conv(v), t))

    def json_value(self, i: int, v: Any) -> Any:
        """Column ``i``'s value ``v`` (a driver value) as the JSON value :meth:`value_json` writes for it (a key
        in a notice): an int or str of its own kind as it is, anything else through the JSON text."""
        plain = self._enc[i][2]
        if v is None or (plain is not None and type(v) is plain):
            return v
        return json.loads(self.value_json(i, v))

    def decode(self, text: str | None, partial: bool = False, verbatim: bool = False) -> dict[str, Any] | None:
        """JSON text -> {column: value}; ``partial``: only the columns the JSON has (a compact before image).
        ``verbatim``: a date, time, timestamp or decimal that Python cannot represent ('infinity', a year
        after 9999 or BC, numeric NaN) stays the text PostgreSQL wrote (``VERBATIM_KINDS``)."""
        if text is None:
            return None
        raw = json.loads(text)
        out: dict[str, Any] = {}
        for i, (name, _, plain, _) in enumerate(self._enc):
            if partial and name not in raw:
                continue
            v = raw.get(name)
            out[name] = v if v is None or (plain is not None and type(v) is plain) else self._value(i, v, verbatim)
        return out

    def _value(self, i: int, v: Any, verbatim: bool = False) -> Any:
        """Column ``i``'s JSON value ``v`` (not null) -> its Python value."""
        _, t, _, conv = self._enc[i]
        if t.kind is Kind.BYTES:
            return base64.b64decode(v)
        if t.kind in (Kind.REAL, Kind.DOUBLE) and isinstance(v, str):
            return float(v)
        if verbatim and t.kind in VERBATIM_KINDS and isinstance(v, str):
            try:
                return conv(v)
            except ValueError_:
                return v
        return conv(v)

    def decode_columns(self, texts: Sequence[str | None], names: Sequence[str]) -> list[list[Any]]:
        """Many rows' JSON texts -> the values of the columns ``names``, column by column (one list per
        column, each value as :meth:`decode` gives it; a NULL text gives NULLs): one parse of all the
        texts, and no Python object per row but the parsed one."""
        raws = json.loads("[" + ",".join([t if t is not None else "{}" for t in texts]) + "]")
        where = {name: i for i, (name, _) in enumerate(self.columns)}
        out = []
        for name in names:
            i = where[name]
            plain, kind = self._enc[i][2], self._enc[i][1].kind
            col = [raw.get(name) for raw in raws]
            if kind in _MEMO_KINDS:          # a pure function of the text: each distinct value converted once
                memo: dict[str, Any] = {}
                out.append([None if v is None else self._value(i, v) if type(v) is not str
                            else memo[v] if v in memo else memo.setdefault(v, self._value(i, v)) for v in col])
            else:
                out.append([v if v is None or (plain is not None and type(v) is plain) else self._value(i, v)
                            for v in col])
        return out


def _compile_encoder(codec: RowCodec):
    """The codec's ``encode``, written out for its columns: the values that need no conversion (an
    int in an integer column, a str in a text column, a canonical UUID, an int in a decimal column)
    are written straight into the JSON text; every other value goes through ``value_json``. Reading
    changes spends most of its time here, one call per changed row."""
    env: dict[str, Any] = {"_str": _json_string, "_slow": codec.value_json, "_uuid": _CANONICAL_UUID.fullmatch}
    names = [f"v{i}" for i in range(len(codec.columns))]
    pieces = []
    for i, ((name, t), v) in enumerate(zip(codec.columns, names)):
        if t.kind in _PLAIN and _PLAIN[t.kind] is int:
            expr = f"(str({v}) if type({v}) is int else _slow({i}, {v}))"
        elif t.kind is Kind.TEXT:
            expr = f"(_str({v}) if type({v}) is str else _slow({i}, {v}))"
        elif t.kind is Kind.UUID:
            expr = f"('\"' + {v} + '\"' if type({v}) is str and _uuid({v}) else _slow({i}, {v}))"
        elif t.kind is Kind.DECIMAL:
            env[f"_dec{i}"] = _int_decimal_json(t, i, codec.value_json)
            expr = f"(_dec{i}({v}) if type({v}) is int else _slow({i}, {v}))"
        else:
            expr = f"_slow({i}, {v})"
        pieces.append(f"{_json_string(name) + ':'!r} + {expr}")
    body = " + ',' + ".join(pieces) if pieces else "''"
    unpack = f"    {', '.join(names)}, = values\n" if names else ""
    exec(f"def encode(values):\n{unpack}    return '{{' + {body} + '}}'\n", env)   # noqa: S102 - our own code
    return env["encode"]


def _int_decimal_json(t: SqlType, i: int, slow):
    """An int in a decimal column as ``_jsonable`` writes the quantized Decimal: a JSON string with
    ``scale`` zeros; a value that does not obviously fit the precision takes the converter's path."""
    scale, precision = t.scale or 0, t.precision or 0
    zeros = "." + "0" * scale if scale else ""

    def fast(v: int) -> str:
        digits = str(v)
        if len(digits.lstrip("-")) + scale > precision:
            return slow(i, v)
        return '"' + digits + zeros + '"'

    return fast


def encode_row(values: Sequence[Any], columns: Sequence[tuple[str, SqlType]]) -> str:
    """Driver values -> JSON text, normalized through each column's logical type."""
    return RowCodec(columns).encode(values)


def decode_row(text: str | None, columns: Sequence[tuple[str, SqlType]]) -> dict[str, Any] | None:
    """JSON text -> {column: Python value of the column's logical type}."""
    return RowCodec(columns).decode(text)


def json_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        return value if isinstance(value, str) else value.decode()
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def summarize_value(v: Any, limit: int = 40) -> str:
    """A short, printable summary of a value for messages and the failed-change log (control
    characters, NUL and undecodable bytes shown as escapes, long values cut)."""
    if isinstance(v, str):
        text = v.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace") if not v.isascii() else v
        text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
        text = repr(text) if not text.startswith("'") else text
    elif isinstance(v, (bytes, bytearray, memoryview)):
        text = "0x" + bytes(v)[:limit].hex()
    else:
        text = repr(v)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def row_key(columns: Sequence[str], key: Sequence[str], values: Sequence[Any]) -> str:
    """``id=4`` / ``a=1, b='x'``: the primary key of a row given in column order."""
    at = {c: i for i, c in enumerate(columns)}
    return ", ".join(f"{k}={summarize_value(values[at[k]])}" for k in key if k in at)


def diagnose_row(codec: RowCodec, values: Sequence[Any]) -> tuple[str, str, str]:
    """Why a row cannot travel: (column, reason, value summary) of its first bad value: one that does
    not fit its column's type, or text that is not valid UTF-8 (read as lone surrogates)."""
    for i, ((name, t), v) in enumerate(zip(codec.columns, values)):
        try:
            text = codec.value_json(i, v)
        except ValueError_ as e:
            return name, f"value does not fit column {name} ({t}): {e}", summarize_value(v)
        except (ValueError, TypeError, ArithmeticError) as e:
            return name, f"value does not fit column {name} ({t}): {type(e).__name__}: {e}", summarize_value(v)
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                return name, f"column {name} holds text that is not valid UTF-8", summarize_value(v)
    return "", "the row cannot be encoded", ""


# -- a row as one canonical text (validation, digests) ----------------------------------------------
def encode(arrays) -> Any:
    """One text per row of ``arrays`` (typed columns): ``v<len>:<text>`` per value, ``n`` for NULL, so two
    different rows never have the same text, and the same rows typed alike at any database have the same."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = []
    for arr in arrays:
        if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
            text = pa.array([None if v is None else v.hex() for v in arr.to_pylist()], pa.string())
        else:
            text = arr if pa.types.is_string(arr.type) else pc.cast(arr, pa.string())
        length = pc.cast(pc.utf8_length(text), pa.string())
        parts.append(pc.fill_null(pc.binary_join_element_wise("v", length, ":", text, ""), "n"))
    return pc.binary_join_element_wise(*parts, "")


def decode(text: str | None) -> list[str | None]:
    """The values of an encoding made by :func:`encode`, as their texts."""
    out: list[str | None] = []
    i = 0
    while text and i < len(text):
        if text[i] == "n":
            out.append(None)
            i += 1
            continue
        colon = text.index(":", i)
        n = int(text[i + 1:colon])
        out.append(text[colon + 1:colon + 1 + n])
        i = colon + 1 + n
    return out
