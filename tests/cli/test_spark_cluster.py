"""Spark on a cluster that cannot run the command's jobs: one line naming the master and what to check, a
non-zero exit, and the same line in the history and in ``status``; never a Java stack, never a wait
without end."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sparksync.dialects import connect
from sparksync.provision import setup
from sparksync.run_history import gather_history
from sparksync.status import gather_status
from sparksync.topology import parse_topology
from tests.support.config import write_config

pytestmark = pytest.mark.spark

JAVA_NOISE = ("Traceback", "Exception in thread", "at org.apache", "Py4J", "java.lang.")


def closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def published(spark, tmp_path) -> dict:
    """Publisher P (SQLite, table T of 5 rows) and subscriber S1, set up; then a change at P to download."""
    pub = f"sqlite:///{tmp_path / 'p.db'}"
    with connect(pub) as r:
        r.execute('CREATE TABLE "T" ("id" INTEGER PRIMARY KEY, "v" TEXT)')
        r.executemany('INSERT INTO "T" VALUES (?, ?)', [(i, f"v{i}") for i in range(1, 6)])
    data = {
        "publisher": {"name": "P", "database": pub, "snapshot_dir": str(tmp_path / "snap")},
        "publications": [{"name": "Pub", "articles": [{"table": "T"}]}],
        "subscriptions": [{"name": "S1", "publication": "Pub", "database": f"sqlite:///{tmp_path / 's1.db'}"}],
    }
    setup(parse_topology(data, tmp_path), lambda: spark)
    with connect(pub) as r:
        r.execute('UPDATE "T" SET "v" = "v" || \'!\'')
    return data


def sparksync(cfg: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_MASTER", "SPARKSYNC_FAILPOINTS")}
    return subprocess.run([str(Path(sys.executable).with_name("sparksync")), *args, "-c", str(cfg)],
                          capture_output=True, text=True, env=env, timeout=120)


def test_an_unreachable_master_is_one_line_naming_it_and_what_history_and_status_keep(published, tmp_path):
    master = f"spark://127.0.0.1:{closed_port()}"
    data = {**published, "spark": {"master": master, "driver_round_changes": 0, "executor_wait_s": 2.0}}
    cfg = write_config(tmp_path, data)
    run = sparksync(cfg, "merge")
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert not [w for w in JAVA_NOISE if w in out], out
    errors = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, out
    message = errors[0].removeprefix("error: ")
    assert message.startswith(f"Spark master {master} cannot be reached") and "connection refused" in message
    assert "is the master running" in message
    topology = parse_topology(data, tmp_path)
    last = next(r for r in gather_history(topology)["runs"] if r["agent"] == "merge agent")
    assert (last["status"], last["message"]) == ("failed", message)
    s1 = next(s for s in gather_status(topology)["subscriptions"] if s["name"] == "S1")
    assert s1["status"] == "stopped" and s1["last_error"] == message
