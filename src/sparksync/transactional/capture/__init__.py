"""Capture at the publisher: how a transactional publication's changes reach the log reader.

* ``logical.py``: PostgreSQL, logical decoding of the server's write-ahead log (a publication and a
  replication slot with the ``pgoutput`` plugin): only committed transactions, in commit order,
  with their boundaries; no triggers on the published tables.
* ``triggers.py``: SQLite, which has no log a client can decode: row triggers write a log table in
  commit order.

Both give the log reader the same thing: batches of events, each batch a run of whole transactions
(:class:`Begin`, its commands, :class:`End`), then ``confirm()`` once the batch is stored at the
distributor, which releases it at the publisher. The capture is chosen by the publisher dialect's
capability ``supports_logical_decoding``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, Union

from ...dialects.base import Replica
from ..distribution import StoredCommand


@dataclass
class Begin:
    xact_seqno: int
    xact_id: str | None
    publisher_commit: dt.datetime | None


@dataclass
class End:
    """The transaction begun last is complete."""


Event = Union[Begin, StoredCommand, End]


class Capture(Protocol):
    def read_batch(self, after: int | None) -> Iterator[Event]:
        """The next batch: whole transactions committed after position ``after``, in commit order
        (nothing when there is nothing new)."""

    def horizon(self) -> int:
        """The publisher's current end of log, in positions comparable with xact_seqno."""

    def confirm(self) -> bool:
        """The last batch is stored at the distributor: the publisher may forget it. False when the
        last batch read nothing (the reader has caught up)."""


def capture_for(replica: Replica, publication, articles: list[dict], read_batch: int) -> Capture:
    """``publication``: distribution.Publication; ``articles``: its MSarticles rows."""
    if replica.dialect.capabilities.supports_logical_decoding:
        from .logical import LogicalCapture

        return LogicalCapture(replica, publication, articles, read_batch)
    from .triggers import TriggerCapture

    return TriggerCapture(replica, publication, articles, read_batch)
