"""``reinit``: a subscription re-created from a snapshot (SQL Server's reinitialization).

For a subscriber that is expired, damaged, restored from an older copy, or whose database was lost or
replaced. A merge subscription: with ``upload_first`` its changes are merged to the publisher first (SQL Server's
``@upload_first``), so nothing made there is lost; without it they are discarded, which must be
asked for (``discard``) when there are any, or when they cannot be counted. Then its registration at
the publisher is dropped (its replica nickname is never given again) and ``setup`` initializes it
as a new replica: its old tracking and metadata go, its tables are loaded from the snapshot, and the
next merge brings it the changes since. A transactional subscription: its registration at the
distributor goes and ``setup`` snapshots and initializes it again. A web device's subscription: registered anew
(``--yes``: the publisher cannot reach its file to upload from it); at its next sync the device sets its file aside,
kept whole, and initializes a new one.
"""

from __future__ import annotations

from sparksync import locks
from sparksync.config import Topology
from sparksync.dialects import connect, dialect_for_url
from sparksync.dialects.protocols import Files
from sparksync.errors import ConfigurationError, NotInitialized, SparksyncError
from sparksync.merge.maintenance.expiration import expiry
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.merge.snapshot.initialize import drop_registration
from sparksync.metadata import store
from sparksync.metadata.records import DistSubscriptionRow, PublicationRow, Role, SubscriptionRow
from sparksync.progress import Reporter, silent
from sparksync.provision import SetupSummary, setup
from sparksync.status import gather_status
from sparksync.transactional.distribution import database as dst


class PendingChanges(ConfigurationError):
    """Reinitializing would discard changes the subscriber has not uploaded, and nobody said so."""

    code = "pending_changes"


class ReinitFailed(SparksyncError):
    code = "reinit_failed"


def reinitialize(topology: Topology, spark_factory, subscription: str, upload_first: bool = False,
                 discard: bool = False, report: Reporter = silent) -> SetupSummary:
    topology.subscription(subscription)
    # reinit ends with a setup: it holds setup's locks from the start (what it counts stays true)
    with locks.hold(topology, "reinit", [p.name for p in topology.publications], report):
        return _reinitialize(topology, spark_factory, subscription, upload_first, discard, report)


def _reinitialize(topology: Topology, spark_factory, subscription: str, upload_first: bool, discard: bool,
                  report: Reporter) -> SetupSummary:

    s = topology.subscription(subscription)
    if topology.publication(s.publication).kind != "merge":
        return _reinitialize_transactional(topology, spark_factory, s, upload_first, report)
    if s.transport == "web" and upload_first:
        raise ConfigurationError(f"subscription {subscription} is a web device's: the publisher cannot reach its file "
                                 "to upload from it; on the device, 'sparksync sync --reinitialize --upload-first' "
                                 "uploads its changes and starts a new file", obj=subscription)
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        store.require_metadata(pub)
        prow = store.select_one(pub, PublicationRow, {"name": s.publication})
        if prow is None:
            raise NotInitialized(f"publication {s.publication} is not published; run 'sparksync setup'",
                                 obj=s.publication)
        pubid = prow.pubid
        registered = store.select_one(pub, SubscriptionRow,
                                      {"pubid": pubid, "name": subscription, "role": Role.SUBSCRIBER})
    if registered is not None and not registered.active:
        # registered but never initialized: an initialization (by setup, or a reinit killed half-way) was
        # interrupted; nothing there was made under this registration, so nothing to upload or discard
        report(f"subscription {subscription}: its initialization was interrupted; finishing it")
    elif registered is not None:
        expired = expiry(prow.retention, registered, store.utcnow())
        if upload_first and expired is not None:
            raise ReinitFailed(f"{expired.split(':')[0]}: its changes cannot be uploaded safely (the metadata they "
                               "would be checked against may be gone); reinit without --upload-first discards them",
                               obj=subscription)
        if upload_first:
            summary = MergeAgent(topology, spark_factory, report).run(
                MergeOptions("upload", subscriptions=[subscription]))
            if not summary.ok:
                errors = "; ".join(e for x in summary.subscriptions for e in x.errors)
                raise ReinitFailed(f"subscription {subscription}: uploading its changes failed ({errors}); nothing "
                                   "was reinitialized (without --upload-first its changes are discarded)",
                                   obj=subscription)
        elif s.transport == "web":
            if not discard:
                raise PendingChanges(f"subscription {subscription} is a web device's: its file may hold changes the "
                                     "publisher has not received. --yes registers it anew: at its next sync the device "
                                     "sets its file aside (kept whole, its changes in it) and initializes a new one; "
                                     "or, on the device, 'sparksync sync --reinitialize --upload-first'",
                                     obj=subscription)
        else:
            entry: dict = next((e for e in gather_status(topology)["subscriptions"] if e["name"] == subscription), {})
            pending = entry.get("pending_upload")
            if not discard and (pending != 0 or expired is not None):
                what = (f"has {pending} change(s) not uploaded" if pending is not None else
                        f"cannot say which of its changes were uploaded ({entry.get('status', 'unknown')}: "
                        f"{'; '.join(entry.get('problems', [])) or entry.get('error', '')})")
                raise PendingChanges(f"subscription {subscription} {what}: --upload-first merges them to the "
                                     "publisher first; --yes discards them", obj=subscription)
        with connect(topology.publisher_url, topology.publisher.name) as pub, pub.transaction():
            drop_registration(pub, pubid, registered)
        report(f"subscription {subscription}: registration dropped at the publisher; initializing it again")
    if s.transport == "web":        # its database is on the device: registered anew, initialized by the device
        done = setup(topology, spark_factory, report)
        report(f"subscription {subscription}: registered anew; at its next sync the device sets its file aside (kept "
               "whole) and initializes a new one from the snapshot")
        return done
    _set_aside_if_damaged(topology, s, report)
    done = setup(topology, spark_factory, report)
    _catch_up(topology, spark_factory, subscription, done, report)
    return done


