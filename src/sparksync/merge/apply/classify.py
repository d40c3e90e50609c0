"""Classification: a generation batch's changes staged and classified in SQL at the destination, the rest
decided in Python, each change becoming one step of work in article processing order (seeds 003/004)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, replace
from typing import Any

from sparksync.dialects.replica import Replica, in_chunks
from sparksync.errors import CHANGE_REJECTED, SparksyncError
from sparksync.handlers import Accept, AcceptPublisher, Custom, Default, HandlerContext, Reject
from sparksync.merge.apply.decide import Decision, Incoming, Local, decide
from sparksync.merge.apply.handling import HandlerFailed, Handling
from sparksync.merge.apply.outcome import ArticleStats, BatchOutcome
from sparksync.merge.apply.staging import LocalMeta, Misfits, StagedArticle, StagedColumns, Staging
from sparksync.merge.conflicts.model import REFUSED, ConflictType, Failure
from sparksync.merge.conflicts.resolvers import ResolverFailed
from sparksync.merge.session.changes import COMPENSATING_COLV, OP_REMOVE, OP_UNREADABLE, ArticleChanges, Change
from sparksync.merge.session.plan import ApplyContext, BatchInfo, DestinationInfo
from sparksync.merge.tracking import identity
from sparksync.merge.tracking import lineage as lin
from sparksync.merge.tracking.pending import flush_rows
from sparksync.merge.tracking.tracked import TrackedArticle
from sparksync.rows import RowCodec, row_key, summarize_value
from sparksync.types import ValueError_, arrow_converter


def prefetch(replica: Replica, article: TrackedArticle, rowguids: list[str]) -> tuple[dict, dict, set]:
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
                f"SELECT {d.quote(article.rowguid_column)} FROM {identity.rows_sql(d, article)} AS t "
                f"WHERE {d.quote(article.rowguid_column)} IN ({inlist})", chunk):
            present.add(str(g))
    return contents, tombs, present


@dataclass(frozen=True)
class ArticleAt:
    """A published article at a destination, with its processing group (1 or 2)."""

    article: TrackedArticle
    group: int


def _order_key(at: ArticleAt, op: str) -> tuple:
    """Seeds 003/004: all deletes first (group 1, then group 2; descending nickname), then inserts and
    updates (group 1, then group 2; ascending nickname)."""
    if op == "delete":
        return (0, at.group, -at.article.nickname)
    return (1, at.group, at.article.nickname)


@dataclass(frozen=True)
class Step:
    """One step of a batch's work, sortable into article processing order (``key``)."""

    key: tuple
    art: TrackedArticle
    op: str                                     # "upsert" | "delete" | "remove"


@dataclass(frozen=True)
class StagedWork(Step):
    """Set-based: every "apply" row of (article, op) in one staging table."""

    staged: StagedArticle
    staging: Staging


@dataclass(frozen=True)
class DecidedChange(Step):
    """One row's change, decided in Python (``decide``)."""

    inc: Incoming
    decision: Decision
    existed: bool                               # the row was here before


@dataclass(frozen=True)
class Removal(Step):
    """Rows that left the destination's partition (op "remove")."""

    rowguids: list[str]


@dataclass(frozen=True)
class FailedChange(Step):
    """A change that cannot be applied here (recorded after the batch's other work)."""

    rowguid: str
    failure: Failure
    values: dict[str, Any] | None = None        # the row it brought, when it could be read


Work = StagedWork | DecidedChange | Removal | FailedChange


def incoming(c: Change, codec: RowCodec, source_nick: int) -> Incoming:
    if c.op == "delete":           # a delete has no column versions; a compensating one says so in their place
        return Incoming(c.op, c.rowguid, None, lin.parse(c.lineage), None, source_nick,
                        compensating=c.colv == COMPENSATING_COLV)
    return Incoming(c.op, c.rowguid, codec.decode(c.row), lin.parse(c.lineage),
                    json.loads(c.colv) if c.colv else None, source_nick)


