"""A transactional article as published: its table at the publisher, the published columns (the
vertical filter), the row filter (the horizontal filter) and its configuration (the commands that
carry it to subscribers).

Publishing (``publish/publication.py``) checks and makes them; the capture (``capture/``) is set up
for them. Both import it from here: the capture knows nothing of publishing.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparksync.config import ArticleConfig
from sparksync.dialects.model import TableInfo
from sparksync.filters import RowFilter
from sparksync.names import TableName


@dataclass
class TxArticle:
    article_id: int
    key: str                       # "Purchasing.Vendor" ("Vendor" on SQLite)
    name: TableName                # resolved at the publisher
    published: TableInfo           # the published columns, primary key, foreign keys to other articles
    filter: RowFilter | None
    config: ArticleConfig
