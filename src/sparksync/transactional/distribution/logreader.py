"""The log reader: moves each transactional publication's committed transactions from the publisher
to the distribution database, in commit order, exactly once.

Per read batch: the capture yields whole transactions (``capture/``); they are stored with their
commands, and the log reader's position moves, in one distribution transaction; only then is the
batch confirmed at the publisher (the slot advanced, the SQLite log trimmed). A crash before the
distribution commit stores nothing and the batch is read again; a crash after it, before the
confirmation, reads the batch again and skips what the position already covers.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sparksync import failpoints, locks
from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.errors import ConfigurationError, ErrorInfo
from sparksync.metadata import store
from sparksync.metadata.records import DistSubscriptionStatus
from sparksync.progress import Reporter, silent
from sparksync.transactional.capture import Begin, End, StoredCommand, capture_method, seen_by_snapshot
from sparksync.transactional.capture.shapes import ShapeDef
from sparksync.transactional.distribution import database as dst
from sparksync.transactional.distribution.database import TransactionInfo

READ_BATCH = 100_000       # changes per read (whole transactions: a bigger one is read whole)


@dataclass
class LogReaderRun:
    publication: str
    transactions: int = 0
    commands: int = 0
    batches: int = 0
    first_seqno: int | None = None
    last_seqno: int | None = None
    tokens: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return dict(vars(self))


def read_publication(topology: Topology, name: str, read_batch: int = READ_BATCH,
                     report: Reporter = silent, stored: Callable[[], None] | None = None) -> LogReaderRun:
    """One log reader run of publication ``name``: what was committed at the publisher when it began, stored at
    the distributor in batches of whole transactions; ``stored`` is called after each batch that stored some
    (``serve`` wakes the distribution agent with it: delivery starts while the log reader goes on)."""
    run = LogReaderRun(name)
    t0 = time.perf_counter()
    started = store.utcnow()
    with locks.hold(topology, "logreader", [name], report), \
            connect(topology.distributor_url, "distributor") as dist, \
            connect(topology.publisher_url, topology.publisher.name) as pub:
        dst.require(dist)
        p = dst.require_publication(dist, name)
        try:
            _read(pub, dist, p, run, read_batch, report, stored)
        except Exception as e:
            run.seconds = time.perf_counter() - t0
            _history(dist, p.publication_id, run, started, e)
            raise
        run.seconds = time.perf_counter() - t0
        _history(dist, p.publication_id, run, started)
    return run


def _read(pub, dist, p: dst.Publication, run: LogReaderRun, read_batch: int, report: Reporter,
          stored: Callable[[], None] | None) -> None:
    subs = [s for s in dst.subscriptions(dist, p.publication_id) if s.status is not DistSubscriptionStatus.INACTIVE]

    def needed_by(xact_seqno: int, origin: int | None) -> list[str]:
        """The subscriptions whose snapshot does not hold this transaction: they need its changes."""
        return [s.subscription for s in subs if not seen_by_snapshot(s.sync_point, xact_seqno, origin)]

    capture = capture_method(pub).reader(pub, p, [a for a in p.articles if a.active], read_batch, needed_by)
    try:
        _batches(capture, dist, p, run, report, stored)
    except BaseException:
        capture.close(clean=False)      # what was stored is confirmed already
        raise
    capture.close()


def _batches(capture, dist, p: dst.Publication, run: LogReaderRun, report: Reporter,
             stored: Callable[[], None] | None) -> None:
    """Batch after batch, each stored in one distribution transaction and then confirmed, until the
    capture has caught up with the horizon it took when the run began."""
    name = p.name
    after = p.logreader_seqno
    capture.horizon()      # one run reads what was committed when it started, and stops
    while True:
        with dist.transaction():
            writer = dst.TransactionWriter(dist, p.publication_id)
            current: TransactionInfo | None = None
            tokens: list[tuple[dict, TransactionInfo]] = []
            for ev in capture.read_batch(after):
                if type(ev) is StoredCommand:          # the common event first
                    assert current is not None         # commands come between Begin and End
                    writer.command(current.xact_seqno, current.commands + 1, ev)
                    current.commands += ev.changes
                    if ev.type == "token":
                        tokens.append((json.loads(ev.after or "{}"), current))
                elif isinstance(ev, Begin):
                    current = TransactionInfo(ev.xact_seqno, ev.xact_id, ev.publisher_commit)
                elif isinstance(ev, End):
                    if current is not None and current.commands:
                        writer.transaction(current)
                    current = None
                elif isinstance(ev, ShapeDef):
                    writer.shape(ev)
            for token, txn in tokens:
                store.insert_row(dist, "MStracer_tokens", {
                    "tracer_id": token["tracer_id"], "publication_id": p.publication_id,
                    "posted_time": token.get("posted"), "publisher_commit": txn.publisher_commit,
                    "distributor_commit": store.utcnow(), "xact_seqno": txn.xact_seqno})
                run.tokens.append(token["tracer_id"])
            writer.finish(writer.last)
            failpoints.hit("logreader.before_commit", name)
        failpoints.hit("logreader.before_confirm", name)
        if writer.transactions:
            run.batches += 1
            run.transactions += writer.transactions
            run.commands += writer.commands
            run.first_seqno = run.first_seqno if run.first_seqno is not None else writer.first
            run.last_seqno = writer.last
            after = writer.last
            report(f"logreader {name}: {writer.transactions:,} transaction(s), {writer.commands:,} "
                   f"command(s) stored (xact_seqno up to {writer.last})")
            if stored is not None:
                stored()
        capture.confirm()
        if capture.caught_up:
            break


def _history(dist, publication_id: str, run: LogReaderRun, started, error: Exception | None = None) -> None:
    """One MSlogreader_history row per run: what it stored, or (status failed) the error that stopped it,
    so ``status`` shows the publication stopped, since when and why. A failed run's row is best effort:
    the error itself is what the caller sees."""
    message = ErrorInfo.of(error).recorded() if error is not None else None
    row = {"run_id": store.new_guid(), "publication_id": publication_id, "start_time": started,
           "end_time": store.utcnow(), "transactions": run.transactions, "commands": run.commands,
           "first_seqno": run.first_seqno, "last_seqno": run.last_seqno, "seconds": run.seconds,
           "status": "failed" if error is not None else "succeeded", "message": message}
    with contextlib.suppress(Exception) if error is not None else contextlib.nullcontext(), dist.transaction():
        store.insert_row(dist, "MSlogreader_history", row)


def run_logreader(topology: Topology, publications: list[str] | None = None, read_batch: int = READ_BATCH,
                  report: Reporter = silent) -> list[LogReaderRun]:
    names = publications or [p.name for p in topology.publications_of_kind("transactional")]
    for n in names:
        if topology.publication(n).kind != "transactional":

            raise ConfigurationError(f"publication {n} is a merge publication; the log reader serves transactional ones",
                                     obj=n)
    return [read_publication(topology, n, read_batch, report) for n in names]