def _catch_up(topology: Topology, spark_factory, subscription: str, summary: SetupSummary, report: Reporter) -> None:
    """Bring the new replica up to date before reinit returns: the snapshot is older than what the
    publisher has (at the least, what --upload-first just uploaded), and an application writing at the
    subscriber before the next merge would be editing old versions of its rows, so its writes would
    meet them as conflicts. A failure here is the next merge's to retry (the replica is initialized)."""
    merged = MergeAgent(topology, spark_factory, report).run(MergeOptions("download", subscriptions=[subscription]))
    session = merged.subscriptions[0] if merged.subscriptions else None
    if session is not None and session.ok:
        down = session.total("download")
        summary.caught_up[subscription] = down.inserts + down.updates + down.deletes
        report(f"subscription {subscription}: brought up to date with {summary.caught_up[subscription]} change(s) "
               "made since the snapshot")
    else:
        report(f"subscription {subscription}: initialized, but the merge that brings it the changes since the snapshot "
               f"failed ({'; '.join(session.errors) if session else 'no session'}); the next merge brings them")


def _set_aside_if_damaged(topology: Topology, s, report: Reporter) -> None:
    """A subscriber database that cannot be used at all (a corrupt SQLite file) is moved aside, kept,
    and a new one is created by the setup that follows."""
    url = topology.subscriber_url(s)
    d: Files = dialect_for_url(url)
    why = d.damage(url)
    if why is not None:
        where = d.set_aside(url)
        report(f"subscription {s.name}: its database is damaged ({why}); moved to {where}, a new one is created")


def _reinitialize_transactional(topology: Topology, spark_factory, s, upload_first: bool,
                                report: Reporter) -> SetupSummary:
    """A transactional subscription: its registration at the distributor goes, and ``setup`` snapshots
    and initializes it again (its tables re-created by its ``pre_creation_cmd``). A transactional
    subscriber sends nothing back, so there is nothing to upload first."""

    if upload_first:
        raise ConfigurationError(f"subscription {s.name} is transactional: it sends nothing to the publisher, "
                                 "so --upload-first does not apply", obj=s.name)
    with connect(topology.distributor_url, "distributor") as dist:
        publication = dst.require_publication(dist, s.publication)
        with dist.transaction():
            store.delete(dist, DistSubscriptionRow, {"publication_id": publication.publication_id,
                                                     "subscription": s.name})
    report(f"subscription {s.name}: registration dropped at the distributor; initializing it again")
    _set_aside_if_damaged(topology, s, report)
    return setup(topology, spark_factory, report)