def plan_batch(replica: Replica, ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo,
          changes: dict[int, ArticleChanges], articles: dict[int, ArticleAt],
          outcome: BatchOutcome, handlings: dict[int, Handling] | None = None,
          rehearsal: bool = False) -> tuple[list[Work], dict[int, RowCodec]]:
    """Stage and classify the batch's changes; decide the ones that need Python (``handlings``: the articles'
    business logic handlers, ``handling_of``). Returns the work (unsorted) and each article's row codec.
    ``rehearsal``: reads only, nothing locked or flushed (``rehearsal.py``: the handlers' answers are what counts)."""
    work: list[Work] = []
    codecs: dict[int, RowCodec] = {}
    if not changes:
        return work, codecs
    staging = Staging(replica)
    for nick, cc in changes.items():
        if nick not in articles:
            raise SparksyncError(f"{dest.name}: no article with nickname {nick} here")
        at = articles[nick]
        codecs[nick] = RowCodec([(c.name, c.type) for c in at.article.info.columns])
        with outcome.timing(nick) as st:
            work += _plan_article(replica, ctx, dest, batch, cc, at, codecs[nick], staging, st,
                                  (handlings or {}).get(nick), rehearsal)
    return work, codecs


def handling_of(ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo, art: TrackedArticle,
                outcome: BatchOutcome) -> Handling | None:
    """The article's business logic handler for this batch (None: it has none); what it logs goes to
    ``outcome.notes``."""
    nick = art.nickname
    rules = ctx.rules.get(nick)
    if rules is None or not rules.business_logic:
        return None
    hctx = HandlerContext("upload" if ctx.upload else "download", ctx.article_names.get(nick, str(nick)),
                          batch.source if ctx.upload else dest.name,
                          (batch.partition_id if ctx.upload else dest.partition_id) or None, outcome.notes)
    return Handling(rules.business_logic, rules.resolver_search, hctx, {c.name: c.type for c in art.info.columns},
                    rules.business_logic_timeout_s)


