"""Partitions: reads cut into ranges of about the same size, and each apply group in a Spark
partition of its own.

``repartition(n, col)`` sends a row to partition ``pmod(murmur3(col, seed 42), n)``. Two group
labels 0 and 1 can hash to the same partition, leaving a core idle while one task applies twice the
work. So the agent labels group *k* with the smallest integer that Spark hashes to partition *k*;
the hash is Spark's Murmur3 x86_32 of a 4-byte int (``Murmur3_x86_32.hashInt``), reimplemented here
and checked against Spark's own ``hash()`` in the tests.
"""

from __future__ import annotations

SEED = 42
_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def spark_int_hash(value: int, seed: int = SEED) -> int:
    """Spark's ``hash(value)`` for an IntegerType value (a signed 32-bit result)."""
    k1 = (value & _MASK) * 0xCC9E2D51 & _MASK
    k1 = _rotl(k1, 15) * 0x1B873593 & _MASK
    h1 = (seed & _MASK) ^ k1
    h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def partition_of(value: int, partitions: int) -> int:
    """The partition ``repartition(partitions, col)`` puts an IntegerType ``value`` in."""
    return spark_int_hash(value) % partitions     # Python's % is already a non-negative pmod


def group_labels(partitions: int) -> list[int]:
    """Label k for group k: the smallest non-negative int that lands in partition k."""
    labels: dict[int, int] = {}
    candidate = 0
    while len(labels) < partitions:
        labels.setdefault(partition_of(candidate, partitions), candidate)
        candidate += 1
    return [labels[k] for k in range(partitions)]


MIN_ROWS_PER_READ = 20_000     # below this, one more read task costs more than it saves


def split_ranges(counts: list[tuple[int, int]], lo: int, hi: int, parts: int,
                 min_rows: int = MIN_ROWS_PER_READ) -> list[tuple[int, int]]:
    """Cut the range (lo, hi] of an ordered key (generations, xact_seqnos) into at most ``parts``
    ranges holding about as many rows each. ``counts``: (key, rows) in ascending key order; a key's
    rows are never split, and no range is empty."""
    total = sum(n for _, n in counts)
    parts = max(1, min(parts, len(counts), -(-total // min_rows) if total else 1))
    if parts == 1:
        return [(lo, hi)]
    ranges: list[tuple[int, int]] = []
    start, acc = lo, 0
    for key, n in counts[:-1]:        # never cut after the last key: no empty read
        acc += n
        if acc >= total * (len(ranges) + 1) / parts and len(ranges) < parts - 1:
            ranges.append((start, key))
            start = key
    ranges.append((start, hi))
    return ranges
