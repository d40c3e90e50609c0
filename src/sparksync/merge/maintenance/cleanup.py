"""Metadata retention cleanup (SQL Server's ``sp_mergemetadataretentioncleanup``), at each replica apart.

What a replica may forget is what no partner can still ask for. Its *horizon* is the highest
generation that is

- received by every partner that could need it: at the publisher, the lowest generation sent to its
  subscriptions (``sentgen``), expired ones left out (they must be reinitialized: SQL Server's rule);
  at a subscriber, the generation it sent its publisher last;
- and closed longer ago than the publication's ``retention`` (days; 0 keeps everything forever).

At or below the horizon go: tombstones, generation history, past partition mappings and generation
partition mappings. Conflict rows (and their losing rows), merge sessions and their article history
go when older than retention. With ``orphans``, contents rows of rows that are no longer in their
table (deleted while tracking was bypassed) go too.

``MSmerge_contents`` rows of rows that exist are never removed: a row's lineage is its version, and a
change made after forgetting it would start again from version 1 and lose against the copy its
partners still hold (SQL Server removes them and documents the non-convergence that follows). They
are one row per changed row of the table, so they do not grow with time.

Every delete runs in steps of ``STEP_ROWS`` rows, one short transaction each, so that application
writes wait for one step at most. The publisher records its horizon (``cleanup_generation``): a
snapshot older than it cannot initialize subscriptions, ``setup`` writes a new one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from dataclasses import dataclass, field

from sparksync import locks
from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.dialects.replica import Replica
from sparksync.errors import ConfigurationError, SparksyncError
from sparksync.merge.conflicts.model import conflict_table_name
from sparksync.merge.maintenance.expiration import expiry
from sparksync.merge.tracking import identity, pending
from sparksync.merge.tracking.articles import published_articles
from sparksync.merge.tracking.generations import enumeration_bound
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import GenStatus, PublicationKind, PublicationRow, Role, SubscriptionRow
from sparksync.progress import Reporter, silent

STEP_ROWS = 20_000

# the tables cleaned by generation, in the order they are cleaned (genhistory last: while a step of
# the others is pending, the generation rows they refer to still exist)
BY_GENERATION = ("MSmerge_tombstone", "MSmerge_past_partition_mappings", "MSmerge_generation_partition_mappings",
                 "MSmerge_genhistory")


@dataclass
class ReplicaCleanup:
    """What cleanup did (or, dry, would do) at one replica."""

    replica: str
    role: Role
    horizon: int = 0                                  # generations at or below it were eligible
    held_by: str | None = None                        # why the horizon is not higher
    removed: dict[str, int] = field(default_factory=dict)
    steps: int = 0
    longest_step: float = 0.0                         # seconds: the longest delete transaction
    error: str | None = None

    @property
    def total(self) -> int:
        return sum(self.removed.values())

    def to_dict(self) -> dict:
        return {"replica": self.replica, "role": self.role, "horizon": self.horizon, "held_by": self.held_by,
                "removed": dict(self.removed), "total": self.total, "steps": self.steps,
                "longest_step": round(self.longest_step, 4), "error": self.error}


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def _partner_horizon(replica: Replica, pubs: dict[str, PublicationRow], now: dt.datetime) -> tuple[int | None, str | None]:
    """The lowest generation this replica sent to a partner that could still merge (None: no
    partner), and who that is."""
    ident = store.replica_identity(replica)
    if ident is None:
        return 0, "no replica identity"
    lowest: int | None = None
    holder = None
    for r in store.select(replica, SubscriptionRow):
        if r.replnickname == ident.nickname or r.pubid not in pubs:
            continue
        if r.role is Role.SUBSCRIBER and expiry(pubs[r.pubid].retention, r, now) is not None:
            continue            # expired: it is reinitialized from a new snapshot, never merged again
        sent = r.sentgen or 0
        if lowest is None or sent < lowest:
            lowest, holder = sent, f"{r.role} {r.name} (sent up to generation {sent})"
    return lowest, holder


def _time_horizon(replica: Replica, cutoff: dt.datetime) -> int:
    """The highest generation below every generation closed after ``cutoff``."""
    gh = replica.meta("MSmerge_genhistory")
    young = replica.scalar(f"SELECT min(generation) FROM {gh} WHERE coldate >= {replica.p}", [cutoff])
    if young is None:
        young = int(replica.scalar(f"SELECT coalesce(max(generation), 0) FROM {gh}") or 0) + 1
    return int(young) - 1


def _delete(replica: Replica, table_sql: str, where: str, params: list, dry_run: bool, result: ReplicaCleanup,
            name: str) -> None:
    """Delete (or count) the rows of ``where``, in bounded steps, one transaction each."""
    if dry_run:
        n = int(replica.scalar(f"SELECT count(*) FROM {table_sql} WHERE {where}", params) or 0)
    else:
        n = 0
        sql = replica.dialect.delete_some_sql(table_sql, where, STEP_ROWS)
        while True:
            t0 = time.perf_counter()
            with replica.transaction():
                done = replica.execute(sql, params).rowcount or 0
            result.longest_step = max(result.longest_step, time.perf_counter() - t0)
            result.steps += 1
            n += done
            if done < STEP_ROWS:
                break
    if n:
        result.removed[name] = result.removed.get(name, 0) + n


def clean_replica(replica: Replica, name: str, role: Role, now: dt.datetime, publications: set[str] | None = None,
                  dry_run: bool = False, orphans: bool = False) -> ReplicaCleanup:
    """Clean one replica's merge metadata; ``publications`` (names) limits the per-publication tables."""
    result = ReplicaCleanup(name, role)
    pubs = {r.pubid: r for r in store.select(replica, PublicationRow, {"kind": PublicationKind.MERGE})}
    if not pubs:
        result.held_by = "no merge publication here"
        return result
    # the metadata is what is cleaned: a row deleted a moment ago must have its tombstone (with its
    # lineage) before contents whose row is gone are told from orphans (a dry run records it too)
    pending.flush(replica)
    p = replica.p
    retentions = [r.retention or 0 for r in pubs.values()]
    # -- history shared by the publications of this database: the longest retention rules -----------
    if 0 in retentions:
        result.held_by = "retention 0 (never cleaned)"
    else:
        cutoff = now - dt.timedelta(days=max(retentions))
        result.horizon = _time_horizon(replica, cutoff)
        result.held_by = f"generations closed in the last {max(retentions)} day(s)"
        sent, holder = _partner_horizon(replica, pubs, now)
        if sent is None:                 # nobody to send to: still never the open or unsettled generations
            sent, holder = enumeration_bound(replica), "the open generation"
        gh = replica.meta("MSmerge_genhistory")
        if role is Role.SUBSCRIBER:
            # what it received from its publisher is there already: only its own generations not sent
            # yet are kept, wherever they are numbered (received ones may be numbered above the open one)
            own = f"genstatus IN ({GenStatus.OPEN:d}, {GenStatus.CLOSED:d})"       # not received
            unsent = f" AND generation NOT IN (SELECT generation FROM {gh} WHERE {own} AND generation > {int(sent)})"
            first_unsent = replica.scalar(f"SELECT min(generation) FROM {gh} WHERE {own} AND generation > {p}", [sent])
            if first_unsent is not None and int(first_unsent) <= result.horizon:
                result.held_by = f"its generations from {first_unsent} on, not sent yet ({holder})"
        else:
            unsent = ""
            if sent < result.horizon:
                result.horizon, result.held_by = sent, holder
        if result.horizon > 0:
            if role is Role.PUBLISHER and not dry_run:     # first: a snapshot taken before it is not used from now
                for pubid, row in pubs.items():
                    if (row.cleanup_generation or 0) < result.horizon:
                        store.update(replica, PublicationRow, {"cleanup_generation": result.horizon}, {"pubid": pubid})
            for table in BY_GENERATION:
                where = f"generation <= {p}{unsent}" + (f" AND genstatus <> {GenStatus.OPEN:d}"
                                                        if table == "MSmerge_genhistory" else "")
                _delete(replica, replica.meta(table), where, [result.horizon], dry_run, result, table)
        if orphans:
            _orphan_contents(replica, pubs, dry_run, result)
    # -- per publication: conflicts, sessions -----------------------------------------------------------
    for pubid, row in pubs.items():
        days = row.retention or 0
        if not days or (publications is not None and row.name not in publications):
            continue
        before = now - dt.timedelta(days=days)
        _clean_conflicts(replica, pubid, row.name, before, dry_run, result)
        sessions = replica.meta("MSmerge_sessions")
        old = f"pubid = {p} AND start_time < {p}"
        _delete(replica, replica.meta("MSmerge_articlehistory"),
                f"session_id IN (SELECT session_id FROM {sessions} WHERE {old})", [pubid, before], dry_run, result,
                "MSmerge_articlehistory")
        _delete(replica, sessions, old, [pubid, before], dry_run, result, "MSmerge_sessions")
    return result


