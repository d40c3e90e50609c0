"""Before a session on a cluster is handed out: a standalone master that takes no connection, and a cluster
that gives the application no executor within ``[spark] executor_wait_s``, stop the command in one line
naming the master (spark/session.py); an executor that comes in time, or a master that listens, does not."""

from __future__ import annotations

import socket
import time

import pytest

from sparksync.errors import ConfigurationError, SparkClusterUnavailable, SparkUnavailable
from sparksync.spark.session import _await_executor, _is_local, _not_started, _reach_master
from sparksync.topology import parse_topology

MINIMAL = {"publisher": {"name": "P", "database": "sqlite:///p.db"}, "publications": [], "subscriptions": []}


class FakeSession:
    """What ``_await_executor`` reads of a SparkSession: its conf and its executors (the driver first), the
    executors joining at the ``joins_at``-th look (None: never); and whether it was stopped."""

    def __init__(self, joins_at: int | None, conf: dict[str, str] | None = None):
        self.joins_at, self.looks, self.stopped, self.conf = joins_at, 0, False, conf or {}
        self.sparkContext = self
        self._jsc = self

    # SparkContext / JavaSparkContext / SparkStatusTracker, as far as they are used
    def getConf(self):
        return self.conf

    def sc(self):
        return self

    def statusTracker(self):
        return self

    def getExecutorInfos(self):
        self.looks += 1
        return ["driver", "executor"] if self.joins_at is not None and self.looks >= self.joins_at else ["driver"]

    def stop(self):
        self.stopped = True


def test_an_executor_that_joins_in_time_is_waited_for():
    s = FakeSession(joins_at=3)
    _await_executor(s, "spark://m:7077", 30.0)
    assert s.looks == 3 and not s.stopped


def test_no_executor_in_time_stops_the_application_and_names_the_master_and_what_holds_its_cores():
    s = FakeSession(joins_at=None)
    t0 = time.monotonic()
    with pytest.raises(SparkClusterUnavailable) as err:
        _await_executor(s, "spark://m:7077", 0.3)
    assert 0.3 <= time.monotonic() - t0 < 5.0
    assert s.stopped
    message = err.value.message
    assert "\n" not in message and message.startswith("Spark master spark://m:7077 gave this application no executor")
    assert "spark.cores.max" in message and "executor_wait_s" in message
    assert err.value.code == "spark_cluster" and err.value.transient


def test_a_wait_past_two_seconds_is_said_once_naming_the_master_and_its_bound(monkeypatch):
    import sparksync.spark.session as session

    monkeypatch.setattr(session, "SAY_WAITING_S", 0.05)
    said: list[str] = []
    with pytest.raises(SparkClusterUnavailable):
        _await_executor(FakeSession(joins_at=None), "spark://m:7077", 0.4, said.append)
    assert said == ["waiting for Spark master spark://m:7077 to give this application an executor (up to 0.4 s: "
                    "[spark] executor_wait_s; its workers' cores may all be held by another application)"]
    quick: list[str] = []
    _await_executor(FakeSession(joins_at=1), "spark://m:7077", 30.0, quick.append)
    assert quick == []


def test_serve_on_a_cluster_takes_at_most_serve_cores_max_unless_conf_says_otherwise(tmp_path):
    cluster = parse_topology({**MINIMAL, "spark": {"master": "spark://m:7077"}}, tmp_path).spark
    assert cluster.application_conf(serving=True) == {"spark.cores.max": "4"}
    assert cluster.application_conf() == {}                      # a command run by hand: as configured
    capped = parse_topology({**MINIMAL, "spark": {"master": "spark://m:7077", "serve_cores_max": 2,
                                                  "conf": {"spark.executor.cores": "1"}}}, tmp_path).spark
    assert capped.application_conf(serving=True) == {"spark.executor.cores": "1", "spark.cores.max": "2"}
    own = parse_topology({**MINIMAL, "spark": {"master": "spark://m:7077", "conf": {"spark.cores.max": "8"}}},
                         tmp_path).spark
    assert own.application_conf(serving=True) == {"spark.cores.max": "8"}
    assert parse_topology(MINIMAL, tmp_path).spark.application_conf(serving=True) == {}     # local[*]: no cluster


def test_dynamic_allocation_from_no_executor_has_none_to_wait_for():
    s = FakeSession(joins_at=None, conf={"spark.dynamicAllocation.enabled": "true"})
    _await_executor(s, "yarn", 0.1)
    assert s.looks == 0 and not s.stopped


def test_a_standalone_master_must_take_connections_at_one_of_its_addresses():
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))
        up, down = listening.getsockname()[1], closed.getsockname()[1]
        closed.close()
        _reach_master(f"spark://127.0.0.1:{up}", 5.0)
        _reach_master(f"spark://127.0.0.1:{down},127.0.0.1:{up}", 5.0)       # a standby master answers
        with pytest.raises(SparkClusterUnavailable) as err:
            _reach_master(f"spark://127.0.0.1:{down}", 5.0)
    assert err.value.message.startswith(f"Spark master spark://127.0.0.1:{down} cannot be reached "
                                        f"(127.0.0.1:{down}: connection refused): is the master running")


def test_local_masters_wait_for_nothing():
    assert _is_local("local") and _is_local("local[*]") and _is_local("local[2,3]")
    assert not _is_local("local-cluster[1,1,1024]") and not _is_local("spark://m:7077") and not _is_local("yarn")


def test_executor_wait_s_is_a_positive_number_of_seconds_60_by_default(tmp_path):
    assert parse_topology(MINIMAL, tmp_path).spark.executor_wait_s == 60.0
    assert parse_topology({**MINIMAL, "spark": {"executor_wait_s": 5}}, tmp_path).spark.executor_wait_s == 5.0
    with pytest.raises(ConfigurationError, match="spark.executor_wait_s"):
        parse_topology({**MINIMAL, "spark": {"executor_wait_s": 0}}, tmp_path)


class JavaError(Exception):
    """What py4j raises for an exception of the JVM: its Java exception, whose ``toString`` is one line."""

    def __init__(self, java: str):
        super().__init__("An error occurred while calling None.org.apache.spark.sql.classic.SparkSession.\n"
                         f": {java}\n\tat org.apache.spark.SparkContext.<init>(SparkContext.scala:603)")
        self.java_exception = self
        self._java = java

    def toString(self) -> str:  # noqa: N802 - the Java method's name
        return self._java


def test_a_context_that_cannot_start_is_one_line_with_spark_s_reason_and_the_master():
    local = _not_started("local[2]", JavaError("org.apache.spark.SparkException: Invalid executor memory 1x"))
    assert isinstance(local, SparkUnavailable)
    assert local.message == "Spark could not start (local[2]): SparkException: Invalid executor memory 1x"
    gave_up = _not_started("spark://m:7077", JavaError(
        "java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext."))
    assert isinstance(gave_up, SparkClusterUnavailable)
    assert gave_up.message.startswith("Spark master spark://m:7077 never took this application")
    other = _not_started("yarn", JavaError("org.apache.spark.SparkException: Could not parse Master URL: 'yarn'"))
    assert other.message == ("Spark could not start the application on master yarn: SparkException: Could not parse "
                             "Master URL: 'yarn'")
    assert all("\n" not in e.message and "at org.apache" not in e.message for e in (local, gave_up, other))
