"""What the API's functions share: a topology loaded (``load``), Spark made when first needed, progress said."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparksync.config import Topology
from sparksync.progress import Reporter, silent
from sparksync.topology import load_config, parse_topology

Progress = Reporter            # a callback of one line of progress


# -- a topology ---------------------------------------------------------------------------------------------
def load(source: str | Path | dict[str, Any], base_dir: str | Path = ".") -> Topology:
    """A topology: of a configuration file (``sparksync.toml``; relative paths are the file's folder's), or of the
    configuration as Python objects (the TOML's tables as dicts; relative paths relative to ``base_dir``). One
    ``ConfigurationError`` lists every problem."""
    if isinstance(source, dict):
        return parse_topology(source, Path(base_dir), "topology")
    return load_config(source)


def _spark(topology: Topology, spark: Any, serving: bool = False) -> Callable[[], Any]:
    """A function giving the SparkSession: ``spark`` as given (a SparkSession, or a function making one when
    first asked), or one made from ``[spark]`` when first asked (``serving``: ``serve``'s, capped on a cluster:
    ``SparkConfig.application_conf``)."""
    if callable(spark):
        return spark
    if spark is not None:
        return lambda: spark
    made: list[Any] = []

    def factory() -> Any:
        if not made:
            from sparksync.spark.session import spark_session

            made.append(spark_session(topology.spark_master, conf=topology.spark.application_conf(serving),
                                      executor_wait_s=topology.spark.executor_wait_s))
        return made[0]

    return factory


def _said(progress: Progress | None) -> Reporter:
    return progress or silent
