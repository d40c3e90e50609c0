"""Changes as data: the uniform shape every enumerated change has on its way through Spark.

One row per change, whatever the article: the row's values travel as JSON (``rows.RowCodec``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from sparksync import failpoints
from sparksync.dialects import connect
from sparksync.errors import ErrorInfo
from sparksync.redaction import redact
from sparksync.rows import RowCodec, diagnose_row, json_text, row_key
from sparksync.spark.reads import ReadPartition
from sparksync.types import SqlType

if TYPE_CHECKING:
    from sparksync.spark.reads import ReadPartition

FETCH_ROWS = 10_000
READER = "sparksync.merge.session.changes:read_changes"      # ReadPartition.reader of change reads
CHANGE_COLUMNS = ["source", "source_nick", "tablenick", "rowguid", "generation", "op", "lineage", "colv", "row",
                  "target", "partition_id"]
CHANGE_SCHEMA = ("source STRING, source_nick INT, tablenick INT, rowguid STRING, generation BIGINT, op STRING, "
                 "lineage STRING, colv STRING, row STRING, target STRING, partition_id INT")
ALL_PARTITIONS = 0      # ``partition_id`` of a change every destination gets (unfiltered articles, uploads)
RETRY_GENERATION = -1   # changes re-read for one destination (failed before) travel under this generation
REMOVE_GENERATION = -3  # rows that left a partition (``OP_REMOVE``) travel under this generation
REALIGN_GENERATION = 1 << 62   # SetupBelongs: descendants of changed rows, applied in a destination's last batch
OP_REMOVE = "remove"    # a row that left the destination's partition: removed there, not deleted everywhere
READ_ERROR_GENERATION = -2   # a read that failed at its source: one "error" row (op), its ErrorInfo in ``row``
OP_UNREADABLE = "unreadable"   # a row its source cannot encode (a value that does not fit its column's type,
                               # invalid UTF-8): ``row`` says which column and why; a failed change of its own
OP_ERROR = "error"
# A delete the agent made to undo a change it could not apply (``compensate_for_errors``: a tombstone of type 6,
# SQL Server's system delete) travels with these column versions, which no delete otherwise has: where it is
# applied it is not given to a business logic handler (it is the agent's own write). A device's uploads never
# carry it (the door drops it): a device cannot make its deletes pass a handler by.
COMPENSATING_COLV = '{"~compensating":6}'


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

    def repeats(self, exclude: set[int] | frozenset[int] = frozenset()) -> tuple[list[int] | None, list[int]]:
        """Positions of each row's first change (None: every row once) and of later changes of the
        same row (a retried change and its newer version can meet in one batch), leaving out the
        positions in ``exclude`` (``first`` then maps each rowguid to its first position left)."""
        if exclude:
            self.first = {}
            for i in range(len(self.rowguid) - 1, -1, -1):
                if i not in exclude:
                    self.first[self.rowguid[i]] = i
        elif len(self.first) == len(self.rowguid):
            return None, []
        firsts = set(self.first.values())
        return sorted(firsts), [i for i in range(len(self.rowguid)) if i not in firsts and i not in exclude]


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

def failed_row_json(column: str, reason: str, value: str, key: str) -> str:
    return json.dumps({"column": column, "reason": reason, "value": value, "key": key}, ensure_ascii=True)



def change_read(url: str, sql: str, params: list, columns: list, label: str, constants: dict) -> ReadPartition:
    """A Data Source partition reading changes (``read_changes``) with ``sql``: (generation, rowguid,
    lineage, colv, <columns>...), each row a change of ``constants`` (source, tablenick, op...)."""

    return ReadPartition(url, sql, params, columns, None, label, reader=READER, schema=CHANGE_SCHEMA,
                         constants=constants)


def read_changes(partition: ReadPartition, arrow_schema) -> Iterator:
    """The Data Source reader of a change read (``ReadPartition.reader``): query rows (generation,
    rowguid, lineage, colv, <article columns>...) become change rows (``CHANGE_SCHEMA``).

    A change read never fails the Spark job: a failure becomes one "error" row, so only the
    destinations fed by this source refuse its batches (one subscriber's broken database must not stop
    the others); a row that cannot be encoded becomes an ``unreadable`` change of its own."""

    columns = [(n, SqlType.from_dict(t)) for n, t in partition.columns]
    codec = RowCodec(columns)
    try:
        failpoints.hit("datasource.read", partition.label)
        replica = connect(partition.url, partition.label or None)
        try:
            for rows in replica.dialect.stream(replica, partition.sql, partition.params, FETCH_ROWS,
                                               snapshot=partition.snapshot, lenient_text=True):
                yield _change_batch(rows, codec, partition.constants, arrow_schema, partition.label)
        finally:
            replica.close()
    except Exception as e:  # noqa: BLE001 - reported to the destinations as data
        yield _error_batch(partition, arrow_schema, e)


def _change_batch(rows, codec, constants: dict, arrow_schema, where: str):
    """Query rows (generation, rowguid, lineage, colv, <article columns>...) -> change rows. A row
    whose values cannot be encoded (a value that does not fit its column, text that is not UTF-8)
    travels as an ``unreadable`` change naming the column and why."""
    import pyarrow as pa


    n = len(rows)
    out = {k: [constants.get(k)] * n for k in ("source", "source_nick", "tablenick", "target", "op")}
    out["rowguid"] = [str(r[1]) for r in rows]
    if constants.get("partitioned"):     # a filtered article's read: the partition is the fifth column
        out["partition_id"] = [int(r[4]) for r in rows]
        rows = [(*r[:4], *r[5:]) for r in rows]
    else:
        out["partition_id"] = [ALL_PARTITIONS] * n
    if constants.get("generation") is not None:
        out["generation"] = [int(constants["generation"])] * n
    else:
        out["generation"] = [RETRY_GENERATION] * n if constants.get("target") else [int(r[0]) for r in rows]
    out["lineage"] = [json_text(r[2]) for r in rows]
    out["colv"] = [json_text(r[3]) for r in rows]
    if constants["op"] == "upsert":
        encode, encoded, ops = codec.encode, [], out["op"]
        for i, r in enumerate(rows):
            try:
                text = encode(r[4:])
                if text.isascii() or _utf8(text):
                    encoded.append(text)
                    continue
            except (ValueError, TypeError, ArithmeticError):
                pass
            column, reason, value = diagnose_row(codec, r[4:])
            names = [c for c, _ in codec.columns]
            encoded.append(failed_row_json(column, reason, value, row_key(names, constants.get("key") or [], r[4:])))
            ops[i] = OP_UNREADABLE
        out["row"] = encoded
    else:
        out["row"] = [None] * n
    return pa.RecordBatch.from_arrays(
        [pa.array(out[name], type=arrow_schema.field(name).type) for name in arrow_schema.names], schema=arrow_schema)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _error_batch(partition: ReadPartition, arrow_schema, exc: BaseException):
    """The one row that tells the destinations a change read failed (``READ_ERROR_GENERATION``):
    the error (an ``ErrorInfo`` as JSON) in ``row``."""
    import json

    import pyarrow as pa


    c = partition.constants
    info = ErrorInfo.of(exc)
    message = redact(" ".join(info.first_line().split()))
    info = ErrorInfo(info.code, f"reading {partition.label} failed: {message}", info.obj or partition.label,
                     info.transient)
    row = {"source": c.get("source"), "source_nick": c.get("source_nick"), "tablenick": c.get("tablenick"),
           "rowguid": "", "generation": READ_ERROR_GENERATION, "op": OP_ERROR, "lineage": "{}", "colv": None,
           "row": json.dumps(info.to_dict()), "target": c.get("target"), "partition_id": ALL_PARTITIONS}
    return pa.RecordBatch.from_pylist([row], schema=arrow_schema)


def key_range_mask(rows, after: tuple[int, str] | None, upto: tuple[int, str] | None):
    """Which change rows have a (tablenick, rowguid) in (``after``, ``upto``] (None: no bound on that
    side; both None: None, every row): the part of a generation cut across batches by key that one
    batch carries (``enumeration.plan_batches``)."""
    import pyarrow.compute as pc

    nick, guid = rows.column("tablenick"), rows.column("rowguid")

    def above(key: tuple[int, str]):      # (tablenick, rowguid) > key
        return pc.or_(pc.greater(nick, key[0]), pc.and_(pc.equal(nick, key[0]), pc.greater(guid, key[1])))

    mask = None
    if after is not None:
        mask = above(after)
    if upto is not None:
        below = pc.invert(above(upto))
        mask = below if mask is None else pc.and_(mask, below)
    return mask
