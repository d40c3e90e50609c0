"""What a capture method is, whichever database it reads: the events it gives the log reader (a transaction's
:class:`Begin`, its commands as :class:`StoredCommand`, its :class:`End`), a :class:`Capture` reading them in
batches, and the :class:`CaptureMethod` holding the rest of what depends on how the publisher is read. The two
methods (``logical.py``, ``triggers.py``) implement it; ``capture_method`` (the package) chooses one."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from sparksync.dialects.model import TableInfo
from sparksync.dialects.replica import Replica
from sparksync.filters import RowFilter
from sparksync.metadata.records import DistArticleRow
from sparksync.progress import Reporter
from sparksync.transactional.articles import TxArticle


@dataclass
class Begin:
    xact_seqno: int
    xact_id: str | None
    publisher_commit: dt.datetime | None


@dataclass
class End:
    """The transaction begun last is complete."""


class StoredCommand(NamedTuple):
    """A command of the transaction begun last, as the log reader stores it (an ``MSrepl_commands`` row)."""

    article_id: int
    type: str                  # ins | upd | del | trunc | token | ddl
    origin: int | None         # PostgreSQL: the transaction's xid; SQLite: the change's log sequence number
    after: str | None
    before: str | None
    rowhash: int | None = None  # a hash of the row's key (before the change): its subscription stream
    data: bytes | None = None   # a PostgreSQL publisher's row changes ("rows"): pgoutput messages, undecoded
    shape: str | None = None    # the MSrepl_shapes row that decodes them
    changes: int = 1            # how many commands this row holds (numbered from its command_id)


Event = Begin | StoredCommand | End


class Capture(Protocol):
    def read_batch(self, after: int | None) -> Iterator[Event]:
        """The next batch: whole transactions committed after position ``after``, in commit order
        (nothing when there is nothing new)."""

    caught_up: bool     # the last batch reached the horizon: a run ends after it

    def horizon(self) -> int:
        """Fix where this run ends: what is committed at the publisher now (a position comparable
        with xact_seqno)."""

    def confirm(self) -> bool:
        """The last batch is stored at the distributor: the publisher may forget it. False when the
        last batch read nothing."""

    def close(self, clean: bool = True) -> None:
        """The run is over: release what reading holds at the publisher (``clean``: it ended well; else
        cut short, confirming nothing more)."""


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

    def alter_table(self, replica: Replica, publication: str, article_id: int, alter: Callable[[Replica], object],
                    new: TableInfo, row_filter: RowFilter | None) -> None:
        """Change a published table (``alter`` runs the change on the connection), in the caller's transaction,
        keeping its capture working."""

    def backlog(self, replica: Replica, publication) -> dict:
        """What the publisher holds for the log reader (for status)."""

    def reader(self, replica: Replica, publication, articles: list[DistArticleRow], read_batch: int,
               needed_by: Callable[[int, int | None], list[str]] | None = None) -> Capture:
        """``publication``: distribution.database.Publication; ``articles``: its MSarticles rows; ``needed_by``:
        (xact_seqno, origin) -> the subscriptions whose snapshot does not hold that transaction (a
        change the capture cannot read faithfully is passed over when none needs it)."""
