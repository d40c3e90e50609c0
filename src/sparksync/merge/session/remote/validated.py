"""A device validated at its sync (docs/web-sync.md, "Validation at the device's sync"): ``hello`` asks for its
digests when its publication's ``validate_schedule`` says (``validation_due``), the device sends each article's
row count and checksum of what it holds with ``done``, and the door compares them with its own of the device's
partition (``validate_device``): passed or failed, or inconclusive where anything stood between the two
(``merge.session.backlog.unsettled``, before and after the publisher's rows were read; the device's own
changes not sent, as it says). Each result is recorded (``merge.maintenance.validations``).
"""

from __future__ import annotations

import datetime as dt
import time

from sparksync.config import PublicationConfig
from sparksync.dialects.replica import Replica
from sparksync.errors import ValueUnreadable
from sparksync.merge.maintenance import validations
from sparksync.merge.maintenance.digest import Digest, partition_digests
from sparksync.merge.maintenance.validations import FAILED, Validation
from sparksync.merge.partitions.evaluation import partitions
from sparksync.merge.session.backlog import unsettled
from sparksync.metadata.records import PublicationRow, SubscriptionRow
from sparksync.schedule import parse_schedule

__all__ = ["FAILED", "Digest", "Validation", "partition_params", "publisher_digests", "validate_device",
           "validation_due"]


def validation_due(pub: Replica, publication: PublicationConfig, pubid: str, name: str) -> bool:
    """Whether subscription ``name``'s device is asked for its digests: its last validation passed longer ago
    than the publication's validate_schedule says (at every sync while none has passed since)."""
    if publication.validate_schedule is None:
        return False
    newest = validations.last(pub, pubid, name)
    if newest is None or newest.validated_at is None or newest.result != validations.PASSED:
        return True
    at = newest.validated_at if newest.validated_at.tzinfo else newest.validated_at.replace(tzinfo=dt.UTC)
    return parse_schedule(publication.validate_schedule).next_run(at, False) <= dt.datetime.now(dt.UTC)


def publisher_digests(pub: Replica, url: str, pubid: str, params: dict[str, str | None] | None) -> dict[str, Digest]:
    """The publisher's digests of the partition of ``params`` (``partition_params``; None: every row)."""
    return partition_digests(pub, url, pubid, params)


def partition_params(pub: Replica, pubid: str, reg: SubscriptionRow) -> dict[str, str | None] | None:
    """The parameters of the subscription's partition (None: it has none, it gets every row)."""
    if reg.partition_id is None:
        return None
    part = next((p for p in partitions(pub, pubid) if p.partition_id == reg.partition_id), None)
    return part.params if part is not None else None


def validate_device(pub: Replica, url: str, prow: PublicationRow, reg: SubscriptionRow, pending: bool,
                    said: dict[str, list], error: str | None = None,
                    read_ahead: dict[str, Digest] | None = None) -> Validation:
    """The device's digests (``said``: article -> [rows, checksum], as the door checked them) against the
    publisher's (``url``: its database) of the device's partition; recorded. ``pending``: the device said
    changes were pending there (it sent no digests); ``error``: why the device could not compute them (a failed
    validation, as is one whose publisher's rows cannot be digested). ``read_ahead``: the publisher's digests of
    the partition read earlier in the device's sync (``web/server/read_ahead.py``): where they match the device's
    and nothing stands between the two now, the validation passed (the device holds what the publisher held then,
    and no change of the publisher's since is missing from it); otherwise the publisher's rows are read now."""
    t0 = time.monotonic()
    v = Validation(reg.name, prow.pubid, validations.INCONCLUSIVE, "sync")
    if error is not None:
        v.result, v.message = FAILED, f"the device could not compute its digests: {error}"
    elif pending:
        v.message = "changes were pending at the device"
    else:
        before = unsettled(pub, prow.pubid, reg)
        early = validations.compare(reg.name, prow.pubid, "sync", read_ahead, said) if read_ahead else None
        if not before and early is not None and early.result == validations.PASSED:
            v = early
        else:
            try:
                expected = publisher_digests(pub, url, prow.pubid, partition_params(pub, prow.pubid, reg)) \
                    if not before else {}
            except ValueUnreadable as e:
                expected, v.result, v.message = {}, FAILED, f"the publisher's rows could not be digested: {e.message}"
            after = before or unsettled(pub, prow.pubid, reg)
            if v.result == FAILED:
                pass
            elif after:
                v.message = f"{after} change(s) were pending at the publisher for it"
            else:
                v = validations.compare(reg.name, prow.pubid, "sync", expected, said)
    v.seconds = time.monotonic() - t0
    validations.record(pub, v)
    return v
