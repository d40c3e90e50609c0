"""Changes as data: the uniform shape every enumerated change has on its way through Spark.

One row per change, whatever the article: the row's values travel as JSON (typed by the article's
schema on both ends, so decimals, timestamps and bytes survive exactly).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Sequence
from typing import Any

from ..types import Kind, SqlType, arrow_converter

CHANGE_COLUMNS = ["source", "source_nick", "tablenick", "rowguid", "generation", "op", "lineage", "colv", "row",
                  "target"]
CHANGE_SCHEMA = ("source STRING, source_nick INT, tablenick INT, rowguid STRING, generation BIGINT, op STRING, "
                 "lineage STRING, colv STRING, row STRING, target STRING")
RETRY_GENERATION = -1   # changes re-read for one destination (failed before) travel under this generation


def _jsonable(v: Any, t: SqlType) -> Any:
    if v is None:
        return None
    if t.kind is Kind.BYTES:
        return base64.b64encode(v).decode("ascii")
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    return v


def encode_row(values: Sequence[Any], columns: Sequence[tuple[str, SqlType]]) -> str:
    """Driver values -> JSON text, normalized through each column's logical type."""
    out = {}
    for (name, t), v in zip(columns, values):
        out[name] = _jsonable(arrow_converter(t)(v), t)
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False)


def decode_row(text: str | None, columns: Sequence[tuple[str, SqlType]]) -> dict[str, Any] | None:
    """JSON text -> {column: Python value of the column's logical type}."""
    if text is None:
        return None
    raw = json.loads(text)
    out: dict[str, Any] = {}
    for name, t in columns:
        v = raw.get(name)
        if v is None:
            out[name] = None
        elif t.kind is Kind.BYTES:
            out[name] = base64.b64decode(v)
        else:
            out[name] = arrow_converter(t)(v)
    return out


def json_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        return value if isinstance(value, str) else value.decode()
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
