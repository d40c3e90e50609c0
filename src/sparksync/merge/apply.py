"""Applying changes at one destination: one transaction per generation batch, watermark included.

Runs inside Spark tasks (``mapInArrow``) on rows sorted by destination and batch. For each batch:

1. skip it if the destination's watermark already covers it (a re-run task applies nothing twice);
2. decide every change against the destination's metadata (``decide.decide``);
3. apply in article processing order (seeds 003/004): deletes in descending nickname order, group 1
   before group 2, then inserts and updates in ascending nickname order, group 1 before group 2;
   a change that fails on a constraint is retried after the other articles, then logged as failed;
4. record a received generation (known to the source), and a generation for resolved conflicts
   (not known to the source, so the result goes back to it), the conflicts, and the watermark.
"""

from __future__ import annotations

import contextlib
import json
import time
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import failpoints
from ..dialects import connect
from ..dialects.base import Replica
from ..errors import ConstraintViolation, SparksyncError
from ..metadata import store
from ..progress import send_progress
from ..types import Kind, SqlType
from . import lineage as lin
from .changes import ArticleChanges, Change, RowCodec, by_article
from .conflicts import ConflictRecord, ConflictType, failed_type
from .decide import ArticleRules, Decision, Incoming, Local, decide
from .publish import published_articles, tracked_article
from .resolvers import Replicas
from .staging import LocalMeta, StagedArticle, Staging
from .tracking import TrackedArticle, agent_writes, delete_row_with_lineage, write_row_with_lineage

RESULT_SCHEMA = ("destination STRING, source STRING, batch_seq INT, status STRING, stats STRING, "
                 "conflicts STRING, message STRING, seconds DOUBLE")
RESULT_COLUMNS = [c.split()[0] for c in RESULT_SCHEMA.split(", ")]
_RESULT_ARROW_TYPES = {"STRING": "string", "INT": "int32", "DOUBLE": "float64"}   # the pyarrow type of each


@dataclass
class BatchInfo:
    source: str
    source_nick: int
    seq: int
    lo: int
    hi: int
    nicknames: list[int]
    retry: bool = False           # carries changes that failed before: applied even below the watermark


@dataclass
class DestinationInfo:
    name: str
    url: str
    nickname: int
    is_publisher: bool
    watermark: dict                      # identifies the destination's sysmergesubscriptions row of the source(s)
    batches: dict[str, list[BatchInfo]]  # source -> batches in order
    log_conflicts_here: bool


@dataclass
class ApplyContext:
    pubid: str
    upload: bool
    session_id: str
    publication: str
    rules: dict[int, ArticleRules]
    replicas: Replicas
    destinations: dict[str, DestinationInfo]
    # Set by the agent for the Spark stage: (source, generation) -> [(destination, batch seq)], in
    # destination order, and each destination's apply group (the label of its Spark partition).
    routes: dict[tuple[str, int], list[tuple[str, int]]] = field(default_factory=dict)
    groups: dict[str, int] = field(default_factory=dict)
    progress: tuple[str, int] | None = None     # the driver's progress listener (progress.py)
    article_names: dict[int, str] = field(default_factory=dict)


@dataclass
class ArticleStats:
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    conflicts: int = 0
    retries: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0                  # time spent on this article's changes at the destination


@dataclass
class BatchOutcome:
    status: str                            # "applied" | "skipped" | "error"
    stats: dict[int, ArticleStats] = field(default_factory=dict)
    remote_conflicts: list[ConflictRecord] = field(default_factory=list)
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


# -- metadata helpers ---------------------------------------------------------------------------

def _watermark_where(dest: DestinationInfo, source: str) -> dict:
    if dest.is_publisher:
        return {"pubid": dest.watermark["pubid"], "name": source, "role": "subscriber"}
    return {"pubid": dest.watermark["pubid"], "role": "publisher"}


def read_watermark(replica: Replica, dest: DestinationInfo, source: str) -> int | None:
    rows = store.select_rows(replica, "sysmergesubscriptions", _watermark_where(dest, source))
    return rows[0]["recgen"] if rows else None


