"""Applying one generation batch at its destination, in one transaction with its watermark.

1. skip it if the destination's watermark already covers it (a re-run task applies nothing twice); a batch
   this session applied already (by an attempt of its task lost after the commit, which Spark runs again)
   is reported with what that attempt applied, recorded with the watermark (``MSmerge_applied_batches``);
2. stage the batch's changes and classify them in SQL (``staging.py``); decide the others in Python
   (``decide.decide``); set aside the changes that cannot be applied here (failed changes);
3. apply in article processing order (seeds 003/004): deletes in descending nickname order, group 1
   before group 2, then inserts and updates in ascending nickname order, group 1 before group 2;
   a change that fails on a constraint or a value is retried after the other articles, then it is a
   failed change (``conflicts.record_failed_change``);
4. record a received generation (known to the source), and a generation for resolved conflicts
   (not known to the source, so the result goes back to it), the conflicts, what the batch applied, and the
   watermark.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from sparksync import failpoints
from sparksync.dialects.replica import Replica, in_chunks
from sparksync.errors import CHANGE_REJECTED, SparksyncError, ValueRejected
from sparksync.handlers import Custom, Default
from sparksync.merge.apply import rehearsal
from sparksync.merge.apply.classify import (
    ArticleAt,
    DecidedChange,
    FailedChange,
    Removal,
    StagedWork,
    custom_decision,
    incoming,
    json_value,
    key_of,
    load_row,
    plan_batch,
    prefetch,
    replaced_by,
)
from sparksync.merge.apply.decide import Decision, Incoming
from sparksync.merge.apply.handling import HandlerFailed, Handling
from sparksync.merge.apply.outcome import ArticleStats, BatchConflict, BatchOutcome
from sparksync.merge.apply.staging import refusal
from sparksync.merge.apply.watermarks import read_watermark, write_watermark
from sparksync.merge.conflicts.model import ConflictRecord, Failure, failed_type, log_conflict, record_failed_change
from sparksync.merge.partitions.evaluation import partitions
from sparksync.merge.partitions.scheme import scheme_of
from sparksync.merge.session.changes import ArticleChanges, Change
from sparksync.merge.session.plan import ApplyContext, BatchInfo, DestinationInfo
from sparksync.merge.tracking import identity
from sparksync.merge.tracking import lineage as lin
from sparksync.merge.tracking.articles import (
    agent_writes,
    delete_row_with_lineage,
    forget_rows,
    published_articles,
    write_row_with_lineage,
)
from sparksync.merge.tracking.generations import new_generation
from sparksync.merge.tracking.tracked import TrackedArticle
from sparksync.metadata import store
from sparksync.metadata.records import FailedChangeRow, GenerationRow, GenStatus
from sparksync.progress import send_progress
from sparksync.rows import RowCodec, summarize_value


def apply_batch(replica: Replica, ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo,
                changes: dict[int, ArticleChanges], articles: dict[int, ArticleAt],
                record: Callable[[Replica, BatchOutcome], None] | None = None,
                planned: Callable[[Replica, list[StagedWork]], None] | None = None,
                handlings: dict[int, Handling] | None = None) -> BatchOutcome:
    """Apply one batch (the module doc); ``record``: what the caller writes in the same transaction, just
    before the watermark (the web door's stored reply to an upload); ``planned``: what the caller reads once
    the batch is staged and classified, before anything is written (a device's notices, ``notices.py``);
    ``handlings``: the batch's handlers, rehearsed by a caller that holds the write lock already
    (``rehearsal.rehearsed``; else they are made, and rehearsed where needed, here)."""
    t0 = time.perf_counter()
    outcome = BatchOutcome("applied")
    _BatchApplier(replica, ctx, dest, batch, changes, articles, outcome, record, planned, handlings).run()
    outcome.seconds = time.perf_counter() - t0
    if outcome.status == "applied":
        _send_progress(ctx, dest, batch, outcome)
    return outcome


def _send_progress(ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo, outcome: BatchOutcome) -> None:
    total = len(dest.batches.get(batch.source, ())) or 1
    for nick, st in outcome.stats.items():
        send_progress(ctx.progress, {
            "direction": "upload" if ctx.upload else "download", "destination": dest.name, "source": batch.source,
            "batch": batch.seq + 1, "batches": total, "article": ctx.article_names.get(nick, str(nick)), **vars(st)})


@dataclass(frozen=True)
class BeforeImage:
    """The publisher's version of a row: its values, lineage and colv."""

    values: dict[str, Any]
    lineage: dict
    colv: Any


@dataclass(frozen=True)
class Retry:
    """A decided change that failed on a constraint or a value, tried again in its generation."""

    change: DecidedChange
    generation: int


class _BatchApplier:
    """Applies one generation batch at its destination, inside one transaction (see the module doc)."""

    def __init__(self, replica: Replica, ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo,
                 changes: dict[int, ArticleChanges], articles: dict[int, ArticleAt], outcome: BatchOutcome,
                 record: Callable[[Replica, BatchOutcome], None] | None = None,
                 planned: Callable[[Replica, list[StagedWork]], None] | None = None,
                 handlings: dict[int, Handling] | None = None):
        self.replica, self.ctx, self.dest, self.batch = replica, ctx, dest, batch
        self.given = handlings
        self.record, self.planned = record, planned
        self.changes, self.articles, self.outcome = changes, articles, outcome
        self.gens: dict[str, int | None] = {"received": None, "resolved": None}
        self.counts = {"received": 0, "resolved": 0}
        self.retry: list[Retry] = []
        self.codecs: dict[int, RowCodec] = {}
        self.handlings: dict[int, Handling] = {}

    def run(self) -> None:
        replica, dest, batch, outcome = self.replica, self.dest, self.batch, self.outcome
        failpoints.hit("apply.before_begin", f"{dest.name}:{batch.seq}")   # tests: changes read, nothing locked
        if self.given is not None:                       # rehearsed by the caller: what they logged is this batch's
            self.handlings = self.given
            for said in {id(h.ctx.messages): h.ctx.messages for h in self.handlings.values()}.values():
                outcome.notes.extend(said)
            for h in self.handlings.values():
                h.ctx.messages = outcome.notes
        else:
            self.handlings = rehearsal.handlings_of(self.ctx, dest, batch, self.changes, self.articles, outcome)
            if rehearsal.needed(replica, self.handlings) and not replica.in_transaction:
                # the handlers' calls made before the write lock is taken
                rehearsal.rehearse(replica, self.ctx, dest, batch, self.changes, self.articles, self.handlings)
        with replica.transaction():
            if _applied_in_session(replica, self.ctx, batch, outcome):
                outcome.message = "applied by an earlier attempt of this session's task"
                return
            wm = read_watermark(replica, dest, batch.source)
            if wm is not None and wm >= batch.covered_at and not batch.retry:
                outcome.status, outcome.message = "skipped", f"already applied (watermark {wm})"
                return
            with agent_writes(replica):
                refusing = dest.is_publisher and batch.partition_id and self.ctx.refused_out_of_partition
                work, self.codecs = plan_batch(replica, self.ctx, dest, batch, self.changes, self.articles, outcome,
                                               self.handlings)
                if self.planned is not None:
                    self.planned(replica, [w for w in work if isinstance(w, StagedWork)])
                # read after the rows are locked and their logged changes flushed, before anything is written
                before = self.before_images() if refusing else {}
                failed_nicks = {f.tablenick for f in store.select(
                    replica, FailedChangeRow, {"source_nickname": batch.source_nick})}
                failures = [w for w in work if isinstance(w, FailedChange)]
                for w in sorted((w for w in work if not isinstance(w, FailedChange)), key=lambda w: w.key):
                    with outcome.timing(w.art.nickname) as st:
                        match w:
                            case Removal():
                                self.remove(w, st)
                            case DecidedChange():
                                self.one_row(w, st)
                            case StagedWork():
                                self.set_based(w, st, clear_failed=w.art.nickname in failed_nicks)
                for r in self.retry:        # after the other articles: an ordering problem resolves itself
                    with outcome.timing(r.change.art.nickname) as st:
                        self.retry_one(r.change, r.generation, st)
                for f in failures:          # last: a newer version applied above clears nothing recorded here
                    with outcome.timing(f.art.nickname) as st:
                        self.failed_change(f, st)
                for key, g in self.gens.items():
                    if g is not None:
                        store.update(replica, GenerationRow, {"changecount": self.counts[key]}, {"generation": g})
                if refusing:
                    self.refuse_out_of_partition(before)
                if dest.is_publisher and batch.partition_id and self.ctx.mapped:
                    self.held_by_source()
                failpoints.hit("apply.before_commit", f"{dest.name}:{batch.seq}")
                if self.record is not None:
                    self.record(replica, outcome)
                _record_applied(replica, self.ctx, batch, outcome)
                write_watermark(replica, dest, batch.source, batch.hi)
        failpoints.hit("apply.after_commit", f"{dest.name}:{batch.seq}")

    def generation_for(self, send_back: bool) -> int:
        """The received generation (known to the source) or the resolved one (sent back to it)."""
        key = "resolved" if send_back else "received"
        g = self.gens[key]
        if g is None:
            d, b, pubid = self.dest, self.batch, self.ctx.pubid
            # Who else has these changes: the publisher is believed about every replica; a subscriber
            # only about itself (trust model: it cannot make the publisher skip another replica).
            known = [d.nickname, b.source_nick] + (b.nicknames if not d.is_publisher else [])
            g = self.gens[key] = (new_generation(self.replica, GenStatus.CLOSED, [d.nickname], pubid) if send_back else
                                  new_generation(self.replica, GenStatus.RECEIVED, known, pubid, b.source_nick, b.hi))
        return g

    def _refusing(self) -> Iterator[tuple[int, TrackedArticle, list[str]]]:
        """(nickname, article, rowguids of its upserts in this batch) of the articles whose subscriber
        changes out of the partition are refused (partition_options 1 and 3)."""
        for nick, cc in self.changes.items():
            if nick in self.ctx.refused_out_of_partition and nick in self.articles:
                guids = list(dict.fromkeys(g for g, op in zip(cc.rowguid, cc.op) if op == "upsert"))
                if guids:
                    yield nick, self.articles[nick].article, guids

    def before_images(self) -> dict[str, BeforeImage | None]:
        """The publisher's version of each row a refusing article's upserts touch, None for a row it does
        not have: what a refused change is undone to."""
        replica = self.replica
        out: dict[str, BeforeImage | None] = {}
        for _, art, guids in self._refusing():
            contents, _, present = prefetch(replica, art, guids)
            for g in guids:
                values = load_row(replica, art, g) if g in present else None
                lineage_, colv = contents.get(g) or ({}, None)
                out[g] = BeforeImage(values, lineage_, colv) if values is not None else None
        return out

    def refuse_out_of_partition(self, before: dict[str, BeforeImage | None]) -> None:
        """partition_options 1 and 3: a subscriber's insert or update that leaves the row outside the
        subscriber's partition is refused. It is undone here (the publisher's version restored, or the
        inserted row deleted), in a generation the subscriber does not have, so the download takes its
        change back there too; and it is logged as a failed-change conflict, with the reason."""

        replica, d, batch = self.replica, self.replica.dialect, self.batch
        part = next(p for p in partitions(replica, self.ctx.pubid) if p.partition_id == batch.partition_id)
        scheme = scheme_of(published_articles(replica, self.ctx.pubid))
        for nick, art, guids in self._refusing():
            name = next(a for a, x in scheme.articles.items() if x.table == art.table)
            cond = scheme.condition(d, name, "m", part.params)
            if cond is None:
                continue
            out = []
            for chunk in in_chunks(guids):
                out += [str(g) for (g,) in replica.query(
                    f"SELECT m.{d.quote(art.rowguid_column)} FROM {identity.rows_sql(d, art)} AS m "
                    f"WHERE m.{d.quote(art.rowguid_column)} IN ({', '.join([d.uuid_param()] * len(chunk))}) "
                    f"AND NOT ({cond})", chunk)]
            cc = self.changes[nick]
            for g in out:
                self.undo_refused(nick, art, g, before.get(g), cc.change(cc.first[g]), part.describe())

    def undo_refused(self, nick: int, art: TrackedArticle, guid: str, before: BeforeImage | None, change: Change,
                     partition: str) -> None:
        replica, ctx, dest, batch = self.replica, self.ctx, self.dest, self.batch
        st = self.outcome.stats.setdefault(nick, ArticleStats())
        now = replica.query_one(f"SELECT lineage FROM {replica.meta('MSmerge_contents')} WHERE tablenick = {int(nick)} "
                                f"AND rowguid = {replica.dialect.uuid_param()}", [guid])
        current = lin.merge(lin.parse(now[0]) if now else {}, lin.parse(change.lineage))
        inc = incoming(change, self.codecs[nick], batch.source_nick)
        gen = self.generation_for(True)
        if before is None:
            op = "insert"
            delete_row_with_lineage(replica, art, guid, lin.bump(current, dest.nickname), gen, tombstone_type=6)
            if nick in ctx.mapped:   # the delete goes to the subscriber's partition (past mappings route deletes)
                store.insert_row(replica, "MSmerge_past_partition_mappings", {
                    "tablenick": nick, "rowguid": guid, "partition_id": batch.partition_id, "generation": gen})
        else:
            op = "update"
            write_row_with_lineage(replica, art, before.values, lin.bump(lin.merge(before.lineage, current),
                                   dest.nickname), gen, colv=json_value(before.colv) if before.colv is not None else None)
        self.counts["resolved"] += 1
        st.conflicts += 1
        st.failed += 1
        key = key_of(art, inc.values)
        rec = ConflictRecord(failed_type(True, op), nick, guid, "out_of_partition",
                             f"{op} refused: the row would be outside the partition of {batch.source} ({partition}) "
                             f"and partition_options = 1 or 3 refuses that; the publisher's "
                             f"{'version was sent back' if before is not None else 'delete was sent back'}"
                             + (f" (row {key})" if key else ""),
                             origin=ctx.replicas.name(batch.source_nick), winner=ctx.replicas.name(dest.nickname),
                             losing_row=inc.values)
        _record_conflict(replica, ctx, dest, batch, art, rec, self.outcome)

    def held_by_source(self) -> None:
        """At the publisher, from a subscriber of a filtered publication: the rows it sent are rows it
        holds, so they are mapped to its partition (``MSmerge_current_partition_mappings``) whatever
        happens to them before the next partition evaluation, which then removes from it those that
        are not in its partition (an insert out of it, or a row moved out since)."""
        replica, pid = self.replica, int(self.batch.partition_id)
        current = replica.meta("MSmerge_current_partition_mappings")
        u = replica.dialect.uuid_param()
        for nick, cc in self.changes.items():
            if nick not in self.ctx.mapped:
                continue
            guids = list(dict.fromkeys(g for g, op in zip(cc.rowguid, cc.op) if op != "delete"))
            contents = replica.meta("MSmerge_contents") if guids else ""     # (flushed: they were planned)
            for chunk in in_chunks(guids):
                replica.execute(
                    f"INSERT INTO {current} (tablenick, rowguid, partition_id) SELECT c.tablenick, c.rowguid, {pid} "
                    f"FROM {contents} c WHERE c.tablenick = {int(nick)} AND c.rowguid IN ({', '.join([u] * len(chunk))}) "
                    f"AND NOT EXISTS (SELECT 1 FROM {current} cm WHERE cm.tablenick = c.tablenick "
                    f"AND cm.rowguid = c.rowguid AND cm.partition_id = {pid})", chunk)

    def remove(self, w: Removal, st: ArticleStats) -> None:
        """Rows that left this subscriber's partition: gone from it with their metadata, recorded
        nowhere (not a delete: the rows live on in other partitions); a change of theirs that failed here
        is moot."""
        st.removed += forget_rows(self.replica, w.art, w.rowguids)
        u, failed = self.replica.dialect.uuid_param(), self.replica.meta("MSmerge_failed_changes")
        for chunk in in_chunks(w.rowguids):
            self.replica.execute(f"DELETE FROM {failed} WHERE tablenick = {int(w.art.nickname)} AND rowguid IN "
                                 f"({', '.join([u] * len(chunk))})", chunk)

    def one_row(self, w: DecidedChange, st: ArticleStats) -> None:
        gen = self.generation_for(w.decision.send_back)
        err = _try_apply(self.replica, w.art, w.inc, w.decision, gen)
        if err is not None:
            self.retry.append(Retry(w, gen))
            return
        self.applied(w, st)

    def applied(self, w: DecidedChange, st: ArticleStats) -> None:
        decision = w.decision
        _count(st, decision, w.existed)
        self.counts["resolved" if decision.send_back else "received"] += 1
        if decision.conflict is not None:
            st.conflicts += 1
            _record_conflict(self.replica, self.ctx, self.dest, self.batch, w.art, decision.conflict, self.outcome)
        elif decision.replaced is not None:
            self.outcome.replaced.append([int(w.art.nickname), str(w.inc.rowguid).lower(), decision.replaced])

    def set_based(self, w: StagedWork, st: ArticleStats, clear_failed: bool) -> None:
        """Every plain change of one article and operation in a few statements; when a constraint
        or a value rejects them, one at a time, so the failing change is found and retried."""
        replica, staged, staging = self.replica, w.staged, w.staging
        generation = self.generation_for(False)   # before the savepoint: a rollback must not take its row
        replica.execute("SAVEPOINT sparksync_bulk")
        try:
            staging.apply(w.art, w.op, generation, clear_failed, staged)
        except CHANGE_REJECTED:
            replica.execute("ROLLBACK TO SAVEPOINT sparksync_bulk")
            replica.execute("RELEASE SAVEPOINT sparksync_bulk")
            cc, codec = self.changes[w.art.nickname], self.codecs[w.art.nickname]
            for g, present in staging.rows(w.art, w.op):
                inc = incoming(cc.change(cc.first[g]), codec, self.batch.source_nick)
                decision = (Decision("upsert", dict(inc.values or {}), dict(inc.lineage),
                                     dict(inc.colv) if inc.colv is not None else None)
                            if w.op == "upsert" else Decision("delete", lineage=dict(inc.lineage)))
                self.one_row(DecidedChange(w.key, w.art, w.op, inc, decision, present), st)
            return
        replica.execute("RELEASE SAVEPOINT sparksync_bulk")
        self.outcome.bulk.add((int(w.art.nickname), w.op))
        if w.op == "delete":
            st.deletes += staged.deletes
        else:
            st.inserts += staged.inserts
            st.updates += staged.updates
        self.counts["received"] += staged.deletes if w.op == "delete" else staged.inserts + staged.updates

    def retry_one(self, w: DecidedChange, gen: int, st: ArticleStats) -> None:
        """A change that failed on a constraint or a value, tried again after the other articles; if it
        fails again it is a failed-change conflict (kept for the next merge, or compensated)."""
        replica, ctx, dest, batch = self.replica, self.ctx, self.dest, self.batch
        inc, decision, art, existed = w.inc, w.decision, w.art, w.existed
        st.retries += 1
        err = _try_apply(replica, art, inc, decision, gen)
        if err is None:
            self.applied(w, st)
            return
        handling = self.handlings.get(art.nickname)
        if handling is not None and decision.action == "upsert" and self.error_handled(handling, w, err, st):
            return
        op = "delete" if decision.action in ("delete", "tombstone") else ("update" if existed else "insert")
        compensate = ctx.rules[art.nickname].compensate_for_errors and op == "insert"
        reason = f"{op} failed: {err.message}" + (
            "; compensating delete sent to its origin" if compensate else "; tried again at the next merge")
        key = key_of(art, inc.values)
        failure = Failure(reason, key, getattr(err, "column", None),
                           summarize_value((inc.values or {}).get(err.column)) if getattr(err, "column", None) else None)
        if compensate:
            st.failed += 1
            st.conflicts += 1
            rec = ConflictRecord(failed_type(ctx.upload, op), art.nickname, inc.rowguid, err.native_code or err.kind,
                                 reason + (f" (row {key})" if key else ""), origin=ctx.replicas.name(batch.source_nick),
                                 winner="", losing_row=inc.values)
            _record_conflict(replica, ctx, dest, batch, art, rec, self.outcome)
            # Undo the insert at its origin: a delete (tombstone type 6, system delete) that
            # dominates the inserted version and that the origin does not have yet.
            delete_row_with_lineage(replica, art, inc.rowguid, lin.bump(inc.lineage, dest.nickname),
                                    self.generation_for(True), tombstone_type=6)
            self.counts["resolved"] += 1
            store.delete(replica, FailedChangeRow, {"tablenick": art.nickname, "rowguid": inc.rowguid})
            return
        self.failed_change(FailedChange(w.key, art, w.op, inc.rowguid, failure, inc.values),
                           st, op=op, code=str(err.native_code or getattr(err, "kind", "") or err.code))

    def error_handled(self, handling: Handling, w: DecidedChange, err: SparksyncError, st: ArticleStats) -> bool:
        """A change the database refused again, given to the handler's ``error``. True when the handler took it:
        its custom row applied instead (a new version made here, sent back to the source), or the change recorded
        as failed naming the handler (it raised, or its row was refused too); False for the default (the change
        fails as without a handler)."""
        art, inc, decision = w.art, w.inc, w.decision
        action: Default | Custom | Failure
        try:
            action = handling.error(dict(decision.values or {}), err.message)
        except HandlerFailed as e:
            action = Failure(e.message)
        if isinstance(action, Custom):
            lineage = decision.lineage if decision.send_back else lin.bump(dict(decision.lineage), self.dest.nickname)
            custom = replace(w, decision=custom_decision(action.row, lineage, decision.colv, decision.values,
                                                         self.dest.nickname, self.ctx.rules[art.nickname].column_tracking,
                                                         replaced_by(handling, "error")))
            again = _try_apply(self.replica, art, inc, custom.decision, self.generation_for(True))
            if again is None:
                self.applied(custom, st)
                return True
            action = Failure(f"the row business logic handler {handling.path}.error gave failed too: {again.message}")
        if isinstance(action, Failure):
            self.failed_change(FailedChange(w.key, art, w.op, inc.rowguid, replace(action, key=key_of(art, inc.values)),
                                            inc.values), st)
            return True
        return False

    def failed_change(self, w: FailedChange, st: ArticleStats, op: str | None = None, code: str | None = None) -> None:
        """Record a change that cannot be applied here: listed in MSmerge_failed_changes (and tried again
        at every merge), logged as a failed-change conflict the first time it fails."""
        replica, ctx, batch, f = self.replica, self.ctx, self.batch, w.failure
        if op is None:
            present = replica.scalar(f"SELECT count(*) FROM {identity.rows_sql(replica.dialect, w.art)} WHERE "
                                     f"{replica.dialect.quote(w.art.rowguid_column)} = {replica.dialect.uuid_param()}",
                                     [w.rowguid])
            op = "delete" if w.op == "delete" else ("update" if present else "insert")
        ctype = failed_type(ctx.upload, op)
        st.failed += 1
        attempts = record_failed_change(replica, w.art.nickname, w.rowguid, batch.source_nick, ctype, f)
        if attempts == 1:
            st.conflicts += 1
            text = f.reason + (f" (row {f.key})" if f.key else "") + (
                f"; column {f.column}" if f.column and f.column not in f.reason else "") + (
                f", value {f.value}" if f.value else "")
            rec = ConflictRecord(ctype, w.art.nickname, w.rowguid, code or "failed", text,
                                 origin=ctx.replicas.name(batch.source_nick), winner="",
                                 losing_row=w.values)
            _record_conflict(replica, ctx, self.dest, batch, w.art, rec, self.outcome)


def _count(st: ArticleStats, decision: Decision, existed: bool) -> None:
    if decision.action == "upsert":
        if existed:
            st.updates += 1
        else:
            st.inserts += 1
    elif decision.action == "delete":
        st.deletes += 1


def _try_apply(replica: Replica, art: TrackedArticle, inc: Incoming, decision: Decision, gen: int):
    if decision.action == "upsert":
        refused = _misfit(art, decision.values or {})
        if refused is not None:
            return refused
    replica.execute("SAVEPOINT sparksync_change")
    try:
        if decision.action == "upsert":
            values = dict(decision.values or {})
            values[art.rowguid_column] = inc.rowguid
            write_row_with_lineage(replica, art, values, decision.lineage, gen, decision.colv)
        else:
            delete_row_with_lineage(replica, art, inc.rowguid, decision.lineage, gen)
        store.delete(replica, FailedChangeRow, {"tablenick": art.nickname, "rowguid": inc.rowguid})
    except CHANGE_REJECTED as e:
        replica.execute("ROLLBACK TO SAVEPOINT sparksync_change")
        replica.execute("RELEASE SAVEPOINT sparksync_change")
        return e
    replica.execute("RELEASE SAVEPOINT sparksync_change")
    return None


def _misfit(art: TrackedArticle, values: dict[str, Any]) -> ValueRejected | None:
    """A value of the row that its column's declared type does not admit, refused as the database would refuse
    it (``staging.refusal``: SQLite's affinity would store a misfit as it comes), naming the column."""
    for c in art.info.columns:
        why = refusal(c, values[c.name]) if c.name in values and c.name != art.rowguid_column else None
        if why is not None:
            return ValueRejected(why, column=c.name)
    return None


def _record_applied(replica: Replica, ctx: ApplyContext, batch: BatchInfo, outcome: BatchOutcome) -> None:
    """What this batch applied, in its transaction, before the watermark (``MSmerge_applied_batches``):
    the source's rows of earlier sessions go (a session reads back only its own), and any row of this batch
    (an attempt running beside this one, which Spark may start for a slow task)."""
    table, u = replica.meta("MSmerge_applied_batches"), replica.dialect.uuid_param()
    replica.execute(f"DELETE FROM {table} WHERE pubid = {u} AND source_nickname = {int(batch.source_nick)} "
                    f"AND (session_id <> {u} OR batch_seq = {int(batch.seq)})", [ctx.pubid, ctx.session_id])
    done = {"stats": {str(nick): vars(st) for nick, st in outcome.stats.items()},
            "conflicts": [c.to_dict() for c in outcome.conflicts], "notes": outcome.notes,
            "replaced": outcome.replaced}
    store.insert_row(replica, "MSmerge_applied_batches", {
        "pubid": ctx.pubid, "source_nickname": batch.source_nick, "session_id": ctx.session_id,
        "batch_seq": batch.seq, "generation": batch.hi,
        "outcome": json.loads(json.dumps(done, default=str))})    # a losing row's values as the result row has them


def _applied_in_session(replica: Replica, ctx: ApplyContext, batch: BatchInfo, outcome: BatchOutcome) -> bool:
    """Whether this session applied ``batch`` already (an attempt of its task lost after the commit: Spark
    runs the task again); if so, ``outcome`` is what that attempt applied."""
    rows = store.select_rows(replica, "MSmerge_applied_batches", {
        "pubid": ctx.pubid, "source_nickname": batch.source_nick, "session_id": ctx.session_id, "batch_seq": batch.seq})
    if not rows:
        return False
    done = rows[0]["outcome"]
    outcome.status = "applied"
    outcome.stats = {int(nick): ArticleStats.from_dict(st) for nick, st in done["stats"].items()}
    outcome.conflicts = [BatchConflict.from_dict(c) for c in done["conflicts"]]
    outcome.notes = list(done.get("notes") or [])
    outcome.replaced = [list(r) for r in done.get("replaced") or ()]
    return True


def _record_conflict(replica: Replica, ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo,
                     art: TrackedArticle, rec: ConflictRecord, outcome: BatchOutcome) -> None:
    subscription = batch.source if ctx.upload else dest.name
    if dest.log_conflicts_here:
        log_conflict(replica, ctx.pubid, ctx.publication, art, rec, subscription, ctx.upload, ctx.session_id)
    outcome.conflicts.append(BatchConflict(rec, dest.log_conflicts_remote))
