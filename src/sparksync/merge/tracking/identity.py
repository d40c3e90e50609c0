"""Where a row's rowguid is kept, and the SQL that finds a row by it.

An article's rowguid is a column of its table (PostgreSQL; a GUID column the application already had), or, for a
*keyed* article (SQLite, where publishing would have added the column), it is kept beside the table: in
``MSmerge_ids_<artid>`` (the primary key's columns and the rowguid column, under the article's own names), so an
application's write never pays for a rowguid, its table is its own (a positional ``INSERT`` still fits), and the
flush that gives a new row its rowguid writes one small row instead of rewriting the user's.

Readers see either layout the same way through :func:`rows_sql`: the table's rows with their rowguid column.
Writers find rows by rowguid through :func:`rows_of` and keep the identity table in step with the table
(:func:`delete_rows`, :func:`insert_ids`). The tracking triggers of a keyed article keep it in step for an
application's deletes and key changes (``dialects/sqlite/templates/merge_triggers_keyed.sql``); the flush gives
inserted rows their rowguids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sparksync.dialects.model import Column, TableInfo
from sparksync.dialects.replica import Replica
from sparksync.errors import SparksyncError
from sparksync.merge.tracking.tracked import TrackedArticle, tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow
from sparksync.names import TableName
from sparksync.types import Kind, SqlType


def rows_sql(d, art: TrackedArticle) -> str:
    """A relation of the article's rows, each with its rowguid column (under the article's name for it)."""
    if not art.keyed:
        return d.table_sql(art.table)
    rg = d.quote(art.rowguid_column)
    return (f"(SELECT t.*, i.{rg} AS {rg} FROM {d.table_sql(art.table)} AS t "
            f"JOIN {d.metadata_table_sql(art.ids_table)} AS i ON {key_match(d, art, 'i', 't')})")


def guids_sql(d, art: TrackedArticle) -> str:
    """The relation a rowguid of the article is looked up in (present here or not): its identity table where the
    article is keyed (a row of it is a row of the table), else the table."""
    return d.metadata_table_sql(art.ids_table) if art.keyed else d.table_sql(art.table)


def key_match(d, art: TrackedArticle, a: str, b: str) -> str:
    """``a``'s primary key equals ``b``'s (two aliases)."""
    return " AND ".join(f"{a}.{d.quote(k)} = {b}.{d.quote(k)}" for k in art.info.primary_key)


def key_sql(d, art: TrackedArticle, alias: str | None = None) -> str:
    """The primary key as one value (a row value where it has several columns)."""
    cols = [f"{alias}.{d.quote(k)}" if alias else d.quote(k) for k in art.info.primary_key]
    return cols[0] if len(cols) == 1 else "(" + ", ".join(cols) + ")"


def rows_of(d, art: TrackedArticle, rowguids: str) -> str:
    """A WHERE condition on the article's table: the rows whose rowguid is among ``rowguids`` (a SELECT of
    rowguids or a list of placeholders)."""
    rg = d.quote(art.rowguid_column)
    if not art.keyed:
        return f"{rg} IN ({rowguids})"
    return (f"{key_sql(d, art)} IN (SELECT {key_sql(d, art)} FROM {d.metadata_table_sql(art.ids_table)} "
            f"WHERE {rg} IN ({rowguids}))")


def delete_rows(replica: Replica, art: TrackedArticle, rowguids: str, params: Sequence[Any] = ()) -> int:
    """Delete the rows whose rowguid is among ``rowguids`` (and, keyed, their identities). Returns how many rows
    of the table went. The caller's tracking: inside ``agent_writes`` nothing is logged."""
    d = replica.dialect
    cur = replica.execute(f"DELETE FROM {d.table_sql(art.table)} WHERE {rows_of(d, art, rowguids)}", list(params))
    n = max(getattr(cur, "rowcount", 0), 0)
    if art.keyed:
        replica.execute(f"DELETE FROM {d.metadata_table_sql(art.ids_table)} WHERE {d.quote(art.rowguid_column)} "
                        f"IN ({rowguids})", list(params))
    return n


