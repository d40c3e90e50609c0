"""Group labels land in distinct Spark partitions: the Murmur3 hash of spark/partitioning.py matches
Spark's own, checked against a running Spark."""

from __future__ import annotations

import pytest

from sparksync.spark.partitioning import group_labels, spark_int_hash


@pytest.mark.spark
def test_matches_spark(spark):
    from pyspark.sql import functions as F

    rows = spark.range(-500, 1500).select(F.col("id").cast("int").alias("v"),
                                          F.hash(F.col("id").cast("int")).alias("h")).collect()
    assert [spark_int_hash(r.v) for r in rows] == [r.h for r in rows]
    labels = group_labels(3)
    df = spark.createDataFrame([(v,) for v in labels for _ in range(4)], "g INT").repartition(3, "g")
    assert sorted(tuple(sorted({r.g for r in part})) for part in df.rdd.glom().collect()) == sorted((v,) for v in labels)
