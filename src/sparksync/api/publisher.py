"""The publisher's side: what each command does, as a function of the topology, and ``Publisher``, the same as
one object."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sparksync.api.common import Progress, _said, _spark, load
from sparksync.api.fleet import devices, enroll_token, forget_strays, remove_device, revoke_device
from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.errors import ConfigurationError, NotInitialized, SparksyncError
from sparksync.merge.conflicts.override import resolve_conflict as _resolve
from sparksync.merge.conflicts.view import list_conflicts, list_failed_changes
from sparksync.merge.maintenance.cleanup import CleanupSummary
from sparksync.merge.maintenance.cleanup import cleanup as _cleanup
from sparksync.merge.partitions.evaluation import describe_partitions
from sparksync.merge.partitions.scheme import scheme_of
from sparksync.merge.publish import schema_change as merge_schema_change
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions, MergeSummary
from sparksync.merge.tracking.articles import published_articles
from sparksync.metadata import store
from sparksync.metadata.records import PublicationRow
from sparksync.monitor.devices import EnrolledDevice
from sparksync.provision import SetupSummary, check_snapshot_dir
from sparksync.provision import setup as _setup
from sparksync.provision import snapshot as _snapshot
from sparksync.reinit import reinitialize
from sparksync.run_history import LIMIT, gather_history
from sparksync.spark.environment import PackedEnvironment
from sparksync.status import gather_status
from sparksync.transactional.delivery.agent import DistributeOptions, DistributeSummary, DistributionAgent
from sparksync.transactional.distribution.logreader import READ_BATCH, LogReaderRun, run_logreader
from sparksync.transactional.publish import schema_change as tx_schema_change
from sparksync.transactional.status import tracer
from sparksync.transactional.status.tracer import TokenReport
from sparksync.validation.repair import repair as _repair
from sparksync.validation.report import ValidationReport
from sparksync.validation.subscriptions import validate as _validate
from sparksync.web import tokens


# -- the publisher's side -----------------------------------------------------------------------------------
def setup(topology: Topology, *, spark: Any = None, progress: Progress | None = None) -> SetupSummary:
    """``sparksync setup``: publish, snapshot, initialize every subscriber (idempotent)."""
    return _setup(topology, _spark(topology, spark), _said(progress))


def snapshot(topology: Topology, publications: list[str] | None = None, *, spark: Any = None,
             progress: Progress | None = None) -> dict[str, str]:
    """``sparksync snapshot``: a new snapshot of each publication (all of them by default): publication -> its id.
    The publications named and the snapshot folder are checked before Spark starts."""
    for name in publications or []:
        topology.publication(name)
    check_snapshot_dir(topology)
    return _snapshot(topology, _spark(topology, spark)(), publications, _said(progress))


def merge(topology: Topology, subscriptions: list[str] | None = None, *, exchange: str = "both",
          spark: Any = None, progress: Progress | None = None, **options: Any) -> MergeSummary:
    """``sparksync merge``: one merge session of every direct subscription (or of ``subscriptions``): upload, then
    download (``exchange``: both, upload or download); ``options``: the other fields of ``MergeOptions``."""
    agent = MergeAgent(topology, _spark(topology, spark), _said(progress))
    return agent.run(MergeOptions(exchange=exchange, subscriptions=subscriptions, **options))


def status(topology: Topology) -> dict[str, Any]:
    """``sparksync status --json``: every publication and subscription; ``ok`` False while anything needs care."""
    return gather_status(topology)


def history(topology: Topology, limit: int = LIMIT) -> dict[str, Any]:
    """``sparksync history --json``: the agents' recent runs, newest first."""
    return gather_history(topology, limit)


