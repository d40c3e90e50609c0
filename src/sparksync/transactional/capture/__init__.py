"""Capture at the publisher: how a transactional publication's changes reach the log reader.

* ``logical.py``: PostgreSQL, logical decoding of the server's write-ahead log (a publication and a
  replication slot with the ``pgoutput`` plugin): only committed transactions, in commit order,
  with their boundaries; no triggers on the published tables.
* ``triggers.py``: SQLite, which has no log a client can decode: row triggers write a log table in
  commit order.
* ``model.py``: the events and protocols both methods implement.
* ``pgoutput.py``: the plugin's messages, parsed; ``shapes.py``: a PostgreSQL publisher's row changes
  as they are stored (the server's messages, with the shape that decodes them).

Both give the log reader the same thing: batches of events, each batch a run of whole transactions
(:class:`Begin`, its commands as :class:`StoredCommand`, :class:`End`), then ``confirm()`` once the
batch is stored at the distributor, which releases it at the publisher. Each module also holds the rest of what depends on
how the publisher is read (a :class:`CaptureMethod`: setting capture up, markers in the log, the
sync point of a snapshot, changing a published table). The method is chosen by the publisher
dialect's capability ``supports_logical_decoding``.
"""

from __future__ import annotations

from sparksync.dialects.replica import Replica
from sparksync.transactional.capture import logical, triggers
from sparksync.transactional.capture.model import Begin, Capture, CaptureMethod, End, Event, StoredCommand

__all__ = ["Begin", "Capture", "CaptureMethod", "End", "Event", "StoredCommand", "capture_method", "seen_by_snapshot"]


def capture_method(replica: Replica) -> CaptureMethod:
    """The publisher's capture: logical decoding where the dialect has it, triggers otherwise."""
    if replica.dialect.capabilities.supports_logical_decoding:
        return logical.LogicalDecoding()
    return triggers.TriggerLog()


def seen_by_snapshot(sync: dict | None, xact_seqno: int, origin: int | None) -> bool:
    """True when the subscription's snapshot already contains this change (the agent skips it)."""
    if not sync:
        return False
    seen = triggers.seen_by_snapshot if sync["kind"] == "seq" else logical.seen_by_snapshot
    return seen(sync, xact_seqno, origin)
