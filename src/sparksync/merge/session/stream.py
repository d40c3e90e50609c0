"""The Spark side of a merge session: the apply task (``mapInArrow``) of one apply group.

Change rows arrive sorted by (apply group, source order, generation). ``apply_stream`` splits them
into runs of one (source, generation) (``_runs``, no Python work per row), hands each run to the
destinations of the group that need it (``ApplyContext.routes``; a generation cut across batches by
key goes to each batch by its key range: the rows of a generation come in (article, row) order), and
applies a destination's batch
(``batch.apply_batch``) when a row of its next batch arrives, or at the end. A source whose read failed
sends one error row first: its batches are refused at every destination it feeds. Each batch handled
yields one result row (``RESULT_SCHEMA``: per-article stats and the error as Spark structs, the conflicts,
whose rows hold any value, as JSON); ``BatchResult.from_row`` decodes one on the driver.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sparksync.dialects import connect
from sparksync.dialects.replica import Replica
from sparksync.errors import ErrorInfo, SparksyncError
from sparksync.merge.apply.batch import apply_batch
from sparksync.merge.apply.outcome import ArticleStats, BatchConflict, BatchOutcome, stats_types
from sparksync.merge.session.changes import (
    ALL_PARTITIONS,
    READ_ERROR_GENERATION,
    ArticleChanges,
    by_article,
    key_range_mask,
)
from sparksync.merge.session.context import articles_at
from sparksync.merge.session.plan import ApplyContext, BatchInfo
from sparksync.redaction import redact
from sparksync.result_rows import ERROR_TYPE, result_mapper, spark_struct
from sparksync.retry import with_retries

_STATS_TYPE = f"ARRAY<{spark_struct({'tablenick': int} | stats_types())}>"   # one per article of the batch
RESULT_SCHEMA = (f"destination STRING, source STRING, batch_seq INT, status STRING, stats {_STATS_TYPE}, "
                 f"conflicts STRING, message STRING, seconds DOUBLE, error {ERROR_TYPE}, notes STRING")




def _result(dest: str, source: str, seq: int, outcome: BatchOutcome) -> dict:
    stats = [{"tablenick": nick, **vars(st)} for nick, st in outcome.stats.items()]
    conflicts = [c.to_dict() for c in outcome.conflicts]
    return {"destination": dest, "source": source, "batch_seq": seq, "status": outcome.status,
            "stats": stats, "conflicts": json.dumps(conflicts, default=str), "message": outcome.message,
            "seconds": outcome.seconds, "error": None, "notes": json.dumps(outcome.notes) if outcome.notes else None}


def _failed(dest: str, source: str, seq: int, error: ErrorInfo) -> dict:
    """The result of a batch that was not applied: the error as data (code, object, message)."""
    error = ErrorInfo(error.code, redact(error.message), error.obj, error.transient)
    return {"destination": dest, "source": source, "batch_seq": seq, "status": "error", "stats": [],
            "conflicts": "[]", "message": error.message, "seconds": 0.0, "error": error.to_dict(), "notes": None}


@dataclass(frozen=True)
class BatchResult:
    """One result row of an apply task, decoded once on the driver."""

    destination: str
    source: str
    batch_seq: int
    status: str                           # "applied" | "skipped" | "error"
    stats: dict[int, ArticleStats]        # article nickname -> what the batch did to it
    conflicts: list[BatchConflict]
    message: str
    seconds: float
    error: ErrorInfo | None               # why the batch was not applied (status "error")
    notes: list[str] = field(default_factory=list)   # what business logic handlers logged (ctx.log)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> BatchResult:
        """A result row (``RESULT_SCHEMA``; its structs as dicts, e.g. ``Row.asDict(recursive=True)``)."""
        return cls(row["destination"], row["source"], int(row["batch_seq"]), row["status"],
                   {int(s["tablenick"]): ArticleStats.from_dict(s) for s in row["stats"] or ()},
                   [BatchConflict.from_dict(c) for c in json.loads(row["conflicts"] or "[]")], row["message"] or "",
                   float(row["seconds"] or 0.0), ErrorInfo.from_dict(row["error"]) if row.get("error") else None,
                   json.loads(row["notes"]) if row.get("notes") else [])


@dataclass
class _Pending:
    """A destination's batch being collected: its source, its sequence number and its Arrow slices."""

    source: str
    seq: int
    slices: list = field(default_factory=list)


