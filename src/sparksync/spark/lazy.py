"""A SparkSession made on first use, importing nothing of Spark: what an agent holds when its small rounds
run in its own process (``[spark] driver_round_changes``) and only a bigger round needs Spark."""

from __future__ import annotations


class LazySpark:
    """A SparkSession given, or a function making one on first use (an agent whose small rounds run in its
    own process starts Spark only for a round that needs it)."""

    def __init__(self, spark):
        self._session = None if callable(spark) else spark
        self._make = spark if callable(spark) else None

    def get(self):
        if self._session is None:
            assert self._make is not None
            self._session = self._make()
        return self._session