def write_watermark(replica: Replica, dest: DestinationInfo, source: str, hi: int) -> None:
    store.update_rows(replica, "sysmergesubscriptions", {"recgen": hi, "last_sync_date": store.utcnow()},
                      _watermark_where(dest, source))


def _new_generation(replica: Replica, genstatus: int, nicknames: list[int], pubid: str,
                    source_nick: int | None = None, source_gen: int | None = None) -> int:
    g = max(int(replica.scalar(f"SELECT coalesce(max(generation), 0) FROM {replica.meta('MSmerge_genhistory')}") or 0),
            int(replica.dialect.current_open_generation(replica) or 0)) + 1
    store.insert_row(replica, "MSmerge_genhistory", {
        "generation": g, "guidsrc": store.new_guid(), "pubid": pubid, "genstatus": genstatus, "settled": 1,
        "nicknames": sorted(set(nicknames)), "changecount": 0, "coldate": store.utcnow(),
        "source_nickname": source_nick, "source_generation": source_gen})
    return g


def _prefetch(replica: Replica, article: TrackedArticle, rowguids: list[str]) -> tuple[dict, dict, set]:
    """Contents (lineage, colv), tombstones (lineage) and present rows for these rowguids."""
    d = replica.dialect
    contents, tombs, present = {}, {}, set()
    u = d.uuid_param()
    for i in range(0, len(rowguids), 500):
        chunk = rowguids[i:i + 500]
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


def conflict_table_name(publication: str, article: TrackedArticle) -> str:
    name = f"MSmerge_conflict_{publication}_{article.table.name}"
    return name if len(name) <= 60 else name[:52] + "_" + article.trigger_id[:7]


def log_conflict(replica: Replica, pubid: str, publication: str, article: TrackedArticle, rec: ConflictRecord,
                 subscription: str, upload: bool, session_id: str) -> None:
    """MSmerge_conflicts_info row, and the losing row in the article's conflict table."""
    d = replica.dialect
    cid = store.new_guid()
    store.insert_row(replica, "MSmerge_conflicts_info", {
        "conflict_id": cid, "pubid": pubid, "tablenick": rec.tablenick, "rowguid": rec.rowguid,
        "conflict_type": int(rec.conflict_type), "reason_code": str(rec.reason_code), "reason_text": rec.reason_text,
        "origin_datasource": rec.origin, "winner": rec.winner, "columns": rec.columns or None,
        "subscription": subscription, "direction": "upload" if upload else "download", "session_id": session_id,
        "create_time": store.utcnow()})
    if rec.losing_row is None:
        return  # a losing delete is only in MSmerge_conflicts_info (as SQL Server does)
    table = d.metadata_table_sql(conflict_table_name(publication, article))
    cols = [c for c in article.info.columns]
    ddl = ", ".join(f"{d.quote(c.name)} {d.render_type(c.type)}" for c in cols)
    replica.execute(f"CREATE TABLE IF NOT EXISTS {table} ({d.quote('conflict_id')} {d.render_type(SqlType(Kind.UUID))} "
                    f"NOT NULL PRIMARY KEY, {d.quote('origin_datasource')} {d.render_type(SqlType(Kind.TEXT))}, {ddl})")
    names = ["conflict_id", "origin_datasource"] + [c.name for c in cols]
    convs = d.db_converters([c.type for c in cols])
    vals = [cid, rec.origin] + [_db_value(rec.losing_row.get(c.name), conv) for c, conv in zip(cols, convs)]
    replica.execute(f"INSERT INTO {table} ({', '.join(d.quote(n) for n in names)}) VALUES "
                    f"({', '.join([replica.p] * len(names))})", vals)


