"""Applying one generation batch at its destination, in one transaction with its watermark.

1. skip it if the destination's watermark already covers it (a re-run task applies nothing twice);
2. stage the batch's changes and classify them in SQL (``staging.py``); decide the others in Python
   (``decide.decide``); set aside the changes that cannot be applied here (failed changes);
3. apply in article processing order (seeds 003/004): deletes in descending nickname order, group 1
   before group 2, then inserts and updates in ascending nickname order, group 1 before group 2;
   a change that fails on a constraint or a value is retried after the other articles, then it is a
   failed change (``conflicts.record_failed_change``);
4. record a received generation (known to the source), and a generation for resolved conflicts
   (not known to the source, so the result goes back to it), the conflicts, and the watermark.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from .. import failpoints
from ..dialects.replica import Replica, in_chunks
from ..errors import CHANGE_REJECTED, SparksyncError
from ..metadata import store
from ..progress import send_progress
from ..rows import RowCodec, row_key, summarize_value
from ..types import ValueError_
from . import lineage as lin
from .changes import OP_REMOVE, OP_UNREADABLE, ArticleChanges, Change
from .conflicts import ConflictRecord, Failure, failed_type, log_conflict, record_failed_change
from .decide import Decision, Incoming, Local, decide
from .generations import new_generation
from .plan import ApplyContext, BatchInfo, DestinationInfo
from .resolvers import ResolverFailed
from .staging import LocalMeta, StagedArticle, Staging
from .tracking import (
    TrackedArticle,
    agent_writes,
    delete_row_with_lineage,
    forget_rows,
    published_articles,
    write_row_with_lineage,
)
from .watermarks import read_watermark, write_watermark


@dataclass
class ArticleStats:
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    conflicts: int = 0
    retries: int = 0
    failed: int = 0
    skipped: int = 0
    removed: int = 0                      # rows that left the destination's partition, removed from it
    seconds: float = 0.0                  # time spent on this article's changes at the destination


@dataclass
class BatchOutcome:
    status: str                            # "applied" | "skipped" | "error"
    stats: dict[int, ArticleStats] = field(default_factory=dict)
    conflicts: list[tuple[ConflictRecord, bool]] = field(default_factory=list)   # (conflict, log it at the source)
    message: str = ""
    seconds: float = 0.0

    @contextlib.contextmanager
    def timing(self, nick: int) -> Iterator[ArticleStats]:
        """Count the time of a step of one article's work into its stats."""
        st = self.stats.setdefault(nick, ArticleStats())
        t0 = time.perf_counter()
        try:
            yield st
        finally:
            st.seconds += time.perf_counter() - t0


def _prefetch(replica: Replica, article: TrackedArticle, rowguids: list[str]) -> tuple[dict, dict, set]:
    """Contents (lineage, colv), tombstones (lineage) and present rows for these rowguids."""
    d = replica.dialect
    contents, tombs, present = {}, {}, set()
    u = d.uuid_param()
    for chunk in in_chunks(rowguids):
        inlist = ", ".join([u] * len(chunk))
        for g, l_, c in replica.query(
                f"SELECT rowguid, lineage, colv FROM {replica.meta('MSmerge_contents')} "
                f"WHERE tablenick = {int(article.nickname)} AND rowguid IN ({inlist})", chunk):
            contents[str(g)] = (lin.parse(l_), json.loads(c) if isinstance(c, str) else c)
        for g, l_ in replica.query(
                f"SELECT rowguid, lineage FROM {replica.meta('MSmerge_tombstone')} "
                f"WHERE tablenick = {int(article.nickname)} AND rowguid IN ({inlist})", chunk):
            tombs[str(g)] = lin.parse(l_)
        for (g,) in replica.query(
                f"SELECT {d.quote(article.rowguid_column)} FROM {d.table_sql(article.table)} "
                f"WHERE {d.quote(article.rowguid_column)} IN ({inlist})", chunk):
            present.add(str(g))
    return contents, tombs, present


