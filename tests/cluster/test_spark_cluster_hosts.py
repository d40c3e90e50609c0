"""sparksync on a Spark standalone cluster whose executors know nothing of the driver's host: a master and two
workers (Spark's own, from pyspark), each worker with a working directory of its own, away from the driver's; the
executors' Python is the archive ``sparksync cluster-pack`` made, shipped with each application (``spark.archives``)
and unpacked by every executor; no path of the driver's is given to them. ``setup`` (the snapshot and the
subscribers' initialization on the executors), a change merged on Spark, a worker killed with kill -9 while a merge
task holds a batch open (Spark runs the task again on the other worker: nothing lost, nothing applied twice), and a
validation with checksums. The snapshot is written by the executors into an object store (an S3-compatible server,
its credentials given to the executors through ``[spark] conf``, never in the workers' environment). The SQLite files
are on this one machine's disk, which the "hosts" share as they would share a network file system.

Its own target (``make test-cluster``; ``make test`` runs it beside the suite): the archive and the cluster take a
minute."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pyspark
import pytest

from sparksync import failpoints
from tests.support.config import write_config
from tests.support.object_store import CREDENTIALS, object_store, s3_folder
from tests.support.service import wait_until
from tests.support.web import free_port

pytestmark = [pytest.mark.cluster]

EXE = str(Path(sys.executable).with_name("sparksync"))
SPARK_CLASS = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
STORES = ("s1", "s2", "s3")
POINT = "apply.before_commit S1:0"


def _run(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    p = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=timeout,
                       env={k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "SPARKSYNC_FAILPOINTS")}
                       | (env or {}))
    assert "Traceback" not in p.stdout + p.stderr, p.stderr[-3000:]
    return p


class Cluster:
    """A standalone master and two workers, each in a process group of its own (a worker is killed whole)."""

    def __init__(self, folder: Path):
        self.folder, self.port, self.ui = folder, free_port(), free_port()
        self.master = f"spark://127.0.0.1:{self.port}"
        self.procs: dict[str, subprocess.Popen] = {}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_HOME", "AWS_"))} | {
            "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(Path(pyspark.__file__).parent)}
        self._start("master", [SPARK_CLASS, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.port), "--webui-port", str(self.ui)], env)
        for w in ("w1", "w2"):
            work = folder / w
            work.mkdir()
            self._start(w, [SPARK_CLASS, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                            "--memory", "1g", "--work-dir", str(work), "--webui-port", "0", self.master], env, cwd=work)
        wait_until(lambda: self.alive() == 2, "two workers registered at the master", timeout=120)

    def _start(self, name: str, command: list[str], env: dict, cwd: Path | None = None) -> None:
        log = open(self.folder / f"{name}.log", "wb")      # noqa: SIM115 - the child keeps its own descriptor
        self.procs[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            cwd=cwd or self.folder, start_new_session=True)
        log.close()

    def alive(self) -> int:
        try:
            state = httpx.get(f"http://127.0.0.1:{self.ui}/json/", timeout=2.0).json()
        except (httpx.HTTPError, ValueError):
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def kill(self, name: str) -> None:
        os.killpg(self.procs[name].pid, signal.SIGKILL)       # the worker, its executor and the executor's Pythons
        self.procs[name].wait()

    def stop(self) -> None:
        for p in reversed(list(self.procs.values())):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cluster")
    driver = folder / "driver"
    driver.mkdir()
    packed = _run("cluster-pack", "--output", str(folder / "env.tar.gz"))
    assert packed.returncode == 0, packed.stderr
    with sqlite3.connect(driver / "hq.db") as db:
        db.execute("CREATE TABLE T (id INTEGER PRIMARY KEY, v TEXT, n INTEGER)")
        db.executemany("INSERT INTO T VALUES (?, ?, ?)", [(i, f"v{i}", i) for i in range(1, 3001)])
    with object_store("snapshots") as options:
        cluster = Cluster(folder)
        points = folder / "failpoints"
        points.touch()
        # the snapshots in an object store, its credentials given to the executors from the environment
        cfg = write_config(driver, {
            "spark": {"master": cluster.master, "driver_round_changes": 0, "executor_wait_s": 120,
                      "conf": {"spark.archives": f"{folder / 'env.tar.gz'}#sparksync_env",
                               "spark.pyspark.python": "./sparksync_env/bin/python",
                               "spark.cores.max": "2", "spark.executor.cores": "1", "spark.executor.memory": "512m",
                               "spark.executor.extraJavaOptions": os.environ.get("SPARK_SUBMIT_OPTS", ""),
                               "spark.executorEnv.SPARKSYNC_FAILPOINTS": str(points),
                               **{f"spark.executorEnv.{k}": f"${{{k}}}" for k in CREDENTIALS}}},
            "publisher": {"name": "HQ", "database": f"sqlite:///{driver / 'hq.db'}",
                          "snapshot_dir": f"s3://snapshots/hq?{options}"},
            "publications": [{"name": "P", "articles": [{"table": "T"}]}],
            "subscriptions": [{"name": s.upper(), "publication": "P", "database": f"sqlite:///{folder / s}.db"}
                              for s in STORES]})
        try:
            yield cluster, cfg, folder, points, options
        finally:
            cluster.stop()


def _rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT id, v, n FROM T ORDER BY id").fetchall()


def test_setup_runs_on_executors_that_run_the_shipped_python(world):
    cluster, cfg, folder, _, options = world
    p = _run("setup", "-c", str(cfg))
    assert p.returncode == 0, p.stderr[-3000:]
    for s in STORES:
        assert _rows(folder / f"{s}.db") == _rows(folder / "driver" / "hq.db")
    unpacked = [p for w in ("w1", "w2") for p in (folder / w).glob("app-*/*/sparksync_env/bin/python")]
    assert unpacked, "no executor unpacked the shipped environment"
    assert {p.relative_to(folder).parts[0] for p in unpacked} == {"w1", "w2"}, "both workers' executors ran"
    snapshots = s3_folder(options, "snapshots", "hq/P")
    current = snapshots.read("CURRENT").decode().strip()
    written = snapshots.child(current).listing("articles")[1]
    assert written and snapshots.child(current).listing(f"articles/{written[0]}")[0], "no snapshot file in the store"
    assert not (folder / "driver" / "snap").exists() and not list(folder.glob("snap*")), "a snapshot on local disk"


def test_a_worker_killed_under_a_merge_task_loses_nothing_and_applies_nothing_twice(world):
    cluster, cfg, folder, points, _ = world
    with sqlite3.connect(folder / "driver" / "hq.db") as db:
        db.execute("UPDATE T SET n = n + 1000 WHERE id <= 500")
    failpoints.arm(str(points), POINT + " !pause")
    merge = subprocess.Popen([EXE, "merge", "-c", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env={k: v for k, v in os.environ.items()
                                             if k not in ("PYSPARK_PYTHON", "SPARKSYNC_FAILPOINTS")})
    try:
        failpoints.wait_paused(str(points), *POINT.split(), timeout=240)
        marker = Path(failpoints.pause_marker(str(points), *POINT.split()))
        held_by = int(marker.read_text().split()[0])
        worker = Path(os.readlink(f"/proc/{held_by}/cwd")).relative_to(folder).parts[0]
        cluster.kill(worker)                                   # kill -9 under the open batch
        marker.unlink(missing_ok=True)
        out, _ = merge.communicate(timeout=300)
    finally:
        if merge.poll() is None:
            merge.kill()
    assert merge.returncode == 0, out[-3000:]
    assert "Traceback" not in out
    hq = _rows(folder / "driver" / "hq.db")
    for s in STORES:
        assert _rows(folder / f"{s}.db") == hq, f"{s} differs from HQ"
    other = "w2" if worker == "w1" else "w1"
    assert cluster.procs[other].poll() is None and cluster.alive() == 1


def test_a_validation_with_checksums_on_the_one_worker_left(world):
    _, cfg, _, _, _ = world
    p = _run("validate", "-c", str(cfg), "--checksum")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
