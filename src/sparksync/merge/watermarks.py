"""A destination's watermark of a source: the last generation of that source it has received
(``recgen`` in its ``sysmergesubscriptions`` row of the source), written in the transaction of the
batch it covers."""

from __future__ import annotations

from ..dialects.replica import Replica
from ..metadata import store
from .plan import DestinationInfo


def watermark_row(dest: DestinationInfo, source: str) -> dict:
    """The key of the destination's row for ``source``: the subscriber's row at the publisher, or the
    publisher's row at a subscriber."""
    if dest.is_publisher:
        return {"pubid": dest.watermark["pubid"], "name": source, "role": "subscriber"}
    return {"pubid": dest.watermark["pubid"], "role": "publisher"}


def read_watermark(replica: Replica, dest: DestinationInfo, source: str) -> int | None:
    rows = store.select_rows(replica, "sysmergesubscriptions", watermark_row(dest, source))
    return rows[0]["recgen"] if rows else None


def write_watermark(replica: Replica, dest: DestinationInfo, source: str, hi: int) -> None:
    store.update_rows(replica, "sysmergesubscriptions", {"recgen": hi, "last_sync_date": store.utcnow()},
                      watermark_row(dest, source))
