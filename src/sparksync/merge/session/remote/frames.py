"""What the device and the door send each other.

Changes travel as frames: the frame's metadata (JSON, its length first) and an Arrow IPC stream of change
rows (the rows the merge agent's reads produce, ``merge.session.changes.CHANGE_SCHEMA``, without what the
receiver knows: ``WIRE_COLUMNS``) whose schema message is left out (both ends know the wire schema of their
protocol), compressed together with zstd behind a small header (``MAGIC``, the payload's size, the
compressed size); everything else is JSON. An upload is one frame; a download is its own frame followed by
the frames of the partition feed's segments (``feed.py``), sent as they were written. An upload
is checked here, at the door, before anything is written (:func:`check_upload`): the exact schema, known articles,
generations inside the range the request names, operations, rowguids, lineage and every row's columns.
What the device says about *who* sent the changes (source, nickname, partition) is not read from the
body: the door fills in what it knows of the authenticated subscription.
"""

from __future__ import annotations

import functools
import json
import struct
import uuid
from dataclasses import dataclass
from typing import Any

from sparksync.errors import ProtocolError, RequestTooLarge
from sparksync.merge.session.changes import ALL_PARTITIONS, CHANGE_SCHEMA, OP_REMOVE, OP_UNREADABLE, RETRY_GENERATION
from sparksync.result_rows import result_arrow_schema
from sparksync.rows import RowCodec

MEDIA_ARROW = "application/vnd.apache.arrow.stream"
OPS = frozenset({"upsert", "delete", OP_UNREADABLE})
MAGIC = b"SSW2"              # a frame of changes: this, its payload's size and the compressed size (8 bytes each),
HEADER = struct.Struct("<QQ")  # then the zstd-compressed payload: metadata length (4 bytes), metadata, stream
META = struct.Struct("<I")
MAX_STREAM = 1 << 30         # the largest stream a body may unpack to, all its frames (a small body cannot claim more)
FRAME_ROWS = 65_536          # the most rows of one record batch of a frame: what a reader holds at once (spooled.py)


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
_OP_NAMES = [_OPS_BY_CODE[i] for i in range(len(OP_CODES))]     # by code: the codes are 0, 1, ...
_END = b"\xff\xff\xff\xff\x00\x00\x00\x00"      # an Arrow IPC stream's end-of-stream marker
_MARK = '"\\u0001"'        # where the rowguid stood in a row's JSON (JSON text of the string "\x01")


def wire_schema():
    import pyarrow as pa

    return pa.schema([(n, getattr(pa, t)()) for n, t in WIRE_COLUMNS])


@functools.cache
def _schema_message() -> bytes:
    """The IPC message of the wire schema, which begins every stream of it and is left out of a frame."""
    return wire_schema().serialize().to_pybytes()


def write_changes(table, metadata: dict[str, Any] | None = None, order=None) -> bytes:
    """Change rows (``change_schema``; None: none) and ``metadata`` as the bytes of one frame; ``order``: the rows'
    order (indices into ``table``). The rows go to the wire ``FRAME_ROWS`` at a time, each record batch compressed
    as it is made (one zstd frame over the metadata and the stream: its framing compresses too, a third smaller than
    compressing each buffer when a sync carries tens of rows), so what a frame of a million rows holds at once is
    its compressed bytes and one record batch, never a sorted copy of its rows or their whole stream unpacked."""
    import pyarrow as pa

    out = pa.BufferOutputStream()
    packed = pa.CompressedOutputStream(out, "zstd")
    meta = json.dumps(metadata or {}, separators=(",", ":")).encode()
    packed.write(META.pack(len(meta)) + meta)
    # the stream without its schema message (both ends know it): its record batches' messages, then its end
    for start in range(0, table.num_rows if table is not None else 0, FRAME_ROWS):
        rows = table.slice(start, FRAME_ROWS) if order is None else table.take(order.slice(start, FRAME_ROWS))
        for batch in _to_wire(rows).to_batches(max_chunksize=FRAME_ROWS):
            packed.write(batch.serialize())
    packed.write(_END)
    size = packed.tell()
    packed.close()
    data = out.getvalue()
    return MAGIC + HEADER.pack(size, data.size) + data.to_pybytes()


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


