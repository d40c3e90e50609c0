"""A direction applied without Spark's exchange: the same reads, routing and apply task as the Spark stage
(``agent.MergeAgent._run``), in the driver process for a small round, or in one Spark task when the round
has one destination (the apply task reads its own changes).

A round that moves a few changes pays Spark's fixed costs (a job, the Data Source's planning, a Python
worker per task: tenths of a second each) for milliseconds of work. Below ``[spark] driver_round_changes``
changes (estimated from the generations' change counts) the agent reads the changes here with the
Data Source's own reader (``spark.reads.read_partition``), joins them with the routes in Arrow, sorts
them as the Spark stage does (apply group, source order, generation, article, row) and hands them to
the very function a Spark task runs (``stream.apply_stream``). The results are the task's result rows,
decoded the same way: the agent cannot tell the two paths apart, and neither can the replicas.

A round with one destination (an upload to the publisher, a download to one subscriber) has one apply
task whatever happens: the exchange that brings the read tasks' rows to it (a join, a shuffle, a sort,
Arrow batches sent between Python workers) costs more than reading them where they are applied, about
half of the time of a 100,000-change round here. Up to ``ONE_TASK_CHANGES`` changes, that task reads
them itself (``applied_rows`` in one Spark task: the rows held in memory once, as here).
"""

from __future__ import annotations

from sparksync.merge.session.changes import CHANGE_SCHEMA
from sparksync.merge.session.plan import ApplyContext, Route, route_table
from sparksync.merge.session.stream import BatchResult, apply_stream
from sparksync.result_rows import result_arrow_schema
from sparksync.spark.reads import ReadPartition, read_partition
from sparksync.spark.tasks import in_one_task

_SORT = ("apply_group", "source_order", "generation", "tablenick", "rowguid")
ONE_TASK_CHANGES = 2_000_000    # the most changes one task reads and holds for its one destination


def estimated_changes(generations: list[dict]) -> int:
    """How many changes reading ``generations`` moves (their change counts, settled at closing)."""
    return sum(int(g.get("changecount") or 0) for g in generations)


def read_changes(reads: list[ReadPartition]):
    """Every change row of ``reads`` as one Arrow table (``CHANGE_SCHEMA``), read in this process."""
    import pyarrow as pa

    schema = result_arrow_schema(CHANGE_SCHEMA)
    batches = [b for p in reads for b in read_partition(p, schema)]
    return pa.Table.from_batches(batches, schema)


def apply_in_driver(reads: list[ReadPartition], routes: list[Route], ctx: ApplyContext,
                    groups: dict[str, int]) -> list[BatchResult]:
    """Apply one direction here: ``ctx`` as the Spark stage would give its tasks (``routes`` keyed by
    (source, generation), ``groups`` the destinations' apply groups)."""
    return [BatchResult.from_row(r) for r in applied_rows(reads, routes, ctx, groups)]


def applied_rows(reads: list[ReadPartition], routes: list[Route], ctx: ApplyContext,
                 groups: dict[str, int]) -> list[dict]:
    """Read ``reads`` in this process, route and sort the rows as the Spark stage does, apply them
    (``stream.apply_stream``): the result rows."""
    import pyarrow as pa

    changes = read_changes(reads)
    table = route_table(routes, ctx.destinations, groups)
    routed = pa.table({k: pa.array([row[i] for row in table], t) for i, (k, t) in enumerate(
        (("source", pa.string()), ("generation", pa.int64()), ("partition_id", pa.int32()),
         ("apply_group", pa.int32()), ("source_order", pa.int32())))})
    rows = changes.join(routed, ["source", "generation", "partition_id"], join_type="inner")
    rows = rows.sort_by([(c, "ascending") for c in _SORT]).combine_chunks()
    return list(apply_stream(ctx, rows.to_batches()))


def apply_in_one_task(spark, reads: list[ReadPartition], routes: list[Route], ctx: ApplyContext,
                      groups: dict[str, int]) -> list[BatchResult]:
    """Apply one direction with one destination in one Spark task that reads its own changes."""
    rows = in_one_task(spark, lambda: applied_rows(reads, routes, ctx, groups))
    return [BatchResult.from_row(r) for r in rows]