def _load_row(replica: Replica, article: TrackedArticle, rowguid: str) -> dict[str, Any] | None:
    from ..types import arrow_converter

    d = replica.dialect
    cols = list(article.info.columns)
    row = replica.query_one(
        f"SELECT {', '.join(d.quote(c.name) for c in cols)} FROM {d.table_sql(article.table)} "
        f"WHERE {d.quote(article.rowguid_column)} = {d.uuid_param()}", [rowguid])
    if row is None:
        return None
    return {c.name: arrow_converter(c.type)(v) for c, v in zip(cols, row)}


def _order_key(article: TrackedArticle, group: int, op: str) -> tuple:
    """Seeds 003/004: all deletes first (group 1, then group 2; descending nickname), then inserts and
    updates (group 1, then group 2; ascending nickname)."""
    if op == "delete":
        return (0, group, -article.nickname)
    return (1, group, article.nickname)


@dataclass
class _Work:
    """One step of a batch, sortable into article processing order."""

    key: tuple
    art: TrackedArticle
    op: str                                     # "upsert" | "delete" | "remove"
    staged: StagedArticle | None = None         # set-based: every "apply" row of (article, op) ...
    staging: Staging | None = None              # ... in this staging table
    inc: Incoming | None = None                 # one row through decide
    decision: Decision | None = None
    existed: bool = False
    failure: Failure | None = None             # a failed change (recorded after the batch's other work)
    rowguid: str = ""
    removals: list[str] = field(default_factory=list)   # op "remove": rows that left the partition

    @property
    def decided(self) -> tuple[Incoming, Decision]:
        """One row's change and its decision (work decided in Python)."""
        assert self.inc is not None and self.decision is not None, "not a decided change"
        return self.inc, self.decision

    @property
    def bulk(self) -> tuple[StagedArticle, Staging]:
        """The staged changes of (article, op) and their staging table (set-based work)."""
        assert self.staged is not None and self.staging is not None, "not set-based work"
        return self.staged, self.staging


def _incoming(c: Change, codec: RowCodec, source_nick: int) -> Incoming:
    return Incoming(c.op, c.rowguid, codec.decode(c.row), lin.parse(c.lineage),
                    json.loads(c.colv) if c.colv else None, source_nick)


def _json_value(v):
    return json.loads(v) if isinstance(v, (str, bytes)) else v


def apply_batch(replica: Replica, ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo,
                changes: dict[int, ArticleChanges], articles: dict[int, tuple[TrackedArticle, int]]) -> BatchOutcome:
    t0 = time.perf_counter()
    outcome = BatchOutcome("applied")
    _BatchApplier(replica, ctx, dest, batch, changes, articles, outcome).run()
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


