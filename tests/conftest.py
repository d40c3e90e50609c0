"""Shared fixtures: real SQLite files, throw-away PostgreSQL databases, one SparkSession per run.
Their machinery, and every topology builder the tests share, is in tests/support.

PostgreSQL tests are not optional: under CI=true a test that cannot reach the server fails instead
of skipping (`make test` starts the server first, see scripts/ensure-services).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# The suite's JVMs (each test process's Spark, and those of the commands and services the tests start) live seconds
# to minutes: they compile with C1 only and collect garbage on one thread. Their second-tier compiler and parallel
# collector cost a Spark session a third more CPU than they save, on a suite that keeps both cores busy
# (README, "Development"). Nothing they run differs.
JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("SPARK_SUBMIT_OPTS", JVM_OPTS)
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", JVM_OPTS)        # the cluster tests' master and workers
# Failpoints reach the Spark Python workers through the environment they inherit (see failpoints.py).
FAILPOINTS_FILE = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"sparksync-failpoints-{os.getpid()}")
os.environ["SPARKSYNC_FAILPOINTS"] = FAILPOINTS_FILE
# tests.support is imported by its package name: the repository root on the path even when pytest is
# not started as `python -m pytest` from there
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.support.databases import PG_ADMIN_URL, databases, pg_problem  # noqa: E402
from tests.support.failpoints import Failpoints  # noqa: E402
from tests.support.object_store import CREDENTIALS  # noqa: E402

# the test object store's credentials, before Spark starts (tests/support/object_store.py)
os.environ.update(CREDENTIALS)

IN_CI = os.environ.get("CI", "").lower() == "true"
DB_KINDS = ["sqlite", "postgresql"]


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    problem = pg_problem(PG_ADMIN_URL)
    if problem:
        msg = f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {problem} (run scripts/ensure-services)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    return PG_ADMIN_URL


@pytest.fixture
def dbs(tmp_path, request):
    """Databases for one test (tests/support/databases.py), dropped after it."""
    with databases(tmp_path, lambda: request.getfixturevalue("pg_admin_url")) as d:
        yield d


@pytest.fixture(params=DB_KINDS)
def kind(request) -> str:
    if request.param == "postgresql":
        request.getfixturevalue("pg_admin_url")
    return request.param


@pytest.fixture
def failpoints():
    fp = Failpoints(FAILPOINTS_FILE)
    fp.clear()
    yield fp
    fp.clear()


@pytest.fixture(scope="session")
def spark():
    from sparksync.spark.session import spark_session, stop_spark

    s = spark_session("local[2]", app_name="sparksync-tests",
                      conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})
    yield s
    stop_spark()


@pytest.fixture(scope="session")
def built_demo(request, tmp_path_factory, worker_id) -> tuple[int, str, Path]:
    """``sparksync demo`` run once for the whole run (the first test process to need it runs it, under a file lock
    the others wait on): its exit code, its output (on one line, ``tests/support/cli.run``) and its folder. A test
    that changes the demo's databases works on a copy of its own (``shutil.copytree``: its URLs are relative)."""
    import fcntl

    from tests.support.cli import run

    root = tmp_path_factory.getbasetemp()
    root = root.parent if worker_id != "master" else root      # shared by the test processes of this run
    built = root / "demo-built"
    with open(root / "demo-built.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (built / "code").exists():
            request.getfixturevalue("spark")                   # the demo's setup runs Spark jobs
            code, out = run("demo", "--dir", str(built / "demo"))
            (built / "output").write_text(out, encoding="utf-8")
            (built / "code").write_text(str(code))
    return int((built / "code").read_text()), (built / "output").read_text(encoding="utf-8"), built / "demo"