def apply_stream(ctx: ApplyContext, batches: Iterable) -> Iterator[dict]:
    """Apply the change rows of one apply group: Arrow batches sorted by (source order, generation).

    Each row is read once per group and goes to every destination of the group that needs it
    (``ctx.routes``). A destination holds one pending batch; it is applied when a row of another
    batch (or source) arrives for that destination, or at the end. Since rows come by source order,
    then generation, every destination gets its batches in order, sources one after another.
    A source whose read failed sends one error row first (``READ_ERROR_GENERATION`` sorts lowest):
    its batches are refused at every destination it feeds (never applied from a partial read).
    Yields one result per batch handled."""
    pending: dict[str, _Pending] = {}                # destination -> its batch being collected
    replicas: dict[str, Replica] = {}
    failed: dict[tuple[str, str], ErrorInfo] = {}    # (destination, source) -> why its batches are refused
    done: dict[tuple[str, str], int] = {}

    def flush(dest_name: str, held: _Pending) -> Iterator[dict]:
        source, seq = held.source, held.seq
        if (dest_name, source) in failed:
            # Never skip silently: the driver must not take this batch for an empty one.
            earlier = failed[(dest_name, source)]
            yield _failed(dest_name, source, seq, ErrorInfo(earlier.code, f"not applied: {earlier.message}",
                                                            earlier.obj, earlier.transient))
            return
        dest = ctx.destinations[dest_name]
        try:
            replica = replicas.get(dest_name)
            if replica is None:
                replica = replicas[dest_name] = connect(dest.url, dest.name)
            # a connection lost on the way (a server restart, a terminated backend) is opened again
            # before the next try; a batch whose commit got through is then skipped by its watermark
            reconnect = [replica]
            articles = with_retries(functools.partial(articles_at, replica, ctx.pubid), connections=reconnect)
            for b in dest.batches[source]:
                if b.seq >= seq or done.get((dest_name, source), -1) >= b.seq:
                    continue
                out = with_retries(functools.partial(apply_batch, replica, ctx, dest, b, {}, articles),
                                   connections=reconnect)
                done[(dest_name, source)] = b.seq
                yield _result(dest_name, source, b.seq, out)
            batch = next(b for b in dest.batches[source] if b.seq == seq)
            changes = _by_article(held.slices)
            out = with_retries(functools.partial(apply_batch, replica, ctx, dest, batch, changes, articles),
                               connections=reconnect)
            done[(dest_name, source)] = seq
            yield _result(dest_name, source, seq, out)
        except Exception as e:  # noqa: BLE001 - one destination's failure must not stop the others
            error = ErrorInfo.of(e)
            failed[(dest_name, source)] = ErrorInfo(error.code, f"an earlier batch from {source} to {dest_name} "
                                                    "failed", error.obj, error.transient)
            yield _failed(dest_name, source, seq, error)

    routes, groups = ctx.routes, ctx.groups
    try:
        for b in batches:
            for group, source, generation, rows in _runs(b):
                if generation == READ_ERROR_GENERATION:
                    yield from _read_failed(ctx, group, source, rows, pending, failed)
                    continue
                for route in routes.get((source, generation), ()):
                    dest_name, seq = route.destination, route.seq
                    if groups[dest_name] != group:
                        continue
                    mine = _for_target(rows, dest_name, ctx.destinations[dest_name].partition_id)
                    if mine is not None and route.keyset:
                        mine = _in_key_range(mine, route.after, route.upto)
                    if mine is None:
                        continue
                    held = pending.get(dest_name)
                    if (dest_name, source) not in failed and (done.get((dest_name, source), -1) >= seq or (
                            held is not None and held.source == source and seq < held.seq)):
                        # rows of a batch after a later one's: never applied out of order (its watermark
                        # would take the earlier batch for applied), the destination stops here
                        pending.pop(dest_name, None)
                        error = ErrorInfo(ErrorInfo.INTERNAL, f"changes of batch {seq} from {source} to {dest_name} "
                                          "arrived after a later batch's; nothing more is applied there this round",
                                          dest_name)
                        failed[(dest_name, source)] = error
                        yield _failed(dest_name, source, seq, error)
                        continue
                    if held is not None and (held.source, held.seq) != (source, seq):
                        yield from flush(dest_name, held)
                        held = None
                    if held is None:
                        held = pending[dest_name] = _Pending(source, seq)
                    held.slices.append(mine)
        for dest_name, held in pending.items():
            yield from flush(dest_name, held)
    finally:
        for rep in replicas.values():
            rep.close()


