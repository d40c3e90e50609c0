"""A small direction applied in the driver process: the same reads, routing and apply task as the Spark
stage (``agent.MergeAgent._run``), without a Spark job.

A round that moves a few changes pays Spark's fixed costs (a job, the Data Source's planning, a Python
worker per task: tenths of a second each) for milliseconds of work. Below ``[spark] driver_round_changes``
changes (estimated from the generations' change counts) the agent reads the changes here with the
Data Source's own reader (``spark.reads.read_partition``), joins them with the routes in Arrow, sorts
them as the Spark stage does (apply group, source order, generation, article, row) and hands them to
the very function a Spark task runs (``stream.apply_stream``). The results are the task's result rows,
decoded the same way: the agent cannot tell the two paths apart, and neither can the replicas.
"""

from __future__ import annotations

from sparksync.merge.session.changes import ALL_PARTITIONS, CHANGE_SCHEMA, READ_ERROR_GENERATION
from sparksync.merge.session.plan import ApplyContext, Route
from sparksync.merge.session.stream import BatchResult, apply_stream
from sparksync.spark.reads import ReadPartition, read_partition
from sparksync.spark.results import result_arrow_schema

_SORT = ("apply_group", "source_order", "generation", "tablenick", "rowguid")


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
    import pyarrow as pa

    changes = read_changes(reads)
    source_order = {s: i for i, s in enumerate(dict.fromkeys(r.source for r in routes))}
    part_of = {name: info.partition_id for name, info in ctx.destinations.items()}
    route_rows = {(r.source, r.generation, p, groups[r.destination], source_order[r.source]) for r in routes
                  for p in {ALL_PARTITIONS, part_of.get(r.destination, ALL_PARTITIONS)}}
    route_rows |= {(r.source, READ_ERROR_GENERATION, ALL_PARTITIONS, groups[r.destination], source_order[r.source])
                   for r in routes}
    routed = pa.table({k: pa.array([row[i] for row in sorted(route_rows)], t) for i, (k, t) in enumerate(
        (("source", pa.string()), ("generation", pa.int64()), ("partition_id", pa.int32()),
         ("apply_group", pa.int32()), ("source_order", pa.int32())))})
    rows = changes.join(routed, ["source", "generation", "partition_id"], join_type="inner")
    rows = rows.sort_by([(c, "ascending") for c in _SORT]).combine_chunks()
    return [BatchResult.from_row(r) for r in apply_stream(ctx, rows.to_batches())]
