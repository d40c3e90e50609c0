"""Work the driver has already laid out, run as one Spark task.

PySpark hands a task's Python worker back to its pool only when the task has read its input to the end
(the worker checks for the end of its stream after the task; ``spark.python.worker.reuse``). A task that
ignores its input, as one that only calls a function the driver chose does, leaves its worker to exit:
the next task starts a Python worker and imports sparksync, pyarrow and pandas again, about half a second
on this project's test machine for every round of a merge. The task below reads its one seed first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def in_one_task(spark, run: Callable[[], Iterable[Any]]) -> list[Any]:
    """``run()``'s items, computed in one Spark task (``run`` picklable: a closure over what the driver
    fixed, so a retried task does the same work), in a Python worker the next task reuses."""
    def task(seed):
        for _ in seed:          # the input read to its end: the worker goes back to the pool (module doc)
            pass
        return run()

    return spark.sparkContext.parallelize([0], 1).mapPartitions(task).collect()
