"""Validation on a schedule: ``sparksync serve`` validates each direct subscription of a merge publication on
its ``validate_schedule`` (a device is validated at its sync, by the door:
``merge/session/remote/validated.py``).

Each subscription's digests (``merge.maintenance.digest``: every article's row count and checksum, read in
``serve``'s process) against the publisher's of its partition, recorded (``merge.maintenance.validations``):
passed, failed (``status`` then says it diverged and exits 1; the monitor shows it in red; an alert fires; a
validation that cannot read or digest the rows, or stops on any error, is a failed one saying why), or
inconclusive where the subscriber could not be reached or anything stood between the two before or after the
rows were read (changes to merge, failed changes, rows whose partition is not evaluated yet): a subscriber that
changes all the time is validated in a lull. It takes no lock (it only reads): a merge that runs meanwhile leaves a backlog
that makes it inconclusive.
"""

from __future__ import annotations

import time

from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.errors import SparksyncError, Transient
from sparksync.merge.maintenance import validations
from sparksync.merge.maintenance.digest import partition_digests, replica_digests
from sparksync.merge.partitions.evaluation import partitions as partitions_of
from sparksync.merge.session.backlog import unsent, unsettled
from sparksync.merge.tracking import pending
from sparksync.metadata import store
from sparksync.metadata.records import PublicationRow, SubscriptionRow
from sparksync.progress import Reporter, silent


def validate_on_schedule(topology: Topology, publication: str, subscriptions: list[str],
                         report: Reporter = silent) -> list[validations.Validation]:
    """Validate the direct ``subscriptions`` of merge ``publication`` and record each result."""
    out: list[validations.Validation] = []
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        prow = store.select_one(pub, PublicationRow, {"name": publication})
        if prow is None:
            return out
        pending.flush(pub)
        params_of = {p.partition_id: p.params for p in partitions_of(pub, prow.pubid)}
        ident = store.replica_identity(pub)
        publisher_nick = ident.nickname if ident is not None else 1
        for name in subscriptions:
            reg = store.select_one(pub, SubscriptionRow, {"pubid": prow.pubid, "name": name})
            if reg is None or not reg.active:
                continue
            t0 = time.monotonic()
            v = validations.Validation(name, prow.pubid, validations.INCONCLUSIVE, "schedule")
            try:
                with connect(topology.subscriber_url(topology.subscription(name)), name) as sub:
                    pending.flush(sub)
                    before = unsettled(pub, prow.pubid, reg) + unsent(sub, prow.pubid, publisher_nick)
                    if before:
                        v.message = f"{before} change(s) were pending either way"
                    else:
                        params = params_of.get(reg.partition_id) if reg.partition_id is not None else None
                        expected = partition_digests(pub, topology.publisher_url, prow.pubid, params)
                        found = replica_digests(sub, topology.subscriber_url(topology.subscription(name)), prow.pubid)
                        after = unsettled(pub, prow.pubid, reg) + unsent(sub, prow.pubid, publisher_nick)
                        if after:
                            v.message = f"{after} change(s) were pending either way"
                        else:
                            v = validations.compare(name, prow.pubid, "schedule", expected, found)
            except SparksyncError as e:
                if isinstance(e, Transient):     # it could not be reached: nothing is known of its rows
                    v.message = f"not validated: {e.message}"
                else:                            # its rows could not be read or digested: a failed validation
                    v.result, v.message = validations.FAILED, f"its rows could not be validated: {e.message}"
            except Exception as e:  # noqa: BLE001 - a validation that errors is a failed one, never an old "passed"
                v.result = validations.FAILED
                v.message = f"its validation stopped on an error: {type(e).__name__}: {' '.join(str(e).split())[:500]}"
            v.seconds = time.monotonic() - t0
            validations.record(pub, v)
            if v.result == validations.FAILED:
                report(f"validation {publication}: subscription {name} does not hold its partition: {v.message}")
            out.append(v)
    return out
