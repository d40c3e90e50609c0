"""Read and apply at once in ``sparksync serve``: a transactional publication's log reader wakes its distribution
agent after each batch it stored, so a subscription on the ``continuous`` schedule gets the batch at once instead
of after the agent's idle wait; one on a timed schedule keeps its times. The scheduler runs in this process
(no Spark: every round in the driver), on SQLite files."""

from __future__ import annotations

import time

import pytest

from sparksync import schedule
from sparksync.locks import DISTRIBUTE, LOGREADER
from sparksync.provision import setup
from sparksync.service.scheduler import Scheduler
from sparksync.topology import parse_topology
from tests.support.transactional import build, vendor_rows


def _arrived(tx, name: str, vendor: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r[0] == vendor for r in tx.subscriber_rows(name)):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.spark
def test_a_stored_batch_wakes_the_continuous_distribution_agent_only(spark, dbs, tmp_path, monkeypatch):
    # an idle continuous agent looks again only after 10 minutes: a row that arrives sooner was woken for
    monkeypatch.setattr(schedule, "CONTINUOUS_IDLE", 600.0)
    tx = build(dbs, tmp_path, "sqlite", {"Live": "sqlite", "Hourly": "sqlite"})
    data = tx.data
    data["publications"][0]["agent_schedule"] = "every 1s"           # the log reader
    for s in data["subscriptions"]:
        s["agent_schedule"] = "continuous" if s["name"] == "Live" else "every 1h"
    tx.topology = topology = parse_topology(data, tmp_path)
    setup(topology, lambda: spark)
    sched = Scheduler(topology, None)
    sched.start()
    try:
        def runs(agent: str) -> int:
            return sum(st.runs for st in sched.states if st.worker.agent == agent)

        deadline = time.monotonic() + 60
        while (runs(DISTRIBUTE) < 2 or runs(LOGREADER) < 1) and time.monotonic() < deadline:
            time.sleep(0.05)                  # both subscriptions' first runs: nothing to deliver; idle from now
        idle = {st.worker.name: list(st.next_due) for st in sched.states if st.worker.agent == DISTRIBUTE}
        tx.publish(vendor_rows("sqlite", [500]))
        assert _arrived(tx, "Live", 500), "the log reader's batch did not wake the continuous distribution agent"
        assert 500 not in [r[0] for r in tx.subscriber_rows("Hourly")]     # its hour is not up
        (dist,) = [st for st in sched.states if st.worker.agent == DISTRIBUTE]
        hourly = [i for i, g in enumerate(dist.worker.groups) if g.subscriptions == ("Hourly",)]
        assert [dist.next_due[i] for i in hourly] == [idle[dist.worker.name][i] for i in hourly]
    finally:
        sched.stop(30)
