"""The distribution database: where the log reader queues each publication's transactions and
commands, in commit order, until every subscription has them.

``xact_seqno`` orders transactions (the commit LSN of a PostgreSQL publisher, the last log sequence
number of a SQLite one). The log reader stores a batch of transactions and moves its own position
(``MSpublications.logreader_seqno``) in the same transaction, so a crash stores nothing twice.
Subscriptions record what they received at the subscriber; ``MSsubscriptions.delivered_seqno`` is
the distributor's copy, used for retention cleanup.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparksync.dialects.replica import Replica
from sparksync.errors import NotInitialized
from sparksync.metadata import store
from sparksync.metadata.records import DistArticleRow, DistPublicationRow, DistSubscriptionRow, DistSubscriptionStatus
from sparksync.metadata.schema import DISTRIBUTION
from sparksync.transactional.capture import StoredCommand
from sparksync.transactional.capture.shapes import ShapeDef
from sparksync.types import Kind, SqlType

COMMAND_COLUMNS = ("publication_id", "xact_seqno", "command_id", "article_id", "type", "origin", "after", "before",
                   "rowhash", "data", "shape")
INSERT_CHUNK = 5_000


@dataclass
class TransactionInfo:
    xact_seqno: int
    xact_id: str | None
    publisher_commit: dt.datetime | None
    commands: int = 0


@dataclass
class Subscription:
    publication_id: str
    subscription: str
    subscriber: str
    status: DistSubscriptionStatus
    sync_point: dict | None
    delivered_seqno: int | None
    message: str | None = None

    @property
    def active(self) -> bool:
        return self.status is DistSubscriptionStatus.ACTIVE


@dataclass
class Publication:
    publication_id: str
    name: str
    source: str
    slot: str | None
    pg_publication: str | None
    logreader_seqno: int | None
    articles: list[DistArticleRow] = field(default_factory=list)


def install(dist: Replica) -> None:
    with dist.transaction():
        store.install_table_set(dist, DISTRIBUTION)


def require(dist: Replica) -> None:
    store.require_table_set(dist, DISTRIBUTION)


def publication(dist: Replica, name: str) -> Publication | None:
    r = store.select_one(dist, DistPublicationRow, {"name": name})
    if r is None:
        return None
    arts = store.select(dist, DistArticleRow, {"publication_id": r.publication_id}, order_by=("article_id",))
    return Publication(r.publication_id, r.name, r.source, r.slot, r.pg_publication, r.logreader_seqno, arts)


def require_publication(dist: Replica, name: str) -> Publication:
    pub = publication(dist, name)
    if pub is None:
        raise NotInitialized(f"publication {name} is not set up at the distributor; run 'sparksync setup'", obj=name)
    return pub


def subscriptions(dist: Replica, publication_id: str) -> list[Subscription]:
    return [Subscription(r.publication_id, r.subscription, r.subscriber, r.status, r.sync_point, r.delivered_seqno,
                         r.message)
            for r in store.select(dist, DistSubscriptionRow, {"publication_id": publication_id}, order_by=("subscription",))]


# -- the log reader's side -------------------------------------------------------------------------

class TransactionWriter:
    """Stores transactions and their commands inside one distribution transaction, in chunks (COPY on
    PostgreSQL), so a transaction of any size goes through with bounded memory."""

    TRANSACTION_COLUMNS = ("publication_id", "xact_seqno", "xact_id", "publisher_commit", "entry_time", "commands")

    def __init__(self, dist: Replica, publication_id: str):
        self.dist = dist
        self.publication_id = publication_id
        self.pending: list[tuple] = []
        self.pending_transactions: list[tuple] = []
        self.transactions = 0
        self.commands = 0
        self.first: int | None = None
        self.last: int | None = None
        self.now = store.utcnow()
        self.stored_shapes: set[str] | None = None

    def command(self, xact_seqno: int, command_id: int, c: StoredCommand) -> None:
        self.pending.append((self.publication_id, xact_seqno, command_id, c.article_id, c.type, c.origin, c.after,
                             c.before, c.rowhash, c.data, c.shape))
        if len(self.pending) >= INSERT_CHUNK:
            self.flush()

    def shape(self, s: ShapeDef) -> None:
        """Store a shape the commands that follow are decoded with (once: the server describes a
        relation again in every decoding session)."""
        if self.stored_shapes is None:
            self.stored_shapes = {r[0] for r in self.dist.query(
                f"SELECT shape_id FROM {self.dist.meta('MSrepl_shapes')} WHERE publication_id = "
                f"{self.dist.dialect.uuid_param()}", [self.publication_id])}
        if s.shape_id not in self.stored_shapes:
            store.insert_row(self.dist, "MSrepl_shapes", {
                "publication_id": self.publication_id, "shape_id": s.shape_id, "article_id": s.article_id,
                "relation": s.relation, "table_schema": s.table_schema})
            self.stored_shapes.add(s.shape_id)

    def transaction(self, t: TransactionInfo) -> None:
        """Record a transaction once all its commands were given."""
        self.pending_transactions.append((self.publication_id, t.xact_seqno, t.xact_id, t.publisher_commit, self.now,
                                          t.commands))
        self.transactions += 1
        self.commands += t.commands
        self.first = t.xact_seqno if self.first is None else self.first
        self.last = t.xact_seqno
        if len(self.pending_transactions) >= INSERT_CHUNK:
            self.flush()

    def flush(self) -> None:
        d = self.dist.dialect
        if self.pending:
            d.load_rows(self.dist, self.dist.meta("MSrepl_commands"), COMMAND_COLUMNS, self.pending)
            self.pending = []
        if self.pending_transactions:
            d.load_rows(self.dist, self.dist.meta("MSrepl_transactions"), self.TRANSACTION_COLUMNS,
                        self.pending_transactions)
            self.pending_transactions = []

    def finish(self, position: int | None) -> None:
        """Move the log reader's position (same transaction as the commands)."""
        self.flush()
        if position is not None:
            store.update(self.dist, DistPublicationRow, {"logreader_seqno": position, "logreader_time": store.utcnow()},
                         {"publication_id": self.publication_id})


