"""The distribution agent's work at one subscription: commands in commit order, in commit batches,
each committed together with the watermark it advances (exactly once), over one or several
connections (subscription streams).

A commit batch is ``commit_batch_size`` transactions or ``commit_batch_threshold`` commands, which
ever comes first; a transaction is never split. With one stream the batch is one transaction at
the subscriber, and ``MSreplication_subscriptions`` (stream 0) moves to the batch's last
``xact_seqno`` inside it. With N streams each command goes to the stream its row's primary key
hashes to (the key before the change: every command of a row stays in one stream, in order), the
streams apply in parallel, each on its own connection, and each commits its part together with its
own watermark row once every stream has succeeded. When any stream fails (seed 001: an update of a
key another stream has not applied yet finds no row, error 20598; or a lock held by another stream)
all streams roll back and the batch is applied again over one connection. A crash between the
streams' commits leaves their watermarks apart; the next run finishes that batch first, each stream
skipping what it already committed.

Errors: a command that fails with a number in ``skip_errors`` is logged and skipped; any other
failure rolls the batch back and stops this subscription (the others go on).
"""

from __future__ import annotations

import json
import threading
import time
import traceback
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .. import failpoints
from ..dialects import connect
from ..dialects.base import Replica
from ..errors import SparksyncError
from ..metadata import store
from ..progress import send_progress
from .initialize import seen_by_snapshot
from .bulk import BulkApplier
from .subscriber import Applier, ArticleTarget, Command, error_number, skippable

RESULT_COLUMNS = ["subscription", "status", "transactions", "commands", "batches", "fallbacks", "skipped",
                  "first_seqno", "last_seqno", "errors", "tokens", "message", "seconds"]
RESULT_SCHEMA = ("subscription STRING, status STRING, transactions BIGINT, commands BIGINT, batches BIGINT, "
                 "fallbacks BIGINT, skipped BIGINT, first_seqno BIGINT, last_seqno BIGINT, errors STRING, "
                 "tokens STRING, message STRING, seconds DOUBLE")
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


@dataclass
class DeliveryContext:
    publication: str
    publication_id: str
    subscriptions: dict[str, SubscriptionTarget]
    progress: tuple[str, int] | None = None


@dataclass
class DeliveryResult:
    subscription: str
    status: str = "ok"                       # ok | error
    transactions: int = 0
    commands: int = 0
    batches: int = 0
    fallbacks: int = 0
    skipped: int = 0
    first_seqno: int | None = None
    last_seqno: int | None = None
    errors: list[dict] = field(default_factory=list)
    tokens: list[dict] = field(default_factory=list)
    message: str = ""
    seconds: float = 0.0

    def row(self) -> dict:
        out = {k: getattr(self, k) for k in RESULT_COLUMNS}
        out["errors"] = json.dumps(self.errors, default=str)
        out["tokens"] = json.dumps(self.tokens, default=str)
        return out


class StreamFailed(Exception):
    """One stream of a multi-stream batch failed: every stream rolled back."""


