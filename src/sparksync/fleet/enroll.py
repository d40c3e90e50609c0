"""The operator's side of a device group's enrollment: a secret made with the partition its devices get
(``make_secret``; the door redeems it: ``merge/session/remote/enrollment.py``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.errors import ConfigurationError, SparksyncError
from sparksync.merge.partitions.evaluation import ensure_partitions, partition_values
from sparksync.merge.partitions.scheme import scheme_of
from sparksync.merge.session.remote import enrollment
from sparksync.merge.session.remote.enrollment import EnrollmentSecret
from sparksync.merge.tracking.articles import published_articles
from sparksync.metadata import store
from sparksync.metadata.records import PartitionOptions, Role, SubscriptionRow
from sparksync.progress import Reporter, silent
from sparksync.snapshot.manifest import current_snapshot
from sparksync.web import tokens


def make_secret(topology: Topology, group: str, *, host_name: str | None = None, login: str | None = None,
                uses: int | None = None, expires: dt.timedelta | None = None, snapshot: bool = True,
                spark: Callable[[], Any] | None = None, report: Reporter = silent) -> tuple[str, EnrollmentSecret]:
    """A new enrollment secret of ``group`` for devices of partition (``host_name``, ``login``): the partition made
    where the publication is filtered and it does not exist (as ``setup`` makes a configured subscription's), and,
    when the current snapshot does not hold it, a new snapshot written (``spark``) so its devices can initialize;
    without ``snapshot`` that is said and left to the operator (many secrets made, then one ``sparksync
    snapshot``). Returns (the secret, printed once; what is kept of it)."""
    g = topology.device_group(group)
    if uses is not None and uses < 1:
        raise ConfigurationError(f"--uses {uses}: at least one device must be able to enroll", obj="uses")
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        store.require_metadata(pub)
        with pub.transaction():
            tokens.install(pub)
            prow = enrollment.publication_of(pub, g)
            articles = published_articles(pub, prow.pubid)
            scheme = scheme_of(articles)
            pid = None
            if scheme.filtered:
                values = partition_values(scheme, host_name, login, f"device group {g.name}")
                single = [a.name for a in articles if a.partition_options == PartitionOptions.NON_OVERLAPPING_SINGLE]
                made = ensure_partitions(pub, prow.pubid, scheme, articles, [values],
                                         mappings=prow.precomputed)[0]
                pid = made.partition_id
                if single:
                    held = [r.name for r in store.select(pub, SubscriptionRow, {"pubid": prow.pubid, "partition_id": pid})
                            if r.role is Role.SUBSCRIBER]
                    if uses != 1 or held:
                        raise ConfigurationError(
                            f"device group {g.name}: article {single[0]} has one subscription per partition "
                            f"(partition_options = 3): a secret of partition {made.describe()} takes --uses 1"
                            + (f", and the partition is {held[0]}'s (sparksync devices --remove it first)" if held else ""),
                            obj=g.name)
            expires_at = store.utcnow() + expires if expires is not None else None
            secret, kept = enrollment.create(pub, g.name, host_name, login, pid, uses, expires_at)
    _snapshot_holds(topology, g.publication, pid, spark if snapshot else None, report)
    return secret, kept


def _snapshot_holds(topology: Topology, publication: str, pid: int | None, spark: Callable[[], Any] | None,
                    report: Reporter) -> None:
    """The current snapshot holds partition ``pid``; otherwise a new one is written (what a device initializes from)."""
    try:
        _, manifest = current_snapshot(topology.snapshots, publication)
    except SparksyncError:
        manifest = None
    if manifest is not None and (pid is None or all(a.partitions is None or str(pid) in a.partitions
                                                    for a in manifest.articles)):
        return
    if spark is None:
        report(f"publication {publication}: the current snapshot does not hold partition {pid}: run 'sparksync "
               "snapshot' before its devices enroll (until then their first sync is refused, naming it)")
        return
    from sparksync.merge.snapshot.writer import write_snapshot

    report(f"publication {publication}: a new snapshot holds partition {pid} for the devices that enroll into it")
    write_snapshot(spark(), topology, publication, report)