def _known_failures(replica: Replica, cc: ArticleChanges, art: TrackedArticle, codec: RowCodec) -> dict[int, Failure]:
    """Changes that cannot be applied here whatever the destination holds: rows their source could
    not read, lineage out of the range a version may take (an edited file), and values this database
    cannot store (each found by a quick scan of the texts)."""
    d = replica.dialect
    bad: dict[int, Failure] = {}
    if cc.op.count(OP_UNREADABLE):                  # rare: the scan runs in C, the loop only then
        for i, op in enumerate(cc.op):
            if op == OP_UNREADABLE:
                info = json.loads(cc.row[i] or "{}")
                bad[i] = Failure(f"unreadable at its source: {info['reason']}", info.get("key") or "",
                                  info.get("column") or None, info.get("value") or None)
    for i in lin.suspects(cc.lineage):
        why = lin.out_of_range(cc.lineage[i]) if cc.op[i] != OP_REMOVE else None
        if why and i not in bad:
            bad[i] = Failure(f"{REFUSED}{why}")
    for i in _rows_holding(cc.row, d.unstorable_markers()):
        if i not in bad:
            values = codec.decode(cc.row[i]) or {}
            for name, t in codec.columns:
                why = d.unstorable(t, values.get(name))
                if why:
                    bad[i] = Failure(why, key_of(art, values), name, summarize_value(values.get(name)))
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
                  at: ArticleAt, codec: RowCodec, staging: Staging, st: ArticleStats,
                  handling: Handling | None = None, rehearsal: bool = False) -> list[Work]:
    work: list[Work] = []
    art = at.article
    removals = [i for i, op in enumerate(cc.op) if op == OP_REMOVE]
    if removals:
        gone = list(dict.fromkeys(cc.rowguid[i] for i in removals))
        work.append(Removal(_order_key(at, "delete"), art, OP_REMOVE, gone))
        if len(removals) == len(cc.op):
            # what was logged of them is recorded, then forgotten with them (not in a rehearsal: it writes nothing)
            for chunk in in_chunks(gone if not rehearsal else []):
                flush_rows(replica, art.nickname, ", ".join([replica.dialect.uuid_param()] * len(chunk)), chunk)
            return work
    bad = _known_failures(replica, cc, art, codec)
    slow: list[tuple[Change, LocalMeta]] = []
    check_forged = dest.is_publisher
    while True:
        unique, again = cc.repeats(exclude=set(bad) | set(removals))
        replica.execute("SAVEPOINT sparksync_plan")
        try:
            staging.stage_columns(art, _columns(cc, unique), codec)
            if not rehearsal:
                staging.lock_rows(art)
                # after the lock, before the classification: a local change committed before the lock is in
                # the metadata the verdicts are made from (a conflict, not an overwrite); none can commit after
                flush_rows(replica, art.nickname, staging.rowguids_sql(art.nickname))
            staged = staging.classify(art, forged_from=batch.source_nick if check_forged else None,
                                     source=batch.source_nick)
            replica.execute("RELEASE SAVEPOINT sparksync_plan")
        except Misfits as e:
            # values their columns' declared types do not admit (found before anything was loaded): those
            # changes fail naming the column, and the others are staged again without them
            replica.execute("ROLLBACK TO SAVEPOINT sparksync_plan")
            replica.execute("RELEASE SAVEPOINT sparksync_plan")
            for pos, (column, why, v) in e.found.items():
                i = unique[pos] if unique is not None else pos
                bad[i] = Failure(why, key_of(art, codec.decode(cc.row[i]) or {}), column, summarize_value(v))
            continue
        except (*CHANGE_REJECTED, ValueError_):
            # The staged batch itself was refused (a value the staging table cannot take): decide every
            # change on its own, so the bad one is found and the others still apply.
            replica.execute("ROLLBACK TO SAVEPOINT sparksync_plan")
            replica.execute("RELEASE SAVEPOINT sparksync_plan")
            staged = None
            again = list(unique if unique is not None else range(len(cc.rowguid))) + again
            if not rehearsal:
                _lock_and_flush(replica, staging, art, list(dict.fromkeys(cc.rowguid[i] for i in again)))
        break
    # A failed change is kept only when no later change of the same row in this batch supersedes it.
    last_good = {cc.rowguid[i]: i for i in range(len(cc.rowguid)) if i not in bad} if bad else {}
    for i, f in bad.items():
        if last_good.get(cc.rowguid[i], -1) < i:
            work.append(FailedChange(_order_key(at, cc.op[i]), art, "delete" if cc.op[i] == "delete" else "upsert",
                                     cc.rowguid[i], f))
    if staged is not None:
        st.skipped += staged.skipped
        if handling is not None and handling.handles_changes():
            work += _handled_staged(replica, ctx, dest, batch, cc, at, codec, staging, staged, handling)
        for op, n in (("delete", staged.deletes), ("upsert", staged.inserts + staged.updates)):
            if n:
                work.append(StagedWork(_order_key(at, op), art, op, staged, staging))
        slow = [(cc.change(cc.first[g]), meta) for g, meta in staged.slow.items()]
    if again:   # the same row twice in one batch: the later one is decided apart
        later = [cc.change(i) for i in again]
        contents, tombs, present = prefetch(replica, art, [c.rowguid for c in later])
        for c in later:
            lineage_, colv = contents.get(c.rowguid) or (None, None)
            slow.append((c, LocalMeta(c.rowguid in present, lineage_, colv, tombs.get(c.rowguid))))
    for c, meta in slow:
        g = c.rowguid
        local = Local(exists=meta.present, lineage=lin.parse(meta.lineage) if meta.lineage is not None else None,
                      colv=json_value(meta.colv), tombstone=lin.parse(meta.tombstone) if meta.tombstone is not None
                      else None, load_values=functools.partial(load_row, replica, art, g))
        inc = incoming(c, codec, batch.source_nick)
        op = "delete" if c.op == "delete" else "upsert"
        failure = _forged(inc, local, ctx) if check_forged else None
        decision = None
        if failure is None:
            try:
                decision = decide(inc, local, ctx.rules[art.nickname], ctx.replicas, dest.nickname, ctx.upload)
                if ctx.defer_conflicts and decision.conflict is not None:
                    # a web device: the local write raced this download; it is kept and goes up at the next
                    # sync, where the publisher decides the conflict (every decision is made there)
                    decision = Decision("skip")
            except (ResolverFailed, ValueError_) as e:
                failure = Failure(e.message if isinstance(e, SparksyncError) else f"the row here cannot be read: {e}")
        if failure is not None:
            work.append(FailedChange(_order_key(at, op), art, op, g,
                                     replace(failure, key=failure.key or key_of(art, inc.values)), inc.values))
            continue
        assert decision is not None                 # decided: nothing failed
        if decision.action == "skip":
            st.skipped += 1
            continue
        if handling is not None and decision.action != "tombstone":
            handled = _handled(handling, replica, ctx, dest, art, inc, decision, meta.present)
            if isinstance(handled, Failure):
                work.append(FailedChange(_order_key(at, op), art, op, g,
                                         replace(handled, key=handled.key or key_of(art, inc.values)), inc.values))
                continue
            decision = handled
        op = "delete" if decision.action in ("delete", "tombstone") else "upsert"
        work.append(DecidedChange(_order_key(at, op), art, op, inc, decision, meta.present))
    return work


