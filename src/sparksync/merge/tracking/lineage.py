"""Lineage: a row's version vector {replica nickname: version}. Pure functions.

A local change sets the replica's own entry to the row's highest version + 1, so the entry with the
highest version names the last writer. Two versions of a row are compared entry by entry: one
dominates (it has seen everything the other has), they are equal, or they are concurrent (each has
something the other has not): a conflict.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import Enum

Lineage = dict[int, int]


class Relation(Enum):
    EQUAL = "equal"
    INCOMING_NEWER = "incoming_newer"    # incoming dominates local
    LOCAL_NEWER = "local_newer"          # local dominates incoming
    CONCURRENT = "concurrent"            # a conflict


def parse(value) -> Lineage:
    """From the metadata form ({"1": 3} as JSON text or a dict) to {1: 3}."""
    if value is None:
        return {}
    if isinstance(value, (str, bytes)):
        value = json.loads(value)
    return {int(k): int(v) for k, v in value.items()}


def to_json(lineage: Mapping[int, int]) -> dict[str, int]:
    return {str(k): int(v) for k, v in sorted(lineage.items())}


def dominates(a: Mapping[int, int], b: Mapping[int, int]) -> bool:
    """True when ``a`` has seen every change ``b`` has (a >= b entry by entry)."""
    return all(a.get(k, 0) >= v for k, v in b.items())


def compare(incoming: Mapping[int, int], local: Mapping[int, int]) -> Relation:
    up = dominates(incoming, local)
    down = dominates(local, incoming)
    if up and down:
        return Relation.EQUAL
    if up:
        return Relation.INCOMING_NEWER
    if down:
        return Relation.LOCAL_NEWER
    return Relation.CONCURRENT


def merge(a: Mapping[int, int], b: Mapping[int, int]) -> Lineage:
    """Entry-by-entry maximum: a version that has seen both."""
    out = dict(a)
    for k, v in b.items():
        if v > out.get(k, 0):
            out[k] = v
    return out


def bump(lineage: Mapping[int, int], nickname: int) -> Lineage:
    """The lineage after one more change at ``nickname``."""
    out = dict(lineage)
    out[nickname] = max(out.values(), default=0) + 1
    return out


def last_writer(lineage: Mapping[int, int]) -> int | None:
    """The replica that made the latest change (highest version; ties: lowest nickname)."""
    if not lineage:
        return None
    top = max(lineage.values())
    return min(k for k, v in lineage.items() if v == top)


def knows(lineage: Mapping[int, int], entry) -> bool:
    """Does a replica with ``lineage`` already have the column change ``entry`` = [nickname, version]?"""
    if entry is None:
        return True
    nick, version = int(entry[0]), int(entry[1])
    return lineage.get(nick, 0) >= version