def _clean_conflicts(replica: Replica, pubid: str, publication: str, before: dt.datetime, dry_run: bool,
                     result: ReplicaCleanup) -> None:
    p, d = replica.p, replica.dialect
    info = replica.meta("MSmerge_conflicts_info")
    old = f"pubid = {p} AND create_time < {p}"
    for row in published_articles(replica, pubid):
        name = conflict_table_name(publication, tracked_article(row))
        if d.metadata_table_exists(replica, name):
            _delete(replica, d.metadata_table_sql(name), f"conflict_id IN (SELECT conflict_id FROM {info} WHERE {old})",
                    [pubid, before], dry_run, result, "conflict rows")
    _delete(replica, info, old, [pubid, before], dry_run, result, "MSmerge_conflicts_info")


def _orphan_contents(replica: Replica, pubs: dict[str, PublicationRow], dry_run: bool, result: ReplicaCleanup) -> None:
    """Contents rows of rows no longer in their table (a delete that bypassed tracking)."""
    contents, p = replica.meta("MSmerge_contents"), replica.p
    seen: set[int] = set()
    for pubid in pubs:
        for row in published_articles(replica, pubid):
            art = tracked_article(row)
            if art.nickname in seen or replica.reflect(art.table) is None:
                continue
            seen.add(art.nickname)
            q = replica.dialect.quote
            rows = identity.guids_sql(replica.dialect, art)      # a row here has its rowguid there
            where = (f"tablenick = {p} AND generation <= {p} AND NOT EXISTS (SELECT 1 FROM {rows} t "
                     f"WHERE t.{q(art.rowguid_column)} = {contents}.rowguid)")
            _delete(replica, contents, where, [art.nickname, result.horizon], dry_run, result, "MSmerge_contents")


