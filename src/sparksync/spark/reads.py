"""Reads of replica tables planned on the driver and run inside Spark tasks, with nothing of Spark
imported: what a plan is (``ReadPartition``, ``ReadPlan``), how a task reads one (``read_partition``:
Arrow batches; ``read_rows``: the driver's tuples), and the two ways a job runs them — the Python
Data Source ``format("sparksync")`` (``datasource.py``, the Spark side) and :func:`map_partitions` /
:func:`per_task`, which need only a SparkSession passed in.

A partition reads a table's rows typed by its columns, or, with a ``reader``, rows of its own shape
(merge's change reads, ``merge.changes.read_changes``).

The driver plans every read (SQL, parameters, bounds, consistent-snapshot id) and passes the plan
as the ``plan`` option; each partition opens its own connection inside ``read()``. Because bounds
are fixed at planning time, a retried task reads the same rows. Usage::

    spark.read.format("sparksync").schema(ddl).option("plan", plan.to_json()).load()

When every row of a partition goes to one Python function anyway (the distribution agent applies
each subscription's commands in the task that reads them), :func:`map_partitions` runs that function
on each partition's rows read inside its own task instead: no Data Source planning (Python workers
the JVM forks per query, a few tenths of a second each time), and the rows go from the database
driver to the function as tuples, never through Arrow and the JVM.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import asdict, dataclass, field

from sparksync.dialects import connect
from sparksync.errors import ErrorInfo
from sparksync.spark.failures import TaskFailed, reporting_failures
from sparksync.types import SqlType, ValueError_, rows_to_record_batch

FETCH_ROWS = 10_000


@dataclass
class ReadPartition:
    """One task: one SQL query against one replica."""

    url: str
    sql: str
    params: list = field(default_factory=list)
    columns: list = field(default_factory=list)      # [[name, SqlType dict], ...]
    snapshot: str | None = None                      # PostgreSQL exported snapshot id
    label: str = ""
    key: list = field(default_factory=list)          # the key columns (to name a row in an error)
    # A reader of its own ("module:function", called with the partition and the Arrow schema, yielding
    # Arrow batches of ``schema``): rows of another shape than the table's, e.g. merge's changes.
    reader: str = ""
    schema: str = ""                                 # the Spark schema (DDL) of such a reader's rows
    constants: dict = field(default_factory=dict)    # anything the reader needs besides the query


@dataclass
class ReadPlan:
    partitions: list[ReadPartition]

    def to_json(self) -> str:
        return json.dumps([asdict(p) for p in self.partitions], default=str)

    @classmethod
    def from_json(cls, text: str) -> ReadPlan:
        return cls([ReadPartition(**d) for d in json.loads(text)])

    def spark_schema(self) -> str:

        if self.partitions[0].schema:
            return self.partitions[0].schema
        cols = self.partitions[0].columns
        return ", ".join(f"`{n}` {SqlType.from_dict(t).to_spark()}" for n, t in cols)


@reporting_failures
def read_partition(partition: ReadPartition, arrow_schema):
    """One partition's rows, as Arrow batches of ``arrow_schema`` (inside a Spark task)."""

    if partition.reader:
        module, _, function = partition.reader.partition(":")
        yield from getattr(importlib.import_module(module), function)(partition, arrow_schema)
        return
    columns = [(n, SqlType.from_dict(t)) for n, t in partition.columns]
    for rows in stream_rows(partition):
        try:
            yield rows_to_record_batch(rows, columns, arrow_schema, partition.label, partition.key)
        except ValueError_ as e:
            raise TaskFailed(ErrorInfo("value", str(e), partition.label)) from None


@reporting_failures
def read_rows(partition: ReadPartition):
    """One partition's rows as the database driver gives them: lists of tuples, in the order of the
    query's columns (inside a Spark task)."""
    yield from stream_rows(partition)


def stream_rows(partition: ReadPartition):
    """The partition's query, in chunks of rows, on a connection of its own; a failure is the
    dialect's typed error (callers inside a task decide how it crosses Spark)."""

    replica = connect(partition.url, partition.label or None)
    try:
        yield from replica.dialect.stream(replica, partition.sql, partition.params, FETCH_ROWS,
                                          snapshot=partition.snapshot)
    finally:
        replica.close()


def map_partitions(spark, plan: ReadPlan, consume, result_schema: str):
    """A DataFrame of ``consume(chunks)``'s output (Arrow batches of ``result_schema``) over every
    partition of ``plan``: one Spark task per partition reads its rows (:func:`read_rows`, read ahead
    by a thread) and hands them to ``consume``. The partitions are fixed here, on the driver, so a
    retried task reads the same rows."""
    return per_task(spark, plan.partitions, lambda p: consume(prefetched(read_rows(p))), result_schema)


def per_task(spark, items: list, run, result_schema: str):
    """A DataFrame of ``run(item)``'s output (Arrow batches of ``result_schema``), one Spark task per
    item of ``items`` (picklable; fixed here, on the driver, so a retried task does the same work)."""
    n = len(items)

    def task(ids):
        for batch in ids:
            for i in batch.column(0).to_pylist():
                yield from run(items[i])

    return spark.range(0, n, 1, n).mapInArrow(task, result_schema)


def prefetched(batches, depth: int = 4):
    """``batches``, read ahead by a thread (at most ``depth`` waiting), so reading the next batch
    overlaps with what the consumer does with this one (mostly waiting on its database). An error of
    the read is raised to the consumer where the batch would have come; a consumer that stops early
    stops the reader."""
    import queue
    import threading

    q: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    end = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for b in batches:
                if not put(b):
                    return
            put(end)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            put(e)
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()              # a reader stopped early closes its connection now, in its thread

    reader = threading.Thread(target=read, name="sparksync-prefetch", daemon=True)
    reader.start()
    try:
        while True:
            item = q.get()
            if item is end:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        reader.join()
