"""A merge session's first step at its subscribers: each one connected, checked to be the registered replica
and intact, brought up to the publication's schema, its open generation closed; several at a time (each
waits on its own database: a thousand subscribers are not opened one after another)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from sparksync.config import SubscriptionConfig, Topology
from sparksync.dialects import connect
from sparksync.dialects.replica import Replica
from sparksync.errors import ReplicaDamaged, SparksyncError
from sparksync.merge.maintenance.integrity import check_identity, check_not_behind, describe, replica_problems
from sparksync.merge.publish.schema_changes import replay, schema_version
from sparksync.merge.session.changes import ALL_PARTITIONS
from sparksync.merge.session.links import Endpoint, PublisherSchema
from sparksync.merge.session.summary import MergeSummary, SubscriptionSession
from sparksync.merge.tracking.generations import make_generation, waiting_writers
from sparksync.metadata import store
from sparksync.metadata.records import SubscriptionRow
from sparksync.progress import Reporter

OPEN_THREADS = 8       # subscribers opened (checked, their generation closed) at a time


def open_subscribers(topology: Topology, active: list[tuple[SubscriptionConfig, SubscriptionRow]], pubid: str,
                     summary: MergeSummary, schema: PublisherSchema, ends: dict[str, Endpoint],
                     sessions: dict[str, SubscriptionSession], report: Reporter) -> None:
    """``open_subscriber`` for every active subscription, ``OPEN_THREADS`` at a time; one that fails is that
    subscription's error. Every connection opened is in ``ends`` (closed by the caller), even when an
    unexpected error stops the session."""

    def one(item: tuple[SubscriptionConfig, SubscriptionRow]) -> Endpoint:
        return open_subscriber(topology, item[0], item[1], pubid, summary, schema, report)

    unexpected: BaseException | None = None
    with ThreadPoolExecutor(max(1, min(OPEN_THREADS, len(active))), thread_name_prefix="sparksync-open") as pool:
        futures = [(s.name, pool.submit(one, (s, r))) for s, r in active]
        for name, future in futures:
            try:
                ends[name] = future.result()
            except SparksyncError as e:
                sessions[name].fail(e.message, e)
            except BaseException as e:  # noqa: BLE001 - raised once every connection is accounted for
                unexpected = unexpected or e
    if unexpected is not None:
        raise unexpected


def open_subscriber(topology: Topology, s: SubscriptionConfig, registered: SubscriptionRow, pubid: str,
                    summary: MergeSummary, schema: PublisherSchema, report: Reporter) -> Endpoint:
    """Connect to a subscriber, check it is the registered replica and intact, replay the schema
    changes it has not had, close its generation."""
    url = topology.subscriber_url(s)
    rep = connect(url, s.name)
    try:
        store.require_metadata(rep)
        check_identity(rep, s.name, registered)
        check_not_behind(rep, s.name, registered, pubid)
        damaged = replica_problems(rep, pubid)
        if damaged:
            raise ReplicaDamaged(
                f"subscriber {s.name} is damaged: {describe(damaged)}; its changes may not have been "
                "recorded, so it was not merged (run 'sparksync setup' to repair its tracking)", obj=s.name)
        have = schema_version(rep, pubid)
        if have < schema.version:
            newer = [c for c in schema.changes if int(c["schemaversion"]) > have]
            for line in replay(rep, pubid, schema.publication, newer, registered.replnickname):
                report(f"{s.name}: schema change replayed: {line}")
        report_waits(s.name, rep, make_generation(rep, registered.replnickname), summary, report)
    except BaseException:
        rep.close()
        raise
    return Endpoint(s.name, url, registered.replnickname, rep, False, registered.partition_id or ALL_PARTITIONS)


def report_waits(name: str, replica: Replica, result, summary: MergeSummary, report: Reporter) -> None:
    """Say which closed generations cannot be sent yet and which open transactions they wait for
    (commit safety: a generation is enumerated only once every transaction that wrote into it ended)."""
    if not result.unsettled:
        return
    lines = [w.describe() for w in waiting_writers(replica, result.unsettled)]
    summary.waiting[name] = lines
    for line in lines:
        report(f"{name}: {line}; its changes go at a later merge")