def insert_ids(replica: Replica, art: TrackedArticle, select: str, params: Sequence[Any] = ()) -> None:
    """Keyed: record the identities of rows just written, ``select`` giving (primary key columns..., rowguid). An
    identity whose row is gone without its trigger seeing it (deleted behind the agent's own writes' flag, or by
    an ``INSERT OR REPLACE`` over another unique column) is stale: the written row's replaces it."""
    d = replica.dialect
    cols = ", ".join([d.quote(k) for k in art.info.primary_key] + [d.quote(art.rowguid_column)])
    # keyed rowguids are kept where the database keeps them apart (SQLite: ``keyed_rowguids``), in its words
    replica.execute(f"INSERT OR REPLACE INTO {d.metadata_table_sql(art.ids_table)} ({cols}) {select}", list(params))


def ids_ddl(d, art: TrackedArticle, info: TableInfo | None = None, index: bool = True) -> list[str]:
    """CREATE statements of a keyed article's identity table: its primary key's columns (declared as the table
    declares them, so a key compares as it does there) and the rowguid column, unique (``index``: its index now;
    a load creates it once its rows are in)."""
    info = info or art.table_info
    by_name = {c.name: c for c in info.columns}
    cols = [f"{d.quote(k)} {d.render_column_type(info, by_name[k])} NOT NULL" for k in info.primary_key]
    # declared as every rowguid column of the metadata is: a rowguid compares with theirs through its index
    cols.append(f"{d.quote(art.rowguid_column)} {d.render_type(SqlType(Kind.UUID))} NOT NULL")
    keys = ", ".join(d.quote(k) for k in info.primary_key)
    rowid = len(info.primary_key) == 1 and d.render_column_type(info, by_name[info.primary_key[0]]) == "INTEGER"
    out = [f"CREATE TABLE IF NOT EXISTS {d.metadata_table_sql(art.ids_table)} ({', '.join(cols)}, "
           f"PRIMARY KEY ({keys})){'' if rowid else ' WITHOUT ROWID'}"]
    if index:
        out.append(ids_index_ddl(d, art))
    return out


def ids_index_ddl(d, art: TrackedArticle) -> str:
    return (f"CREATE UNIQUE INDEX IF NOT EXISTS {d.quote(art.ids_table + '_guid')} ON "
            f"{d.metadata_table_sql(art.ids_table)} ({d.quote(art.rowguid_column)})")


def keep_rowguids(replica: Replica, art: TrackedArticle) -> int:
    """Publishing a keyed article: its identity table, and a new rowguid for every row of the table without one
    (ascending in key order). Returns the rows given one."""
    d = replica.dialect
    for stmt in ids_ddl(d, art, index=False):
        replica.execute(stmt)
    ids = d.metadata_table_sql(art.ids_table)
    keys = ", ".join(f"t.{d.quote(k)}" for k in art.info.primary_key)
    cte, guid = d.ordered_rowguids_sql(keys)
    fresh = "" if replica.scalar(f"SELECT count(*) FROM (SELECT 1 FROM {ids} LIMIT 1) AS x") == 0 else \
        f" WHERE NOT EXISTS (SELECT 1 FROM {ids} AS i WHERE {key_match(d, art, 'i', 't')})"
    cur = replica.execute(f"INSERT INTO {ids} ({', '.join(d.quote(k) for k in art.info.primary_key)}, "
                          f"{d.quote(art.rowguid_column)}) WITH {cte} SELECT {keys}, {guid} "
                          f"FROM {d.table_sql(art.table)} AS t, g{fresh}")
    replica.execute(ids_index_ddl(d, art))
    return max(getattr(cur, "rowcount", 0), 0)


def drop_rowguids(replica: Replica, art: TrackedArticle) -> None:
    """A keyed article no longer published anywhere here: its identity table and its log go."""
    d = replica.dialect
    for table in (art.ids_table, art.log_table):
        replica.execute(f"DROP TABLE IF EXISTS {d.metadata_table_sql(table)}")


def with_rowguid(info: TableInfo, rowguid_column: str, published: TableInfo | None = None) -> TableInfo:
    """A table as its article publishes it: with the rowguid column a keyed article keeps beside it, where the
    article's ``published`` columns have it (columns added since come after it, as they would in a table that
    has the column), else last."""
    if info.column(rowguid_column) is not None:
        return info
    names = [c.name for c in published.columns] if published is not None else []
    at = names.index(rowguid_column) if rowguid_column in names else len(info.columns)
    before = [c for c in info.columns if c.name in names[:at]] if names else list(info.columns)
    after = [c for c in info.columns if c not in before]
    return replace(info, columns=(*before, Column(rowguid_column, SqlType(Kind.UUID), False), *after),
                   unique_columns=info.unique_columns | {rowguid_column})