# -- the distribution agent's side -----------------------------------------------------------------

def bound(dist: Replica, publication_id: str) -> int | None:
    """The last stored transaction: the distribution agent delivers up to here (fixed per run)."""
    return dist.scalar(f"SELECT max(xact_seqno) FROM {dist.meta('MSrepl_transactions')} WHERE publication_id = "
                       f"{dist.dialect.uuid_param()}", [publication_id])


LAST_COMMAND = 2**31 - 1     # (xact_seqno, LAST_COMMAND): the end of that transaction


def commands_query(dist: Replica, ordered: bool = False) -> str:
    """The SQL reading a subscription's commands of a publication between two (xact_seqno, command_id)
    positions, the first excluded; parameters: subscription (a constant first column), publication_id,
    lo seqno, lo command, hi seqno, hi command. ``ordered``: in commit order."""
    p = dist.p
    text = dist.dialect.typed_param(SqlType(Kind.TEXT))
    return (f"SELECT {text} AS subscription, xact_seqno, command_id, article_id, type, origin, after, before, rowhash, "
            f"data, shape FROM "
            f"{dist.meta('MSrepl_commands')} WHERE publication_id = {dist.dialect.uuid_param()} "
            f"AND (xact_seqno, command_id) > ({p}, {p}) AND (xact_seqno, command_id) <= ({p}, {p})"
            + (" ORDER BY xact_seqno, command_id" if ordered else ""))


def shapes(dist: Replica, publication_id: str) -> dict[str, ShapeDef]:
    """Every shape of the publication's stored changes (read after the run's bound: the shapes of the
    commands up to it were stored with them)."""
    return {r["shape_id"]: ShapeDef(r["shape_id"], r["article_id"], bytes(r["relation"]), r["table_schema"])
            for r in store.select_rows(dist, "MSrepl_shapes", {"publication_id": publication_id})}


_ERROR_COLUMNS = ("error_id", "publication_id", "subscription", "xact_seqno", "command_id", "article_id",
                  "error_code", "native_code", "message", "skipped", "time")


def pending(dist: Replica, publication_id: str, after: int) -> int:
    """Transactions of the publication after xact_seqno ``after``."""
    return int(dist.scalar(f"SELECT count(*) FROM {dist.meta('MSrepl_transactions')} WHERE publication_id = "
                           f"{dist.dialect.uuid_param()} AND xact_seqno > {dist.p}", [publication_id, after]) or 0)


def pending_commands(dist: Replica, publication_id: str, starts: list[int], bound: int) -> int:
    """Commands the subscriptions positioned at ``starts`` have to receive, up to ``bound`` (a round's size)."""
    return sum(int(dist.scalar(f"SELECT sum(commands) FROM {dist.meta('MSrepl_transactions')} WHERE publication_id = "
                               f"{dist.dialect.uuid_param()} AND xact_seqno > {dist.p} AND xact_seqno <= {dist.p}",
                               [publication_id, start, bound]) or 0) * starts.count(start)
               for start in set(starts))


def oldest_pending(dist: Replica, publication_id: str, after: int) -> Any:
    """When the oldest transaction after xact_seqno ``after`` was committed at the publisher (None: none)."""
    return dist.scalar(f"SELECT min(coalesce(publisher_commit, entry_time)) FROM {dist.meta('MSrepl_transactions')} "
                       f"WHERE publication_id = {dist.dialect.uuid_param()} AND xact_seqno > {dist.p}",
                       [publication_id, after])


