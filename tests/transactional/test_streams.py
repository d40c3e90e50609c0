"""Subscription streams: parallel connections, seed 001's primary key chain (error 20598 on one
stream makes the batch go again over one connection), and a crash between the streams' commits."""

from __future__ import annotations

import json

import pytest

from sparksync.dialects import connect
from sparksync.metadata import store
from sparksync.transactional.delivery.bulk_text import TextStaging
from sparksync.transactional.delivery.deliver import route
from sparksync.transactional.delivery.subscriber import ArticleTarget, Command
from tests.support.transactional import build, replicate, setup_topology, vendor_rows

pytestmark = pytest.mark.spark
T = '"Purchasing"."Vendor"'
STREAMS = 4


def _stream(key: int) -> int:
    target = ArticleTarget(1, "v", None, (), ("VendorID",), None, None, None)
    return route(target, Command(1, 1, 1, "upd", None, None, json.dumps({"VendorID": key})), STREAMS)


def _topology(dbs, tmp_path, **sub):
    return build(dbs, tmp_path, "postgresql", {"Reporting": "postgresql"},
                 # streams for every batch, however small (the default leaves small batches to one connection)
                 subscription={"Reporting": {"subscription_streams": STREAMS, "subscription_streams_threshold": 0,
                                             **sub}}, seed_ids=range(1, 41))


def test_independent_rows_apply_over_every_stream(spark, dbs, tmp_path, pg_admin_url):
    tx = _topology(dbs, tmp_path)
    setup_topology(tx, spark)
    tx.publish(*[f'UPDATE {T} SET "Name" = \'n{i}\' WHERE "VendorID" = {i}' for i in range(1, 41)],
               vendor_rows("postgresql", range(100, 120)), f'DELETE FROM {T} WHERE "VendorID" > 35 AND "VendorID" < 100')
    summary = replicate(tx, spark)
    (s,) = summary.subscriptions
    assert s.ok and s.fallbacks == 0 and s.transactions == 42        # 40 updates, one insert, one delete statement
    assert s.parallel == s.batches == 1
    assert len({_stream(i) for i in range(1, 41)}) == STREAMS          # the work really was spread
    assert tx.subscriber_rows("Reporting") == tx.publisher_rows()
    with connect(tx.subscriber_urls["Reporting"]) as r:
        rows = store.select_rows(r, "MSreplication_subscriptions", {"subscription": "Reporting"})
        assert sorted(x["stream"] for x in rows) == [0, 1, 2, 3]
        assert {x["transaction_timestamp"] for x in rows} == {s.last_seqno}


def test_a_batch_under_the_streams_threshold_goes_over_one_connection(spark, dbs, tmp_path, pg_admin_url):
    tx = _topology(dbs, tmp_path, subscription_streams_threshold=11)      # streams for 4 x 11 = 44 commands or more
    setup_topology(tx, spark)
    tx.publish(*[f'UPDATE {T} SET "Name" = \'a{i}\' WHERE "VendorID" = {i}' for i in range(1, 41)])
    (small,) = replicate(tx, spark).subscriptions
    assert small.ok and (small.commands, small.batches, small.parallel, small.fallbacks) == (40, 1, 0, 0)
    tx.publish(*[f'UPDATE {T} SET "Name" = \'b{i}\' WHERE "VendorID" = {i % 40 + 1}' for i in range(50)])
    (big,) = replicate(tx, spark).subscriptions
    assert big.ok and (big.commands, big.batches, big.parallel, big.fallbacks) == (50, 1, 1, 0)
    assert tx.subscriber_rows("Reporting") == tx.publisher_rows()
    with connect(tx.subscriber_urls["Reporting"]) as r:        # every stream's position moved both times
        rows = store.select_rows(r, "MSreplication_subscriptions", {"subscription": "Reporting"})
        assert sorted(x["stream"] for x in rows) == [0, 1, 2, 3]
        assert {x["transaction_timestamp"] for x in rows} == {big.last_seqno}


def test_the_primary_key_chain_of_seed_001_falls_back_to_one_connection(spark, dbs, tmp_path, pg_admin_url):
    # update ... set pk = b where pk = a; update ... set pk = c where pk = b: on different streams
    a = next(i for i in range(1, 41) if _stream(i) != _stream(i + 1000))
    b, c = a + 1000, a + 2000
    tx = _topology(dbs, tmp_path)
    setup_topology(tx, spark)
    tx.publish(f'UPDATE {T} SET "VendorID" = {b} WHERE "VendorID" = {a}',
               f'UPDATE {T} SET "VendorID" = {c} WHERE "VendorID" = {b}')
    summary = replicate(tx, spark)
    (s,) = summary.subscriptions
    assert s.ok and s.fallbacks == 1 and s.parallel == 0 and s.errors == []
    assert tx.subscriber_rows("Reporting") == tx.publisher_rows()
    ids = [r[0] for r in tx.subscriber_rows("Reporting")]
    assert c in ids and a not in ids and b not in ids


def test_a_crash_between_the_streams_commits_is_finished_next_time(spark, dbs, tmp_path, pg_admin_url, failpoints):
    tx = _topology(dbs, tmp_path)
    setup_topology(tx, spark)
    tx.publish(vendor_rows("postgresql", range(200, 240)),
               *[f'UPDATE {T} SET "CreditRating" = 5 WHERE "VendorID" = {i}' for i in range(1, 21)],
               f'DELETE FROM {T} WHERE "VendorID" BETWEEN 21 AND 30')
    failpoints("distribute.stream_committed Reporting:0:1")       # streams 0 and 1 committed, 2 and 3 not
    first = replicate(tx, spark)
    assert not first.ok and "failpoint" in first.subscriptions[0].message
    with connect(tx.subscriber_urls["Reporting"]) as r:
        marks = {x["stream"]: x["transaction_timestamp"]
                 for x in store.select_rows(r, "MSreplication_subscriptions", {"subscription": "Reporting"})}
    assert len(set(marks.values())) == 2                          # the streams are apart
    second = replicate(tx, spark)                                  # inserts or deletes applied twice would fail
    assert second.ok and second.subscriptions[0].errors == [], second.to_dict()
    assert tx.subscriber_rows("Reporting") == tx.publisher_rows()


def test_a_big_batch_goes_over_the_streams_in_the_logs_text_form(spark, dbs, tmp_path, pg_admin_url, monkeypatch):
    """Every row changed four times in one batch: each stream stages its share in the log's text form (its
    COPY lines made by the delivery while the streams before it run their statements), wave by wave."""
    tx = _topology(dbs, tmp_path)
    setup_topology(tx, spark)
    tx.publish(*[f'UPDATE {T} SET "CreditRating" = "CreditRating" % 5 + 1, "Name" = \'r{i}\' || "VendorID"'
                 for i in range(4)])
    executed = []
    real = TextStaging.execute
    monkeypatch.setattr(TextStaging, "execute", lambda self, batch: executed.append(batch) or real(self, batch))
    summary = replicate(tx, spark)          # a small round: delivered in this process, where the spy is
    (s,) = summary.subscriptions
    assert s.ok and s.parallel == s.batches == 1 and s.fallbacks == 0 and s.commands == 160
    assert len(executed) == STREAMS and all(not b.moved for b in executed)
    assert all(len(b.ranges) == 1 for b in executed)          # a stream's lines: made in this process
    assert max(a.waves for b in executed for a in b.ranges[0].values()) == 4
    assert tx.subscriber_rows("Reporting") == tx.publisher_rows()
