"""What applying a generation batch did: per article, rows inserted, updated, deleted, conflicts and failed
changes, and the time spent."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, get_type_hints

from sparksync.merge.conflicts.model import ConflictRecord, ConflictType


@dataclass
class ArticleStats:
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    conflicts: int = 0
    retries: int = 0
    failed: int = 0
    skipped: int = 0
    removed: int = 0                      # rows that left the destination's partition, removed from it
    seconds: float = 0.0                  # time spent on this article's changes at the destination

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ArticleStats:
        """Stats read back from a task's result, each field of its declared type."""
        return cls(**{name: kind(d[name]) for name, kind in stats_types().items()})


def stats_types() -> dict[str, type]:
    """The fields of ``ArticleStats`` with their declared types (int or float), in order."""
    hints = get_type_hints(ArticleStats)
    return {f.name: hints[f.name] for f in fields(ArticleStats)}


@dataclass(frozen=True)
class BatchConflict:
    """A conflict of a batch, and whether ``conflict_logging`` wants it logged at the source too."""

    record: ConflictRecord
    log_remote: bool

    def to_dict(self) -> dict[str, Any]:
        """Its form as JSON (a task's result row, ``MSmerge_applied_batches``), read back by ``from_dict``."""
        return {**vars(self.record), "conflict_type": int(self.record.conflict_type), "log_remote": self.log_remote}

    @classmethod
    def from_dict(cls, c: Mapping[str, Any]) -> BatchConflict:
        return cls(ConflictRecord(ConflictType(c["conflict_type"]), c["tablenick"], c["rowguid"], c["reason_code"],
                                  c["reason_text"], c["origin"], c["winner"], c["losing_row"], c["columns"],
                                  c.get("conflict_id")),
                   bool(c["log_remote"]))


@dataclass
class BatchOutcome:
    status: str                            # "applied" | "skipped" | "error"
    stats: dict[int, ArticleStats] = field(default_factory=dict)
    conflicts: list[BatchConflict] = field(default_factory=list)
    message: str = ""
    seconds: float = 0.0
    bulk: set[tuple[int, str]] = field(default_factory=set)   # (article nickname, op) applied set-based, whole
    notes: list[str] = field(default_factory=list)            # what business logic handlers logged (ctx.log)
    replaced: list[list] = field(default_factory=list)        # [article nickname, rowguid, why]: changes a handler's
    #                                                           own row was applied instead of (a device's outbox)

    @contextlib.contextmanager
    def timing(self, nick: int) -> Iterator[ArticleStats]:
        """Count the time of a step of one article's work into its stats."""
        st = self.stats.setdefault(nick, ArticleStats())
        t0 = time.perf_counter()
        try:
            yield st
        finally:
            st.seconds += time.perf_counter() - t0
