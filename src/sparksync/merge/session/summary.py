"""What a merge session reports: its options, and per subscription and article what each direction moved."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from sparksync.errors import ErrorInfo, SparksyncError
from sparksync.merge.apply.outcome import ArticleStats
from sparksync.merge.maintenance.cleanup import ReplicaCleanup
from sparksync.metadata import store

DEFAULT_GENERATIONS_PER_BATCH = 100


@dataclass
class MergeOptions:
    exchange: str = "both"                       # both | upload | download
    upload_generations_per_batch: int = DEFAULT_GENERATIONS_PER_BATCH
    download_generations_per_batch: int = DEFAULT_GENERATIONS_PER_BATCH
    subscriptions: list[str] | None = None
    cleanup: bool = True                         # retention cleanup at the end of the session (-MetadataRetentionCleanup)
    driver_round_changes: int | None = None      # a direction moving at most this many changes skips Spark
                                                 # (None: the configuration's ``[spark] driver_round_changes``)


@dataclass
class DirectionStats(ArticleStats):
    """What one direction of a session moved for one article (batches: generation batches applied)."""

    batches: int = 0

    def add(self, s: ArticleStats) -> None:
        """Add one batch's stats (or another direction's) to these."""
        for f in fields(ArticleStats):
            setattr(self, f.name, getattr(self, f.name) + getattr(s, f.name))


CHANGED_LISTED = 10_000      # the rows a device's download changed that its summary lists


@dataclass
class SubscriptionSession:
    subscription: str
    publication: str
    upload: dict[str, DirectionStats] = field(default_factory=dict)     # article -> stats
    download: dict[str, DirectionStats] = field(default_factory=dict)
    problems: list[ErrorInfo] = field(default_factory=list)            # what went wrong, as data
    seconds: float = 0.0
    batches: dict[str, int] = field(default_factory=dict)               # direction -> batches applied
    # a web device: the rows its download changed, [article, inserted|updated|deleted, rowguid, key] each: the
    # first CHANGED_LISTED (what the application's callbacks are given is every one), the others counted
    changed: list[list[Any]] = field(default_factory=list)
    changed_more: int = 0
    notes: list[str] = field(default_factory=list)       # what business logic handlers logged (``ctx.log``)

    def note_changed(self, rows: list[list[Any]]) -> None:
        """Rows a download batch changed: listed while fewer than ``CHANGED_LISTED`` are, counted after (a download
        of millions of rows keeps a list of its changes in no one's memory)."""
        room = max(CHANGED_LISTED - len(self.changed), 0)
        self.changed += rows[:room]
        self.changed_more += max(len(rows) - room, 0)

    def fail(self, message: str, error: ErrorInfo | SparksyncError | None = None) -> None:
        """Record a problem: ``message`` for the user, with the code and object of ``error``."""
        info = error.info() if isinstance(error, SparksyncError) else error
        self.problems.append(ErrorInfo(info.code, message, info.obj, info.transient) if info
                             else ErrorInfo("error", message))

    @property
    def errors(self) -> list[str]:
        return [p.message for p in self.problems]

    def total(self, direction: str) -> DirectionStats:
        t = DirectionStats()
        for s in getattr(self, direction).values():
            t.add(s)
        t.batches = self.batches.get(direction, 0)
        return t

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass
class MergeSummary:
    session_id: str
    subscriptions: list[SubscriptionSession] = field(default_factory=list)
    conflicts: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    started_at: Any = field(default_factory=store.utcnow)
    # replica -> why changes made there cannot be sent yet (generations waiting for open transactions)
    waiting: dict[str, list[str]] = field(default_factory=dict)
    cleanup: list[ReplicaCleanup] = field(default_factory=list)    # retention cleanup at the session's end

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.subscriptions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id, "ok": self.ok, "seconds": round(self.seconds, 3),
            "subscriptions": [{
                "subscription": s.subscription, "publication": s.publication, "ok": s.ok, "errors": s.errors,
                "error_codes": [p.code for p in s.problems],
                "seconds": round(s.seconds, 3), "batches": s.batches,
                "upload": {a: vars(v) for a, v in s.upload.items()},
                "download": {a: vars(v) for a, v in s.download.items()},
                **({"changed": s.changed} if s.changed else {}),
                **({"changed_more": s.changed_more} if s.changed_more else {}),
                **({"notes": s.notes} if s.notes else {}),
            } for s in self.subscriptions],
            "conflicts": self.conflicts,
            "waiting": self.waiting,
            "cleanup": [c.to_dict() for c in self.cleanup],
        }
