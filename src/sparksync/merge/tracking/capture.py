"""How a database's merge changes are tracked (``[publisher] change_capture``): by triggers that append to the
tracking log, or, on PostgreSQL, read from the server's write-ahead log (``dialects/postgres/log_capture.py``).
The flush (``pending.py``) takes its entries from whichever the database uses."""

from __future__ import annotations

from sparksync.dialects.replica import Replica
from sparksync.merge.tracking import pending


def resolve(replica: Replica, mode: str) -> str:
    """``"log"`` or ``"triggers"``: ``auto`` is the log where the database can be read so (PostgreSQL with
    ``wal_level = logical`` and a replication slot for it), else triggers."""
    if mode != "auto":
        return mode
    return "log" if replica.dialect.log_capture_possible(replica) else "triggers"


def prepare(replica: Replica, mode: str) -> str:
    """Before setup's transaction: what reading the log needs that no transaction may make (the slot).
    Returns the mode resolved (:func:`resolve`)."""
    mode = resolve(replica, mode)
    if mode == "log":
        replica.dialect.prepare_log_capture(replica)
    return mode


def settle(replica: Replica, mode: str) -> None:
    """Inside setup's transaction, before the articles' tracking is installed: a database going back to
    triggers has what its log holds flushed first, then its slot dropped (the triggers follow)."""
    d = replica.dialect
    if mode == "triggers" and d.captures_from_log(replica):
        pending.flush(replica, wait=True)
        d.drop_log_capture(replica)


def state(replica: Replica) -> dict:
    """For ``status``, the monitor and ``/metrics``: ``{"mode": "triggers"}``, or the log's slot and the bytes of
    write-ahead log it keeps the server from recycling (``retained_wal_bytes``; bounded by the server's
    ``max_slot_wal_keep_size``, past which the slot is lost)."""
    return replica.dialect.capture_state(replica)