def _read_failed(ctx: ApplyContext, group: int, source: str, rows, pending: dict[str, _Pending],
                 failed: dict[tuple[str, str], ErrorInfo]) -> Iterator[dict]:
    """A read of ``source``'s changes failed: every destination of this group fed by it refuses its
    batches (an error result for the first one, so the driver moves no watermark)."""
    error = ErrorInfo.from_dict(json.loads(rows.column("row")[0].as_py()))
    targets = {t for t in rows.column("target").to_pylist() if t}
    for dest_name, dest in ctx.destinations.items():
        batches = dest.batches.get(source)
        if not batches or ctx.groups.get(dest_name) != group or (targets and dest_name not in targets):
            continue
        if (dest_name, source) in failed:
            continue
        failed[(dest_name, source)] = error
        held = pending.get(dest_name)
        if held is not None and held.source == source:
            del pending[dest_name]
        yield _failed(dest_name, source, batches[0].seq, error)


def _runs(batch) -> Iterator[tuple[int, str, int, Any]]:
    """Split an Arrow batch of change rows (sorted by group, source, generation) into runs with one
    (apply group, source, generation): the unit of routing, so no Python work is done per row."""
    import numpy as np

    n = batch.num_rows
    if n == 0:
        return
    cols = [batch.column(name).to_numpy(zero_copy_only=False) for name in ("apply_group", "source", "generation")]
    boundary = np.zeros(n, dtype=bool)
    boundary[0] = True
    for c in cols:
        boundary[1:] |= c[1:] != c[:-1]
    starts = np.flatnonzero(boundary).tolist() + [n]
    for s, e in zip(starts, starts[1:]):
        yield int(cols[0][s]), str(cols[1][s]), int(cols[2][s]), batch.slice(s, e - s)


def _for_target(rows, dest_name: str, partition_id: int = ALL_PARTITIONS):
    """The rows of a run meant for ``dest_name``: all of them, except re-read failed changes,
    which carry the one destination they are for (``target``), and changes of a filtered article,
    which carry the partition they are for (``partition_id``; the destination's, or it is not theirs)."""
    import pyarrow.compute as pc

    target, part = rows.column("target"), rows.column("partition_id")
    mask = None
    if target.null_count != len(rows):
        mask = pc.fill_null(pc.equal(target, dest_name), True)
    if pc.max(part).as_py() != ALL_PARTITIONS or pc.min(part).as_py() != ALL_PARTITIONS:
        mine = pc.or_(pc.equal(part, ALL_PARTITIONS), pc.equal(part, partition_id))
        mask = mine if mask is None else pc.and_(mask, mine)
    if mask is None:
        return rows
    kept = rows.filter(mask)
    return kept if len(kept) else None


def _in_key_range(rows, after: tuple[int, str] | None, upto: tuple[int, str] | None):
    """The rows of a run (one generation) whose (tablenick, rowguid) is in (``after``, ``upto``]: the part
    of a generation cut across batches by key that one batch carries (None if none is)."""
    mask = key_range_mask(rows, after, upto)
    kept = rows.filter(mask) if mask is not None else rows
    return kept if len(kept) else None


def _by_article(slices: list) -> dict[int, ArticleChanges]:
    import pyarrow as pa

    return by_article(pa.Table.from_batches(slices))


def make_mapper(ctx: ApplyContext):
    """The function for ``mapInArrow``: Arrow batches of change rows in, result rows out."""
    return result_mapper(functools.partial(apply_stream, ctx), RESULT_SCHEMA)


def apply_stream_empty(ctx: ApplyContext, dest_name: str, source: str, batches: list[BatchInfo]) -> Iterator[dict]:
    """Watermark-only batches that no change row reached (after the last one with data), on the driver."""
    dest = ctx.destinations[dest_name]
    with connect(dest.url, dest.name) as replica:
        articles = articles_at(replica, ctx.pubid)
        for b in batches:
            try:
                yield _result(dest_name, source, b.seq, apply_batch(replica, ctx, dest, b, {}, articles))
            except SparksyncError as e:
                yield _failed(dest_name, source, b.seq, e.info())
                return