def reflect(replica: Replica, art: TrackedArticle) -> TableInfo | None:
    """The article's table as it is here, as its article publishes it: a keyed article's with its rowguid column
    (kept beside it). None when the table is missing."""
    info = replica.reflect(art.table)
    return with_rowguid(info, art.rowguid_column, art.info) if info is not None and art.keyed else info


def rows_of_table(replica: Replica, table: TableName) -> str:
    """:func:`rows_sql` of the article that publishes ``table`` here (its rows with their rowguids), for a reader
    that knows the table, not the article; the table itself where no article publishes it."""
    d = replica.dialect
    name = d.resolve_name(table)
    for row in store.select(replica, ArticleRow):
        art = tracked_article(row)
        if d.resolve_name(art.table) == name:
            return rows_sql(d, art)
    return d.table_sql(name)


def key_rowguids(replica: Replica, art: TrackedArticle) -> str | None:
    """Upgrade in place: an article whose rowguid column publishing added (a release before keyed rowguids) gets
    its rowguids kept beside the table, each row keeping its own, and the column leaves the table. Inside a
    transaction, after a flush (every row has its rowguid, nothing is logged by the old triggers), as the agent
    (nothing of it is a change). Returns None when done, else why the article keeps its column (a view or an index
    of the application's own on it): nothing of it changed then."""
    d = replica.dialect
    users = d.column_users(replica, art.table, art.rowguid_column)
    if users:          # (SQLite drops a column a view reads, and the view then reads a string where it was)
        return f"{', '.join(users)} of the application uses it"
    keyed = replace(art, keyed=True)
    rg, t = d.quote(art.rowguid_column), d.table_sql(art.table)
    replica.execute("SAVEPOINT sparksync_key_rowguids")
    try:
        for stmt in ids_ddl(d, keyed, index=False):
            replica.execute(stmt)
        keys = ", ".join(d.quote(k) for k in art.info.primary_key)
        replica.execute(f"INSERT INTO {d.metadata_table_sql(keyed.ids_table)} ({keys}, {rg}) "
                        f"SELECT {keys}, lower({rg}) FROM {t} WHERE {rg} IS NOT NULL ORDER BY {rg}")
        replica.execute(ids_index_ddl(d, keyed))
        d.drop_merge_triggers(replica, art.table, art.trigger_id)
        replica.execute(f"DROP INDEX IF EXISTS {d.quote(d.rowguid_index_name(art.table, art.rowguid_column))}")
        replica.execute(f"ALTER TABLE {t} DROP COLUMN {rg}")
    except SparksyncError as e:
        replica.execute("ROLLBACK TO sparksync_key_rowguids")
        replica.execute("RELEASE sparksync_key_rowguids")
        return e.message
    replica.execute("RELEASE sparksync_key_rowguids")
    for row in store.select(replica, ArticleRow, {"artid": art.artid}):
        store.update(replica, ArticleRow, {"rowguid_keyed": 1}, {"pubid": row.pubid, "artid": art.artid})
    return None


def join_rows(d, art: TrackedArticle, alias: str, rowguid: str, left: bool = False) -> str:
    """Joins that find, for each row of the relation before them, the article's row (alias ``alias``) whose
    rowguid is the SQL expression ``rowguid`` (``left``: or none). Where the rowguid is kept beside the table the
    identity table comes first (``{alias}_id``) and the join order is fixed (SQLite's ``CROSS JOIN``): a planner
    without statistics would otherwise scan the identity table for every read. Its columns: :func:`column_sql`."""
    t, rg = d.table_sql(art.table), d.quote(art.rowguid_column)
    if not art.keyed:
        return f"{'LEFT JOIN' if left else 'JOIN'} {t} AS {alias} ON {alias}.{rg} = {rowguid}"
    join = "LEFT JOIN" if left else "CROSS JOIN"
    ids = f"{alias}_id"
    return (f"{join} {d.metadata_table_sql(art.ids_table)} AS {ids} ON {ids}.{rg} = {rowguid} "
            f"{join} {t} AS {alias} ON {key_match(d, art, alias, ids)}")


def column_sql(d, art: TrackedArticle, alias: str, name: str) -> str:
    """Column ``name`` of the article's row joined by :func:`join_rows` as ``alias`` (its rowguid included)."""
    if art.keyed and name == art.rowguid_column:
        return f"{alias}_id.{d.quote(name)}"
    return f"{alias}.{d.quote(name)}"
