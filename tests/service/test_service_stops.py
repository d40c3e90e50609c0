"""Stopping ``sparksync serve`` in the middle of a round loses nothing (the demo's topology, SQLite files):

- SIGTERM while a download batch is applied (held inside its transaction by a failpoint): the service starts
  no new run, waits for the one in flight, which commits its batch, and exits 0;
- SIGTERM with a run that outlives ``[server] stop_grace_s``: it is cut off with the process, its transaction
  rolls back, and the next start applies the change, once;
- kill -9 inside the transaction: the next start applies the change, once;
- SIGTERM to the service's whole process group with Spark up (Ctrl-C at a terminal): Spark's JVM, in a session
  of its own, is not signalled; the service stops it and exits 0. And SIGTERM to the service and its JVM at once
  (a unit with systemd's default KillMode): the run the JVM held fails in one line, the service exits 0.

After each, every store holds the publisher's value, and ``status`` is ok with nothing pending or failed.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sparksync import failpoints as fp
from sparksync.cli.app import app
from tests.support.service import Service, service_config, sql, wait_until

pytestmark = pytest.mark.spark

STORES = ("store1.db", "store2.db", "store3.db")
POINT = "apply.before_commit Store1:0"


def price(db, product: str) -> float:
    return sql(db, "SELECT ListPrice FROM Product WHERE ProductID = ?", (product,))[0][0]


def change(demo, value: float) -> str:
    """A new price for one product at the publisher; its ProductID."""
    (pid,), = sql(demo / "hq.db", "SELECT min(ProductID) FROM Product")
    sql(demo / "hq.db", "UPDATE Product SET ListPrice = ? WHERE ProductID = ?", (value, pid))
    return pid


def converged(demo, pid: str, value: float) -> None:
    for db in STORES:
        wait_until(lambda db=db: price(demo / db, pid) == value, f"the price at {db}")
    result = CliRunner().invoke(app, ["status", "-c", str(demo / "stops.toml"), "--json"])
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    for s in status["subscriptions"]:
        if s["publication"] == "Sales":
            assert (s["pending_download"], s["pending_upload"], s["failed_download"], s["failed_upload"]) == (0, 0, 0, 0)


def next_start_converges(demo, cfg, log, pid: str, value: float) -> None:
    """The next start of serve (no failpoint) brings the change to every store, and stops cleanly."""
    svc = Service(cfg, log).start()
    try:
        converged(demo, pid, value)
    finally:
        assert svc.stop() == 0


@pytest.fixture
def stops(service_demo, tmp_path):
    """A service configuration for these tests, a failpoints file only its process reads, and its log."""
    cfg = service_config(service_demo, name="stops.toml", server={"stop_grace_s": 60})
    merged = CliRunner().invoke(app, ["merge", "-c", str(cfg)])   # nothing left over: the failpoint's batch is ours
    assert merged.exit_code == 0, merged.output
    points = str(tmp_path / "failpoints")
    open(points, "w").close()
    yield cfg, points, tmp_path / "serve.log"
    for f in glob.glob(points + ".paused.*"):       # a process cut off while paused leaves its marker
        os.remove(f)


def paused(points: str) -> bool:
    return bool(glob.glob(points + ".paused.*"))


def test_sigterm_waits_for_the_batch_in_flight_and_exits(service_demo, stops):
    cfg, points, log = stops
    fp.arm(points, POINT + " !pause")
    svc = Service(cfg, log, env={"SPARKSYNC_FAILPOINTS": points}).start()
    pid = change(service_demo, 1234.5)
    wait_until(lambda: paused(points), "the download to Store1 inside its transaction")
    assert price(service_demo / "store1.db", pid) != 1234.5
    svc.signal(signal.SIGTERM)
    svc.said("serve: stopping: no new run starts")
    assert svc.proc.poll() is None                 # waiting for the run in flight
    fp.resume(points, "apply.before_commit", "Store1:0")
    assert svc.wait() == 0
    assert "serve: stopped" in svc.text()
    assert price(service_demo / "store1.db", pid) == 1234.5       # the batch in flight was committed
    next_start_converges(service_demo, cfg, log, pid, 1234.5)


def test_sigterm_cuts_off_a_run_that_outlives_the_grace_and_the_next_start_resumes(service_demo, stops):
    cfg, points, log = stops
    short = service_config(service_demo, name="stops.toml", server={"stop_grace_s": 0.5})
    fp.arm(points, POINT + " !pause")
    svc = Service(short, log, env={"SPARKSYNC_FAILPOINTS": points}).start()
    pid = change(service_demo, 2345.5)
    wait_until(lambda: paused(points), "the download to Store1 inside its transaction")
    svc.signal(signal.SIGTERM)
    assert svc.wait() == 0
    # the runs still in flight, named together: the paused merge among them (a scheduled run may be in flight too)
    assert re.search(r"serve: (.+, )?merge agent Sales(, .+)? still running after 0\.5s: cut off", svc.text()), \
        svc.text()
    assert price(service_demo / "store1.db", pid) != 2345.5       # rolled back with the process
    next_start_converges(service_demo, cfg, log, pid, 2345.5)


def test_kill_9_inside_a_batch_loses_nothing(service_demo, stops):
    cfg, points, log = stops
    fp.arm(points, POINT + " !kill")
    svc = Service(cfg, log, env={"SPARKSYNC_FAILPOINTS": points}).start()
    pid = change(service_demo, 3456.5)
    assert svc.wait() == -signal.SIGKILL
    assert price(service_demo / "store1.db", pid) != 3456.5
    next_start_converges(service_demo, cfg, log, pid, 3456.5)


def _on_spark(service_demo) -> object:
    """The stops' configuration with every round on Spark (the JVM up under the service once a change moves); the
    publications other than Sales on a schedule that does not come round during a test."""
    return service_config(service_demo, name="on-spark.toml", server={"stop_grace_s": 60},
                          schedules={"Territories": "every 1h", "Reports": "every 1h"},
                          spark={"master": "local[2]", "driver_round_changes": 0})


def _spark_up(service_demo, log, value: float) -> tuple[Service, int]:
    """The service in a process group of its own, a change moved on Spark; the service and its JVM's pid. The
    JVM's start and its first jobs take seconds on a quiet machine, a minute or more on a loaded one: the wait is
    for the row, bounded generously."""
    svc = Service(_on_spark(service_demo), log, own_group=True).start()
    pid = change(service_demo, value)
    wait_until(lambda: price(service_demo / "store1.db", pid) == value, "the change at Store1, on Spark", timeout=240)
    return svc, svc.jvm()


def test_sigterm_to_the_process_group_reaches_the_service_not_its_jvm(service_demo, stops):
    _, _, log = stops
    svc, jvm = _spark_up(service_demo, log, 4567.5)
    assert os.getsid(jvm) != os.getsid(svc.proc.pid), "Spark's JVM shares the service's session"
    os.killpg(svc.proc.pid, signal.SIGTERM)
    assert svc.wait() == 0, svc.text()[-3000:]
    assert "serve: stopped" in svc.text() and "Traceback" not in svc.text()
    assert "JVM ended" not in svc.text() and "JVM had ended" not in svc.text()
    wait_until(lambda: not Path(f"/proc/{jvm}").exists(), "the JVM's end with the service")


def test_a_jvm_signalled_with_the_service_fails_its_run_in_one_line_and_the_service_exits_0(service_demo, stops):
    cfg, _, log = stops
    svc, jvm = _spark_up(service_demo, log, 5678.5)
    os.kill(svc.proc.pid, signal.SIGTERM)
    os.kill(jvm, signal.SIGTERM)
    assert svc.wait() == 0, svc.text()[-3000:]
    text = svc.text()
    assert "serve: stopped" in text and "Traceback" not in text and "ConnectionRefusedError: [Errno" not in text
    failed = [ln for ln in text.splitlines() if "run failed" in ln]
    assert all("Spark's JVM ended under this run" in ln for ln in failed), failed
    again = Service(cfg, log).start()          # the next start: what the cut run held arrives, status is ok again
    try:
        pid = change(service_demo, 6789.5)
        for db in STORES:
            wait_until(lambda db=db: price(service_demo / db, pid) == 6789.5, f"the price at {db}")
        wait_until(lambda: CliRunner().invoke(app, ["status", "-c", str(cfg)]).exit_code == 0, "status ok again")
    finally:
        assert again.stop() == 0
