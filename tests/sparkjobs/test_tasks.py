"""Work the driver laid out, run as one Spark task (``spark.tasks.in_one_task``): its Python worker is
reused by the next task (a worker that exits after every task costs each merge round a process start and
its imports)."""

from __future__ import annotations

import os

import pytest

from sparksync.spark.tasks import in_one_task

pytestmark = pytest.mark.spark

RUNS = "SPARKSYNC_TEST_TASKS_IN_THIS_WORKER"


def test_the_next_task_runs_in_a_worker_that_ran_one_before(spark):
    def runs_in_this_worker() -> list[int]:     # defined here: sent by value (the tests are no module of the worker)
        n = int(os.environ.get(RUNS, "0")) + 1  # the worker process's own environment lives as long as it does
        os.environ[RUNS] = str(n)
        return [n]

    # the pool may hold idle workers of earlier tests, taken first: a few rounds reach a worker used here
    runs = [in_one_task(spark, runs_in_this_worker)[0] for _ in range(8)]
    assert max(runs) >= 2, f"every task started a new Python worker: {runs}"


def test_what_the_task_returns_arrives_whole(spark):
    assert in_one_task(spark, lambda: [{"a": 1}, {"b": [2, 3]}]) == [{"a": 1}, {"b": [2, 3]}]
