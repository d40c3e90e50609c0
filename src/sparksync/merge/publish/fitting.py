"""Before a column narrows (a smaller integer, a shorter text, fewer digits, NOT NULL): every replica's values
must fit, counted where they are, the publisher and each direct subscriber of the publication, before anything
changes. A replica that cannot be reached stops the change (its values could not be counted); one that has not
had the publication's latest schema changes is counted under the column's name there. A device's values are
counted as they arrive: a value it wrote offline that does not fit the new column is a failed change naming the
column, never a silent truncation."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sparksync.dialects import connect
from sparksync.dialects.column_changes import not_fitting
from sparksync.dialects.model import Column
from sparksync.dialects.replica import Replica
from sparksync.errors import SchemaError, SparksyncError
from sparksync.merge.publish.schema_changes import pending
from sparksync.merge.tracking.tracked import TrackedArticle, tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, PublicationRow
from sparksync.names import TableName
from sparksync.types import SqlType


def check_values_fit(topology, publication: str, pub: Replica, prow: PublicationRow, art: TrackedArticle,
                     old: Column, new: Column, where: str) -> list[str]:
    """Raise SchemaError naming each replica where a value of ``old`` does not fit ``new`` (how many, and one
    row's key); nothing when the change only widens. Returns what is said of the replicas it could not count:
    the web subscriptions, whose values are on their devices."""
    if not_fitting(old, new, "x") is None:
        return []
    problems = []
    found = _count(pub, art.table, art.info.primary_key, old, new)
    if found:
        problems.append(f"the publisher {topology.publisher.name}: {found}")
    history = pending(pub, prow.pubid, 0)          # the publication's schema changes, in order
    for s in topology.subscriptions_of(publication):
        if s.transport != "direct":
            continue
        try:
            with connect(topology.subscriber_url(s), s.name) as sub:
                mine = store.select_one(sub, ArticleRow, {"pubid": prow.pubid, "artid": art.artid})
                have = store.select_one(sub, PublicationRow, {"pubid": prow.pubid})
                if mine is None or have is None:
                    continue                      # not initialized yet: its snapshot will be made after the change
                here = _name_at(history, art.artid, old.name, have.schema_version or 0)
                if here is None:
                    continue                      # added after its last merge: it holds no value of it yet
                table = tracked_article(mine).table
                found = _count(sub, table, art.info.primary_key, replace(old, name=here), replace(new, name=here))
        except SparksyncError as e:
            problems.append(f"subscriber {s.name} cannot be reached to count its values ({e.message})")
            continue
        if found:
            problems.append(f"subscriber {s.name}: {found}")
    if problems:
        raise SchemaError(f"{where}: column {old.name} cannot become {_shape(new)}: " + "; ".join(problems)
                          + ". Nothing was changed", obj=old.name)
    devices = [s.name for s in topology.subscriptions if s.publication == publication and s.transport == "web"]
    if not devices:
        return []
    null = old.nullable and not new.nullable
    return [f"not counted: the values of the device(s) of {', '.join(devices)}, which are on the devices. A row one "
            f"wrote offline that does not fit {_shape(new)} arrives as a failed change naming column {old.name} "
            "(its outbox says failed, status names the subscription)" + (
                "; a device holding a NULL there uploads its writes under its old schema and its sync names the "
                "rows its application must fill before the change is made there" if null else "")]


@dataclass(frozen=True)
class Unfit:
    """Rows of a replica that a schema change it has not had yet does not admit."""

    article: str
    column: str
    shape: str                    # what the column becomes, e.g. "text NOT NULL"
    count: int
    keys: list[str]               # the first rows' keys, e.g. "id=5"

    def __str__(self) -> str:
        more = f" and {self.count - len(self.keys)} more" if self.count > len(self.keys) else ""
        return (f"{self.count} row(s) of {self.article} hold a value column {self.column} as {self.shape} does not "
                f"admit ({', '.join(self.keys)}{more})")


def not_admitted(replica: Replica, pubid: str, changes: list[dict], first: int = 10) -> list[Unfit]:
    """What stops ``changes`` (schema changes, in order, not replayed at ``replica`` yet) from being replayed there:
    for each narrowing or NOT NULL, the rows whose value (under the column's name at the replica: a rename among
    ``changes`` is followed back) the new column does not admit. A column added among them holds no value yet."""
    out: list[Unfit] = []
    d = replica.dialect
    here: dict[tuple[str, str], str | None] = {}           # (artid, name after a change) -> its name at the replica
    for ch in changes:
        artid, name = ch["artid"], ch["column_name"]
        if ch["schematype"] == "rename_column":
            here[(artid, ch["column_def"]["name"])] = here.get((artid, name), name)
        elif ch["schematype"] == "add_column":
            here[(artid, name)] = None
        elif ch["schematype"] == "alter_column" and ch["column_def"].get("before"):
            col = here.get((artid, name), name)
            row = store.select_one(replica, ArticleRow, {"pubid": pubid, "artid": artid})
            if col is None or row is None:
                continue
            art = tracked_article(row)
            definition, before = ch["column_def"], ch["column_def"]["before"]
            old = Column(col, SqlType.from_dict(before["type"]), bool(before["nullable"]))
            new = Column(col, SqlType.from_dict(definition["type"]), bool(definition["nullable"]))
            cond = not_fitting(old, new, d.quote(col))
            if cond is None or art.info.column(col) is None:
                continue
            t = d.table_sql(art.table)
            n = int(replica.scalar(f"SELECT count(*) FROM {t} WHERE {cond}") or 0)
            if n:
                key = art.info.primary_key
                cols = ", ".join(d.quote(k) for k in key)
                rows = replica.query(f"SELECT {cols} FROM {t} WHERE {cond} ORDER BY {cols} LIMIT {int(first)}")
                out.append(Unfit(row.name, col, _shape(new), n,
                                 [", ".join(f"{k}={v}" for k, v in zip(key, r)) for r in rows]))
    return out


def _name_at(history: list[dict], artid: str, column: str, version: int) -> str | None:
    """The column's name at a replica that has had the publication's schema changes (``history``) up to
    ``version`` (a rename it has not had yet undone), or None: the column was added after it."""
    for ch in reversed(history):
        if ch["artid"] != artid or int(ch["schemaversion"]) <= version:
            continue
        if ch["schematype"] == "rename_column" and ch["column_def"]["name"] == column:
            column = ch["column_name"]
        elif ch["schematype"] == "add_column" and ch["column_name"] == column:
            return None
    return column


def _count(replica: Replica, table: TableName, key: tuple[str, ...], old: Column, new: Column) -> str | None:
    d = replica.dialect
    cond = not_fitting(old, new, d.quote(old.name))
    t = d.table_sql(table)
    n = int(replica.scalar(f"SELECT count(*) FROM {t} WHERE {cond}") or 0)
    if not n:
        return None
    cols = ", ".join(d.quote(k) for k in key)
    first = replica.query_one(f"SELECT {cols} FROM {t} WHERE {cond} ORDER BY {cols} LIMIT 1")
    where = ", ".join(f"{k}={v}" for k, v in zip(key, first or ()))
    return f"{n} row(s) hold a value that does not fit (the first: {where})"


def _shape(c: Column) -> str:
    return f"{c.type}{'' if c.nullable else ' NOT NULL'}"