def partitions(topology: Topology, publication: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """``sparksync partitions --json``: the partitions of each filtered merge publication (or of ``publication``):
    parameters, subscriptions, rows per article."""
    pubs = [topology.publication(publication)] if publication else topology.publications_of_kind("merge")
    if publication and pubs[0].kind != "merge":
        raise ConfigurationError(f"publication {publication} is transactional: partitions belong to filtered merge "
                                 "publications", obj=publication)
    out: dict[str, list[dict[str, Any]]] = {}
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        store.require_metadata(pub)
        for p in pubs:
            prow = store.select_one(pub, PublicationRow, {"name": p.name})
            if prow is None:
                raise NotInitialized(f"publication {p.name} is not published; run 'sparksync setup'", obj=p.name)
            articles = published_articles(pub, prow.pubid)
            scheme = scheme_of(articles)
            if scheme.filtered:
                out[p.name] = describe_partitions(pub, prow.pubid, articles, scheme, prow.precomputed)
    return out


def conflicts(topology: Topology, publication: str | None = None, article: str | None = None) -> list[dict[str, Any]]:
    """``sparksync conflicts --json``: the conflicts resolved, with both versions."""
    return list_conflicts(topology, publication, article)


def failed_changes(topology: Topology, publication: str | None = None,
                   article: str | None = None) -> list[dict[str, Any]]:
    """``sparksync conflicts --failed --json``: the changes waiting at every replica to be tried again."""
    return list_failed_changes(topology, publication, article)


def resolve_conflict(topology: Topology, conflict_id: str, keep: str) -> dict[str, Any]:
    """``sparksync conflicts --resolve ID --keep winner|loser``."""
    return _resolve(topology, conflict_id, keep)


def validate(topology: Topology, publication: str | None = None, subscriptions: list[str] | None = None, *,
             checksum: bool = False, repair_rows: bool = False, spark: Any = None,
             progress: Progress | None = None) -> ValidationReport:
    """``sparksync validate``: each subscriber against its partition (row counts; ``checksum``: checksums and the
    rows that differ, on Spark); ``repair_rows``: write them from the publisher (publisher wins)."""
    report = _validate(topology, _spark(topology, spark), publication, subscriptions, checksum or repair_rows,
                       _said(progress))
    return _repair(topology, report, _said(progress)) if repair_rows and not report.ok else report


def repair(topology: Topology, report: ValidationReport, *, progress: Progress | None = None) -> ValidationReport:
    """``sparksync validate --repair``'s writing: the rows a checksum validation (``report``) found different,
    written at each merge subscriber from the publisher (rows changed there since are left, in ``skipped``)."""
    return _repair(topology, report, _said(progress))


def reinit(topology: Topology, subscription: str, *, upload_first: bool = False, discard: bool = False,
           spark: Any = None, progress: Progress | None = None) -> SetupSummary:
    """``sparksync reinit``: re-create a subscriber from a snapshot (``upload_first``: its changes merged before;
    ``discard``: its changes that cannot be uploaded are given up)."""
    return reinitialize(topology, _spark(topology, spark), subscription, upload_first, discard, _said(progress))


def cleanup(topology: Topology, publication: str | None = None, *, dry_run: bool = False,
            progress: Progress | None = None) -> CleanupSummary:
    """``sparksync cleanup``: the merge metadata that retention lets every replica forget; first, the devices enrolled
    into device groups that were revoked, removed or went without a sync beyond their retention are dropped."""
    from sparksync.fleet.registry import forget

    dropped: list[str] = []
    if topology.device_groups and publication is None:
        try:
            with connect(topology.publisher_url, topology.publisher.name) as pub:
                dropped = forget(pub, topology, store.utcnow(), dry_run, _said(progress))
        except SparksyncError as e:          # the publisher's own cleanup below says what is wrong with it
            _said(progress)(f"cleanup: the enrolled devices could not be read ({e.message})")
    summary = _cleanup(topology, publication, dry_run, report=_said(progress))
    summary.devices = dropped
    return summary


def schema_change(topology: Topology, publication: str, article: str, *, add_column: str | None = None,
                  drop_column: str | None = None, alter_column: str | None = None,
                  rename_column: str | None = None) -> list[str]:
    """``sparksync schema-change``: one change of one published column at the publisher, in one transaction with
    what replicates it: ``add_column`` ("Name type", nullable), ``drop_column`` ("Name"), ``alter_column``
    ("Name [type] [NOT NULL | NULL] [DEFAULT value | DROP DEFAULT]": a type of the same family; a narrowing only
    when every replica's values fit) or ``rename_column`` ("Old New"). A merge publication's subscribers and
    devices replay it at their next merge or sync, a transactional one's distribution agent applies it in order
    with the data. Returns what was done, a line each."""
    if topology.publication(publication).kind == "merge":
        return merge_schema_change.change(topology, publication, article, add_column, drop_column, alter_column,
                                          rename_column)
    content = tx_schema_change.change(topology, publication, article, add_column, drop_column, alter_column,
                                      rename_column)
    return [f"{article}: {tx_schema_change.describe(content)}"]


def logreader(topology: Topology, publications: list[str] | None = None, *, read_batch: int = READ_BATCH,
              progress: Progress | None = None) -> list[LogReaderRun]:
    """``sparksync logreader``: each transactional publication's committed transactions moved from the publisher's
    log to the distribution database (whole transactions, ``read_batch`` changes a read)."""
    return run_logreader(topology, publications, read_batch, _said(progress))


def distribute(topology: Topology, subscriptions: list[str] | None = None, *, spark: Any = None,
               progress: Progress | None = None) -> DistributeSummary:
    """``sparksync distribute``: the queued commands delivered to the transactional subscriptions (or to
    ``subscriptions``), exactly once, in commit order."""
    return DistributionAgent(topology, _spark(topology, spark), _said(progress)).run(DistributeOptions(subscriptions))


def tracer_token(topology: Topology, publication: str, *, wait: float = 0.0,
                 progress: Progress | None = None) -> TokenReport:
    """``sparksync tracer-token``: a tracer token posted to ``publication`` and its latency report, publisher ->
    distributor -> each subscriber, once every subscriber has it or ``wait`` seconds have passed (the agents, or
    ``serve``, move it meanwhile)."""
    tid = tracer.post(topology, publication)
    _said(progress)(f"tracer token {tid} posted to {publication}")
    deadline = time.monotonic() + wait
    rep = tracer.report(topology, publication, tid)
    while not rep.complete and time.monotonic() < deadline:
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))       # the agents write where it is: polled
        rep = tracer.report(topology, publication, tid)
    return rep


