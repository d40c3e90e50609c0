"""A tracked article: what its triggers and their flush need to know (:class:`TrackedArticle`, read
from its ``sysmergearticles`` row by :func:`tracked_article`), and the context both are rendered with
(:func:`trigger_context`).

Installing the triggers is ``articles.py``'s, flushing what they log ``pending.py``'s; both read the
article from here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
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

    @property
    def trigger_id(self) -> str:
        return self.artid.replace("-", "").upper()


def tracked_article(row: ArticleRow) -> TrackedArticle:
    return TrackedArticle(row.artid, TableName(row.source_schema, row.source_table), row.nickname,
                          row.rowguid_column, bool(row.column_tracking), from_table_dict(row.table_schema))


def trigger_context(replica: Replica, article: TrackedArticle, replica_nickname: int) -> dict[str, Any]:
    d = replica.dialect
    columns = [{"name": c.name, "type": c.type} for c in article.info.columns if c.name != article.rowguid_column]
    for pos, c in enumerate(columns, 1):
        c["pos"] = pos                       # a column's place in a column-tracked update's mask
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
        # every column, as keys of a JSON object (an insert stamps them all with its version)
        "all_columns_json": json.dumps({c["name"]: 1 for c in columns}).replace("'", "''"),
    }
