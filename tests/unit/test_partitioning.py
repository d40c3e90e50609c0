"""Group labels land in distinct Spark partitions: the Murmur3 hash matches Spark's own."""

from __future__ import annotations

import pytest

from sparksync.spark.partitioning import group_labels, partition_of, spark_int_hash


@pytest.mark.parametrize("n", [1, 2, 3, 8, 64])
def test_labels_cover_every_partition_once(n):
    labels = group_labels(n)
    assert len(set(labels)) == n
    assert sorted(partition_of(v, n) for v in labels) == list(range(n))


def test_known_values():
    # Spark 4.3: SELECT hash(0), hash(1), hash(-1), hash(2147483647)
    assert [spark_int_hash(v) for v in (0, 1, -1, 2147483647)] == [933211791, -559580957, -1604776387, 133916647]