def record_errors(dist: Replica, publication_id: str, subscription: str, errors: Iterable[Mapping[str, Any]]) -> None:
    now = store.utcnow()
    store.insert_rows(dist, "MSrepl_errors", _ERROR_COLUMNS, (
        (store.new_guid(), publication_id, subscription, e["xact_seqno"], e["command_id"], e.get("article_id"),
         e["error_code"], e.get("native_code"), e["message"], int(bool(e.get("skipped"))), now) for e in errors))


def update_delivered(dist: Replica, publication_id: str, subscription: str, seqno: int | None) -> None:
    values: dict[str, Any] = {"last_delivery": store.utcnow()}
    if seqno is not None:
        values["delivered_seqno"] = seqno
    store.update(dist, DistSubscriptionRow, values, {"publication_id": publication_id, "subscription": subscription})


@dataclass
class Cleanup:
    transactions: int = 0
    commands: int = 0
    deactivated: list[str] = field(default_factory=list)


def cleanup(dist: Replica, publication_id: str, min_hours: float, max_hours: float, history_hours: float,
            now: dt.datetime | None = None) -> Cleanup:
    """Retention (SQL Server's distribution cleanup): remove transactions every active subscription has
    received and that are older than ``min_hours``; remove anything older than ``max_hours``,
    delivered or not, and mark the subscriptions that still needed it inactive (they must be
    reinitialized); drop history older than ``history_hours``. One transaction."""
    now = now or store.utcnow()
    out = Cleanup()
    u, p = dist.dialect.uuid_param(), dist.p
    tx, cmd = dist.meta("MSrepl_transactions"), dist.meta("MSrepl_commands")
    with dist.transaction():
        subs = [s for s in subscriptions(dist, publication_id) if s.status is not DistSubscriptionStatus.INACTIVE]
        delivered = [s.delivered_seqno for s in subs if s.delivered_seqno is not None]
        cut = None
        if subs and len(delivered) == len(subs):
            cut = min(delivered)
        elif not subs:
            cut = bound(dist, publication_id)
        limit_min = now - dt.timedelta(hours=min_hours)
        limit_max = now - dt.timedelta(hours=max_hours)
        expired = dist.scalar(f"SELECT max(xact_seqno) FROM {tx} WHERE publication_id = {u} AND entry_time < {p}",
                              [publication_id, store.to_param(dist, Kind.TIMESTAMPTZ, limit_max)])
        for s in subs:
            if expired is not None and s.active and (s.delivered_seqno or 0) < expired:
                store.update(dist, DistSubscriptionRow, {
                    "status": DistSubscriptionStatus.INACTIVE,
                    "message": f"inactive: commands it had not received are older than the "
                    f"{max_hours:g} hour max_distretention; reinitialize it (sparksync setup)"},
                    {"publication_id": publication_id, "subscription": s.subscription})
                out.deactivated.append(s.subscription)
        conds = []
        params: list[Any] = [publication_id]
        if cut is not None:
            conds.append(f"(xact_seqno <= {p} AND entry_time < {p})")
            params += [cut, store.to_param(dist, Kind.TIMESTAMPTZ, limit_min)]
        if expired is not None:
            conds.append(f"xact_seqno <= {p}")
            params.append(expired)
        if conds:
            where = f"publication_id = {u} AND ({' OR '.join(conds)})"
            doomed = dist.scalar(f"SELECT max(xact_seqno) FROM {tx} WHERE {where}", params)
            if doomed is not None:
                out.commands = dist.execute(f"DELETE FROM {cmd} WHERE publication_id = {u} AND xact_seqno <= {p}",
                                            [publication_id, doomed]).rowcount
                out.transactions = dist.execute(f"DELETE FROM {tx} WHERE publication_id = {u} AND xact_seqno <= {p}",
                                                [publication_id, doomed]).rowcount
        old = store.to_param(dist, Kind.TIMESTAMPTZ, now - dt.timedelta(hours=history_hours))
        for table, col in (("MSdistribution_history", "end_time"), ("MSlogreader_history", "end_time"),
                           ("MSrepl_errors", "time")):
            dist.execute(f"DELETE FROM {dist.meta(table)} WHERE publication_id = {u} AND {col} < {p}",
                         [publication_id, old])
        tokens = [r[0] for r in dist.query(
            f"SELECT tracer_id FROM {dist.meta('MStracer_tokens')} WHERE publication_id = {u} AND "
            f"coalesce(distributor_commit, posted_time) < {p}", [publication_id, old])]
        for t in tokens:
            store.delete_rows(dist, "MStracer_history", {"tracer_id": t})
            store.delete_rows(dist, "MStracer_tokens", {"tracer_id": t})
    return out

