"""Result rows of the apply tasks (``mapInArrow``): one Spark DDL string (``name TYPE, ...``) gives
Spark the output schema, the tasks their Arrow schema, and both the column names."""

from __future__ import annotations

_ARROW_TYPES = {"STRING": "string", "INT": "int32", "BIGINT": "int64", "DOUBLE": "float64"}


def _fields(ddl: str) -> list[tuple[str, str]]:
    return [(name, kind) for name, kind in (c.split() for c in ddl.split(", "))]


def result_columns(ddl: str) -> list[str]:
    return [name for name, _ in _fields(ddl)]


def result_arrow_schema(ddl: str):
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, _ARROW_TYPES[t])()) for name, t in _fields(ddl)])
