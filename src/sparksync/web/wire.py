"""What the device and the door send each other.

Changes travel as an Arrow IPC stream of change rows (the rows the merge agent's reads produce,
``merge.session.changes.CHANGE_SCHEMA``, without what the receiver knows: ``WIRE_COLUMNS``), the whole
stream compressed with zstd behind a small header (``MAGIC``, its size); everything else is JSON. An upload
is checked here, at the door, before anything is written (:func:`check_upload`): the exact schema, known articles,
generations inside the range the request names, operations, rowguids, lineage and every row's columns.
What the device says about *who* sent the changes (source, nickname, partition) is not read from the
body: the door fills in what it knows of the authenticated subscription.
"""

from __future__ import annotations

import json
import struct
import uuid
from dataclasses import dataclass
from typing import Any

from sparksync.errors import ProtocolError
from sparksync.merge.session.changes import ALL_PARTITIONS, CHANGE_SCHEMA, OP_REMOVE, OP_UNREADABLE, RETRY_GENERATION
from sparksync.rows import RowCodec
from sparksync.spark.results import result_arrow_schema

PROTOCOL = 1                 # the version of this protocol; a device that speaks an older one is refused (426)
MEDIA_ARROW = "application/vnd.apache.arrow.stream"
OPS = frozenset({"upsert", "delete", OP_UNREADABLE})
MAX_RETRIES = 10_000         # failed changes one request sends again (the rest at the next sync)
MAGIC = b"SSW1"              # a body of changes: this, its stream's size (8 bytes), the zstd-compressed stream
MAX_STREAM = 1 << 30         # the largest stream a body may unpack to (a small body cannot claim more)


def change_schema():
    """The change rows as the apply reads them (``CHANGE_SCHEMA``)."""
    return result_arrow_schema(CHANGE_SCHEMA)


# On the wire, a change row carries only what the receiver cannot know: who sent it is the sender's (the
# stream's metadata: the door's own knowledge of an upload's sender), which destination and partition it
# is for were settled by the sender. A row's values repeat its rowguid (the rowguid column): the copy is
# left out (``guid_in_row``) and put back on arrival, text for text.
WIRE_COLUMNS = (("tablenick", "int32"), ("rowguid", "string"), ("generation", "int64"), ("op", "int8"),
                ("lineage", "string"), ("colv", "string"), ("row", "string"), ("guid_in_row", "bool_"))
OP_CODES = {"upsert": 0, "delete": 1, OP_UNREADABLE: 2, OP_REMOVE: 3}
_OPS_BY_CODE = {v: k for k, v in OP_CODES.items()}
_MARK = '"\\u0001"'        # where the rowguid stood in a row's JSON (JSON text of the string "\x01")


def wire_schema():
    import pyarrow as pa

    return pa.schema([(n, getattr(pa, t)()) for n, t in WIRE_COLUMNS])


def write_changes(table, metadata: dict[str, Any] | None = None) -> bytes:
    """Change rows (``change_schema``) as the bytes of one Arrow IPC stream (zstd), ``metadata`` in its schema."""
    import pyarrow as pa

    schema = wire_schema().with_metadata({"sparksync": json.dumps(metadata or {})})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as w:
        if table.num_rows:
            w.write_table(_to_wire(table).replace_schema_metadata(schema.metadata))
    stream = sink.getvalue()
    # one zstd frame over the whole stream: its schema and framing compress too (a third smaller than
    # compressing each buffer when a sync carries tens of rows)
    return MAGIC + struct.pack("<Q", stream.size) + pa.compress(stream, codec="zstd", asbytes=True)


def _to_wire(table):
    import pyarrow as pa

    guids = table.column("rowguid").to_pylist()
    rows, inside = [], []
    for g, text in zip(guids, table.column("row").to_pylist()):
        quoted = f'"{g}"'
        if text is not None and quoted in text and _MARK not in text:
            rows.append(text.replace(quoted, _MARK, 1))
            inside.append(True)
        else:
            rows.append(text)
            inside.append(False)
    ops = [OP_CODES[o] for o in table.column("op").to_pylist()]
    return pa.table([table.column("tablenick").cast(pa.int32()), pa.array(guids, pa.string()),
                     table.column("generation").cast(pa.int64()), pa.array(ops, pa.int8()),
                     table.column("lineage"), table.column("colv"), pa.array(rows, pa.string()),
                     pa.array(inside, pa.bool_())], schema=wire_schema())


def read_changes(body: bytes, what: str):
    """(change rows as ``change_schema``, metadata) of an IPC stream of changes; ``ProtocolError`` naming
    ``what`` when the bytes are not one (truncated, another format) or hold other columns. The sender's
    name and nickname come from the metadata (the door replaces them with what it knows)."""
    import pyarrow as pa

    try:
        if body[:len(MAGIC)] != MAGIC or len(body) < len(MAGIC) + 8:
            raise ValueError("it does not start with this protocol's header")
        (size,) = struct.unpack("<Q", body[len(MAGIC):len(MAGIC) + 8])
        if size > MAX_STREAM:
            raise ValueError(f"it says it holds {size:,} bytes, more than {MAX_STREAM:,}")
        stream = pa.decompress(body[len(MAGIC) + 8:], decompressed_size=size, codec="zstd")
        reader = pa.ipc.open_stream(pa.BufferReader(stream))
        table = reader.read_all()
        table.validate(full=True)            # offsets, UTF-8: a forged buffer is refused here, not later
        got = [(f.name, str(f.type)) for f in table.schema]
    except (pa.ArrowException, OSError, ValueError) as e:     # UnicodeDecodeError is a ValueError
        raise ProtocolError(f"{what}: not an Arrow stream of changes ({' '.join(str(e).split())[:200]})",
                            obj=what) from None
    want = [(f.name, str(f.type)) for f in wire_schema()]
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
    meta = meta if isinstance(meta, dict) else {}
    return _from_wire(table, meta, what), meta


def _from_wire(table, meta: dict, what: str):
    import pyarrow as pa

    n = table.num_rows
    guids = table.column("rowguid").to_pylist()
    rows = []
    for g, text, inside in zip(guids, table.column("row").to_pylist(), table.column("guid_in_row").to_pylist()):
        if inside:
            if text is None or _MARK not in text or g is None:
                raise ProtocolError(f"{what}: a row says its rowguid is in its values, and it is not", obj=what)
            text = text.replace(_MARK, f'"{g}"', 1)
        rows.append(text)
    ops = []
    for code in table.column("op").to_pylist():
        if code not in _OPS_BY_CODE:
            raise ProtocolError(f"{what}: unknown operation {code!r}", obj=what)
        ops.append(_OPS_BY_CODE[code])
    source, nick = meta.get("source"), meta.get("source_nick")
    return pa.table({
        "source": pa.array([str(source or "")] * n, pa.string()),
        "source_nick": pa.array([int(nick) if isinstance(nick, int) else 0] * n, pa.int32()),
        "tablenick": table.column("tablenick"), "rowguid": pa.array(guids, pa.string()),
        "generation": table.column("generation"), "op": pa.array(ops, pa.string()),
        "lineage": table.column("lineage"), "colv": table.column("colv"), "row": pa.array(rows, pa.string()),
        "target": pa.nulls(n, pa.string()), "partition_id": pa.array([ALL_PARTITIONS] * n, pa.int32()),
    }, schema=change_schema())


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
