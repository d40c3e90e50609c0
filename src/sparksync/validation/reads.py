"""Validation's reads: every side's rows of every article, one Spark task per database (at most
``READS_PER_TASK`` article reads each), each row encoded as one canonical text.

A task costs tens of milliseconds whatever it reads, so validating many small articles is bounded by
the task count: reading per database instead of per (article, database) is what keeps a validation
of 50 articles on 10 subscribers a few seconds. Rows are converted to the article's types (the same
conversion as every other read, so a SQLite and a PostgreSQL replica of the same rows agree) and
encoded as text by Arrow: each value as its text with its length in front (``v<len>:<text>``, ``n``
for NULL), so two different rows never have the same encoding. Spark hashes the encodings.

A read that fails (a value that does not fit its column, a table gone, a database that went away)
ends that read with one row naming the side and why; the task goes on with its other reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparksync.errors import SparksyncError
from sparksync.rows import encode
from sparksync.spark.reads import ReadPartition, per_task, stream_rows
from sparksync.types import SqlType, ValueError_, digest_arrow, rows_to_record_batch

READS_PER_TASK = 8
SIDE = "sparksync_side"                 # whose rows: a subscriber's number, or negative: the publisher's
READ_ERROR = "sparksync_read_error"     # why a side's rows could not be read (one row), else NULL
COLUMNS = ["a", SIDE, READ_ERROR, "k", "row", "pk"]
SCHEMA = f"a INT, {SIDE} INT, {READ_ERROR} STRING, k STRING, row STRING, pk STRING"


@dataclass
class SideRead:
    """One article's rows at one side: ``a`` the article's index, ``side`` the side's number (a
    subscriber's, or negative: the publisher's rows of one partition)."""

    a: int
    side: int
    article: str
    url: str
    sql: str
    label: str
    columns: list = field(default_factory=list)     # [[name, SqlType dict], ...], the query's columns
    key: list = field(default_factory=list)         # primary key columns
    identity: str | None = None                     # the rowguid column: what matches a row (else its key)


def tasks_of(reads: list[SideRead]) -> list[list[SideRead]]:
    """The reads grouped by database, in chunks of at most READS_PER_TASK: one Spark task each."""
    by_url: dict[str, list[SideRead]] = {}
    for r in reads:
        by_url.setdefault(r.url, []).append(r)
    return [group[i:i + READS_PER_TASK] for group in by_url.values() for i in range(0, len(group), READS_PER_TASK)]


def read_frame(spark, reads: list[SideRead]):
    """A DataFrame of SCHEMA over every read: one task per chunk of :func:`tasks_of`."""
    return per_task(spark, tasks_of(reads), lambda task: (b for r in task for b in read_side(r)), SCHEMA)


def read_side(r: SideRead):
    """One read's rows as Arrow batches of SCHEMA (inside a Spark task)."""
    import pyarrow as pa


    def out(n: int, error=None, k=None, row=None, pk=None) -> pa.RecordBatch:
        none = pa.nulls(n, pa.string())
        return pa.record_batch([pa.array([r.a] * n, pa.int32()), pa.array([r.side] * n, pa.int32()),
                                none if error is None else pa.array([error]), none if k is None else k,
                                none if row is None else row, none if pk is None else pk], names=COLUMNS)

    columns = [(n, SqlType.from_dict(t)) for n, t in r.columns]
    typed = pa.schema([pa.field(n, digest_arrow(t)) for n, t in columns])
    names = [n for n, _ in columns]
    where = f"{r.label}, article {r.article}"
    try:
        for rows in stream_rows(ReadPartition(r.url, r.sql, [], r.columns, label=r.label, key=r.key)):
            batch = rows_to_record_batch(rows, columns, typed, where, r.key)
            pk = encode([batch.column(names.index(k)) for k in r.key]) if r.key else None
            k = pk if r.identity is None else batch.column(names.index(r.identity)).cast(pa.string())
            yield out(batch.num_rows, k=k, row=encode(batch.columns), pk=pk)
    except ValueError_ as e:
        yield out(1, error=str(e))
    except SparksyncError as e:
        cause = e.__cause__
        yield out(1, error=f"{where}: {str(cause).splitlines()[0] if cause else e.message}")
