"""Unit tests for the Spark tasks' result rows: the DDL gives the Arrow schema (structs and lists included), and
a row written by a task comes back on the driver as one typed result, every field of its declared type."""

from __future__ import annotations

import pyarrow as pa

from sparksync.errors import ErrorInfo
from sparksync.merge.apply.outcome import ArticleStats, BatchConflict, BatchOutcome
from sparksync.merge.conflicts.model import ConflictRecord, ConflictType
from sparksync.merge.session.stream import RESULT_SCHEMA, BatchResult, _failed, _result
from sparksync.merge.session.summary import DirectionStats
from sparksync.result_rows import result_arrow_schema, result_columns, spark_struct
from sparksync.transactional.delivery import results as deliver
from sparksync.transactional.delivery.agent import SubscriptionRun


def _through_arrow(ddl: str, rows: list[dict]) -> list[dict]:
    """What the driver reads back: the rows as a task sends them (Arrow, by the DDL's schema), structs as dicts."""
    return pa.RecordBatch.from_pylist(rows, schema=result_arrow_schema(ddl)).to_pylist()


def test_the_ddl_gives_nested_arrow_types():
    ddl = "a STRING, b ARRAY<STRUCT<x: INT, y: DOUBLE>>, c STRUCT<ok: BOOLEAN, n: BIGINT>, d ARRAY<STRING>"
    assert result_columns(ddl) == ["a", "b", "c", "d"]
    schema = result_arrow_schema(ddl)
    assert schema.field("b").type == pa.list_(pa.struct([("x", pa.int32()), ("y", pa.float64())]))
    assert schema.field("c").type == pa.struct([("ok", pa.bool_()), ("n", pa.int64())])
    assert schema.field("d").type == pa.list_(pa.string())
    assert spark_struct({"s": str, "n": int | None, "f": float}) == "STRUCT<s: STRING, n: BIGINT, f: DOUBLE>"


def test_a_merge_batch_result_is_decoded_once_with_its_types():
    outcome = BatchOutcome("applied", message="ok", seconds=1.5)
    outcome.stats[20] = ArticleStats(inserts=3, updates=1, conflicts=1, seconds=0.25)
    outcome.stats[10] = ArticleStats(removed=2)
    rec = ConflictRecord(ConflictType.UPDATE, 20, "g-1", 2627, "update conflict", "S1", "P",
                         {"id": 4, "name": "x"}, ["name"])
    outcome.conflicts.append(BatchConflict(rec, True))
    (row,) = _through_arrow(RESULT_SCHEMA, [_result("P", "S1", 3, outcome)])
    r = BatchResult.from_row(row)
    assert (r.destination, r.source, r.batch_seq, r.status, r.message, r.seconds, r.error) == \
        ("P", "S1", 3, "applied", "ok", 1.5, None)
    assert r.stats == {20: ArticleStats(inserts=3, updates=1, conflicts=1, seconds=0.25), 10: ArticleStats(removed=2)}
    assert all(type(v) is int for v in vars(r.stats[20]).values() if not isinstance(v, float))
    assert r.conflicts == [BatchConflict(rec, True)] and r.conflicts[0].record.reason_code == 2627


def test_a_failed_merge_batch_result_carries_its_error():
    error = ErrorInfo("database", "connection refused (password=secret)", "S1", True)
    (row,) = _through_arrow(RESULT_SCHEMA, [_failed("P", "S1", 0, error)])
    r = BatchResult.from_row(row)
    assert r.status == "error" and r.stats == {} and r.conflicts == []
    assert r.error is not None and (r.error.code, r.error.obj, r.error.transient) == ("database", "S1", True)
    assert "secret" not in r.error.message and r.message == r.error.message


def test_direction_stats_add_keeps_the_declared_types():
    total = DirectionStats()
    total.add(ArticleStats(inserts=2, seconds=0.5))
    total.add(ArticleStats(inserts=1, failed=1, seconds=0.25))
    assert (total.inserts, total.failed, total.seconds, total.batches) == (3, 1, 0.75, 0)
    assert type(total.inserts) is int and type(total.seconds) is float


def test_a_delivery_result_is_decoded_and_taken_by_the_run():
    res = deliver.DeliveryResult("S1", transactions=2, commands=5, batches=1, first_seqno=7, last_seqno=9,
                                 message="", seconds=0.5)
    res.errors.append(deliver.CommandError(xact_seqno=8, command_id=2, article_id=1, error_code="2627",
                                           native_code="23505", message="duplicate key", skipped=True))
    res.tokens.append(deliver.TokenDelivered(tracer_id="t-1", subscriber_commit="2024-01-02T03:04:05+00:00"))
    (row,) = _through_arrow(deliver.RESULT_SCHEMA, [res.row()])
    back = deliver.DeliveryResult.from_row(row)
    assert back == res
    run = SubscriptionRun("S1", publication="pub", last_seqno=4, pending_before=2)
    run.take(back)
    assert (run.publication, run.pending_before, run.last_seqno, run.errors, run.tokens) == \
        ("pub", 2, 9, res.errors, res.tokens)


def test_a_failed_delivery_keeps_what_the_run_knew():
    res = deliver.DeliveryResult("S1")
    res.fail(RuntimeError("boom"))
    (row,) = _through_arrow(deliver.RESULT_SCHEMA, [res.row()])
    back = deliver.DeliveryResult.from_row(row)
    assert back.status == "error" and back.error is not None and back.error.code == ErrorInfo.INTERNAL
    run = SubscriptionRun("S1", publication="pub", last_seqno=4)
    run.take(back)
    assert run.last_seqno == 4 and run.status == "error" and run.error == back.error