def route(target: ArticleTarget, c: Command, streams: int) -> int:
    """The stream of a command: its row's primary key before the change (after, for an insert), hashed
    by the log reader (``rowhash``) or here."""
    if streams == 1 or c.type not in ("ins", "upd", "del"):
        return 0
    if c.rowhash is not None:
        return c.rowhash % streams
    row = json.loads(c.before if c.before is not None else c.after)
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
        self._recorded_schemas()
        self.applier = Applier(self.main, sub.targets, self._schema_change)
        self.bulk = BulkApplier(self.main, sub.targets)
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

    # -- article schemas -------------------------------------------------------------------------
    def _recorded_schemas(self) -> None:
        """Each article's columns as they are at this subscriber (schema changes arrive in order)."""
        from dataclasses import replace

        from ..dialects.base import from_table_dict

        for r in store.select_rows(self.main, "MSsubscription_articles", self._key()):
            t = self.sub.targets.get(r["article_id"])
            if t is not None:
                info = from_table_dict(r["table_schema"])
                self.sub.targets[t.article_id] = replace(
                    t, columns=tuple((c.name, c.type.to_dict()) for c in info.columns), key=tuple(info.primary_key))

    def _schema_change(self, replica: Replica, c: Command) -> ArticleTarget:
        from .subscriber import schema_change

        content = json.loads(c.after)
        new, _ = schema_change(replica, self.sub.targets[c.article_id], content)
        self.sub.targets[c.article_id] = new
        store.update_rows(replica, "MSsubscription_articles", {"table_schema": content["table_schema"]},
                          {**self._key(), "article_id": c.article_id})
        self.schema_changed = True
        return new

    # -- watermarks ------------------------------------------------------------------------------
    def _key(self, stream: int | None = None) -> dict:
        k = {"publication": self.ctx.publication, "subscription": self.sub.name}
        if stream is not None:
            k["stream"] = stream
        return k

    def _read_watermarks(self) -> dict[int, int]:
        rows = store.select_rows(self.main, "MSreplication_subscriptions", self._key())
        if not rows:
            raise SparksyncError(f"subscription {self.sub.name}: {self.main.label} has no record of publication "
                                 f"{self.ctx.publication}; run 'sparksync setup'", obj=self.sub.name)
        self.stored_streams = max(r["streams"] for r in rows)
        return {r["stream"]: r["transaction_timestamp"] for r in rows}

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
                store.update_rows(replica, "MSreplication_subscriptions", {
                    "transaction_timestamp": max(hi, self.watermarks[k]), "time": now, "streams": self.sub.streams}, key)
            else:
                store.insert_row(replica, "MSreplication_subscriptions", {
                    **key, "publisher": self.sub.publisher, "streams": self.sub.streams, "transaction_timestamp": hi,
                    "time": now})

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
        try:
            self.main.dialect.restore_commit_durability(self.main)
            with self.main.transaction():
                store.update_rows(self.main, "MSreplication_subscriptions", {"time": store.utcnow()}, self._key(0))
        except Exception:  # noqa: BLE001 - reported through the result
            self.result.last_seqno = None

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
        try:
            single = (self.sub.streams == 1 or hi <= self.behind_to
                      or any(c.type not in ("ins", "upd", "del", "token") for c in commands))
            if single:
                self._single(commands, hi)
            else:
                try:
                    self._parallel(commands, hi)
                except StreamFailed:
                    self.result.fallbacks += 1
                    self._single(commands, hi)
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
        r = self.result
        r.batches += 1
        r.transactions += len(batch)
        r.commands += len(commands)
        r.first_seqno = batch[0][0] if r.first_seqno is None else r.first_seqno
        r.last_seqno = hi
        now = store.utcnow()
        r.tokens += [{"tracer_id": json.loads(c.after)["tracer_id"], "subscriber_commit": now.isoformat()}
                     for c in commands if c.type == "token"]
        failpoints.hit("distribute.after_commit", f"{self.sub.name}:{seq}")
        send_progress(self.ctx.progress, {"publication": self.ctx.publication, "subscription": self.sub.name,
                                          "batch": seq + 1, "transactions": len(batch), "commands": len(commands),
                                          "last_seqno": hi, "seconds": time.perf_counter() - t0,
                                          "fallback": self.result.fallbacks})

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
            pass
        # rolled back: a schema change of the batch is undone too
        self.sub.targets.clear()
        self.sub.targets.update(saved)
        self.applier = Applier(self.main, self.sub.targets, self._schema_change)
        self.bulk = BulkApplier(self.main, self.sub.targets)
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
            r.execute(f"SET lock_timeout = '{STREAM_LOCK_TIMEOUT}'")
            self.extra.append(r)
            self.stream_appliers.append((Applier(r, self.sub.targets), BulkApplier(r, self.sub.targets)))
        if not self.main_in_streams:
            self.main.execute(f"SET lock_timeout = '{STREAM_LOCK_TIMEOUT}'")
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

        def work(k: int) -> None:
            r, (applier, bulk) = conns[k]
            try:
                r.execute(r.dialect.begin_write_sql)
                _fast(applier, bulk, parts[k])
                self._write_watermarks(r, hi, [k])
            except BaseException as e:  # noqa: BLE001 - every stream's outcome is collected
                with lock:
                    errors[k] = e

        with ThreadPoolExecutor(max_workers=n) as pool:
            list(pool.map(work, range(n)))
        if errors:
            for r, _ in conns:
                try:
                    r.dialect.rollback(r.raw)
                except Exception:  # noqa: BLE001
                    pass
            k = min(errors)
            if isinstance(errors[k], failpoints.InjectedFault):
                raise errors[k]
            raise StreamFailed(f"stream {k}: {errors[k]}")
        failpoints.hit("distribute.before_commit", f"{self.sub.name}:{seq}")
        for k, (r, _) in enumerate(conns):
            r.dialect.commit(r.raw)
            failpoints.hit("distribute.stream_committed", f"{self.sub.name}:{seq}:{k}")

    def _stop(self, e: SparksyncError, commands: list[Command]) -> None:
        self.stopped = True
        self.result.status = "error"
        if isinstance(e, CommandFailed):
            self.result.errors.append(_error(e.command, e.error, skipped=False))
            c = e.command
            self.result.message = (f"transaction {c.xact_seqno}, command {c.command_id} "
                                   f"({c.type} of article {c.article_id}) failed with error {error_number(e.error)}: "
                                   f"{e.error.message}")
        else:
            self.result.message = e.message


