"""Loading the merge apply's typed staging table (``merge/apply/staging.py``) with COPY; and the
transactional apply's, whose lines are the publisher's log text, already escaped (``copy_text_lines``).

Binary COPY when every staged column is of a type whose binary form a Python value of the row-at-a-time
path maps to one to one (integers, text, numeric, float8, boolean, date, timestamp, bytea, uuid): no
text is formatted or parsed for them. Any other type (timestamptz, time, float4, json, an enum, a
domain...) and the batch goes through text COPY, where the server reads every value with the column's
own input function, as it reads a bound parameter.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from sparksync.errors import SparksyncError, ValueRejected

# pg_type oids of article columns whose binary form a decoded value maps to exactly
_BINARY = frozenset({16, 17, 20, 21, 23, 25, 701, 1043, 1082, 1114, 1700})
# integer types: a binary COPY writes a value out of range wrapped around, where text input refuses it
_INT_RANGE = {21: 1 << 15, 23: 1 << 31, 20: 1 << 63}
_UUID, _JSONB = 2950, 3802


@functools.cache
def _meta_dumpers():
    """Binary dumpers of the staging table's rowguid (uuid) and lineage / colv (jsonb) as the changes
    carry them: text."""
    from psycopg import pq
    from psycopg.adapt import Dumper

    class UuidText(Dumper):
        format = pq.Format.BINARY
        oid = _UUID

        def dump(self, obj: Any) -> bytes:
            return obj.bytes if hasattr(obj, "bytes") else bytes.fromhex(str(obj).replace("-", ""))

    class JsonbText(Dumper):
        format = pq.Format.BINARY
        oid = _JSONB

        def dump(self, obj: Any) -> bytes:
            return b"\x01" + obj.encode()       # jsonb's binary form: version 1, then the text

    return UuidText, JsonbText


def copies_binary(types: Sequence[int], rows: Sequence[Sequence[Any]] = (), first: int = 0) -> bool:
    """Are ``rows`` whose columns from ``first`` on are of ``types`` (pg_type oids) staged by binary COPY?
    Not when an integer is out of its column's range: text COPY refuses it, as a bound parameter is."""
    if not all(t in _BINARY for t in types):
        return False
    for i, t in enumerate(types):
        bound = _INT_RANGE.get(t)
        if bound is not None and rows:
            values = [v for v in (r[first + i] for r in rows) if v is not None]
            if values and (min(values) < -bound or max(values) >= bound):
                return False
    return True


def load_staging(replica, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], meta: int,
                 translate: Callable[[Exception], Exception]) -> None:
    """COPY ``rows`` into ``columns`` of the staging table ``table``; the first ``meta`` columns are the
    staging table's own (rowguid, op, lineage, colv: text as the changes carry them)."""
    names = [c.strip('"') for c in columns]
    try:
        oids = dict(replica.query(
            "SELECT attname, atttypid::int FROM pg_catalog.pg_attribute WHERE attrelid = %s::regclass "
            "AND attnum > 0 AND NOT attisdropped", [table]))
        types = [oids[n] for n in names]
        binary = copies_binary(types[meta:], rows, meta)
        with replica.raw.cursor() as cur:
            fmt = ""
            if binary:
                for dumper in _meta_dumpers():
                    cur.adapters.register_dumper(None, dumper)   # by oid only: COPY after set_types
                fmt = " (FORMAT BINARY)"
            with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN{fmt}") as copy:
                if binary:
                    copy.set_types(types)
                for r in rows:
                    copy.write_row(r)
    except SparksyncError:
        raise
    except (ValueError, TypeError, OverflowError, ArithmeticError) as exc:
        # a value the binary form cannot carry, found before it reached the server: the batch is
        # refused as a value would be, and its changes go one at a time, bound as parameters
        raise ValueRejected(f"{replica.label}: stage changes: {exc}") from exc
    except Exception as exc:  # noqa: BLE001
        raise translate(exc) from exc


def copy_text_lines(replica, table: str, columns: Sequence[str], lines) -> None:
    """Lines of COPY's text format (fields escaped) into ``table``, written in chunks."""
    d = replica.dialect
    try:
        with replica.raw.cursor() as cur:
            with cur.copy(f"COPY {table} ({', '.join(d.quote(c) for c in columns)}) FROM STDIN") as copy:
                chunk: list[bytes] = []
                for line in lines:
                    chunk.append(line)
                    if len(chunk) >= 2_000:
                        copy.write(b"".join(chunk))
                        chunk = []
                if chunk:
                    copy.write(b"".join(chunk))
    except SparksyncError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise d.translate_error(exc, f"{replica.label}: load {table}") from exc
