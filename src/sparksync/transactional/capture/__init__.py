"""Capture at the publisher: how a transactional publication's changes reach the log reader.

* ``logical.py``: PostgreSQL, logical decoding of the server's write-ahead log (a publication and a
  replication slot with the ``pgoutput`` plugin): only committed transactions, in commit order,
  with their boundaries; no triggers on the published tables.
* ``triggers.py``: SQLite, which has no log a client can decode: row triggers write a log table in
  commit order.

Both give the log reader the same thing: batches of events, each batch a run of whole transactions
(:class:`Begin`, its commands, :class:`End`), then ``confirm()`` once the batch is stored at the
distributor, which releases it at the publisher. Each module also holds the rest of what depends on
how the publisher is read (a :class:`CaptureMethod`: setting capture up, markers in the log, the
sync point of a snapshot, changing a published table). The method is chosen by the publisher
dialect's capability ``supports_logical_decoding``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from sparksync.dialects.model import TableInfo
from sparksync.dialects.replica import Replica
from sparksync.filters import RowFilter
from sparksync.metadata.records import DistArticleRow
from sparksync.progress import Reporter
from sparksync.transactional.distribution import StoredCommand

if TYPE_CHECKING:
    from sparksync.transactional.publish import TxArticle


@dataclass
class Begin:
    xact_seqno: int
    xact_id: str | None
    publisher_commit: dt.datetime | None


@dataclass
class End:
    """The transaction begun last is complete."""


Event = Begin | StoredCommand | End


class Capture(Protocol):
    def read_batch(self, after: int | None) -> Iterator[Event]:
        """The next batch: whole transactions committed after position ``after``, in commit order
        (nothing when there is nothing new)."""

    def horizon(self) -> int:
        """The publisher's current end of log, in positions comparable with xact_seqno."""

    def confirm(self) -> bool:
        """The last batch is stored at the distributor: the publisher may forget it. False when the
        last batch read nothing (the reader has caught up)."""


class CaptureMethod(Protocol):
    """Everything about a transactional publication that depends on how its publisher is read."""

    def problems(self, replica: Replica, wants_filters: bool) -> list[str]:
        """What keeps this publisher from being captured, as messages for the user."""

    def install(self, replica: Replica, publication: str, articles: list[TxArticle]) -> tuple[str | None, str | None]:
        """Set up capture of ``articles`` (and stop capturing the publication's others); returns the
        replication slot and server publication it uses, if any."""

    def log_position(self, replica: Replica) -> int | None:
        """The end of the publisher's log now, when positions are the server's (None: the reader's)."""

    def sync_point(self, publisher: Replica, frozen: Replica, report: Reporter) -> tuple[dict, int]:
        """Where the consistent view ``frozen`` stands in the log (the subscriptions' sync point) and
        the position their delivery starts after."""

    def post_marker(self, replica: Replica, publication: str, kind: str, content: dict, article_id: int = 0) -> None:
        """Write a marker (``token``: a tracer token; ``ddl``: a schema change) into the log, in the
        caller's transaction."""

    def alter_table(self, replica: Replica, publication: str, article_id: int, ddl: str, new: TableInfo,
                    row_filter: RowFilter | None) -> None:
        """Change a published table (``ddl``), in the caller's transaction, keeping its capture working."""

    def backlog(self, replica: Replica, publication) -> dict:
        """What the publisher holds for the log reader (for status)."""

    def reader(self, replica: Replica, publication, articles: list[DistArticleRow], read_batch: int,
               needed_by: Callable[[int, int | None], list[str]] | None = None) -> Capture:
        """``publication``: distribution.Publication; ``articles``: its MSarticles rows; ``needed_by``:
        (xact_seqno, origin) -> the subscriptions whose snapshot does not hold that transaction (a
        change the capture cannot read faithfully is passed over when none needs it)."""


def capture_method(replica: Replica) -> CaptureMethod:
    """The publisher's capture: logical decoding where the dialect has it, triggers otherwise."""
    if replica.dialect.capabilities.supports_logical_decoding:
        from sparksync.transactional.capture.logical import LogicalDecoding

        return LogicalDecoding()
    from sparksync.transactional.capture.triggers import TriggerLog

    return TriggerLog()


def seen_by_snapshot(sync: dict | None, xact_seqno: int, origin: int | None) -> bool:
    """True when the subscription's snapshot already contains this change (the agent skips it)."""
    if not sync:
        return False
    if sync["kind"] == "seq":
        from sparksync.transactional.capture.triggers import seen_by_snapshot as seen
    else:
        from sparksync.transactional.capture.logical import seen_by_snapshot as seen
    return seen(sync, xact_seqno, origin)
