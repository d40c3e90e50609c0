"""Loading a snapshot at a subscriber, shared by both replication models: tables that already exist
(``pre_creation_cmd``), an article's Parquet files bulk loaded and checked against the manifest, and one
Spark task per subscription."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparksync.dialects.model import TableInfo, describe_drift
from sparksync.dialects.replica import Replica
from sparksync.errors import ErrorInfo, SchemaError, SnapshotError, SparksyncError
from sparksync.names import TableName
from sparksync.rows import row_key, summarize_value
from sparksync.snapshot.manifest import KeyDigest
from sparksync.snapshot.source import SnapshotFiles, parquet_batches
from sparksync.types import Kind


@dataclass
class InitResult:
    subscription: str
    ok: bool
    message: str = ""
    rows: int = 0
    seconds: float = 0.0
    baseline_generation: int = 0
    snapshot_generation: int | None = None   # the snapshot it was initialized from (when not this one)
    skipped: bool = False
    error: ErrorInfo | None = None           # why it failed (ok False)

    @classmethod
    def failed(cls, subscription: str, e: BaseException, t0: float) -> InitResult:
        """A failed initialization (one subscription's: the others go on), with its error as data."""
        error = ErrorInfo.of(e)
        message = error.message if isinstance(e, SparksyncError) else error.first_line()
        return cls(subscription, False, message, seconds=time.perf_counter() - t0, error=error)


def check_distinct_tables(label: str, names: dict[str, TableName]) -> None:
    """Refuse two articles (article name -> destination table) that would be one table here."""
    seen: dict[str, str] = {}
    for article, table in names.items():
        k = str(table).lower()
        if k in seen:
            raise SchemaError(f"{label}: articles {seen[k]} and {article} would both be table {table}")
        seen[k] = article


def pre_create(replica: Replica, tables: list[tuple[str, TableName, TableInfo]], cmd: str) -> set[str]:
    """Apply ``pre_creation_cmd`` to the tables that already exist at a subscriber: ``tables`` is
    (article, destination table, expected table) in dependency order. Returns the articles whose table
    is kept (``delete``: emptied, ``none``: as is; it must have the article's columns)."""
    d = replica.dialect
    keep: set[str] = set()
    for article, name, expected in reversed(tables):  # children before parents
        info = replica.reflect(name)
        if info is None:
            continue
        for trg in d.list_merge_triggers(replica, name):
            artid = trg.split("_", 2)[2]
            d.drop_merge_triggers(replica, name, artid)
        if cmd == "drop":
            replica.execute(f"DROP TABLE {d.table_sql(name)}")
        else:
            drift = describe_drift(expected, info)
            if drift:
                raise SchemaError(f"{replica.label}: existing table {name} does not match article {article} "
                                  f"({'; '.join(drift)}); use pre_creation_cmd = \"drop\"", obj=str(name))
            if cmd == "delete":
                replica.execute(f"DELETE FROM {d.table_sql(name)}")
            keep.add(article)
    return keep


@dataclass
class Loaded:
    """What loading one article's snapshot did."""

    rows: int = 0                       # rows inserted
    digest: str = ""                    # KeyDigest of the key column over every row read
    refused: list[dict] = field(default_factory=list)   # rows this database cannot hold (``unstorable``)

    def check(self, expected_rows: int, expected_digest: str | None, what: str) -> None:
        """Every row of the snapshot was read (inserted or refused) and they are the rows it holds."""
        read = self.rows + len(self.refused)
        if read != expected_rows:
            raise SnapshotError(f"{what}: {read} rows were loaded but the snapshot holds {expected_rows}; "
                                "nothing was initialized", obj=what)
        if expected_digest is not None and self.digest != expected_digest:
            raise SnapshotError(f"{what}: the rows loaded are not the rows the snapshot was written with "
                                "(checksum differs); nothing was initialized", obj=what)


def load_parquet(replica: Replica, files: SnapshotFiles, folder: str, name: TableName, info: TableInfo,
                 key_column: str | None = None, ids: TableName | None = None) -> Loaded:
    """Bulk load one article's snapshot (``folder``'s Parquet files in ``files``) into its table. Rows holding a value
    this database cannot store exactly (``ValueChecks.unstorable``: NUL in PostgreSQL text, NaN in SQLite)
    are not loaded but returned, each with its key, column and reason. ``ids``: the article is keyed (its rowguid,
    ``key_column``, kept beside the table): each row's primary key and rowguid go to this identity table, the rest
    to the table (``merge/tracking/identity.py``)."""
    loaded = Loaded()
    digest = KeyDigest()
    cols = [c.name for c in info.columns]
    key_at = cols.index(key_column) if key_column in cols else 0
    d = replica.dialect
    checks = [(i, c) for i, c in enumerate(info.columns) if _may_be_unstorable(d, c.type)]

    def batches():
        """Each batch's columns (Python values), and the positions of its rows this database cannot store."""
        for batch in parquet_batches(files, folder, cols):
            columns = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
            digest.add(columns[key_at])
            refused = set()
            for r in (_unstorable_rows(columns, checks) if checks else ()):
                values = [c[r] for c in columns]
                why = next(((c.name, reason) for (i, c) in checks if (reason := d.unstorable(c.type, values[i]))), None)
                if why is not None:
                    loaded.refused.append({"key": row_key(cols, info.primary_key, values), "keyvalue": values[key_at],
                                           "column": why[0], "reason": why[1],
                                           "value": summarize_value(values[cols.index(why[0])])})
                    refused.add(r)
            yield columns, refused

    def rows(columns: list[list], refused: set[int], at: Sequence[int]) -> Iterable[tuple]:
        picked = zip(*(columns[i] for i in at))
        return picked if not refused else (row for r, row in enumerate(picked) if r not in refused)

    types = [c.type for c in info.columns]
    if ids is None:
        every = range(len(cols))
        loaded.rows = d.bulk_load(replica, name, cols, types,
                                  (row for columns, refused in batches() for row in rows(columns, refused, every)))
    else:
        # the table's columns, and (primary key, rowguid) beside it: both loaded a batch at a time
        mine = [i for i in range(len(cols)) if i != key_at]
        keyed = [cols.index(k) for k in info.primary_key] + [key_at]
        for columns, refused in batches():
            loaded.rows += d.bulk_load(replica, name, [cols[i] for i in mine], [types[i] for i in mine],
                                       rows(columns, refused, mine))
            d.bulk_load(replica, ids, [cols[i] for i in keyed], [types[i] for i in keyed],
                        rows(columns, refused, keyed))
    loaded.digest = digest.hexdigest()
    return loaded


def _may_be_unstorable(d, t) -> bool:
    return ((not d.capabilities.text_holds_nul and t.kind in (Kind.TEXT, Kind.JSON))
            or (not d.capabilities.float_holds_nan and t.kind in (Kind.REAL, Kind.DOUBLE)))


def _unstorable_rows(columns: list[list], checks) -> set[int]:
    """Positions of the rows of a batch (its columns as Python values) that may hold an unstorable value: a NaN in
    a float column, a NUL in a text one (in a JSON one, its escape too), found in the Python values the load
    reads anyway."""
    out: set[int] = set()
    for i, c in checks:
        if c.type.kind in (Kind.REAL, Kind.DOUBLE):
            out.update(r for r, v in enumerate(columns[i]) if v is not None and v != v)       # NaN != NaN
        elif c.type.kind is Kind.JSON:
            out.update(r for r, v in enumerate(columns[i]) if v and ("\x00" in v or "\\u0000" in v))
        else:
            out.update(r for r, v in enumerate(columns[i]) if v and "\x00" in v)
    return out


def initialize_in_parallel(spark, specs: list, task: Callable[[Any], InitResult]) -> list[InitResult]:
    """``task(spec)`` as one Spark task per subscription, in parallel; results come back in the order
    of ``specs``."""
    if not specs:
        return []
    results = spark.sparkContext.parallelize(list(enumerate(specs)), len(specs)) \
        .map(lambda item: (item[0], task(item[1]))).collect()
    return [r for _, r in sorted(results, key=lambda x: x[0])]