def _handled_staged(replica: Replica, ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo, cc: ArticleChanges,
                    at: ArticleAt, codec: RowCodec, staging: Staging, staged: StagedArticle,
                    handling: Handling) -> list[Work]:
    """The plain changes the set-based apply would write, each given to the handler first (``insert``, ``update``,
    ``delete``): those it accepts stay set-based; one it rejects, or that it fails on, is a failed change; one it
    gives a row of its own for is applied alone with that row (a new version made here)."""
    art, aside = at.article, []
    out: list[Work] = []
    for op in ("upsert", "delete"):
        if not (handling.has("delete") if op == "delete" else handling.has("insert") or handling.has("update")):
            continue
        staged_rows = staging.rows(art, op)
        names = [n for n, _ in codec.columns]
        decoded = [] if op == "delete" else [dict(zip(names, values)) for values in zip(*codec.decode_columns(
            [cc.row[cc.first[g]] for g, _ in staged_rows], names))]             # one parse of the batch's rows
        if op == "delete":                  # the agent's own compensating deletes are not the handler's
            staged_rows = [(g, p) for g, p in staged_rows if cc.colv[cc.first[g]] != COMPENSATING_COLV]
        last = load_rows(replica, art, [g for g, _ in staged_rows]) if op == "delete" else {}   # one read for all
        for k, (g, present) in enumerate(staged_rows):
            at_ = cc.first[g]
            method = "delete" if op == "delete" else "update" if present else "insert"
            row = last.get(str(g).lower(), {}) if op == "delete" else decoded[k]
            action: Accept | Reject | Custom | Failure
            try:
                action = handling.change(method, row)
            except HandlerFailed as e:
                action = Failure(e.message)
            if isinstance(action, Accept):
                continue                              # the row stays set-based: nothing more read of it
            inc = incoming(cc.change(at_), codec, batch.source_nick)
            if isinstance(action, Custom) and op != "delete" and action.row == inc.values:
                continue                              # a custom row that is the incoming one: nothing of its own
            aside.append(g)
            if op == "delete":
                staged.deletes -= 1
            elif present:
                staged.updates -= 1
            else:
                staged.inserts -= 1
            if isinstance(action, Custom):
                decision = custom_decision(action.row, lin.bump(dict(inc.lineage), dest.nickname), inc.colv, inc.values,
                                           dest.nickname, ctx.rules[art.nickname].column_tracking,
                                           replaced_by(handling, method))
                out.append(DecidedChange(_order_key(at, "upsert"), art, "upsert", inc, decision, present or op == "delete"))
                continue
            failure = action if isinstance(action, Failure) else _rejected(handling, action)
            out.append(FailedChange(_order_key(at, op), art, op, g, replace(failure, key=key_of(art, inc.values or row)),
                                    inc.values))
    if aside:
        staging.set_aside(art, aside)
    return out


def _rejected(handling: Handling, action: Reject) -> Failure:
    return Failure(f"rejected by business logic handler {handling.path}" + (f": {action.reason}" if action.reason else ""))


def replaced_by(handling: Handling, method: str) -> str:
    """Why a change did not apply as it came: the handler's ``method`` gave a row of its own (what a device's outbox
    says of the change: *replaced*)."""
    if method == "delete":
        return f"business logic handler {handling.path}.delete kept the row (a row of its own) instead of deleting it"
    if method == "error":
        return (f"the publisher's database refused the row; business logic handler {handling.path}.error applied "
                "a row of its own instead")
    return f"business logic handler {handling.path}.{method} applied a row of its own instead of this {method}"