def tracer_tokens(topology: Topology, publication: str, limit: int = 20) -> list[TokenReport]:
    """``sparksync tracer-token --history``: the recent tracer tokens of ``publication``, newest first."""
    return tracer.recent(topology, publication, limit)


def _web_subscription(topology: Topology, subscription: str) -> None:
    if topology.subscription(subscription).transport != "web":
        raise ConfigurationError(f"subscription {subscription} is not a web subscription (transport = \"web\"); its "
                                 "database is reached directly and needs no token", obj=subscription)


def token(topology: Topology, subscription: str, *, rotate: bool = False) -> str:
    """``sparksync token``: a web subscription's device token (its only copy: the publisher keeps a hash);
    ``rotate``: a new one replaces it (the old one stops working at once)."""
    _web_subscription(topology, subscription)
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        return tokens.create(pub, subscription, rotate=rotate)


def revoke_token(topology: Topology, subscription: str) -> int:
    """``sparksync token --revoke``: the web subscription's token removed (its device cannot sync); how many were."""
    _web_subscription(topology, subscription)
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        return tokens.revoke(pub, subscription)


def serve(topology: Topology, *, operator_token: str | None = None, spark: Any = None,
          progress: Progress | None = None) -> None:
    """``sparksync serve``: the service in this process until SIGTERM: every agent on its schedule, the operator's
    monitor (``operator_token``: what its requests must carry; required beyond loopback), the device endpoint
    when there are web subscriptions. Needs the ``server`` extra."""
    from sparksync.service.process import run_service

    run_service(topology, _said(progress), _spark(topology, spark, serving=True), operator_token)


@contextlib.contextmanager
def serving(topology: Topology, *, spark: Any = None, progress: Progress | None = None) -> Iterator[str]:
    """The device endpoint of ``sparksync serve`` in a thread of this process while inside (an application, a
    test): yields its URL. Needs the ``server`` extra."""
    from sparksync.web.server.serve import serving as _serving

    with _serving(topology, _said(progress), _spark(topology, spark) if spark is not None else None) as url:
        yield url


def cluster_pack(output: str | Path, *, progress: Progress | None = None) -> PackedEnvironment:
    """``sparksync cluster-pack``: the executors' Python environment packed into ``output`` (``spark/environment.py``);
    its ``conf()`` is what ``[spark] conf`` adds to ship it."""
    from sparksync.spark.environment import pack

    return pack(Path(output), _said(progress))