class _BatchApplier:
    """Applies one generation batch at its destination, inside one transaction (see the module doc)."""

    def __init__(self, replica: Replica, ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo,
                 changes: dict[int, ArticleChanges], articles: dict[int, tuple[TrackedArticle, int]],
                 outcome: BatchOutcome):
        self.replica, self.ctx, self.dest, self.batch = replica, ctx, dest, batch
        self.changes, self.articles, self.outcome = changes, articles, outcome
        self.gens: dict[str, int | None] = {"received": None, "resolved": None}
        self.counts = {"received": 0, "resolved": 0}
        self.retry: list[tuple[_Work, int]] = []
        self.codecs: dict[int, RowCodec] = {}

    def run(self) -> None:
        replica, dest, batch, outcome = self.replica, self.dest, self.batch, self.outcome
        failpoints.hit("apply.before_begin", f"{dest.name}:{batch.seq}")   # tests: changes read, nothing locked
        with replica.transaction():
            wm = read_watermark(replica, dest, batch.source)
            if wm is not None and wm >= batch.hi and not batch.retry:
                outcome.status, outcome.message = "skipped", f"already applied (watermark {wm})"
                return
            with agent_writes(replica):
                refusing = dest.is_publisher and batch.partition_id and self.ctx.refused_out_of_partition
                before = self.before_images() if refusing else {}
                work, self.codecs = _plan(replica, self.ctx, dest, batch, self.changes, self.articles, outcome)
                failed_nicks = {f["tablenick"] for f in store.select_rows(
                    replica, "MSmerge_failed_changes", {"source_nickname": batch.source_nick})}
                failures = [w for w in work if w.failure is not None]
                for w in sorted((w for w in work if w.failure is None), key=lambda w: w.key):
                    with outcome.timing(w.art.nickname) as st:
                        if w.op == OP_REMOVE:
                            self.remove(w, st)
                        elif w.staged is None:
                            self.one_row(w, st)
                        else:
                            self.set_based(w, st, clear_failed=w.art.nickname in failed_nicks)
                for w, gen in self.retry:   # after the other articles: an ordering problem resolves itself
                    with outcome.timing(w.art.nickname) as st:
                        self.retry_one(w, gen, st)
                for w in failures:          # last: a newer version applied above clears nothing recorded here
                    with outcome.timing(w.art.nickname) as st:
                        self.failed_change(w, st)
                for key, g in self.gens.items():
                    if g is not None:
                        store.update_rows(replica, "MSmerge_genhistory", {"changecount": self.counts[key]},
                                          {"generation": g})
                if refusing:
                    self.refuse_out_of_partition(before)
                if dest.is_publisher and batch.partition_id and self.ctx.mapped:
                    self.held_by_source()
                failpoints.hit("apply.before_commit", f"{dest.name}:{batch.seq}")
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
            g = self.gens[key] = (new_generation(self.replica, 1, [d.nickname], pubid) if send_back else
                                  new_generation(self.replica, 2, known, pubid, b.source_nick, b.hi))
        return g

    def _refusing(self) -> Iterator[tuple[int, TrackedArticle, list[str]]]:
        """(nickname, article, rowguids of its upserts in this batch) of the articles whose subscriber
        changes out of the partition are refused (partition_options 1 and 3)."""
        for nick, cc in self.changes.items():
            if nick in self.ctx.refused_out_of_partition and nick in self.articles:
                guids = list(dict.fromkeys(g for g, op in zip(cc.rowguid, cc.op) if op == "upsert"))
                if guids:
                    yield nick, self.articles[nick][0], guids

    def before_images(self) -> dict[str, tuple[dict[str, Any], dict, Any] | None]:
        """The publisher's version (row, lineage, colv) of each row a refusing article's upserts touch,
        None for a row it does not have: what a refused change is undone to."""
        replica = self.replica
        out: dict[str, tuple[dict[str, Any], dict, Any] | None] = {}
        for _, art, guids in self._refusing():
            contents, _, present = _prefetch(replica, art, guids)
            for g in guids:
                values = _load_row(replica, art, g) if g in present else None
                lineage_, colv = contents.get(g) or ({}, None)
                out[g] = (values, lineage_, colv) if values is not None else None
        return out

    def refuse_out_of_partition(self, before: dict) -> None:
        """partition_options 1 and 3: a subscriber's insert or update that leaves the row outside the
        subscriber's partition is refused. It is undone here (the publisher's version restored, or the
        inserted row deleted), in a generation the subscriber does not have, so the download takes its
        change back there too; and it is logged as a failed-change conflict, with the reason."""
        from .evaluation import partitions
        from .partitions import scheme_of

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
                    f"SELECT m.{d.quote(art.rowguid_column)} FROM {d.table_sql(art.table)} AS m "
                    f"WHERE m.{d.quote(art.rowguid_column)} IN ({', '.join([d.uuid_param()] * len(chunk))}) "
                    f"AND NOT ({cond})", chunk)]
            cc = self.changes[nick]
            for g in out:
                self.undo_refused(nick, art, g, before.get(g), cc.change(cc.first[g]), part.describe())

    def undo_refused(self, nick: int, art: TrackedArticle, guid: str, before, change: Change, partition: str) -> None:
        replica, ctx, dest, batch = self.replica, self.ctx, self.dest, self.batch
        st = self.outcome.stats.setdefault(nick, ArticleStats())
        now = replica.query_one(f"SELECT lineage FROM {replica.meta('MSmerge_contents')} WHERE tablenick = {int(nick)} "
                                f"AND rowguid = {replica.dialect.uuid_param()}", [guid])
        current = lin.merge(lin.parse(now[0]) if now else {}, lin.parse(change.lineage))
        inc = _incoming(change, self.codecs[nick], batch.source_nick)
        gen = self.generation_for(True)
        if before is None:
            op = "insert"
            delete_row_with_lineage(replica, art, guid, lin.bump(current, dest.nickname), gen, tombstone_type=6)
            if nick in ctx.mapped:   # the delete goes to the subscriber's partition (past mappings route deletes)
                store.insert_row(replica, "MSmerge_past_partition_mappings", {
                    "tablenick": nick, "rowguid": guid, "partition_id": batch.partition_id, "generation": gen})
        else:
            op = "update"
            values, lineage_, colv = before
            write_row_with_lineage(replica, art, values, lin.bump(lin.merge(lineage_, current), dest.nickname), gen,
                                   colv=_json_value(colv) if colv is not None else None)
        self.counts["resolved"] += 1
        st.conflicts += 1
        st.failed += 1
        key = _row_key(art, inc.values)
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
        current, contents = replica.meta("MSmerge_current_partition_mappings"), replica.meta("MSmerge_contents")
        u = replica.dialect.uuid_param()
        for nick, cc in self.changes.items():
            if nick not in self.ctx.mapped:
                continue
            guids = list(dict.fromkeys(g for g, op in zip(cc.rowguid, cc.op) if op != "delete"))
            for chunk in in_chunks(guids):
                replica.execute(
                    f"INSERT INTO {current} (tablenick, rowguid, partition_id) SELECT c.tablenick, c.rowguid, {pid} "
                    f"FROM {contents} c WHERE c.tablenick = {int(nick)} AND c.rowguid IN ({', '.join([u] * len(chunk))}) "
                    f"AND NOT EXISTS (SELECT 1 FROM {current} cm WHERE cm.tablenick = c.tablenick "
                    f"AND cm.rowguid = c.rowguid AND cm.partition_id = {pid})", chunk)

    def remove(self, w: _Work, st: ArticleStats) -> None:
        """Rows that left this subscriber's partition: gone from it with their metadata, recorded
        nowhere (not a delete: the rows live on in other partitions)."""
        st.removed += forget_rows(self.replica, w.art, w.removals)

    def one_row(self, w: _Work, st: ArticleStats) -> None:
        inc, decision = w.decided
        gen = self.generation_for(decision.send_back)
        err = _try_apply(self.replica, w.art, inc, decision, gen)
        if err is not None:
            self.retry.append((w, gen))
            return
        self.applied(w, st)

    def applied(self, w: _Work, st: ArticleStats) -> None:
        _, decision = w.decided
        _count(st, decision, w.existed)
        self.counts["resolved" if decision.send_back else "received"] += 1
        if decision.conflict is not None:
            st.conflicts += 1
            _record_conflict(self.replica, self.ctx, self.dest, self.batch, w.art, decision.conflict, self.outcome)

    def set_based(self, w: _Work, st: ArticleStats, clear_failed: bool) -> None:
        """Every plain change of one article and operation in a few statements; when a constraint
        or a value rejects them, one at a time, so the failing change is found and retried."""
        replica, (staged, staging) = self.replica, w.bulk
        generation = self.generation_for(False)   # before the savepoint: a rollback must not take its row
        replica.execute("SAVEPOINT sparksync_bulk")
        try:
            staging.apply(w.art, w.op, generation, clear_failed)
        except CHANGE_REJECTED:
            replica.execute("ROLLBACK TO SAVEPOINT sparksync_bulk")
            replica.execute("RELEASE SAVEPOINT sparksync_bulk")
            cc, codec = self.changes[w.art.nickname], self.codecs[w.art.nickname]
            for g, present in staging.rows(w.art, w.op):
                inc = _incoming(cc.change(cc.first[g]), codec, self.batch.source_nick)
                decision = (Decision("upsert", dict(inc.values or {}), dict(inc.lineage),
                                     dict(inc.colv) if inc.colv is not None else None)
                            if w.op == "upsert" else Decision("delete", lineage=dict(inc.lineage)))
                self.one_row(_Work(w.key, w.art, w.op, inc=inc, decision=decision, existed=present), st)
            return
        replica.execute("RELEASE SAVEPOINT sparksync_bulk")
        if w.op == "delete":
            st.deletes += staged.deletes
        else:
            st.inserts += staged.inserts
            st.updates += staged.updates
        self.counts["received"] += staged.deletes if w.op == "delete" else staged.inserts + staged.updates

    def retry_one(self, w: _Work, gen: int, st: ArticleStats) -> None:
        """A change that failed on a constraint or a value, tried again after the other articles; if it
        fails again it is a failed-change conflict (kept for the next merge, or compensated)."""
        replica, ctx, dest, batch = self.replica, self.ctx, self.dest, self.batch
        (inc, decision), art, existed = w.decided, w.art, w.existed
        st.retries += 1
        err = _try_apply(replica, art, inc, decision, gen)
        if err is None:
            self.applied(w, st)
            return
        op = "delete" if decision.action in ("delete", "tombstone") else ("update" if existed else "insert")
        compensate = ctx.rules[art.nickname].compensate_for_errors and op == "insert"
        reason = f"{op} failed: {err.message}" + (
            "; compensating delete sent to its origin" if compensate else "; tried again at the next merge")
        key = _row_key(art, inc.values)
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
            store.delete_rows(replica, "MSmerge_failed_changes", {"tablenick": art.nickname, "rowguid": inc.rowguid})
            return
        self.failed_change(_Work(w.key, art, w.op, inc=inc, existed=existed, failure=failure, rowguid=inc.rowguid),
                           st, op=op, code=str(err.native_code or getattr(err, "kind", "") or err.code))

    def failed_change(self, w: _Work, st: ArticleStats, op: str | None = None, code: str | None = None) -> None:
        """Record a change that cannot be applied here: listed in MSmerge_failed_changes (and tried again
        at every merge), logged as a failed-change conflict the first time it fails."""
        replica, ctx, batch, f = self.replica, self.ctx, self.batch, w.failure
        assert f is not None, "not a failed change"
        if op is None:
            present = replica.scalar(f"SELECT count(*) FROM {replica.dialect.table_sql(w.art.table)} WHERE "
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
                                 losing_row=w.inc.values if w.inc is not None else None)
            _record_conflict(replica, ctx, self.dest, batch, w.art, rec, self.outcome)


