"""A destination's watermark of a source: the last generation of that source it has received
(``recgen`` in its ``sysmergesubscriptions`` row of the source), written in the transaction of the
batch it covers."""

from __future__ import annotations

from sparksync.dialects.replica import Replica
from sparksync.merge.session.plan import DestinationInfo
from sparksync.metadata import store
from sparksync.metadata.records import Role, SubscriptionRow


def watermark_row(dest: DestinationInfo, source: str) -> dict:
    """The key of the destination's row for ``source``: the subscriber's row at the publisher, or the
    publisher's row at a subscriber."""
    if dest.is_publisher:
        return {"pubid": dest.watermark["pubid"], "name": source, "role": Role.SUBSCRIBER}
    return {"pubid": dest.watermark["pubid"], "role": Role.PUBLISHER}


def read_watermark(replica: Replica, dest: DestinationInfo, source: str) -> int | None:
    row = store.select_one(replica, SubscriptionRow, watermark_row(dest, source))
    return row.recgen if row is not None else None


def write_watermark(replica: Replica, dest: DestinationInfo, source: str, hi: int) -> None:
    store.update(replica, SubscriptionRow, {"recgen": hi, "last_sync_date": store.utcnow()}, watermark_row(dest, source))
