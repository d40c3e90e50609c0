"""Divergence made loud: ``serve`` validates each direct subscription of a merge publication on its
``validate_schedule`` (row counts and checksums of its partition, read in ``serve``'s process), and a replica
that lost a row without a trace is said by ``status`` (exit 1, "diverged"), the monitor's roll-up (error),
``/metrics`` and the alerts, until a repair mends it and a validation passes. On the demo's topology (a copy of
its own); the validation runs here as ``serve``'s worker runs it (no serve process, no Spark job)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from prometheus_client.core import Metric

from sparksync.config import AlertsConfig
from sparksync.dialects import connect
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.metadata import store
from sparksync.monitor import page
from sparksync.monitor.alerts import Evaluator
from sparksync.monitor.metrics import SparksyncCollector
from sparksync.monitor.rollup import cadences_of, roll_up
from sparksync.monitor.view import build_view
from sparksync.monitor.watch import NoAgents
from sparksync.progress import silent
from sparksync.service.jobs import VALIDATE, workers_of
from sparksync.status import gather_status
from sparksync.topology import load_config
from sparksync.validation.repair import repair
from sparksync.validation.scheduled import validate_on_schedule
from sparksync.validation.subscriptions import validate
from tests.support.publishing import empty_tracking_logs_sql
from tests.support.service import sql

pytestmark = pytest.mark.spark


def _metric(collector: SparksyncCollector, name: str, subscription: str) -> float | None:
    for family in collector.collect():
        assert isinstance(family, Metric)
        for s in family.samples:
            if s.name == name and s.labels.get("subscription") == subscription:
                return s.value
    return None


def test_a_store_that_lost_a_row_without_a_trace_is_said_everywhere_until_it_is_repaired(service_demo, spark):
    topology = load_config(service_demo / "sparksync.toml")
    stores = [s.name for s in topology.subscriptions_of("Sales") if s.transport == "direct"]
    assert any(w.agent == VALIDATE and w.publication == "Sales" and set(w.subscriptions) == set(stores)
               for w in workers_of(topology)), "serve has no validation worker for Sales' stores"
    assert validate_on_schedule(topology, "Sales", stores)[0].result == "inconclusive"   # the demo left changes
    assert MergeAgent(topology, None, silent).run(MergeOptions(subscriptions=stores)).ok        # serve's next round
    first = validate_on_schedule(topology, "Sales", stores)
    assert {v.subscription: v.result for v in first} == dict.fromkeys(stores, "passed"), [v.message for v in first]
    # a row gone from Store2 with the trace its tracking trigger left: no merge would ever notice
    sql(service_demo / "store2.db", "DELETE FROM Vendor WHERE BusinessEntityID = (SELECT min(BusinessEntityID) FROM Vendor)")
    _forget_logged(service_demo / "store2.db")
    results = {v.subscription: v for v in validate_on_schedule(topology, "Sales", stores)}
    assert results["Store2"].result == "failed" and "Vendor" in results["Store2"].message, results["Store2"]
    assert results["Store1"].result == "passed"
    status = gather_status(topology)
    entry = next(s for s in status["subscriptions"] if s["name"] == "Store2")
    assert not status["ok"] and entry["status"] == "diverged", entry
    assert "validate --checksum" in entry["problems"][0] and entry["validation_age"] is not None
    rolled = roll_up(status, AlertsConfig(), set(), dt.datetime.now(dt.UTC), cadences_of(topology))
    assert rolled["subscriptions"]["Store2"]["state"] == "error", rolled["subscriptions"]["Store2"]
    assert rolled["publications"]["Sales"]["state"] == "error"
    fired = Evaluator(AlertsConfig()).evaluate(status, rolled, [], dt.datetime.now(dt.UTC))
    assert any(a.subscription == "Store2" and a.name == "error" and "validation" in a.message for a in fired), fired
    html = page.render(build_view(topology, NoAgents(), None), None, "main")
    assert re.search(r'data-subscription="Store2".*?<td class="validation"><span class="err">failed</span>', html, re.S)
    collector = SparksyncCollector(topology, NoAgents(), None)
    assert _metric(collector, "sparksync_validation_failed", "Store2") == 1.0
    assert _metric(collector, "sparksync_validation_failed", "Store2") == 1.0
    assert _metric(collector, "sparksync_validation_failed", "Store1") == 0.0
    # stopped as well (its last merge failed): still diverged in the metric, both said by status
    with connect(topology.publisher_url) as pub, pub.transaction():
        pubid = store.select_rows(pub, "sysmergepublications", {"name": "Sales"})[0]["pubid"]
        store.insert_row(pub, "MSmerge_sessions", {
            "session_id": store.new_guid(), "subscription": "Store2", "pubid": pubid, "start_time": store.utcnow(),
            "end_time": store.utcnow(), "duration": 0.1, "status": "failed", "message": "store2 unreachable",
            **dict.fromkeys(("upload_inserts", "upload_updates", "upload_deletes", "upload_conflicts",
                             "download_inserts", "download_updates", "download_deletes", "download_conflicts",
                             "retries", "failed"), 0)})
    entry = next(s for s in gather_status(topology)["subscriptions"] if s["name"] == "Store2")
    assert entry["status"] == "stopped" and any("validation" in p for p in entry["problems"]), entry
    assert _metric(SparksyncCollector(topology, NoAgents(), None), "sparksync_validation_failed", "Store2") == 1.0
    assert MergeAgent(topology, None, silent).run(MergeOptions(subscriptions=["Store2"])).ok   # running again
    # the way out status names: validate --checksum --repair; the next validation passes
    report = validate(topology, lambda: spark, "Sales", ["Store2"], checksum=True)
    assert not report.ok
    repair(topology, report)
    assert validate_on_schedule(topology, "Sales", ["Store2"])[0].result == "passed"
    entry = next(s for s in gather_status(topology)["subscriptions"] if s["name"] == "Store2")
    assert entry["status"] == "active" and entry["validation"]["result"] == "passed", entry


def test_a_validation_that_cannot_read_the_rows_is_a_failed_one_said_everywhere(service_demo):
    """Finding 3 of reliability round 5: a validation that errored (a value its column's type cannot be read as)
    was only in serve's log, and the store kept an old "passed". Now it is a failed validation, recorded with why:
    status, the roll-up and ``sparksync_validation_failed`` say it, until a validation passes again."""
    topology = load_config(service_demo / "sparksync.toml")
    assert MergeAgent(topology, None, silent).run(MergeOptions(subscriptions=["Store1"])).ok
    assert validate_on_schedule(topology, "Sales", ["Store1"])[0].result == "passed"
    first = "(SELECT min(BusinessEntityID) FROM Vendor)"
    was = sql(service_demo / "store1.db", f"SELECT ModifiedDate FROM Vendor WHERE BusinessEntityID = {first}")
    sql(service_demo / "store1.db", f"UPDATE Vendor SET ModifiedDate = 'not a time' WHERE BusinessEntityID = {first}")
    _forget_logged(service_demo / "store1.db")
    v = validate_on_schedule(topology, "Sales", ["Store1"])[0]
    assert v.result == "failed" and "could not be validated" in v.message and "ModifiedDate" in v.message, v
    entry = next(s for s in gather_status(topology)["subscriptions"] if s["name"] == "Store1")
    assert entry["status"] == "diverged" and "could not be validated" in entry["problems"][0], entry
    status = gather_status(topology)
    rolled = roll_up(status, AlertsConfig(), set(), dt.datetime.now(dt.UTC), cadences_of(topology))
    assert rolled["subscriptions"]["Store1"]["state"] == "error", rolled["subscriptions"]["Store1"]
    assert _metric(SparksyncCollector(topology, NoAgents(), None), "sparksync_validation_failed", "Store1") == 1.0
    sql(service_demo / "store1.db", f"UPDATE Vendor SET ModifiedDate = '{was[0][0]}' WHERE BusinessEntityID = {first}")
    _forget_logged(service_demo / "store1.db")
    assert validate_on_schedule(topology, "Sales", ["Store1"])[0].result == "passed"


def _forget_logged(path) -> None:
    """Every tracking log of the file emptied by hand: what was changed there is never recorded."""
    with connect(f"sqlite:///{path}") as r:
        script = empty_tracking_logs_sql(r)
    for stmt in script.strip().splitlines():
        sql(path, stmt.rstrip(";"))
