"""Changes as data: the uniform shape every enumerated change has on its way through Spark.

One row per change, whatever the article: the row's values travel as JSON (typed by the article's
schema on both ends, so decimals, timestamps and bytes survive exactly).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import re
from collections.abc import Sequence
from json.encoder import encode_basestring as _json_string   # a str as JSONEncoder(ensure_ascii=False) writes it
from typing import Any, NamedTuple

from ..types import Kind, SqlType, arrow_converter

CHANGE_COLUMNS = ["source", "source_nick", "tablenick", "rowguid", "generation", "op", "lineage", "colv", "row",
                  "target"]
CHANGE_SCHEMA = ("source STRING, source_nick INT, tablenick INT, rowguid STRING, generation BIGINT, op STRING, "
                 "lineage STRING, colv STRING, row STRING, target STRING")
RETRY_GENERATION = -1   # changes re-read for one destination (failed before) travel under this generation


class Change(NamedTuple):
    """One change as the apply stage sees it (lineage, colv and row still JSON text)."""

    tablenick: int
    rowguid: str
    op: str                  # "upsert" | "delete"
    lineage: str
    colv: str | None
    row: str | None



class ArticleChanges:
    """One article's changes of a generation batch, column by column: no Python object per row on
    the set-based path; a :class:`Change` is made only for a row that goes through ``decide``."""

    def __init__(self, tablenick: int, rowguid: list[str], op: list[str], lineage: list[str],
                 colv: list[str | None], row: list[str | None]):
        self.tablenick = tablenick
        self.rowguid, self.op, self.lineage, self.colv, self.row = rowguid, op, lineage, colv, row
        n = len(rowguid)
        # rowguid -> position of its first change in the batch
        self.first = dict(zip(reversed(rowguid), range(n - 1, -1, -1)))

    def change(self, i: int) -> Change:
        return Change(self.tablenick, self.rowguid[i], self.op[i], self.lineage[i], self.colv[i], self.row[i])

    def staged(self, positions: list[int] | None = None):
        """(rowguid, op, lineage, colv, row) of the changes at ``positions`` (all by default)."""
        if positions is None:
            return zip(self.rowguid, self.op, self.lineage, self.colv, self.row)
        return ((self.rowguid[i], self.op[i], self.lineage[i], self.colv[i], self.row[i]) for i in positions)

    def repeats(self) -> tuple[list[int] | None, list[int]]:
        """Positions of each row's first change (None: every row once) and of later changes of the
        same row (a retried change and its newer version can meet in one batch)."""
        if len(self.first) == len(self.rowguid):
            return None, []
        firsts = set(self.first.values())
        return sorted(firsts), [i for i in range(len(self.rowguid)) if i not in firsts]


def by_article(table) -> dict[int, ArticleChanges]:
    """An Arrow table of change rows (``CHANGE_SCHEMA``) -> each article's changes, in row order."""
    import pyarrow.compute as pc

    out: dict[int, ArticleChanges] = {}
    if table.num_rows == 0:
        return out
    nicks = table.column("tablenick")
    unique = pc.unique(nicks).to_pylist()
    for nick in unique:
        part = table if len(unique) == 1 else table.filter(pc.equal(nicks, nick))
        out[int(nick)] = ArticleChanges(int(nick), *(part.column(n).to_pylist()
                                                     for n in ("rowguid", "op", "lineage", "colv", "row")))
    return out

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
_PLAIN = {Kind.SMALLINT: int, Kind.INTEGER: int, Kind.BIGINT: int, Kind.TEXT: str}
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class RowCodec:
    """One article's rows to and from the change JSON, with each column's converter built once.

    The JSON is strict (no NaN/Infinity literals), so either database's JSON functions can read it:
    the set-based apply (``merge/staging.py``) extracts values from it in SQL.
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

    def decode(self, text: str | None, partial: bool = False) -> dict[str, Any] | None:
        """JSON text -> {column: value}; ``partial``: only the columns the JSON has (a compact before image)."""
        if text is None:
            return None
        raw = json.loads(text)
        out: dict[str, Any] = {}
        for name, t, plain, conv in self._enc:
            if partial and name not in raw:
                continue
            v = raw.get(name)
            if v is None:
                out[name] = None
            elif plain is not None and type(v) is plain:
                out[name] = v
            elif t.kind is Kind.BYTES:
                out[name] = base64.b64decode(v)
            elif t.kind in (Kind.REAL, Kind.DOUBLE) and isinstance(v, str):
                out[name] = float(v)
            else:
                out[name] = conv(v)
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
