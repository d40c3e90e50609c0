"""Lineage: a row's version vector {replica nickname: version}. Pure functions.

A local change sets the replica's own entry to the row's highest version + 1, so the entry with the
highest version names the last writer. Two versions of a row are compared entry by entry: one
dominates (it has seen everything the other has), they are equal, or they are concurrent (each has
something the other has not): a conflict.
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from enum import Enum

Lineage = dict[int, int]

# The range a version may take, wherever a lineage comes from. A version counts the changes of one row
# (each change sets its replica's entry to the row's highest version + 1), so 2^40 is never reached by
# replication; a lineage beyond it was written by hand (an edited file), and storing it would end the
# row's history: SQLite's JSON turns an integer past 2^63 - 1 into an inexact float, PostgreSQL's next
# change of the row fails with "bigint out of range". Such a change is a failed change of its row.
MAX_VERSION = 1 << 40
# How far a replica's own entry may move above the highest version its destination knows of the row in
# one change: the replica's local changes of that row since (one per flush of its tracking log), which
# no honest replica makes a million of between two syncs. A claim beyond it is refused at the publisher.
MAX_ADVANCE = 1 << 20
_SUSPECT = re.compile(rf"\d{{{len(str(MAX_VERSION))},}}|[.eE+-]")    # what a lineage in range never holds


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


def out_of_range(value) -> str | None:
    """Why a lineage (JSON text or a dict) cannot be stored: an entry that is not replica nickname: version
    with a version in 0..``MAX_VERSION``; None when it can."""
    try:
        value = json.loads(value) if isinstance(value, (str, bytes)) else value
    except ValueError:
        return "its lineage is not JSON"
    if not isinstance(value, dict):
        return "its lineage is not a JSON object"
    for k, v in value.items():
        if not (str(k).isdigit() and len(str(k)) < 10):
            return f"its lineage names replica {str(k)[:24]!r}, which is not a replica nickname"
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_VERSION:
            return (f"its lineage claims version {str(v)[:24]} of replica {k}, outside the versions a lineage may "
                    f"hold (0 to 2^40)")
    return None


def suspects(texts: Sequence[str | None]) -> list[int]:
    """Positions of the lineage texts that may be out of range (``out_of_range`` says which are): one
    search over all of them at once, in C; none in a batch of lineages written by replication."""
    blob = "\x00".join([t or "" for t in texts])
    if not _SUSPECT.search(blob):
        return []
    starts = [0, *itertools.accumulate(len(t or "") + 1 for t in texts)]
    return sorted({bisect.bisect_right(starts, m.start()) - 1 for m in _SUSPECT.finditer(blob)})


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