def _fast(applier: Applier, bulk: BulkApplier, commands: list[Command]) -> None:
    """The batch's commands on one connection, the quick way: set-based where it can, else runs of one
    statement (executemany). Raises on the first failure."""
    if not (bulk.eligible(commands) and bulk.apply(commands)):
        applier.apply(commands)


class CommandFailed(SparksyncError):
    code = "command_failed"

    def __init__(self, command: Command, error: SparksyncError):
        super().__init__(error.message)
        self.command = command
        self.error = error


def _error(c: Command, e: SparksyncError, skipped: bool) -> dict:
    return {"xact_seqno": c.xact_seqno, "command_id": c.command_id, "article_id": c.article_id,
            "error_code": error_number(e), "native_code": getattr(e, "native_code", None), "message": e.message,
            "skipped": skipped}


# -- the Spark task --------------------------------------------------------------------------------

def deliver_stream(ctx: DeliveryContext, batches: Iterable) -> Iterator[dict]:
    """The commands of one apply group (Arrow batches sorted by subscription, xact_seqno, command_id):
    one :class:`Delivery` per subscription, one after another. Yields one result per subscription; a
    subscription that fails (even by an injected crash) is reported and the next one goes on."""
    group = _Group(ctx)
    for b in batches:
        cols = {n: b.column(n).to_pylist() for n in ("subscription", *Command._fields)}
        for sub, cmd in zip(cols["subscription"], map(Command, *(cols[n] for n in Command._fields))):
            if sub != group.name:
                yield from group.close()
                group.open(sub)
            group.command(cmd)
    yield from group.close()


class _Group:
    def __init__(self, ctx: DeliveryContext):
        self.ctx = ctx
        self.name: str | None = None
        self.delivery: Delivery | None = None
        self.failed: DeliveryResult | None = None
        self.txn: list[Command] = []

    def open(self, name: str) -> None:
        self.name, self.delivery, self.failed, self.txn = name, None, None, []
        try:
            self.delivery = Delivery(self.ctx, self.ctx.subscriptions[name])
        except Exception as e:  # noqa: BLE001 - this subscription fails, the others go on
            self.failed = DeliveryResult(name, status="error", message=_message(e))

    def command(self, c: Command) -> None:
        if self.delivery is None:
            return
        if self.txn and c.xact_seqno != self.txn[0].xact_seqno:
            self._add()
        self.txn.append(c)

    def _add(self) -> None:
        txn, self.txn = self.txn, []
        try:
            self.delivery.add(txn[0].xact_seqno, txn)
        except Exception as e:  # noqa: BLE001
            self._fail(e)

    def _fail(self, e: BaseException) -> None:
        d = self.delivery
        d.make_durable()
        d.result.status, d.result.message = "error", _message(e)
        d.result.seconds = time.perf_counter() - d.t0
        self.failed, self.delivery = d.result, None
        d.close()

    def close(self) -> Iterator[dict]:
        if self.name is None:
            return
        if self.delivery is not None:
            if self.txn:
                self._add()
        if self.delivery is not None:
            d = self.delivery
            try:
                result = d.finish()
            except Exception as e:  # noqa: BLE001
                self._fail(e)
            else:
                d.close()
                self.failed = result
        if self.failed is not None:
            yield self.failed.row()
        self.name, self.delivery, self.failed = None, None, None


def _message(e: BaseException) -> str:
    if isinstance(e, SparksyncError):
        return e.message
    return f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"


def make_mapper(ctx: DeliveryContext):
    def mapper(batches):
        import pyarrow as pa

        types = {"status": pa.string(), "subscription": pa.string(), "errors": pa.string(), "tokens": pa.string(),
                 "message": pa.string(), "seconds": pa.float64()}
        schema = pa.schema([(n, types.get(n, pa.int64())) for n in RESULT_COLUMNS])
        rows = list(deliver_stream(ctx, batches))
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=schema)

    return mapper