# -- one batch ----------------------------------------------------------------------------------

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
    op: str                                     # "upsert" | "delete"
    staged: StagedArticle | None = None         # set-based: every "apply" row of (article, op) ...
    staging: Staging | None = None              # ... in this staging table
    inc: Incoming | None = None                 # one row through decide
    decision: Decision | None = None
    existed: bool = False


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
        with replica.transaction():
            wm = read_watermark(replica, dest, batch.source)
            if wm is not None and wm >= batch.hi and not batch.retry:
                outcome.status, outcome.message = "skipped", f"already applied (watermark {wm})"
                return
            with agent_writes(replica):
                work, self.codecs = _plan(replica, self.ctx, dest, batch, self.changes, self.articles, outcome)
                failed_nicks = {f["tablenick"] for f in store.select_rows(
                    replica, "MSmerge_failed_changes", {"source_nickname": batch.source_nick})}
                for w in sorted(work, key=lambda w: w.key):
                    with outcome.timing(w.art.nickname) as st:
                        if w.staged is None:
                            self.one_row(w, st)
                        else:
                            self.set_based(w, st, clear_failed=w.art.nickname in failed_nicks)
                for w, gen in self.retry:   # after the other articles: an ordering problem resolves itself
                    with outcome.timing(w.art.nickname) as st:
                        self.retry_one(w, gen, st)
                for key, g in self.gens.items():
                    if g is not None:
                        store.update_rows(replica, "MSmerge_genhistory", {"changecount": self.counts[key]},
                                          {"generation": g})
                failpoints.hit("apply.before_commit", f"{dest.name}:{batch.seq}")
                write_watermark(replica, dest, batch.source, batch.hi)
        failpoints.hit("apply.after_commit", f"{dest.name}:{batch.seq}")

    def generation_for(self, send_back: bool) -> int:
        """The received generation (known to the source) or the resolved one (sent back to it)."""
        key = "resolved" if send_back else "received"
        if self.gens[key] is None:
            d, b, pubid = self.dest, self.batch, self.ctx.pubid
            self.gens[key] = (_new_generation(self.replica, 1, [d.nickname], pubid) if send_back else
                              _new_generation(self.replica, 2, b.nicknames + [d.nickname, b.source_nick], pubid,
                                              b.source_nick, b.hi))
        return self.gens[key]

    def one_row(self, w: _Work, st: ArticleStats) -> None:
        gen = self.generation_for(w.decision.send_back)
        err = _try_apply(self.replica, w.art, w.inc, w.decision, gen)
        if err is not None:
            self.retry.append((w, gen))
            return
        self.applied(w, st)

    def applied(self, w: _Work, st: ArticleStats) -> None:
        _count(st, w.decision, w.existed)
        self.counts["resolved" if w.decision.send_back else "received"] += 1
        if w.decision.conflict is not None:
            st.conflicts += 1
            _record_conflict(self.replica, self.ctx, self.dest, self.batch, w.art, w.decision.conflict, self.outcome)

    def set_based(self, w: _Work, st: ArticleStats, clear_failed: bool) -> None:
        """Every plain change of one article and operation in a few statements; when a constraint
        rejects them, one at a time, so the failing change is found and retried."""
        replica, staging = self.replica, w.staging
        replica.execute("SAVEPOINT sparksync_bulk")
        try:
            staging.apply(w.art, w.op, self.generation_for(False), clear_failed)
        except ConstraintViolation:
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
            st.deletes += w.staged.deletes
        else:
            st.inserts += w.staged.inserts
            st.updates += w.staged.updates
        self.counts["received"] += w.staged.deletes if w.op == "delete" else w.staged.inserts + w.staged.updates

    def retry_one(self, w: _Work, gen: int, st: ArticleStats) -> None:
        """A change that failed on a constraint, tried again after the other articles; if it fails
        again it is a failed-change conflict (kept for the next merge, or compensated)."""
        replica, ctx, dest, batch = self.replica, self.ctx, self.dest, self.batch
        art, inc, decision, existed = w.art, w.inc, w.decision, w.existed
        st.retries += 1
        err = _try_apply(replica, art, inc, decision, gen)
        if err is None:
            self.applied(w, st)
            return
        st.failed += 1
        st.conflicts += 1
        op = "delete" if decision.action in ("delete", "tombstone") else ("update" if existed else "insert")
        ctype = failed_type(ctx.upload, op)
        compensate = ctx.rules[art.nickname].compensate_for_errors and op == "insert"
        rec = ConflictRecord(ctype, art.nickname, inc.rowguid, err.native_code or err.kind,
                             f"{op} failed: {err.message}" + (
                                 "; compensating delete sent to its origin" if compensate else
                                 "; tried again at the next merge"),
                             origin=ctx.replicas.name(batch.source_nick), winner="", losing_row=inc.values)
        _record_conflict(replica, ctx, dest, batch, art, rec, self.outcome)
        if compensate:
            # Undo the insert at its origin: a delete (tombstone type 6, system delete) that
            # dominates the inserted version and that the origin does not have yet.
            delete_row_with_lineage(replica, art, inc.rowguid, lin.bump(inc.lineage, dest.nickname),
                                    self.generation_for(True), tombstone_type=6)
            self.counts["resolved"] += 1
            store.delete_rows(replica, "MSmerge_failed_changes", {"tablenick": art.nickname, "rowguid": inc.rowguid})
        else:
            _record_failed(replica, art.nickname, inc.rowguid, batch.source_nick, ctype, err.message)