@dataclass
class CleanupSummary:
    replicas: list[ReplicaCleanup] = field(default_factory=list)
    dry_run: bool = False
    devices: list[str] = field(default_factory=list)     # enrolled devices dropped (fleet/registry.forget)

    @property
    def ok(self) -> bool:
        return all(r.error is None for r in self.replicas)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "dry_run": self.dry_run, "replicas": [r.to_dict() for r in self.replicas],
                "devices_dropped": self.devices}


def cleanup(topology: Topology, publication: str | None = None, dry_run: bool = False, orphans: bool = True,
            report: Reporter = silent, now: dt.datetime | None = None) -> CleanupSummary:
    """Clean the publisher and every subscriber of the merge publications (one, with ``publication``).
    A replica that cannot be reached or cleaned is listed with its error; the others go on."""
    pubs = [p for p in topology.publications if p.kind == "merge" and publication in (None, p.name)]
    if publication is not None and not pubs:
        topology.publication(publication)          # an unknown name: its own error
        raise ConfigurationError(f"publication {publication} is not a merge publication; cleanup is for merge "
                                 "metadata (the distribution database keeps transactional commands)", obj=publication)
    names = {p.name for p in pubs}
    now = now or store.utcnow()
    summary = CleanupSummary(dry_run=dry_run)
    targets = [(topology.publisher.name, topology.publisher_url, Role.PUBLISHER)]
    seen = {topology.publisher_url}
    for p in pubs:
        for s in topology.subscriptions_of(p.name):
            url = topology.subscriber_url(s)
            if url not in seen:
                seen.add(url)
                targets.append((s.name, url, Role.SUBSCRIBER))
    with contextlib.nullcontext() if dry_run else locks.hold(topology, "cleanup", sorted(names), report):
        for name, url, role in targets:
            try:
                with connect(url, name) as replica:
                    store.require_metadata(replica)
                    result = clean_replica(replica, name, role, now, names, dry_run, orphans)
            except SparksyncError as e:
                result = ReplicaCleanup(name, role, error=e.message)
            summary.replicas.append(result)
            report(f"cleanup {name}: " + (f"FAILED: {result.error}" if result.error else _describe(result, dry_run)))
    return summary


def _describe(r: ReplicaCleanup, dry_run: bool) -> str:
    what = ", ".join(f"{n} {t}" for t, n in sorted(r.removed.items())) or "nothing"
    return (f"{'would remove' if dry_run else 'removed'} {what} (through generation {r.horizon}; "
            f"held by {r.held_by})")
