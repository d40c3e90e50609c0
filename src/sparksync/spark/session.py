"""The one SparkSession factory.

``local[*]`` by default, the master from the config or ``SPARK_MASTER``; UI off; few shuffle
partitions (AQE on); Arrow on; workers run this interpreter (``PYSPARK_PYTHON``), or on a cluster the one
``spark.pyspark.python`` names (a packed environment shipped with ``spark.archives``); Spark's JVM logging kept to
errors (its configuration file given to the driver only: no executor is told a path of this host). On a cluster
the executors must be able to import ``sparksync`` (the shipped environment) and reach the SQLite files and
snapshot folder (shared storage). Spark's JVM runs in a session of its own (``_own_jvm``).

On a cluster (any master but ``local``) a session is handed out only once the cluster can run its
tasks, within ``[spark] executor_wait_s``: a standalone master that cannot be reached is refused before
the JVM tries (Spark would try for a minute, then fail with a Java stack that never names it), and an
application the cluster gives no executor (every core held by other applications, e.g. ``sparksync
serve``'s warm session) is stopped (Spark would let its first job wait for one without end, saying so
only in a warning). Either is one :class:`~sparksync.errors.SparkClusterUnavailable` naming the master.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sparksync.config import SparkConfig
from sparksync.errors import SparkClusterUnavailable, SparkUnavailable

_lock = threading.Lock()
EXECUTOR_WAIT_S: float = SparkConfig.model_fields["executor_wait_s"].default     # [spark] executor_wait_s

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.pythonUDF.arrow.enabled": "true",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.python.worker.reuse": "true",
    "spark.sql.sources.partitionOverwriteMode": "static",
}


def spark_session(master: str | None = None, app_name: str = "sparksync", conf: dict[str, str] | None = None,
                  executor_wait_s: float = EXECUTOR_WAIT_S, report: Callable[[str], None] | None = None):
    """Return the process's SparkSession, creating it on first use; on a cluster, once it has an executor
    (the module doc), waiting at most ``executor_wait_s`` seconds (said once to ``report`` when it waits)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkUnavailable("this command runs Spark jobs and pyspark is not installed here: install the "
                               "publisher side with pip install 'sparksync[spark]' (and Java 17 or newer)") from None
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise SparkUnavailable("this command runs Spark jobs and no Java is found (neither JAVA_HOME nor java on the "
                               "PATH): install Java 17 or newer")
    # the executors' Python: [spark] conf's spark.pyspark.python (on a cluster, the shipped environment's:
    # docs/operations.md), else PYSPARK_PYTHON, else this interpreter (local mode, one host)
    os.environ["PYSPARK_PYTHON"] = ((conf or {}).get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
                                    or sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    url = master or os.environ.get("SPARK_MASTER") or "local[*]"

    with _lock:
        active = SparkSession.getActiveSession()
        if active is not None:
            return active
        if url.startswith("spark://"):
            _reach_master(url, executor_wait_s)
        log4j = Path(__file__).with_name("log4j2.properties")
        java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Dlog4j.configurationFile=file:{log4j}"
        builder = SparkSession.builder.master(url).appName(app_name)
        settings = {**DEFAULT_CONF, "spark.driver.extraJavaOptions": java_opts, **(conf or {})}
        if _is_local(url):          # the executors are this JVM; a cluster's run where no path of this host exists
            settings.setdefault("spark.executor.extraJavaOptions", java_opts)
        for k, v in settings.items():
            builder = builder.config(k, v)
        try:
            _own_jvm(url, app_name, settings)
            spark = builder.getOrCreate()
        except Exception as e:  # noqa: BLE001 - Spark's reason, in one line (its log of it is off)
            raise _not_started(url, e) from None
        spark.sparkContext.setLogLevel("ERROR")
        _quiet_accumulator_server(spark.sparkContext)
        if not _is_local(url):
            _await_executor(spark, url, executor_wait_s, report)
        from sparksync.spark.datasource import ReplicaSource

        spark.dataSource.register(ReplicaSource)
        return spark


def _own_jvm(url: str, app_name: str, settings: dict[str, str]) -> None:
    """Spark's JVM started in a session of its own (``setsid``): a signal to this process's group (Ctrl-C at a
    terminal, ``kill -TERM -PGID``, a service manager's stop) reaches this process, which stops Spark when its runs
    in flight are done, and not the JVM under them. The JVM still ends with this process: it exits when its
    standard input, a pipe from here, closes."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:         # a JVM this process started before (a session stopped since)
        return
    conf = SparkConf().setMaster(url).setAppName(app_name).setAll(list(settings.items()))
    popen: dict[str, object] = {"start_new_session": True}
    home = _driver_home(url, settings.get("spark.pyspark.python"))
    if home is not None:
        popen["cwd"] = home
    SparkContext._ensure_initialized(gateway=launch_gateway(conf, popen_kwargs=popen))


def _driver_home(url: str, python: str | None) -> str | None:
    """On a cluster whose executors run a shipped environment (``spark.pyspark.python`` a path inside the archive's
    folder, ``./sparksync_env/bin/python``): the Python processes Spark's JVM starts on this host (the planning of a
    Python data source's reads) run the same relative path. The JVM then works in a folder of its own where that
    folder is this process's environment (a link to ``sys.prefix``), removed when the process ends."""
    if not python or os.path.isabs(python) or _is_local(url):
        return None
    alias = Path(python).parts[0]
    home = Path(tempfile.mkdtemp(prefix="sparksync-driver-"))
    (home / alias).symlink_to(sys.prefix, target_is_directory=True)
    atexit.register(shutil.rmtree, home, True)
    return str(home)


def _quiet_accumulator_server(sc) -> None:
    """PySpark's accumulator server (a thread of this process the JVM connects to) prints a traceback when the JVM
    ends under it (a connection cut short): what that means is said once, by the run it failed (``failures.jvm_ended``)
    or by ``serve``'s stop."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda request, client_address: None


def _is_local(master: str) -> bool:
    """Spark in this process (``local``, ``local[N]``, ``local[N,F]``): no master, no executors to wait for."""
    return master == "local" or master.startswith("local[")


def _not_started(url: str, e: Exception) -> SparkUnavailable | SparkClusterUnavailable:
    """Spark could not make its context: the reason, one line (the Java exception's class and message)."""
    java = getattr(e, "java_exception", None)
    text = (str(java.toString()) if java is not None else str(e)).strip()
    name, sep, rest = (text.splitlines()[0] if text else type(e).__name__).partition(": ")
    reason = f"{name.rsplit('.', 1)[-1]}{sep}{rest}"
    if _is_local(url):
        return SparkUnavailable(f"Spark could not start ({url}): {reason}")
    if url.startswith("spark://"):
        from pyspark import __version__

        if "stopped SparkContext" in reason or reason.startswith("NullPointerException"):
            # killed while it registered: the master never answered Spark's tries (about a minute), or refused it
            return SparkClusterUnavailable(f"Spark master {url} never took this application (Spark gave up registering "
                                           f"it): is a Spark {__version__} master listening at that address, not "
                                           "another service?", obj=url)
        return SparkClusterUnavailable(f"Spark master {url} did not take this application ({reason}): is a Spark "
                                       f"{__version__} master running at that address?", obj=url)
    return SparkClusterUnavailable(f"Spark could not start the application on master {url}: {reason}", obj=url)


def _reach_master(url: str, wait_s: float) -> None:
    """A standalone master (``spark://host:port``, or several for a standby: ``spark://h1:p1,h2:p2``) takes
    connections at one of its addresses at least; else the command stops here, naming it."""
    deadline = time.monotonic() + wait_s
    problems = []
    for address in url[len("spark://"):].split(","):
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            host, port = address.strip(), "7077"
        try:
            with socket.create_connection((host.strip("[]"), int(port)),
                                          timeout=max(0.1, deadline - time.monotonic())):
                return
        except OSError as e:
            problems.append(f"{host}:{port}: {_why(e)}")
    raise SparkClusterUnavailable(f"Spark master {url} cannot be reached ({'; '.join(problems)}): is the master "
                                  "running, and is that address and port reachable from this host?", obj=url)


def _why(e: OSError) -> str:
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, TimeoutError):
        return "no answer"
    if isinstance(e, socket.gaierror):
        return "unknown host"
    return e.strerror or type(e).__name__


SAY_WAITING_S = 2.0      # a cluster slower than this to give an executor: the wait is said (once)


def _await_executor(spark, url: str, wait_s: float, report: Callable[[str], None] | None = None) -> None:
    """Until the cluster gives this application an executor (Spark lists the driver with them: two entries).
    None by the deadline: the application is stopped (its registration at the master goes with it) and the
    command stops, naming the master and what may hold its cores."""
    sc = spark.sparkContext
    if _on_demand(sc.getConf()):
        return
    tracker = sc._jsc.sc().statusTracker()
    start = time.monotonic()
    deadline, said = start + wait_s, report is None
    while len(tracker.getExecutorInfos()) < 2:
        if not said and report is not None and time.monotonic() - start >= SAY_WAITING_S:
            said = True
            report(f"waiting for Spark master {url} to give this application an executor (up to {wait_s:g} s: "
                   "[spark] executor_wait_s; its workers' cores may all be held by another application)")
        if time.monotonic() >= deadline:
            spark.stop()
            raise SparkClusterUnavailable(
                f"Spark master {url} gave this application no executor in {wait_s:g} s ([spark] executor_wait_s): "
                "are its workers running, with free cores and memory, or does another application hold them all "
                "(sparksync serve keeps its executors: cap each application with spark.cores.max in [spark] conf)?",
                obj=url)
        time.sleep(0.1)


def _on_demand(conf) -> bool:
    """Dynamic allocation starting from no executor: the first job asks for them, there is none to wait for."""
    if (conf.get("spark.dynamicAllocation.enabled") or "false").lower() != "true":
        return False
    return all(int(conf.get(k) or 0) == 0 for k in ("spark.dynamicAllocation.minExecutors",
                                                     "spark.dynamicAllocation.initialExecutors",
                                                     "spark.executor.instances"))


def stop_spark() -> None:
    from pyspark.sql import SparkSession

    s = SparkSession.getActiveSession()
    if s is not None:
        s.stop()