def _plan(replica: Replica, ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo,
          changes: dict[int, ArticleChanges], articles: dict[int, tuple[TrackedArticle, int]],
          outcome: BatchOutcome) -> tuple[list[_Work], dict[int, RowCodec]]:
    """Stage and classify the batch's changes; decide the ones that need Python. Returns the work
    (unsorted) and each article's row codec."""
    work: list[_Work] = []
    codecs: dict[int, RowCodec] = {}
    staging = Staging(replica) if changes else None
    for nick, cc in changes.items():
        if nick not in articles:
            raise SparksyncError(f"{dest.name}: no article with nickname {nick} here")
        art, group = articles[nick]
        codecs[nick] = RowCodec([(c.name, c.type) for c in art.info.columns])
        with outcome.timing(nick) as st:
            work += _plan_article(replica, ctx, dest, batch, cc, art, group, codecs[nick], staging, st)
    return work, codecs


def _plan_article(replica: Replica, ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo, cc: ArticleChanges,
                  art: TrackedArticle, group: int, codec: RowCodec, staging: Staging, st: ArticleStats) -> list[_Work]:
    work = []
    unique, again = cc.repeats()
    staging.stage(art.nickname, cc.staged(unique))
    staged = staging.classify(art)
    st.skipped += staged.skipped
    for op, n in (("delete", staged.deletes), ("upsert", staged.inserts + staged.updates)):
        if n:
            work.append(_Work(_order_key(art, group, op), art, op, staged=staged, staging=staging))
    slow = [(cc.change(cc.first[g]), meta) for g, meta in staged.slow.items()]
    if again:   # the same row twice in one batch: the later one is decided apart
        later = [cc.change(i) for i in again]
        contents, tombs, present = _prefetch(replica, art, [c.rowguid for c in later])
        slow += [(c, LocalMeta(c.rowguid in present, *(contents.get(c.rowguid) or (None, None)),
                               tombs.get(c.rowguid))) for c in later]
    for c, meta in slow:
        g = c.rowguid
        local = Local(exists=meta.present, lineage=lin.parse(meta.lineage) if meta.lineage is not None else None,
                      colv=_json_value(meta.colv), tombstone=lin.parse(meta.tombstone) if meta.tombstone is not None
                      else None, load_values=(lambda a=art, g=g: _load_row(replica, a, g)))
        inc = _incoming(c, codec, batch.source_nick)
        decision = decide(inc, local, ctx.rules[art.nickname], ctx.replicas, dest.nickname, ctx.upload)
        if decision.action == "skip":
            st.skipped += 1
            continue
        op = "delete" if decision.action in ("delete", "tombstone") else "upsert"
        work.append(_Work(_order_key(art, group, op), art, op, inc=inc, decision=decision, existed=meta.present))
    return work


