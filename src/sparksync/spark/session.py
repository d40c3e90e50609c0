"""The one SparkSession factory.

``local[*]`` by default, the master from the config or ``SPARK_MASTER``; UI off; few shuffle
partitions (AQE on); Arrow on; workers run this interpreter (``PYSPARK_PYTHON``); Spark's JVM
logging kept to errors. On a cluster the executors must be able to import ``sparksync`` (ship a
packed virtual environment) and reach the SQLite files and snapshot folder (shared storage).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from pathlib import Path

from sparksync.errors import SparkUnavailable

_lock = threading.Lock()

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


def spark_session(master: str | None = None, app_name: str = "sparksync", conf: dict[str, str] | None = None):
    """Return the process's SparkSession, creating it on first use."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkUnavailable("this command runs Spark jobs and pyspark is not installed here: install the "
                               "publisher side with pip install 'sparksync[spark]' (and Java 17 or newer)") from None
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise SparkUnavailable("this command runs Spark jobs and no Java is found (neither JAVA_HOME nor java on the "
                               "PATH): install Java 17 or newer")
    os.environ["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")

    with _lock:
        active = SparkSession.getActiveSession()
        if active is not None:
            return active
        log4j = Path(__file__).with_name("log4j2.properties")
        java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Dlog4j.configurationFile=file:{log4j}"
        builder = SparkSession.builder.master(master or os.environ.get("SPARK_MASTER") or "local[*]").appName(app_name)
        settings = {**DEFAULT_CONF, "spark.driver.extraJavaOptions": java_opts,
                    "spark.executor.extraJavaOptions": java_opts, **(conf or {})}
        for k, v in settings.items():
            builder = builder.config(k, v)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        from sparksync.spark.datasource import ReplicaSource

        spark.dataSource.register(ReplicaSource)
        return spark


def stop_spark() -> None:
    from pyspark.sql import SparkSession

    s = SparkSession.getActiveSession()
    if s is not None:
        s.stop()
