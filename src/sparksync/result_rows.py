"""Result rows of the apply tasks (``mapInArrow``): one Spark DDL string (``name TYPE, ...``) gives
Spark the output schema, the tasks their Arrow schema, and both the column names. Besides the plain
types, a column may be an ``ARRAY<...>`` or a ``STRUCT<name: TYPE, ...>`` of them: a task writes such a
value as a list or a dict, and the driver reads it back the same way (``Row.asDict(recursive=True)``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, get_args

_ARROW_TYPES = {"STRING": "string", "INT": "int32", "BIGINT": "int64", "DOUBLE": "float64", "BOOLEAN": "bool_"}
_SPARK_TYPES: dict[Any, str] = {str: "STRING", int: "BIGINT", float: "DOUBLE", bool: "BOOLEAN"}
ERROR_TYPE = "STRUCT<code: STRING, message: STRING, object: STRING, transient: BOOLEAN>"   # ErrorInfo.to_dict()


def spark_struct(fields: Mapping[str, Any]) -> str:
    """``STRUCT<name: TYPE, ...>`` of fields given with their declared Python types (``str``, ``int``,
    ``float``, ``bool``, or one of them ``| None``), e.g. a TypedDict's ``get_type_hints``."""
    def spark_type(t: Any) -> str:
        args = [a for a in get_args(t) if a is not type(None)]
        return _SPARK_TYPES[args[0] if args else t]

    return "STRUCT<" + ", ".join(f"{name}: {spark_type(t)}" for name, t in fields.items()) + ">"


def _split(text: str) -> list[str]:
    """``text`` cut at its commas outside angle brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _fields(ddl: str) -> list[tuple[str, str]]:
    out = []
    for part in _split(ddl):
        name, kind = part.split(None, 1)
        out.append((name.rstrip(":"), kind.strip()))
    return out


def _arrow_type(kind: str):
    import pyarrow as pa

    upper = kind.upper()
    if upper.startswith("ARRAY<") and upper.endswith(">"):
        return pa.list_(_arrow_type(kind[len("ARRAY<"):-1].strip()))
    if upper.startswith("STRUCT<") and upper.endswith(">"):
        return pa.struct([(name, _arrow_type(t)) for name, t in _fields(kind[len("STRUCT<"):-1])])
    return getattr(pa, _ARROW_TYPES[upper])()


def result_columns(ddl: str) -> list[str]:
    return [name for name, _ in _fields(ddl)]


@functools.cache
def result_arrow_schema(ddl: str):
    import pyarrow as pa

    return pa.schema([(name, _arrow_type(t)) for name, t in _fields(ddl)])


def result_mapper(run: Callable[[Any], Iterable[dict]], ddl: str):
    """The function for ``mapInArrow``: the result rows ``run(batches)`` gives, as one Arrow batch of
    ``ddl``'s schema (nothing when it gives none)."""

    def mapper(batches):
        import pyarrow as pa

        rows = list(run(batches))
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=result_arrow_schema(ddl))

    return mapper