def custom_decision(values: dict[str, Any], lineage: lin.Lineage, colv, before: dict[str, Any] | None, dest: int,
                    column_tracking: bool, replaced: str | None = None) -> Decision:
    """A row a handler gave: a new version made here (``lineage``: this replica's entry already its own), sent on to
    every replica (the source too); with column tracking each column it changed is this replica's version.
    ``replaced``: why the change it answered was not applied as it came (``replaced_by``)."""
    versions = None
    if column_tracking:
        versions = dict(colv or {})
        for c, v in values.items():
            if before is None or c not in before or before[c] != v or c not in versions:
                versions[c] = [dest, lineage[dest]]
    return Decision("upsert", dict(values), dict(lineage), versions, send_back=True, replaced=replaced)


def _handled(handling: Handling, replica: Replica, ctx: ApplyContext, dest: DestinationInfo, art: TrackedArticle,
             inc: Incoming, decision: Decision, existed: bool) -> Decision | Failure:
    """A decided change given to the handler: a plain change to ``insert``, ``update`` or ``delete``, a conflict to
    ``update_conflict`` or ``update_delete_conflict``. Returns the decision to apply, or the failure to record."""
    tracking = ctx.rules[art.nickname].column_tracking
    try:
        if decision.conflict is not None:
            return _conflict_handled(handling, replica, ctx, dest, art, inc, decision, tracking)
        method = "delete" if decision.action == "delete" else "update" if existed else "insert"
        row = (load_row(replica, art, inc.rowguid) or {}) if method == "delete" else dict(decision.values or {})
        action = handling.change(method, row)
    except HandlerFailed as e:
        return Failure(e.message)
    if isinstance(action, Accept):
        return decision
    if isinstance(action, Reject):
        return _rejected(handling, action)
    if method != "delete" and action.row == decision.values:
        return decision                       # a custom row that is the incoming one: nothing of its own
    # a version made here already (a column-level merge) keeps its lineage; a change taken as it came gets one
    lineage = decision.lineage if decision.send_back else lin.bump(dict(decision.lineage), dest.nickname)
    return custom_decision(action.row, lineage, decision.colv, row, dest.nickname, tracking,
                           replaced_by(handling, method))


def _conflict_handled(handling: Handling, replica: Replica, ctx: ApplyContext, dest: DestinationInfo,
                      art: TrackedArticle, inc: Incoming, decision: Decision, tracking: bool) -> Decision:
    """A conflict given to the handler; its answer (not Default) becomes the resolved version, sent back."""
    assert decision.conflict is not None
    if inc.compensating:                   # the agent's own compensating delete: not the handler's
        return decision
    rec = decision.conflict
    update_delete = rec.conflict_type in (ConflictType.UPDATE_DELETE_WINS, ConflictType.UPDATE_WINS_DELETE)
    local = load_row(replica, art, inc.rowguid)
    pub_row, sub_row = (local, inc.values) if ctx.upload else (inc.values, local)
    if update_delete:
        updated = pub_row if pub_row is not None else sub_row
        action = handling.conflict("update_delete_conflict", (dict(updated or {}),), dict(updated or {}))
    else:
        action = handling.conflict("update_conflict", (dict(pub_row or {}), dict(sub_row or {})),
                                   dict(decision.values or pub_row or {}))
    if isinstance(action, Default):
        return decision
    pub_name = ctx.replicas.name(dest.nickname if ctx.upload else inc.source)
    sub_name = ctx.replicas.name(inc.source if ctx.upload else dest.nickname)
    values: dict[str, Any] | None
    if isinstance(action, Custom):
        values, winner, loser, chose = action.row, "resolver", None, "its own row"
    elif isinstance(action, AcceptPublisher):
        values, winner, loser, chose = pub_row, pub_name, sub_row, "the publisher's version"
    else:
        values, winner, loser, chose = sub_row, sub_name, pub_row, "the subscriber's version"
    ctype = (ConflictType.UPDATE_DELETE_WINS if values is None else ConflictType.UPDATE_WINS_DELETE) if update_delete \
        else rec.conflict_type
    record = replace(rec, conflict_type=ctype, reason_code=int(ctype),
                     reason_text=f"business logic handler {handling.path} chose {chose}", winner=winner,
                     origin=f"{pub_name}, {sub_name}", losing_row=dict(loser) if loser is not None else None)
    if values is None:
        return Decision("delete", None, decision.lineage, None, send_back=True, conflict=record)
    versions = {c: [dest.nickname, decision.lineage[dest.nickname]] for c in values} if tracking else None
    return Decision("upsert", dict(values), decision.lineage, versions, send_back=True, conflict=record)


