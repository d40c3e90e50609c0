"""Conflicts and failed changes: the vocabulary shared by detection and resolution
(``MSmerge_conflicts_info``), and their logging at a replica (the conflict tables and
``MSmerge_failed_changes``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from sparksync.dialects.replica import Replica
from sparksync.errors import CHANGE_REJECTED
from sparksync.metadata import store
from sparksync.metadata.records import FailedChangeRow
from sparksync.redaction import redact
from sparksync.types import Kind, SqlType

if TYPE_CHECKING:
    from sparksync.merge.tracking.tracked import TrackedArticle


class ConflictType(IntEnum):
    UPDATE = 1                  # update-update, row-level tracking
    COLUMN_UPDATE = 2           # update-update on the same column, column-level tracking
    UPDATE_DELETE_WINS = 3      # update vs delete: the delete won
    UPDATE_WINS_DELETE = 4      # update vs delete: the update won (the row is re-sent to the deleter)
    UPLOAD_INSERT_FAILED = 5
    DOWNLOAD_INSERT_FAILED = 6
    UPLOAD_DELETE_FAILED = 7
    DOWNLOAD_DELETE_FAILED = 8
    UPLOAD_UPDATE_FAILED = 9
    DOWNLOAD_UPDATE_FAILED = 10

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", " ")


def failed_type(upload: bool, op: str) -> ConflictType:
    base = {"insert": 5, "delete": 7, "update": 9}[op]
    return ConflictType(base if upload else base + 1)


@dataclass
class ConflictRecord:
    """One conflict, as logged to MSmerge_conflicts_info (and the article's conflict table)."""

    conflict_type: ConflictType
    tablenick: int
    rowguid: str
    reason_code: int | str
    reason_text: str
    origin: str                  # the replica whose version lost (or whose change failed)
    winner: str                  # the replica whose version won ("" for failed changes)
    losing_row: dict[str, Any] | None = None
    columns: list[str] = field(default_factory=list)
    conflict_id: str | None = None   # its id in MSmerge_conflicts_info, once logged


REFUSED = "refused: "        # a failed change whose claim the publisher refused (a forged or edited replica's)


@dataclass(frozen=True)
class Failure:
    """Why a change cannot be applied at a replica: a constraint or a value it rejects, a row its
    source could not read, a value it cannot hold, a resolver that failed, forged lineage."""

    reason: str
    key: str = ""                    # the row's primary key, e.g. "id=4"
    column: str | None = None
    value: str | None = None


def conflict_table_name(publication: str, article: TrackedArticle) -> str:
    """The article's conflict table (the losing rows), named as SQL Server names it, cut to fit."""
    name = f"MSmerge_conflict_{publication}_{article.table.name}"
    return name if len(name) <= 60 else name[:52] + "_" + article.trigger_id[:7]


def log_conflict(replica: Replica, pubid: str, publication: str, article: TrackedArticle, rec: ConflictRecord,
                 subscription: str, upload: bool, session_id: str) -> None:
    """MSmerge_conflicts_info row, and the losing row in the article's conflict table."""
    d = replica.dialect
    cid = rec.conflict_id = store.new_guid()
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
    losing = [rec.losing_row.get(c.name) for c in cols]
    vals = [cid, rec.origin] + [v if v is None or conv is None else conv(v) for v, conv in zip(losing, convs)]
    insert = (f"INSERT INTO {table} ({', '.join(d.quote(n) for n in names)}) VALUES "
              f"({', '.join([replica.p] * len(names))})")
    replica.execute("SAVEPOINT sparksync_loser")
    try:
        replica.execute(insert, vals)
    except CHANGE_REJECTED:
        # The losing row holds a value this table cannot (the reason it failed): keep its key columns
        # only; the value is in the conflict's reason text.
        replica.execute("ROLLBACK TO SAVEPOINT sparksync_loser")
        keep = set(article.info.primary_key)
        replica.execute(insert, [cid, rec.origin] + [v if c.name in keep else None for c, v in zip(cols, vals[2:])])
    replica.execute("RELEASE SAVEPOINT sparksync_loser")


def record_failed_change(replica: Replica, nick: int, rowguid: str, source_nick: int, ctype: ConflictType,
                         failure: Failure) -> int:
    """Add or update the failed-change row; returns how many times the change has failed."""
    key = {"tablenick": nick, "rowguid": rowguid, "source_nickname": source_nick}
    row = store.select_one(replica, FailedChangeRow, key)
    now = store.utcnow()
    values = {"conflict_type": int(ctype), "reason": redact(failure.reason), "last_time": now,
              "row_key": failure.key or None, "column_name": failure.column, "value": failure.value}
    if row is not None:
        store.update(replica, FailedChangeRow, {**values, "attempts": row.attempts + 1}, key)
        return row.attempts + 1
    store.insert(replica, FailedChangeRow(tablenick=nick, rowguid=rowguid, source_nickname=source_nick,
                                          conflict_type=int(ctype), reason=redact(failure.reason), attempts=1,
                                          first_time=now, last_time=now, row_key=failure.key or None,
                                          column_name=failure.column, value=failure.value))
    return 1