def read_changes(body: bytes, what: str, limit: int = MAX_STREAM):
    """(change rows as ``change_schema``, metadata) of a body of one frame or more (their rows in order, the
    first frame's metadata); ``ProtocolError`` naming ``what`` when the bytes are not frames of changes
    (truncated, another format, other columns), ``RequestTooLarge`` when they say they unpack to more than
    ``limit`` bytes. The sender's name and nickname come from the metadata (the door replaces them with
    what it knows)."""
    import pyarrow as pa

    frames = read_frames(body, what, limit)
    table = frames[0][0] if len(frames) == 1 else pa.concat_tables([t for t, _ in frames])
    return table, frames[0][1]


def read_frames(body: bytes, what: str, limit: int = MAX_STREAM) -> list[tuple[Any, dict]]:
    """Each frame of ``body``: (its change rows as ``change_schema``, its metadata). Every frame's header
    says what its payload unpacks to: a body whose frames say more than ``limit`` bytes in all is refused
    before anything is unpacked, and a frame is unpacked into exactly the size it said (a payload that
    unpacks to more is refused), so a small body never takes more memory than ``limit``."""
    frames: list[tuple[Any, dict]] = []
    at = total = 0
    view = memoryview(body)
    while True:
        head = len(MAGIC) + HEADER.size
        if bytes(view[at:at + len(MAGIC)]) != MAGIC or len(body) < at + head:
            where = "it does not start" if at == 0 else f"frame {len(frames) + 1} does not start"
            raise ProtocolError(f"{what}: not frames of changes ({where} with this protocol's header)", obj=what)
        size, packed = HEADER.unpack(view[at + len(MAGIC):at + head])
        total += size
        if total > limit:
            raise RequestTooLarge(f"{what}: its frames say they unpack to more than {limit:,} bytes, more than "
                                  "this side takes at once (the server's max_request_mb); send fewer generations "
                                  "per request", obj=what)
        if len(body) < at + head + packed:
            raise ProtocolError(f"{what}: not frames of changes (frame {len(frames) + 1} is truncated: "
                                f"{len(body) - at - head:,} of {packed:,} bytes)", obj=what)
        frames.append(_read_frame(view[at + head:at + head + packed], size, what))
        at += head + packed
        if at == len(body):
            return frames


def _read_frame(packed, size: int, what: str) -> tuple[Any, dict]:
    import pyarrow as pa

    try:
        payload = pa.decompress(packed, decompressed_size=size, codec="zstd", asbytes=True)
        if len(payload) < META.size:
            raise ValueError("its payload is shorter than its metadata's length")
        (n,) = META.unpack(payload[:META.size])
        if META.size + n > len(payload):
            raise ValueError("its metadata is longer than its payload")
        raw = payload[META.size:META.size + n]
        reader = pa.ipc.open_stream(pa.BufferReader(_schema_message() + payload[META.size + n:]))
        table = reader.read_all()
        table.validate(full=True)            # offsets, UTF-8: a forged buffer is refused here, not later
    except (pa.ArrowException, OSError, ValueError) as e:     # UnicodeDecodeError is a ValueError
        raise not_arrow(what, e) from None
    meta = metadata_of(raw, what)
    return from_wire(table, meta, what), meta


def not_arrow(what: str, e: Exception) -> ProtocolError:
    """The error of a frame whose payload is not the Arrow stream of change rows it says (``e``: why)."""
    return ProtocolError(f"{what}: not an Arrow stream of changes ({' '.join(str(e).split())[:200]})", obj=what)