def _columns(cc: ArticleChanges, positions: list[int] | None) -> StagedColumns:
    """The changes at ``positions`` (None: every one) column by column, as they are staged."""
    if positions is None:
        return StagedColumns(cc.rowguid, cc.op, cc.lineage, cc.colv, cc.row)
    at = positions
    return StagedColumns([cc.rowguid[i] for i in at], [cc.op[i] for i in at], [cc.lineage[i] for i in at],
                         [cc.colv[i] for i in at], [cc.row[i] for i in at])


def _lock_and_flush(replica: Replica, staging: Staging, art: TrackedArticle, rowguids: list[str]) -> None:
    """Without a staging table (it refused the batch): the rows locked where writers run concurrently,
    then their logged changes flushed, before their metadata is read."""
    for chunk in in_chunks(rowguids):
        listed = ", ".join([replica.dialect.uuid_param()] * len(chunk))
        staging.lock_rows(art, listed, chunk)
        flush_rows(replica, art.nickname, listed, chunk)


def _forged(inc: Incoming, local: Local, ctx: ApplyContext) -> Failure | None:
    """At the publisher: an uploaded version may only add its own replica's changes to what the
    publisher has seen. Lineage that claims a version of another replica (the publisher included)
    that the publisher never had is refused: it would silently beat a newer change (trust model); so is
    an entry of its own more than ``lineage.MAX_ADVANCE`` above the row's newest version there."""
    known = lin.merge(local.lineage or {}, local.tombstone or {})
    over = sorted((n, v) for n, v in inc.lineage.items() if n != inc.source and v > known.get(n, 0))
    if over:
        claims = ", ".join(f"version {v} of {ctx.replicas.name(n)} (publisher has {known.get(n, 0)})" for n, v in over)
        return Failure(f"{REFUSED}its lineage claims {claims}, which the publisher never had")
    own, newest = inc.lineage.get(inc.source, 0), max(known.values(), default=0)
    if own > newest + lin.MAX_ADVANCE:
        return Failure(f"{REFUSED}its lineage claims version {own} of {ctx.replicas.name(inc.source)}, more than "
                       f"{lin.MAX_ADVANCE:,} above the row's newest version at the publisher ({newest}): more local "
                       "changes of one row than a replica makes between two syncs")
    return None


def load_row(replica: Replica, article: TrackedArticle, rowguid: str) -> dict[str, Any] | None:
    """The row of ``rowguid`` as it is here, or None."""
    return load_rows(replica, article, [rowguid]).get(str(rowguid).lower())


def load_rows(replica: Replica, article: TrackedArticle, rowguids: list[str], chunk: int = 500
              ) -> dict[str, dict[str, Any]]:
    """The rows of ``rowguids`` as they are here (a handler's ``delete`` is given a deleted row's last values),
    read ``chunk`` at a time, keyed by lowercase rowguid."""
    d = replica.dialect
    cols = list(article.info.columns)
    convert = [arrow_converter(c.type) for c in cols]
    select = ", ".join(d.quote(c.name) for c in cols)
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(rowguids), chunk):
        part = [str(g) for g in rowguids[start:start + chunk]]
        marks = ", ".join([d.uuid_param()] * len(part))
        for guid, *values in replica.query(f"SELECT {d.quote(article.rowguid_column)}, {select} FROM "
                                           f"{identity.rows_sql(d, article)} WHERE {d.quote(article.rowguid_column)} "
                                           f"IN ({marks})", part):
            out[str(guid).lower()] = {c.name: f(v) for c, f, v in zip(cols, convert, values)}
    return out


def json_value(v):
    return json.loads(v) if isinstance(v, (str, bytes)) else v


def key_of(art: TrackedArticle, values: dict | None) -> str:
    if not values:
        return ""
    cols = list(values)
    return row_key(cols, art.info.primary_key, [values[c] for c in cols])
