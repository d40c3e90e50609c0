"""A tracked article: what its triggers and their flush need to know (:class:`TrackedArticle`, read
from its ``sysmergearticles`` row by :func:`tracked_article`), and the context both are rendered with
(:func:`trigger_context`).

Installing the triggers is ``articles.py``'s, flushing what they log ``pending.py``'s; both read the
article from here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from sparksync.dialects.model import TableInfo, from_table_dict
from sparksync.dialects.replica import Replica
from sparksync.metadata.records import ArticleRow
from sparksync.names import TableName


@dataclass(frozen=True)
class TrackedArticle:
    """What the triggers of one article need to know."""

    artid: str
    table: TableName
    nickname: int
    rowguid_column: str
    column_tracking: bool
    info: TableInfo
    keyed: bool = False         # the rowguid kept beside the table, keyed by its primary key (``identity.py``)

    @property
    def trigger_id(self) -> str:
        return self.artid.replace("-", "").upper()

    @property
    def ids_table(self) -> str:
        return ids_table(self.artid)

    @property
    def log_table(self) -> str:
        """A keyed article's tracking log: which rows its application changed since the last flush, by key."""
        return f"MSmerge_log_{self.trigger_id}"

    @property
    def table_info(self) -> TableInfo:
        """The table as it is in the database: without the rowguid column where that is kept beside it."""
        if not self.keyed:
            return self.info
        return replace(self.info, columns=tuple(c for c in self.info.columns if c.name != self.rowguid_column),
                       unique_columns=self.info.unique_columns - {self.rowguid_column})


def ids_table(artid: str) -> str:
    """A keyed article's rowguids: a table of (primary key columns, rowguid column)."""
    return f"MSmerge_ids_{artid.replace('-', '').upper()}"


def tracked_article(row: ArticleRow) -> TrackedArticle:
    return TrackedArticle(row.artid, TableName(row.source_schema, row.source_table), row.nickname,
                          row.rowguid_column, bool(row.column_tracking), from_table_dict(row.table_schema),
                          bool(row.rowguid_keyed))


def trigger_context(replica: Replica, article: TrackedArticle, replica_nickname: int) -> dict[str, Any]:
    d = replica.dialect
    columns = [{"name": c.name, "type": c.type} for c in article.info.columns if c.name != article.rowguid_column]
    for pos, c in enumerate(columns, 1):
        c["pos"] = pos                       # a column's place in a column-tracked update's mask
    by_name = {c.name: c for c in article.info.columns}
    return {
        "table": d.table_sql(article.table),
        "table_name": article.table,
        "artid": article.trigger_id,
        "tablenick": int(article.nickname),
        "replnick": int(replica_nickname),
        "rowguid": d.quote(article.rowguid_column),
        "rowguid_name": article.rowguid_column,
        "pk": list(article.info.primary_key),
        "columns": columns,
        "column_tracking": article.column_tracking,
        "contents": d.metadata_table_sql("MSmerge_contents"),
        "tombstone": d.metadata_table_sql("MSmerge_tombstone"),
        "genhistory": d.metadata_table_sql("MSmerge_genhistory"),
        "replica_state": d.metadata_table_sql("MSmerge_replica"),
        "pending": d.metadata_table_sql("MSmerge_pending"),
        "new_guid": d.new_rowguid_sql(),
        "keyed": article.keyed,
        "ids": d.metadata_table_sql(article.ids_table),
        "log": d.metadata_table_sql(article.log_table),
        "ids_name": article.ids_table,
        "log_name": article.log_table,
        # the primary key's columns: each with its name in a keyed article's log (k0, k1, ...)
        "keys": [{"name": d.quote(k), "k": f"k{i}", "type": d.render_column_type(article.info, by_name[k])}
                 for i, k in enumerate(article.info.primary_key)],
        # every column, as keys of a JSON object (an insert stamps them all with its version)
        "all_columns_json": json.dumps({c["name"]: 1 for c in columns}).replace("'", "''"),
    }
