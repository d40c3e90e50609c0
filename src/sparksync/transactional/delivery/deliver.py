"""The distribution agent's work at one subscription: commands in commit order, in commit batches,
each committed together with the watermark it advances (exactly once), over one or several
connections (subscription streams).

A commit batch is ``commit_batch_size`` transactions or ``commit_batch_threshold`` commands, which
ever comes first; a transaction is never split. With one stream the batch is one transaction at
the subscriber, and ``MSreplication_subscriptions`` (stream 0) moves to the batch's last
``xact_seqno`` inside it. A batch of fewer than N x ``subscription_streams_threshold`` commands goes
the same way (there N connections' round trips and commits cost more than they save). With N
streams and a bigger batch each command goes to the stream its row's primary key
hashes to (the key before the change: every command of a row stays in one stream, in order), the
streams apply in parallel, each on its own connection, and each commits its part together with its
own watermark row once every stream has succeeded. When any stream fails (seed 001: an update of a
key another stream has not applied yet finds no row, error 20598; or a lock held by another stream)
all streams roll back and the batch is applied again over one connection. A crash between the
streams' commits leaves their watermarks apart; the next run finishes that batch first, each stream
skipping what it already committed.

Errors: a command that fails with a number in ``skip_errors`` is logged and skipped; a transient
failure (a deadlock, a lock timeout, a lost connection) tries the batch again, on new connections
where they were lost; any other failure rolls the batch back and stops this subscription (the
others go on). A commit that fails is a typed error like any statement's: a stream whose commit
fails after others committed leaves the batch half committed, and the next try (or the fallback to
one connection) applies what the subscriber's watermarks say is left (:meth:`Delivery._still_pending`),
as does a try after a lost connection, whose commit may have gone through.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sparksync import failpoints
from sparksync.dialects import connect
from sparksync.dialects.model import from_table_dict
from sparksync.dialects.replica import Replica
from sparksync.errors import ErrorInfo, SparksyncError
from sparksync.metadata import store
from sparksync.metadata.records import DeliveryMarkRow, SubscriptionArticleRow
from sparksync.progress import send_progress
from sparksync.redaction import redact
from sparksync.retry import with_retries
from sparksync.transactional.capture import seen_by_snapshot
from sparksync.transactional.capture.shapes import ShapeDef
from sparksync.transactional.delivery.bulk import BulkApplier
from sparksync.transactional.delivery.bulk_text import TextBatch
from sparksync.transactional.delivery.results import CommandError, DeliveryResult, TokenDelivered
from sparksync.transactional.delivery.subscriber import (
    Applier,
    ArticleTarget,
    Command,
    error_number,
    schema_change,
    skippable,
)

STREAM_LOCK_TIMEOUT = "2s"      # a stream waiting on another stream's lock gives up: the batch falls back


@dataclass
class SubscriptionTarget:
    name: str
    url: str
    label: str
    publisher: str
    streams: int
    commit_batch_size: int
    commit_batch_threshold: int
    skip_errors: list[str]
    targets: dict[int, ArticleTarget]
    sync_point: dict | None
    streams_threshold: int = 0               # a batch under streams x this many commands: one connection


@dataclass
class DeliveryContext:
    publication: str
    publication_id: str
    subscriptions: dict[str, SubscriptionTarget]
    shapes: dict[str, ShapeDef] = field(default_factory=dict)     # what decodes a PostgreSQL publisher's changes
    progress: tuple[str, int] | None = None
    processes: int = 1          # processes one delivery may use to make a big batch's lines (at most its cores)


class StreamFailed(Exception):
    """One stream of a multi-stream batch failed: every stream rolled back, or (``committed``) its
    commit failed after earlier streams had committed their part."""

    def __init__(self, message: str, committed: bool = False):
        super().__init__(message)
        self.committed = committed


def route(target: ArticleTarget, c: Command, streams: int) -> int:
    """The stream of a command: its row's primary key before the change (after, for an insert), hashed
    by the log reader (``rowhash``) or here."""
    if streams == 1 or c.type not in ("ins", "upd", "del"):
        return 0
    if c.rowhash is not None:
        return c.rowhash % streams
    row = json.loads(c.before if c.before is not None else c.after or "{}")
    key = json.dumps([c.article_id] + [row.get(k) for k in target.key], default=str, separators=(",", ":"))
    return zlib.crc32(key.encode("utf-8")) % streams


class Delivery:
    """Delivers commands to one subscription. Feed transactions in order with :meth:`add`, then :meth:`finish`."""

    def __init__(self, ctx: DeliveryContext, sub: SubscriptionTarget):
        self.ctx, self.sub = ctx, sub
        self.result = DeliveryResult(sub.name)
        self.t0 = time.perf_counter()
        self.main = connect(sub.url, sub.label)
        self.extra: list[Replica] = []
        try:
            failpoints.hit("distribute.setup", sub.name)
            self._recorded_schemas()
            self.applier = Applier(self.main, sub.targets, self._schema_change)
            self.bulk = BulkApplier(self.main, sub.targets, ctx.processes)
            self.stream_appliers: list[tuple[Applier, BulkApplier]] = []
            self.main.dialect.relax_commit_durability(self.main)   # made durable once, at the end (finish)
            self.watermarks = self._read_watermarks()
            self.done_to = min(self.watermarks.values())        # below this, every stream has everything
            self.batch: list[tuple[int, list[Command]]] = []
            self.batch_commands = 0
            self.stopped = False
            self.schema_changed = False          # a batch altered a table: other connections must re-prepare
            self.main_in_streams = False         # the main connection was set up as stream 0
            self._recover_streams()
        except BaseException:
            self.close()                         # a failed set-up leaks no connection
            raise

    # -- article schemas -------------------------------------------------------------------------
    def _recorded_schemas(self) -> None:
        """Each article's columns as they are at this subscriber (schema changes arrive in order)."""
        from dataclasses import replace

        for r in store.select(self.main, SubscriptionArticleRow, self._key()):
            t = self.sub.targets.get(r.article_id)
            if t is not None:
                info = from_table_dict(r.table_schema)
                self.sub.targets[t.article_id] = replace(
                    t, columns=tuple((c.name, c.type.to_dict()) for c in info.columns), key=tuple(info.primary_key))

    def _schema_change(self, replica: Replica, c: Command) -> ArticleTarget:
        content = json.loads(c.after or "{}")
        new, _ = schema_change(replica, self.sub.targets[c.article_id], content)
        self.sub.targets[c.article_id] = new
        store.update(replica, SubscriptionArticleRow, {"table_schema": content["table_schema"]},
                     {**self._key(), "article_id": c.article_id})
        self.schema_changed = True
        return new

    # -- watermarks ------------------------------------------------------------------------------
    def _key(self, stream: int | None = None) -> dict[str, Any]:
        k: dict[str, Any] = {"publication": self.ctx.publication, "subscription": self.sub.name}
        if stream is not None:
            k["stream"] = stream
        return k

    def _read_watermarks(self) -> dict[int, int]:
        rows = store.select(self.main, DeliveryMarkRow, self._key())
        if not rows:
            raise SparksyncError(f"subscription {self.sub.name}: {self.main.label} has no record of publication "
                                 f"{self.ctx.publication}: its database was lost, emptied or replaced; run "
                                 f"'sparksync reinit --subscription {self.sub.name}'", obj=self.sub.name)
        self.stored_streams = max(r.streams for r in rows)
        return {r.stream: r.transaction_timestamp for r in rows}

    def _write_watermarks(self, replica: Replica, hi: int, streams: list[int], all_streams: bool = False) -> None:
        """Move the given streams' watermark rows to ``hi`` (never back). ``all_streams``: the batch was
        applied on one connection for every stream: rows of streams beyond the current count go."""
        now = store.utcnow()
        if all_streams:
            replica.execute(f"DELETE FROM {replica.meta('MSreplication_subscriptions')} WHERE publication = {replica.p} "
                            f"AND subscription = {replica.p} AND stream >= {int(self.sub.streams)}",
                            [self.ctx.publication, self.sub.name])
        for k in streams:
            key = self._key(k)
            if k in self.watermarks:
                store.update(replica, DeliveryMarkRow, {
                    "transaction_timestamp": max(hi, self.watermarks[k]), "time": now, "streams": self.sub.streams}, key)
            else:
                store.insert(replica, DeliveryMarkRow(
                    publication=self.ctx.publication, subscription=self.sub.name, stream=k,
                    publisher=self.sub.publisher, streams=self.sub.streams, transaction_timestamp=hi, time=now))

    def _recover_streams(self) -> None:
        """Streams apart after a crash between their commits: commands up to ``behind_to`` may be
        applied by some streams and not others; the first batch finishes them (:meth:`_pending`).
        With nothing half done, a new stream count only rewrites the rows."""
        self.behind_to = max(self.watermarks.values())
        if self.behind_to == self.done_to and set(self.watermarks) != set(range(self.sub.streams)):
            with self.main.transaction():
                self._write_watermarks(self.main, self.done_to, list(range(self.sub.streams)), all_streams=True)
            self.watermarks = {k: self.done_to for k in range(self.sub.streams)}
            self.stored_streams = self.sub.streams

    def _snapshot_may_have(self, xact_seqno: int, commands: list[Command]) -> bool:
        """Could the subscription's snapshot already contain some of this transaction's commands?"""
        sync = self.sub.sync_point
        if not sync:
            return False
        if sync["kind"] == "snapshot":
            return xact_seqno <= sync["upto"]
        return commands[0].origin is not None and commands[0].origin <= sync["seq"]   # origins ascend

    def _pending(self, c: Command) -> bool:
        """Whether this command still has to be applied at this subscription."""
        if c.xact_seqno <= self.done_to:
            return False
        if c.xact_seqno <= self.behind_to:   # a half-committed multi-stream batch: by the stream it went to
            target = self.sub.targets.get(c.article_id)
            stream = route(target, c, self.stored_streams) if target is not None else 0
            return c.xact_seqno > self.watermarks.get(stream, self.done_to)
        return True

    # -- feeding ---------------------------------------------------------------------------------
    def add(self, xact_seqno: int, commands: list[Command]) -> None:
        """One transaction, in commit order."""
        if self.stopped or xact_seqno <= self.done_to:
            return
        if xact_seqno > self.behind_to and not self._snapshot_may_have(xact_seqno, commands):
            todo = commands                   # the common case: every command is new here
        else:
            todo = [c for c in commands
                    if self._pending(c) and not seen_by_snapshot(self.sub.sync_point, c.xact_seqno, c.origin)]
        self.batch.append((xact_seqno, todo))
        self.batch_commands += len(todo)
        if xact_seqno < self.behind_to:       # finishing a half-committed batch: all of it in one go
            return
        if (xact_seqno == self.behind_to or len(self.batch) >= self.sub.commit_batch_size
                or self.batch_commands >= self.sub.commit_batch_threshold):
            self.flush()

    def finish(self) -> DeliveryResult:
        if not self.stopped:
            self.flush()
        self.make_durable()
        self.result.seconds = time.perf_counter() - self.t0
        return self.result

    def make_durable(self) -> None:
        """Batches committed without waiting for the disk; one synchronous commit makes all of them
        durable before the distributor is told they arrived (its retention relies on it). If that
        fails, the result claims no position, so the distributor keeps every command."""
        if not self.result.batches:
            return

        lost = False

        def durable() -> None:
            nonlocal lost
            lost = self.main.revive() or lost
            self.main.dialect.restore_commit_durability(self.main)
            with self.main.transaction():
                store.update(self.main, DeliveryMarkRow, {"time": store.utcnow()}, self._key(0))
            if lost:    # a new connection's synchronous commit covers the earlier commits the server still has
                self._check_kept(self.result.last_seqno or 0)

        try:
            failpoints.hit("distribute.make_durable", self.sub.name)
            with_retries(durable)
        except Exception as e:  # noqa: BLE001 - reported through the result, never as a success
            self.result.last_seqno = None
            self.result.fail(e, f"the batches applied could not be made durable ({ErrorInfo.of(e).message}); they "
                                "are delivered again by the next run")

    def close(self) -> None:
        for r in [self.main, *self.extra]:
            r.close()

    # -- one batch -------------------------------------------------------------------------------
    def flush(self) -> None:
        if not self.batch or self.stopped:
            return
        batch, self.batch, self.batch_commands = self.batch, [], 0
        hi = batch[-1][0]
        commands = [c for _, cs in batch for c in cs]
        seq = self.result.batches
        t0 = time.perf_counter()
        single = (self.sub.streams == 1 or hi <= self.behind_to
                  or len(commands) < self.sub.streams * self.sub.streams_threshold
                  or any(c.type not in ("ins", "upd", "del", "token") for c in commands))
        saved = dict(self.sub.targets)
        counted = (len(self.result.errors), self.result.skipped)
        tried = False
        floor = self.done_to                 # every stream has every command up to here

        def attempt() -> bool:
            """Apply the batch, or what a failed try left of it; True when it went over the streams."""
            nonlocal tried
            todo: list[Command] | None = commands
            if self._revive() or tried:
                # a failed try may have committed part of the batch (some streams) or all of it (a
                # commit that got through before its connection was lost): the watermarks say
                todo = self._still_pending(commands, hi, floor)
                self.applier = Applier(self.main, self.sub.targets, self._schema_change)
                self.bulk = BulkApplier(self.main, self.sub.targets, self.ctx.processes)
            tried = True
            if todo is None:
                return False
            if single or hi <= self.behind_to:
                self._single(todo, hi)
                return False
            try:
                self._parallel(todo, hi)
                return True
            except StreamFailed as e:
                self.result.fallbacks += 1
                if e.committed:
                    todo = self._still_pending(commands, hi, floor)
                if todo is not None:
                    self._single(todo, hi)
                return False

        def again(e: SparksyncError, n: int) -> None:
            # rolled back: a schema change of the batch is undone too, and so are the skipped commands
            del self.result.errors[counted[0]:]
            self.result.skipped = counted[1]
            self.sub.targets.clear()
            self.sub.targets.update(saved)

        try:
            streamed = with_retries(attempt, on_retry=again)
        except SparksyncError as e:
            self._stop(e, commands)
            return
        if self.schema_changed:                       # other connections prepared the old statements
            for r in self.extra:
                r.close()
            self.extra, self.stream_appliers, self.schema_changed = [], [], False
        self.watermarks = {k: hi for k in range(self.sub.streams)}
        self.done_to = self.behind_to = hi
        self.stored_streams = self.sub.streams
        res = self.result
        res.batches += 1
        res.parallel += streamed
        res.transactions += len(batch)
        res.commands += len(commands)
        res.first_seqno = batch[0][0] if res.first_seqno is None else res.first_seqno
        res.last_seqno = hi
        now = store.utcnow()
        res.tokens += [TokenDelivered(tracer_id=json.loads(c.after or "{}")["tracer_id"],
                                      subscriber_commit=now.isoformat()) for c in commands if c.type == "token"]
        failpoints.hit("distribute.after_commit", f"{self.sub.name}:{seq}")
        send_progress(self.ctx.progress, {"publication": self.ctx.publication, "subscription": self.sub.name,
                                          "batch": seq + 1, "transactions": len(batch), "commands": len(commands),
                                          "last_seqno": hi, "seconds": time.perf_counter() - t0,
                                          "fallback": self.result.fallbacks})

    def _revive(self) -> bool:
        """Open again, with this delivery's session settings, the connections that were lost (a server
        restart, a terminated backend); True when one was."""
        revived = self.main.revive()
        if revived:
            self.main.dialect.relax_commit_durability(self.main)
            self.main_in_streams = False          # its lock timeout is set again with the streams'
        if any(r.lost for r in self.extra):       # the streams' connections are made again when needed
            for r in self.extra:
                r.close()
            self.extra, self.stream_appliers = [], []
            revived = True
        return revived

    def _still_pending(self, commands: list[Command], hi: int, floor: int) -> list[Command] | None:
        """After a failed try, the watermarks as the subscriber has them, and the commands of the batch
        they do not cover: all of them, or those of the streams that did not commit (:meth:`_pending`);
        None when the whole batch was committed. ``floor``: what every stream had before the batch."""
        self._check_kept(floor)
        self.done_to, self.behind_to = min(self.watermarks.values()), max(self.watermarks.values())
        if self.done_to >= hi:
            self._recorded_schemas()              # a schema change of the batch is committed too
            return None
        return [c for c in commands if self._pending(c)]

    def _check_kept(self, upto: int) -> None:
        """Read the watermarks again (after a failed try, or a lost connection): the subscriber must still
        have every batch committed up to ``upto``. Batches are committed without waiting for the disk, so a
        server that restarted may have lost the last ones, with the watermarks they moved: then this
        delivery stops and claims no position, and the next run delivers them again."""
        self.watermarks = self._read_watermarks()
        if min(self.watermarks.values()) < upto:
            self.result.last_seqno = None
            raise SparksyncError(f"subscription {self.sub.name}: {self.main.label} no longer has batches it committed "
                                 "(its server restarted before they reached the disk); they are delivered again by "
                                 "the next run", obj=self.sub.name)

    def _single(self, commands: list[Command], hi: int) -> None:
        """The batch in one transaction on one connection: fast (runs of one statement), and when
        anything fails, again one command at a time to find it (skipping what skip_errors allows)."""
        seq = self.result.batches
        saved = dict(self.sub.targets)
        try:
            with self.main.transaction():
                _fast(self.applier, self.bulk, commands)
                self._write_watermarks(self.main, hi, list(range(self.sub.streams)), all_streams=True)
                failpoints.hit("distribute.before_commit", f"{self.sub.name}:{seq}")
            return
        except failpoints.InjectedFault:
            raise
        except SparksyncError:
            if self.main.lost:
                raise                             # tried again on a new connection (flush)
        # rolled back: a schema change of the batch is undone too
        self.sub.targets.clear()
        self.sub.targets.update(saved)
        self.applier = Applier(self.main, self.sub.targets, self._schema_change)
        self.bulk = BulkApplier(self.main, self.sub.targets, self.ctx.processes)
        with self.main.transaction():
            for c in commands:
                self.main.execute("SAVEPOINT sparksync_command")
                try:
                    self.applier.apply_one(c)
                except SparksyncError as e:
                    self.main.execute("ROLLBACK TO SAVEPOINT sparksync_command")
                    if not skippable(e, self.sub.skip_errors):
                        raise CommandFailed(c, e) from e
                    self.result.skipped += 1
                    self.result.errors.append(_error(c, e, skipped=True))
                self.main.execute("RELEASE SAVEPOINT sparksync_command")
            self._write_watermarks(self.main, hi, list(range(self.sub.streams)), all_streams=True)
            failpoints.hit("distribute.before_commit", f"{self.sub.name}:{seq}")

    def _connections(self) -> list[tuple[Replica, tuple[Applier, BulkApplier]]]:
        while len(self.extra) < self.sub.streams - 1:
            r = connect(self.sub.url, f"{self.sub.label} stream {len(self.extra) + 1}")
            r.dialect.relax_commit_durability(r)
            r.dialect.set_lock_timeout(r, STREAM_LOCK_TIMEOUT)
            self.extra.append(r)
            self.stream_appliers.append((Applier(r, self.sub.targets), BulkApplier(r, self.sub.targets)))
        if not self.main_in_streams:
            self.main.dialect.set_lock_timeout(self.main, STREAM_LOCK_TIMEOUT)
            self.main_in_streams = True
        return [(self.main, (self.applier, self.bulk))] + list(zip(self.extra, self.stream_appliers))

    def _parallel(self, commands: list[Command], hi: int) -> None:
        n = self.sub.streams
        parts: list[list[Command]] = [[] for _ in range(n)]
        for c in commands:
            parts[route(self.sub.targets[c.article_id], c, n) if c.article_id in self.sub.targets else 0].append(c)
        conns = self._connections()
        seq = self.result.batches
        errors: dict[int, BaseException] = {}
        lock = threading.Lock()

        def work(k: int, prepared: TextBatch | None) -> None:
            r, (applier, bulk) = conns[k]
            try:
                r.begin()
                _fast(applier, bulk, parts[k], prepared)
                self._write_watermarks(r, hi, [k])
            except BaseException as e:  # noqa: BLE001 - every stream's outcome is collected
                with lock:
                    errors[k] = e

        with ThreadPoolExecutor(max_workers=n) as pool:
            # a stream's Python half (its COPY lines) is made here, one stream after another, while the
            # streams already started run their statements: the subscriber's work overlaps the next
            # stream's lines, where threads each making their own would only take turns on one core
            for k in range(n):
                try:
                    prepared = conns[k][1][1].prepare(parts[k])
                except BaseException as e:  # noqa: BLE001 - that stream's failure, as if it ran
                    errors[k] = e
                    continue
                pool.submit(work, k, prepared)
        if errors:
            for r, _ in conns:
                r.rollback()
            k = min(errors)
            if isinstance(errors[k], failpoints.InjectedFault):
                raise errors[k]
            raise StreamFailed(f"stream {k}: {errors[k]}")
        failpoints.hit("distribute.before_commit", f"{self.sub.name}:{seq}")
        for k, (r, _) in enumerate(conns):
            try:
                r.commit()
            except SparksyncError as e:
                # streams 0..k-1 committed their part: the later ones roll theirs back, and the rest
                # of the batch is applied by the next try (a transient failure, e.g. a lost connection)
                # or over one connection
                for later, _ in conns[k + 1:]:
                    later.rollback()
                if e.transient:
                    raise
                raise StreamFailed(f"stream {k}: {e}", committed=k > 0) from e
            failpoints.hit("distribute.stream_committed", f"{self.sub.name}:{seq}:{k}")

    def _stop(self, e: SparksyncError, commands: list[Command]) -> None:
        self.stopped = True
        if isinstance(e, CommandFailed):
            self.result.errors.append(_error(e.command, e.error, skipped=False))
            c = e.command
            self.result.fail(e.error, f"transaction {c.xact_seqno}, command {c.command_id} ({c.type} of article "
                                      f"{c.article_id}) failed with error {error_number(e.error)}: {e.error.message}")
        else:
            self.result.fail(e)


def _fast(applier: Applier, bulk: BulkApplier, commands: list[Command], prepared: TextBatch | None = None) -> None:
    """The batch's commands on one connection, the quick way: set-based where it can (``prepared``: its
    COPY lines already made), else runs of one statement (executemany). Raises on the first failure."""
    if prepared is not None:
        if not bulk.apply_prepared(prepared):
            applier.apply(commands)
    elif not (bulk.eligible(commands) and bulk.apply(commands)):
        applier.apply(commands)


class CommandFailed(SparksyncError):
    code = "command_failed"

    def __init__(self, command: Command, error: SparksyncError):
        super().__init__(error.message, obj=error.obj)
        self.command = command
        self.error = error
        self.transient = error.transient        # a deadlock or a lock timeout: the batch is tried again


def _error(c: Command, e: SparksyncError, skipped: bool) -> CommandError:
    return CommandError(xact_seqno=c.xact_seqno, command_id=c.command_id, article_id=c.article_id,
                        error_code=error_number(e), native_code=getattr(e, "native_code", None),
                        message=redact(e.message), skipped=skipped)