def metadata_of(raw: bytes, what: str) -> dict:
    """A frame's metadata from its JSON text (none, or JSON that is not an object: {})."""
    try:
        meta = json.loads(raw) if raw else {}
    except ValueError:
        raise ProtocolError(f"{what}: its metadata is not JSON", obj=what) from None
    return meta if isinstance(meta, dict) else {}


def from_wire(table, meta: dict, what: str):
    """A frame's wire rows as change rows: each row's rowguid put back where its values had it, each operation
    named, the sender's name and nickname from the metadata. Column by column, in Arrow: tens of thousands of
    rows make no Python object each."""
    import pyarrow as pa

    n = table.num_rows
    table = table.combine_chunks()
    rows = _rows_with_guids(table, what)
    ops = _operations(table, what)
    source, nick = meta.get("source"), meta.get("source_nick")
    return pa.table({
        "source": pa.repeat(pa.scalar(str(source or ""), pa.string()), n),
        "source_nick": pa.repeat(pa.scalar(int(nick) if isinstance(nick, int) else 0, pa.int32()), n),
        "tablenick": table.column("tablenick"), "rowguid": table.column("rowguid"),
        "generation": table.column("generation"), "op": ops,
        "lineage": table.column("lineage"), "colv": table.column("colv"), "row": rows,
        "target": pa.nulls(n, pa.string()), "partition_id": pa.repeat(pa.scalar(ALL_PARTITIONS, pa.int32()), n),
    }, schema=change_schema())


def _rows_with_guids(table, what: str):
    """The ``row`` column with each row's rowguid back where ``guid_in_row`` says its values had it (the first
    ``_MARK`` of its text, quoted as JSON); ``ProtocolError`` when a row says so and has no mark (or no text, or
    no rowguid)."""
    import pyarrow.compute as pc

    rows, guids = table.column("row"), table.column("rowguid")
    inside = pc.fill_null(table.column("guid_in_row"), False)
    if not pc.any(inside).as_py():
        return rows
    texts, mine = rows.filter(inside), guids.filter(inside)
    marked = pc.and_(pc.and_(texts.is_valid(), mine.is_valid()), pc.fill_null(pc.match_substring(texts, _MARK), False))
    if not pc.all(marked).as_py():
        raise ProtocolError(f"{what}: a row says its rowguid is in its values, and it is not", obj=what)
    around = pc.split_pattern(texts, _MARK, max_splits=1)
    put_back = pc.binary_join_element_wise(pc.list_element(around, 0), '"', mine, '"', pc.list_element(around, 1), "")
    return pc.replace_with_mask(rows.combine_chunks(), inside.combine_chunks(), put_back.combine_chunks())


def _operations(table, what: str):
    """The ``op`` column's codes as operation names (``OP_CODES``); ``ProtocolError`` naming the first unknown one."""
    import pyarrow as pa
    import pyarrow.compute as pc

    codes = table.column("op")
    if not pc.all(pc.is_in(codes, value_set=pa.array(list(_OPS_BY_CODE), pa.int8())), min_count=0).as_py():
        code = next(c for c in codes.to_pylist() if c not in _OPS_BY_CODE)
        raise ProtocolError(f"{what}: unknown operation {code!r}", obj=what)
    return pc.take(pa.array(_OP_NAMES, pa.string()), codes)


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
    # a delete carries no column versions: a device's never pass as the agent's compensating deletes (which a
    # business logic handler is not given, changes.COMPENSATING_COLV)
    table = table.set_column(table.schema.get_field_index("colv"), "colv", pa.array(
        [None if op == "delete" else c for op, c in zip(ops, colvs)], table.schema.field("colv").type))
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
    """A lineage is an object of replica nickname: number; a number a lineage may not hold (negative, fractional,
    past ``lineage.MAX_VERSION``) is a claim, refused by the apply as a failed change of that row
    (``lineage.out_of_range``), never a refusal of the whole upload."""
    value = _json(text, where, dict)
    for k, v in value.items():
        if not (str(k).isdigit() and isinstance(v, int | float) and not isinstance(v, bool)):
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
