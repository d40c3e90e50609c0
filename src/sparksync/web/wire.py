"""What the device and the door send each other.

Changes travel as an Arrow IPC stream of change rows (``merge.session.changes.CHANGE_SCHEMA``, the rows
the merge agent's reads produce), compressed with zstd; everything else is JSON. An upload is checked
here, at the door, before anything is written (:func:`read_upload`): the exact schema, known articles,
generations inside the range the request names, operations, rowguids, lineage and every row's columns.
What the device says about *who* sent the changes (source, nickname, partition) is not read from the
body: the door fills in what it knows of the authenticated subscription.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from sparksync.errors import ProtocolError
from sparksync.merge.session.changes import ALL_PARTITIONS, CHANGE_SCHEMA, OP_UNREADABLE, RETRY_GENERATION
from sparksync.rows import RowCodec
from sparksync.spark.results import result_arrow_schema

PROTOCOL = 1                 # the version of this protocol; a device that speaks an older one is refused (426)
MEDIA_ARROW = "application/vnd.apache.arrow.stream"
OPS = frozenset({"upsert", "delete", OP_UNREADABLE})
MAX_RETRIES = 10_000         # failed changes one request sends again (the rest at the next sync)


def change_schema():
    return result_arrow_schema(CHANGE_SCHEMA)


def write_changes(table, metadata: dict[str, Any] | None = None) -> bytes:
    """An Arrow table of change rows as the bytes of one IPC stream (zstd), ``metadata`` in its schema."""
    import pyarrow as pa

    schema = change_schema().with_metadata({"sparksync": json.dumps(metadata or {})})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        if table.num_rows:
            w.write_table(table.cast(change_schema()).replace_schema_metadata(schema.metadata))
    return sink.getvalue().to_pybytes()


def read_changes(body: bytes, what: str):
    """(table, metadata) of an IPC stream of change rows; ``ProtocolError`` naming ``what`` when the bytes
    are not one (truncated, another format) or hold other columns."""
    import pyarrow as pa

    try:
        reader = pa.ipc.open_stream(pa.BufferReader(body))
        table = reader.read_all()
    except (pa.ArrowInvalid, pa.ArrowException, OSError, ValueError) as e:
        raise ProtocolError(f"{what}: not an Arrow stream of changes ({' '.join(str(e).split())[:200]})",
                            obj=what) from None
    expected = change_schema()
    got = [(f.name, str(f.type)) for f in table.schema]
    want = [(f.name, str(f.type)) for f in expected]
    if got != want:
        missing = [n for n, _ in want if n not in dict(got)]
        extra = [n for n, _ in got if n not in dict(want)]
        detail = "; ".join(x for x in (f"missing column(s) {', '.join(missing)}" if missing else "",
                                       f"unknown column(s) {', '.join(extra)}" if extra else "") if x) \
            or "column types differ"
        raise ProtocolError(f"{what}: not the change schema ({detail})", obj=what)
    raw = (table.schema.metadata or {}).get(b"sparksync", b"{}")
    try:
        meta = json.loads(raw)
    except ValueError:
        raise ProtocolError(f"{what}: its metadata is not JSON", obj=what) from None
    return table, meta if isinstance(meta, dict) else {}


@dataclass(frozen=True)
class UploadArticle:
    """What the door checks an uploaded change of one article against."""

    nickname: int
    name: str
    codec: RowCodec


def check_upload(table, articles: dict[int, UploadArticle], lo: int, hi: int, source: str, source_nick: int,
                 partition_id: int, what: str, retries: frozenset[tuple[int, str]] = frozenset()):
    """An uploaded table of changes, checked row by row, with the sender's identity filled in by the
    door (never the body's). A change of generation ``RETRY_GENERATION`` is a change that failed at the
    publisher before, sent again: only those the publisher asked for (``retries``: (tablenick, rowguid)).
    Raises ``ProtocolError`` for the first problem, naming the row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    if n == 0:
        return table
    nicks = table.column("tablenick").to_pylist()
    gens = table.column("generation").to_pylist()
    ops = table.column("op").to_pylist()
    guids = table.column("rowguid").to_pylist()
    lineages = table.column("lineage").to_pylist()
    colvs = table.column("colv").to_pylist()
    rows = table.column("row").to_pylist()
    for i in range(n):
        where = f"{what}, change {i + 1}"
        art = articles.get(nicks[i]) if nicks[i] is not None else None
        if art is None:
            raise ProtocolError(f"{where}: article nickname {nicks[i]} is not an article of this publication", obj=what)
        g = gens[i]
        if g == RETRY_GENERATION:
            if (nicks[i], str(guids[i])) not in retries:
                raise ProtocolError(f"{where}: a change sent again that the publisher did not ask for (row "
                                    f"{str(guids[i])[:40]})", obj=what)
        elif g is None or not lo < g <= hi:
            raise ProtocolError(f"{where}: generation {g} is outside the upload's range ({lo}, {hi}]", obj=what)
        if ops[i] not in OPS:
            raise ProtocolError(f"{where}: unknown operation {ops[i]!r}", obj=what)
        try:
            uuid.UUID(str(guids[i]))
        except ValueError:
            raise ProtocolError(f"{where}: rowguid {str(guids[i])[:40]!r} is not a GUID", obj=what) from None
        _check_lineage(lineages[i], f"{where}: lineage")
        if colvs[i] is not None:
            _json(colvs[i], f"{where}: colv", dict)
        if ops[i] == "upsert":
            _check_row(rows[i], art, f"{where} ({art.name})")
    return table.set_column(table.schema.get_field_index("source"), "source", pa.array([source] * n, pa.string())) \
        .set_column(table.schema.get_field_index("source_nick"), "source_nick", pa.array([source_nick] * n, pa.int32())) \
        .set_column(table.schema.get_field_index("target"), "target", pa.nulls(n, pa.string())) \
        .set_column(table.schema.get_field_index("partition_id"), "partition_id",
                    pc.cast(pa.array([partition_id or ALL_PARTITIONS] * n), pa.int32()))


def _json(text: Any, where: str, kind: type) -> Any:
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        value = None
    if not isinstance(value, kind):
        raise ProtocolError(f"{where}: not a JSON {'object' if kind is dict else kind.__name__}", obj=where)
    return value


def _check_lineage(text: Any, where: str) -> None:
    value = _json(text, where, dict)
    for k, v in value.items():
        if not (str(k).isdigit() and isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            raise ProtocolError(f"{where}: entry {str(k)[:20]!r}: {str(v)[:20]!r} is not nickname: version", obj=where)


def _check_row(text: Any, art: UploadArticle, where: str) -> None:
    value = _json(text, f"{where}: row", dict)
    known = {name for name, _ in art.codec.columns}
    extra = sorted(str(k) for k in value if k not in known)
    if extra:
        raise ProtocolError(f"{where}: column(s) {', '.join(repr(x[:64]) for x in extra[:5])} not in the article",
                            obj=art.name)
    try:
        art.codec.decode(text)
    except (ValueError, TypeError, ArithmeticError) as e:
        raise ProtocolError(f"{where}: a value cannot be read ({' '.join(str(e).split())[:200]})", obj=art.name) from None