def _db_value(value, conv):
    return value if value is None or conv is None else conv(value)


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
    except ConstraintViolation as e:
        replica.execute("ROLLBACK TO SAVEPOINT sparksync_change")
        replica.execute("RELEASE SAVEPOINT sparksync_change")
        return e
    replica.execute("RELEASE SAVEPOINT sparksync_change")
    return None


def _record_failed(replica: Replica, nick: int, rowguid: str, source_nick: int, ctype: ConflictType, reason: str) -> None:
    key = {"tablenick": nick, "rowguid": rowguid, "source_nickname": source_nick}
    rows = store.select_rows(replica, "MSmerge_failed_changes", key)
    now = store.utcnow()
    if rows:
        store.update_rows(replica, "MSmerge_failed_changes",
                          {"attempts": rows[0]["attempts"] + 1, "last_time": now, "reason": reason}, key)
    else:
        store.insert_row(replica, "MSmerge_failed_changes", {**key, "conflict_type": int(ctype), "reason": reason,
                                                             "attempts": 1, "first_time": now, "last_time": now})


def _record_conflict(replica: Replica, ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo,
                     art: TrackedArticle, rec: ConflictRecord, outcome: BatchOutcome) -> None:
    subscription = batch.source if ctx.upload else dest.name
    if dest.log_conflicts_here:
        log_conflict(replica, ctx.pubid, ctx.publication, art, rec, subscription, ctx.upload, ctx.session_id)
    else:
        outcome.remote_conflicts.append(rec)


# -- the Spark task -------------------------------------------------------------------------------

def _articles(replica: Replica, pubid: str) -> dict[int, tuple[TrackedArticle, int]]:
    return {a["nickname"]: (tracked_article(a), a["processing_group"]) for a in published_articles(replica, pubid)}


def _result(dest: str, source: str, seq: int, outcome: BatchOutcome) -> dict:
    stats = {str(k): vars(v) for k, v in outcome.stats.items()}
    conflicts = [{**vars(c), "conflict_type": int(c.conflict_type)} for c in outcome.remote_conflicts]
    return {"destination": dest, "source": source, "batch_seq": seq, "status": outcome.status,
            "stats": json.dumps(stats), "conflicts": json.dumps(conflicts, default=str), "message": outcome.message,
            "seconds": outcome.seconds}


def apply_stream(ctx: ApplyContext, batches: Iterable) -> Iterator[dict]:
    """Apply the change rows of one apply group: Arrow batches sorted by (source order, generation).

    Each row is read once per group and goes to every destination of the group that needs it
    (``ctx.routes``). A destination holds one pending batch; it is applied when a row of another
    batch (or source) arrives for that destination, or at the end. Since rows come by source order,
    then generation, every destination gets its batches in order, sources one after another.
    Yields one result per batch handled."""
    pending: dict[str, tuple[str, int, list]] = {}   # destination -> (source, batch seq, Arrow slices)
    replicas: dict[str, Replica] = {}
    failed: set[tuple[str, str]] = set()
    done: dict[tuple[str, str], int] = {}

    def flush(dest_name: str, source: str, seq: int, slices: list) -> Iterator[dict]:
        if (dest_name, source) in failed:
            # Never skip silently: the driver must not take this batch for an empty one.
            yield _result(dest_name, source, seq, BatchOutcome(
                "error", message=f"not applied: an earlier batch from {source} to {dest_name} failed"))
            return
        dest = ctx.destinations[dest_name]
        try:
            replica = replicas.get(dest_name)
            if replica is None:
                replica = replicas[dest_name] = connect(dest.url, dest.name)
            articles = _articles(replica, ctx.pubid)
            for b in dest.batches[source]:
                if b.seq >= seq or done.get((dest_name, source), -1) >= b.seq:
                    continue
                out = apply_batch(replica, ctx, dest, b, {}, articles)   # empty batches before this one
                done[(dest_name, source)] = b.seq
                yield _result(dest_name, source, b.seq, out)
            batch = next(b for b in dest.batches[source] if b.seq == seq)
            out = apply_batch(replica, ctx, dest, batch, _by_article(slices), articles)
            done[(dest_name, source)] = seq
            yield _result(dest_name, source, seq, out)
        except SparksyncError as e:
            failed.add((dest_name, source))
            yield _result(dest_name, source, seq, BatchOutcome("error", message=e.message))
        except Exception as e:  # noqa: BLE001 - one destination's failure must not stop the others
            failed.add((dest_name, source))
            tb = traceback.format_exc(limit=3)
            yield _result(dest_name, source, seq, BatchOutcome("error", message=f"{type(e).__name__}: {e}\n{tb}"))

    routes, groups = ctx.routes, ctx.groups
    try:
        for b in batches:
            for group, source, generation, rows in _runs(b):
                for dest_name, seq in routes.get((source, generation), ()):
                    if groups[dest_name] != group:
                        continue
                    mine = _for_target(rows, dest_name)
                    if mine is None:
                        continue
                    held = pending.get(dest_name)
                    if held is not None and (held[0], held[1]) != (source, seq):
                        yield from flush(dest_name, *held)
                        held = None
                    if held is None:
                        held = pending[dest_name] = (source, seq, [])
                    held[2].append(mine)
        for dest_name, held in pending.items():
            yield from flush(dest_name, *held)
    finally:
        for rep in replicas.values():
            rep.close()


