"""Shared fixtures: real SQLite files, throw-away PostgreSQL databases, one SparkSession per run.

PostgreSQL tests are not optional: under CI=true a test that cannot reach the server fails instead
of skipping (`make test` starts the server first, see scripts/ensure-services).
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Failpoints reach the Spark Python workers through the environment they inherit (see failpoints.py).
FAILPOINTS_FILE = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"sparksync-failpoints-{os.getpid()}")
os.environ["SPARKSYNC_FAILPOINTS"] = FAILPOINTS_FILE

PG_ADMIN_URL = os.environ.get("SPARKSYNC_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
IN_CI = os.environ.get("CI", "").lower() == "true"
DB_KINDS = ["sqlite", "postgresql"]


def _pg_problem() -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, connect_timeout=5) as c:
            c.execute("SELECT 1")
        return None
    except Exception as e:  # noqa: BLE001
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    problem = _pg_problem()
    if problem:
        msg = f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {problem} (run scripts/ensure-services)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    return PG_ADMIN_URL


class Databases:
    """Creates databases for one test and drops the PostgreSQL ones afterwards."""

    def __init__(self, tmp_path: Path, request):
        self.tmp_path = tmp_path
        self.request = request
        self.pg_created: list[str] = []

    def url(self, kind: str, name: str = "db") -> str:
        if kind == "sqlite":
            return f"sqlite:///{self.tmp_path / (name + '.db')}"
        admin = self.request.getfixturevalue("pg_admin_url")
        import psycopg

        dbname = f"sst_{name.lower()}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{dbname}"')
        self.pg_created.append(dbname)
        return admin.rsplit("/", 1)[0] + "/" + dbname

    def cleanup(self) -> None:
        if not self.pg_created:
            return
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as c:
            for db in self.pg_created:
                # a logical replication slot keeps its database (and the server's log): drop it first
                c.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s",
                          (db,))
                c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


@pytest.fixture
def dbs(tmp_path, request):
    d = Databases(tmp_path, request)
    yield d
    d.cleanup()


@pytest.fixture(params=DB_KINDS)
def kind(request) -> str:
    if request.param == "postgresql":
        request.getfixturevalue("pg_admin_url")
    return request.param


class Failpoints:
    """Arm failpoints for one test: ``failpoints("apply.before_commit S1:0")``; a point armed with
    ``!pause`` is awaited with ``failpoints.wait_paused(name, key)`` and let go with ``resume``."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, *points: str) -> None:
        from sparksync import failpoints as fp

        fp.arm(self.path, *points)

    def wait_paused(self, name: str, key: str = "", timeout: float = 120.0) -> None:
        from sparksync import failpoints as fp

        fp.wait_paused(self.path, name, key, timeout)

    def resume(self, name: str, key: str = "") -> None:
        from sparksync import failpoints as fp

        fp.resume(self.path, name, key)

    def clear(self) -> None:
        import glob

        for f in [self.path, *glob.glob(self.path + ".paused.*")]:
            if os.path.exists(f):
                os.remove(f)


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
