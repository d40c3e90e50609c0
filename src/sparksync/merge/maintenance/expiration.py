"""Expiration (SQL Server's retention rule): a subscription that has not merged within its
publication's ``retention`` (days; 0: never) is expired. The metadata it would need to merge safely
(the lineage of rows it changed long ago, tombstones of rows deleted since) is what retention allows
the replicas to forget, so its next merge is refused and ``sparksync reinit`` re-creates it; its
changes cannot be uploaded (against forgotten lineage an old change would win over newer ones)."""

from __future__ import annotations

import datetime as dt

from sparksync.errors import SparksyncError
from sparksync.metadata.records import SubscriptionRow


class SubscriptionExpired(SparksyncError):
    code = "expired"


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def expiry(retention_days: int | None, registered: SubscriptionRow, now: dt.datetime) -> str | None:
    """Why the subscription (its row at the publisher) is expired, or None."""
    last = registered.last_sync_date or registered.created_at
    if not retention_days or last is None:
        return None
    idle = now - _aware(last)
    if idle <= dt.timedelta(days=retention_days):
        return None
    return (f"subscription {registered.name} expired: its last merge was {idle.days} day(s) ago "
            f"({_aware(last):%Y-%m-%d %H:%M} UTC), beyond the publication's retention of {retention_days} "
            "day(s); the metadata it needs may be gone, so it was not merged: run 'sparksync reinit "
            f"--subscription {registered.name} --yes' (its changes are discarded)")

