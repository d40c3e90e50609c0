"""What one direction of a merge session is made of, as data the Spark tasks receive: the generation
batches of each source, the destinations that apply them, and the context every task needs.

Everything here is built on the driver before the Spark stage and not changed afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from sparksync.merge.apply.decide import ArticleRules
from sparksync.merge.conflicts.resolvers import Replicas
from sparksync.merge.session.changes import ALL_PARTITIONS, READ_ERROR_GENERATION


class Route(NamedTuple):
    """Changes of ``source`` in ``generation`` go to ``destination``, in its batch ``seq``; those whose
    (tablenick, rowguid) is in (``after``, ``upto``] when the generation is cut across batches by key."""

    source: str
    generation: int
    destination: str
    order: int                  # the source's place in the session (upload: configuration order)
    seq: int
    after: tuple[int, str] | None = None
    upto: tuple[int, str] | None = None

    @property
    def keyset(self) -> bool:
        return self.after is not None or self.upto is not None


@dataclass
class BatchInfo:
    source: str
    source_nick: int
    seq: int
    lo: int
    hi: int
    nicknames: list[int]
    retry: bool = False           # carries changes that failed before: applied even below the watermark
    partition_id: int = 0         # upload from a subscriber of a filtered publication: its partition
    ends_within: int = 0          # the generation this batch ends inside of (cut by key), whose rest follows

    @property
    def covered_at(self) -> int:
        """The watermark from which this batch is already applied: its end, or the generation it ends
        inside of (its ``hi`` is the generation before it, where the watermark stays until the rest is in)."""
        return max(self.hi, self.ends_within)


@dataclass
class DestinationInfo:
    name: str
    url: str
    nickname: int
    is_publisher: bool
    watermark: dict                      # identifies the destination's sysmergesubscriptions row of the source(s)
    batches: dict[str, list[BatchInfo]]  # source -> batches in order
    log_conflicts_here: bool             # conflict_logging: at this destination ...
    log_conflicts_remote: bool = False   # ... and/or at the source (the agent writes those after the run)
    partition_id: int = 0                # a filtered publication's subscriber: the partition it holds


@dataclass(frozen=True)
class ApplyContext:
    pubid: str
    upload: bool
    session_id: str
    publication: str
    rules: dict[int, ArticleRules]
    replicas: Replicas
    destinations: dict[str, DestinationInfo]
    article_names: dict[int, str] = field(default_factory=dict)
    filtered: frozenset[int] = frozenset()      # nicknames of the filtered articles (filtered publications)
    refused_out_of_partition: frozenset[int] = frozenset()   # ... with partition_options 1 or 3
    mapped: frozenset[int] = frozenset()        # ... whose membership is kept in partition mappings
    # For the Spark stage: (source, generation) -> its routes, in destination order, and each
    # destination's apply group (the label of its Spark partition).
    routes: dict[tuple[str, int], list[Route]] = field(default_factory=dict)
    groups: dict[str, int] = field(default_factory=dict)
    progress: tuple[str, int] | None = None     # the driver's progress listener (progress.py)
    defer_conflicts: bool = False               # a web device: a conflict is not decided here (kept local)


ROUTE_TABLE = "source STRING, generation BIGINT, partition_id INT, apply_group INT, source_order INT"


def routes_by_key(routes: list[Route]) -> dict[tuple[str, int], list[Route]]:
    """(source, generation) -> its routes, in destination order: what the apply task looks a row's batch up in."""
    out: dict[tuple[str, int], list[Route]] = {}
    for r in routes:
        out.setdefault((r.source, r.generation), []).append(r)
    return out


def route_table(routes: list[Route], destinations: dict[str, DestinationInfo],
                groups: dict[str, int]) -> list[tuple[str, int, int, int, int]]:
    """The routing table a direction's change rows are joined with (``ROUTE_TABLE``), the same in Spark and in
    the agent's process: (source, generation, partition, apply group, source order). Every destination takes
    the changes of all partitions (unfiltered articles) and of its own; a failed read sends one error row to
    every group with a destination fed by its source."""
    order = {s: i for i, s in enumerate(dict.fromkeys(r.source for r in routes))}    # upload: configuration order
    part_of = {name: info.partition_id for name, info in destinations.items()}
    rows = {(r.source, r.generation, p, groups[r.destination], order[r.source]) for r in routes
            for p in {ALL_PARTITIONS, part_of.get(r.destination, ALL_PARTITIONS)}}
    rows |= {(r.source, READ_ERROR_GENERATION, ALL_PARTITIONS, groups[r.destination], order[r.source]) for r in routes}
    return sorted(rows)