def _plan(replica: Replica, ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo,
          changes: dict[int, ArticleChanges], articles: dict[int, tuple[TrackedArticle, int]],
          outcome: BatchOutcome) -> tuple[list[_Work], dict[int, RowCodec]]:
    """Stage and classify the batch's changes; decide the ones that need Python. Returns the work
    (unsorted) and each article's row codec."""
    work: list[_Work] = []
    codecs: dict[int, RowCodec] = {}
    if not changes:
        return work, codecs
    staging = Staging(replica)
    for nick, cc in changes.items():
        if nick not in articles:
            raise SparksyncError(f"{dest.name}: no article with nickname {nick} here")
        art, group = articles[nick]
        codecs[nick] = RowCodec([(c.name, c.type) for c in art.info.columns])
        with outcome.timing(nick) as st:
            work += _plan_article(replica, ctx, dest, batch, cc, art, group, codecs[nick], staging, st)
    return work, codecs


def _row_key(art: TrackedArticle, values: dict | None) -> str:
    if not values:
        return ""
    cols = list(values)
    return row_key(cols, art.info.primary_key, [values[c] for c in cols])


def _known_failures(replica: Replica, cc: ArticleChanges, art: TrackedArticle, codec: RowCodec) -> dict[int, Failure]:
    """Changes that cannot be applied here whatever the destination holds: rows their source could
    not read, and values this database cannot store (found by a quick scan of the row JSON)."""
    d = replica.dialect
    bad: dict[int, Failure] = {}
    if cc.op.count(OP_UNREADABLE):                  # rare: the scan runs in C, the loop only then
        for i, op in enumerate(cc.op):
            if op == OP_UNREADABLE:
                info = json.loads(cc.row[i] or "{}")
                bad[i] = Failure(f"unreadable at its source: {info['reason']}", info.get("key") or "",
                                  info.get("column") or None, info.get("value") or None)
    for i in _rows_holding(cc.row, d.unstorable_markers()):
        if i not in bad:
            values = codec.decode(cc.row[i]) or {}
            for name, t in codec.columns:
                why = d.unstorable(t, values.get(name))
                if why:
                    bad[i] = Failure(why, _row_key(art, values), name, summarize_value(values.get(name)))
                    break
    return bad


