"""What validation found: per subscription and article, the row counts, checksums, differing rows, and what
a repair did or skipped."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparksync.errors import SparksyncError

MISSING, EXTRA, CHANGED = "missing", "extra", "changed"


MAX_LISTED = 10_000          # differing rows collected per article (more: reinitialize)


# why a repair left a row as it is (``SkippedRow.reason``)
SKIPPED_PENDING = "changed at the subscriber since validation, not uploaded yet: the next merge uploads it"


SKIPPED_NEWER = "changed at the subscriber since validation: it holds a version the publisher's does not include"


SKIPPED_REFUSED = "refused by the subscriber"


class RepairRefused(SparksyncError):
    """A subscription cannot be repaired now (changes pending, too many differences)."""

    code = "repair_refused"


@dataclass
class RowDifference:
    kind: str                 # missing | extra | changed
    rowguid: str              # merge articles ("" for transactional ones, matched by key)
    key: str                  # the row's primary key, e.g. id=4

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "rowguid": self.rowguid, "key": self.key}


@dataclass
class SkippedRow:
    """A row a repair left as it is, and why (``SKIPPED_*``)."""

    article: str
    key: str
    rowguid: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"article": self.article, "key": self.key, "rowguid": self.rowguid, "reason": self.reason}


@dataclass
class ArticleValidation:
    article: str
    publisher_rows: int
    subscriber_rows: int
    publisher_checksum: str | None = None       # decimal: the sum of the rows' hashes
    subscriber_checksum: str | None = None
    differences: list[RowDifference] = field(default_factory=list)
    more: bool = False                           # more rows differ than were listed

    @property
    def ok(self) -> bool:
        return (self.publisher_rows == self.subscriber_rows and self.publisher_checksum == self.subscriber_checksum
                and not self.differences)

    def count(self, kind: str) -> int:
        return sum(1 for d in self.differences if d.kind == kind)

    def to_dict(self) -> dict[str, Any]:
        return {"article": self.article, "ok": self.ok, "publisher_rows": self.publisher_rows,
                "subscriber_rows": self.subscriber_rows, "publisher_checksum": self.publisher_checksum,
                "subscriber_checksum": self.subscriber_checksum,
                **{k: self.count(k) for k in (MISSING, EXTRA, CHANGED)},
                "differences": [d.to_dict() for d in self.differences], "more": self.more}


@dataclass
class SubscriptionValidation:
    subscription: str
    publication: str
    partition: str | None = None                 # its partition's parameters (filtered publications)
    articles: list[ArticleValidation] = field(default_factory=list)
    error: str | None = None                     # it could not be validated (unreachable, not initialized)
    pending_upload: int | None = None
    pending_download: int | None = None
    repaired: int = 0                            # rows written or removed by a repair
    kind: str = "merge"                          # of its publication: merge | transactional
    skipped: list[SkippedRow] = field(default_factory=list)   # rows a repair left (changed since validation)

    @property
    def ok(self) -> bool:
        return self.error is None and all(a.ok for a in self.articles)

    @property
    def pending(self) -> bool:
        return bool(self.pending_upload) or bool(self.pending_download)

    def to_dict(self) -> dict[str, Any]:
        return {"subscription": self.subscription, "publication": self.publication, "kind": self.kind, "ok": self.ok,
                "partition": self.partition, "error": self.error, "pending_upload": self.pending_upload,
                "pending_download": self.pending_download, "repaired": self.repaired,
                "skipped": [x.to_dict() for x in self.skipped], "articles": [a.to_dict() for a in self.articles]}


@dataclass
class ValidationReport:
    subscriptions: list[SubscriptionValidation] = field(default_factory=list)
    checksum: bool = False

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.subscriptions)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checksum": self.checksum,
                "subscriptions": [s.to_dict() for s in self.subscriptions]}