def _runs(batch) -> Iterator[tuple[int, str, int, Any]]:
    """Split an Arrow batch of change rows (sorted by group, source, generation) into runs with one
    (apply group, source, generation): the unit of routing, so no Python work is done per row."""
    import numpy as np

    n = batch.num_rows
    if n == 0:
        return
    cols = [batch.column(name).to_numpy(zero_copy_only=False) for name in ("apply_group", "source", "generation")]
    boundary = np.zeros(n, dtype=bool)
    boundary[0] = True
    for c in cols:
        boundary[1:] |= c[1:] != c[:-1]
    starts = np.flatnonzero(boundary).tolist() + [n]
    for s, e in zip(starts, starts[1:]):
        yield int(cols[0][s]), str(cols[1][s]), int(cols[2][s]), batch.slice(s, e - s)


def _for_target(rows, dest_name: str):
    """The rows of a run meant for ``dest_name``: all of them, except re-read failed changes,
    which carry the one destination they are for (``target``)."""
    target = rows.column("target")
    if target.null_count == len(rows):
        return rows
    import pyarrow.compute as pc

    mine = rows.filter(pc.fill_null(pc.equal(target, dest_name), True))
    return mine if len(mine) else None


def _by_article(slices: list) -> dict[int, ArticleChanges]:
    import pyarrow as pa

    return by_article(pa.Table.from_batches(slices))


def make_mapper(ctx: ApplyContext):
    """The function for ``mapInArrow``: Arrow batches of change rows in, result rows out."""

    def mapper(batches):
        import pyarrow as pa

        schema = pa.schema([(n, getattr(pa, _RESULT_ARROW_TYPES[t])()) for n, t in
                            (c.split() for c in RESULT_SCHEMA.split(", "))])
        buf = list(apply_stream(ctx, batches))
        if buf:
            yield pa.RecordBatch.from_pylist(buf, schema=schema)

    return mapper


def apply_stream_empty(ctx: ApplyContext, dest_name: str, source: str, batches: list[BatchInfo]) -> Iterator[dict]:
    """Watermark-only batches that no change row reached (after the last one with data), on the driver."""
    dest = ctx.destinations[dest_name]
    with connect(dest.url, dest.name) as replica:
        articles = _articles(replica, ctx.pubid)
        for b in batches:
            try:
                yield _result(dest_name, source, b.seq, apply_batch(replica, ctx, dest, b, {}, articles))
            except SparksyncError as e:
                yield _result(dest_name, source, b.seq, BatchOutcome("error", message=e.message))
                return