def _rows_holding(rows: list[str | None], markers: tuple[str, ...]) -> list[int]:
    """Positions of the row texts that contain one of ``markers`` (rare): one search over all of
    them at once, the rows located only where something was found."""
    if not markers:
        return []
    blob = "\x00".join([r or "" for r in rows])      # NUL never occurs in a row's JSON text
    if not any(m in blob for m in markers):
        return []
    import bisect
    import itertools

    starts = [0, *itertools.accumulate(len(r or "") + 1 for r in rows)]
    found = set()
    for m in markers:
        at = blob.find(m)
        while at != -1:
            found.add(bisect.bisect_right(starts, at) - 1)
            at = blob.find(m, at + 1)
    return sorted(found)


def _plan_article(replica: Replica, ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo, cc: ArticleChanges,
                  art: TrackedArticle, group: int, codec: RowCodec, staging: Staging, st: ArticleStats) -> list[_Work]:
    work = []
    removals = [i for i, op in enumerate(cc.op) if op == OP_REMOVE]
    if removals:
        work.append(_Work(_order_key(art, group, "delete"), art, OP_REMOVE,
                          removals=list(dict.fromkeys(cc.rowguid[i] for i in removals))))
        if len(removals) == len(cc.op):
            return work
    bad = _known_failures(replica, cc, art, codec)
    unique, again = cc.repeats(exclude=set(bad) | set(removals))
    # A failed change is kept only when no later change of the same row in this batch supersedes it.
    last_good = {cc.rowguid[i]: i for i in range(len(cc.rowguid)) if i not in bad} if bad else {}
    for i, f in bad.items():
        if last_good.get(cc.rowguid[i], -1) < i:
            work.append(_Work(_order_key(art, group, cc.op[i]), art, "delete" if cc.op[i] == "delete" else "upsert",
                              failure=f, rowguid=cc.rowguid[i]))
    slow: list[tuple[Change, LocalMeta]] = []
    check_forged = dest.is_publisher
    replica.execute("SAVEPOINT sparksync_plan")
    try:
        staging.stage(art.nickname, cc.staged(unique))
        staging.lock_rows(art)
        staged = staging.classify(art, forged_from=batch.source_nick if check_forged else None)
        replica.execute("RELEASE SAVEPOINT sparksync_plan")
    except CHANGE_REJECTED:
        # The staged batch itself was refused (a value the staging table cannot take): decide every
        # change on its own, so the bad one is found and the others still apply.
        replica.execute("ROLLBACK TO SAVEPOINT sparksync_plan")
        replica.execute("RELEASE SAVEPOINT sparksync_plan")
        staged = None
        again = list(unique if unique is not None else range(len(cc.rowguid))) + again
    if staged is not None:
        st.skipped += staged.skipped
        for op, n in (("delete", staged.deletes), ("upsert", staged.inserts + staged.updates)):
            if n:
                work.append(_Work(_order_key(art, group, op), art, op, staged=staged, staging=staging))
        slow = [(cc.change(cc.first[g]), meta) for g, meta in staged.slow.items()]
    if again:   # the same row twice in one batch: the later one is decided apart
        later = [cc.change(i) for i in again]
        contents, tombs, present = _prefetch(replica, art, [c.rowguid for c in later])
        for c in later:
            lineage_, colv = contents.get(c.rowguid) or (None, None)
            slow.append((c, LocalMeta(c.rowguid in present, lineage_, colv, tombs.get(c.rowguid))))
    for c, meta in slow:
        g = c.rowguid
        local = Local(exists=meta.present, lineage=lin.parse(meta.lineage) if meta.lineage is not None else None,
                      colv=_json_value(meta.colv), tombstone=lin.parse(meta.tombstone) if meta.tombstone is not None
                      else None, load_values=functools.partial(_load_row, replica, art, g))
        inc = _incoming(c, codec, batch.source_nick)
        op = "delete" if c.op == "delete" else "upsert"
        failure = _forged(inc, local, ctx) if check_forged else None
        decision = None
        if failure is None:
            try:
                decision = decide(inc, local, ctx.rules[art.nickname], ctx.replicas, dest.nickname, ctx.upload)
            except (ResolverFailed, ValueError_) as e:
                failure = Failure(e.message if isinstance(e, SparksyncError) else f"the row here cannot be read: {e}")
        if failure is not None:
            work.append(_Work(_order_key(art, group, op), art, op, inc=inc, existed=meta.present,
                              failure=replace(failure, key=failure.key or _row_key(art, inc.values)), rowguid=g))
            continue
        assert decision is not None                 # decided: nothing failed
        if decision.action == "skip":
            st.skipped += 1
            continue
        op = "delete" if decision.action in ("delete", "tombstone") else "upsert"
        work.append(_Work(_order_key(art, group, op), art, op, inc=inc, decision=decision, existed=meta.present))
    return work