# -- the publisher's side, as one object -------------------------------------------------------------------
class Publisher:
    """A topology's publisher, and what can be done to its replication (each method is the function of this
    module of the same name): ``Publisher(topology)`` or ``Publisher("sparksync.toml")``; ``spark``: a
    SparkSession for every job (default: one made from ``[spark]`` when first needed, kept for the next
    calls); ``progress``: a callback of one line."""

    def __init__(self, topology: Topology | str | Path | dict[str, Any], *, spark: Any = None,
                 progress: Progress | None = None):
        self.topology = topology if isinstance(topology, Topology) else load(topology)
        self.progress = progress
        self._spark = _spark(self.topology, spark)          # made once, when a job first needs it

    def setup(self) -> SetupSummary:
        return setup(self.topology, spark=self._spark, progress=self.progress)

    def snapshot(self, publications: list[str] | None = None) -> dict[str, str]:
        return snapshot(self.topology, publications, spark=self._spark, progress=self.progress)

    def merge(self, subscriptions: list[str] | None = None, *, exchange: str = "both", **options: Any) -> MergeSummary:
        return merge(self.topology, subscriptions, exchange=exchange, spark=self._spark, progress=self.progress,
                     **options)

    def status(self) -> dict[str, Any]:
        return status(self.topology)

    def history(self, limit: int = LIMIT) -> dict[str, Any]:
        return history(self.topology, limit)

    def partitions(self, publication: str | None = None) -> dict[str, list[dict[str, Any]]]:
        return partitions(self.topology, publication)

    def conflicts(self, publication: str | None = None, article: str | None = None) -> list[dict[str, Any]]:
        return conflicts(self.topology, publication, article)

    def failed_changes(self, publication: str | None = None, article: str | None = None) -> list[dict[str, Any]]:
        return failed_changes(self.topology, publication, article)

    def resolve_conflict(self, conflict_id: str, keep: str) -> dict[str, Any]:
        return resolve_conflict(self.topology, conflict_id, keep)

    def validate(self, publication: str | None = None, subscriptions: list[str] | None = None, *,
                 checksum: bool = False, repair_rows: bool = False) -> ValidationReport:
        return validate(self.topology, publication, subscriptions, checksum=checksum, repair_rows=repair_rows,
                        spark=self._spark, progress=self.progress)

    def reinit(self, subscription: str, *, upload_first: bool = False, discard: bool = False) -> SetupSummary:
        return reinit(self.topology, subscription, upload_first=upload_first, discard=discard, spark=self._spark,
                      progress=self.progress)

    def cleanup(self, publication: str | None = None, *, dry_run: bool = False) -> CleanupSummary:
        return cleanup(self.topology, publication, dry_run=dry_run, progress=self.progress)

    def schema_change(self, publication: str, article: str, *, add_column: str | None = None,
                      drop_column: str | None = None, alter_column: str | None = None,
                      rename_column: str | None = None) -> list[str]:
        return schema_change(self.topology, publication, article, add_column=add_column, drop_column=drop_column,
                             alter_column=alter_column, rename_column=rename_column)

    def logreader(self, publications: list[str] | None = None) -> list[LogReaderRun]:
        return logreader(self.topology, publications, progress=self.progress)

    def distribute(self, subscriptions: list[str] | None = None) -> DistributeSummary:
        return distribute(self.topology, subscriptions, spark=self._spark, progress=self.progress)

    def tracer_token(self, publication: str, *, wait: float = 0.0) -> TokenReport:
        return tracer_token(self.topology, publication, wait=wait, progress=self.progress)

    def tracer_tokens(self, publication: str, limit: int = 20) -> list[TokenReport]:
        return tracer_tokens(self.topology, publication, limit)

    def token(self, subscription: str, *, rotate: bool = False) -> str:
        return token(self.topology, subscription, rotate=rotate)

    def revoke_token(self, subscription: str) -> int:
        return revoke_token(self.topology, subscription)

    def enroll_token(self, group: str, *, host_name: str | None = None, login: str | None = None,
                     uses: int | None = None, expires: str | None = None, snapshot: bool = True) -> str:
        """An enrollment secret of device ``group`` (``enroll_token``); returns the secret."""
        return enroll_token(self.topology, group, host_name=host_name, login=login, uses=uses, expires=expires,
                            snapshot=snapshot, spark=self._spark, progress=self.progress)[0]

    def devices(self, *, group: str | None = None, state: str | None = None,
                search: str | None = None) -> list[EnrolledDevice]:
        return devices(self.topology, group=group, state=state, search=search)

    def revoke_device(self, name: str) -> dict[str, Any]:
        return revoke_device(self.topology, name)

    def remove_device(self, name: str) -> dict[str, Any]:
        return remove_device(self.topology, name)

    def forget_strays(self, name: str) -> list[dict[str, Any]]:
        return forget_strays(self.topology, name)

    def serve(self, *, operator_token: str | None = None) -> None:
        return serve(self.topology, operator_token=operator_token, spark=self._spark, progress=self.progress)

    def serving(self) -> contextlib.AbstractContextManager[str]:
        return serving(self.topology, spark=self._spark, progress=self.progress)