def _forged(inc: Incoming, local: Local, ctx: ApplyContext) -> Failure | None:
    """At the publisher: an uploaded version may only add its own replica's changes to what the
    publisher has seen. Lineage that claims a version of another replica (the publisher included)
    that the publisher never had is refused: it would silently beat a newer change (trust model)."""
    known = lin.merge(local.lineage or {}, local.tombstone or {})
    over = sorted((n, v) for n, v in inc.lineage.items() if n != inc.source and v > known.get(n, 0))
    if not over:
        return None
    claims = ", ".join(f"version {v} of {ctx.replicas.name(n)} (publisher has {known.get(n, 0)})" for n, v in over)
    return Failure(f"refused: its lineage claims {claims}, which the publisher never had")


def _count(st: ArticleStats, decision: Decision, existed: bool) -> None:
    if decision.action == "upsert":
        if existed:
            st.updates += 1
        else:
            st.inserts += 1
    elif decision.action == "delete":
        st.deletes += 1


def _try_apply(replica: Replica, art: TrackedArticle, inc: Incoming, decision: Decision, gen: int):
    replica.execute("SAVEPOINT sparksync_change")
    try:
        if decision.action == "upsert":
            values = dict(decision.values or {})
            values[art.rowguid_column] = inc.rowguid
            write_row_with_lineage(replica, art, values, decision.lineage, gen, decision.colv)
        else:
            delete_row_with_lineage(replica, art, inc.rowguid, decision.lineage, gen)
        store.delete_rows(replica, "MSmerge_failed_changes", {"tablenick": art.nickname, "rowguid": inc.rowguid})
    except CHANGE_REJECTED as e:
        replica.execute("ROLLBACK TO SAVEPOINT sparksync_change")
        replica.execute("RELEASE SAVEPOINT sparksync_change")
        return e
    replica.execute("RELEASE SAVEPOINT sparksync_change")
    return None


def _record_conflict(replica: Replica, ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo,
                     art: TrackedArticle, rec: ConflictRecord, outcome: BatchOutcome) -> None:
    subscription = batch.source if ctx.upload else dest.name
    if dest.log_conflicts_here:
        log_conflict(replica, ctx.pubid, ctx.publication, art, rec, subscription, ctx.upload, ctx.session_id)
    outcome.conflicts.append((rec, dest.log_conflicts_remote))
