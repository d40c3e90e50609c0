"""Partition membership of filtered merge articles (seed 002): which rows of each article belong to a
subscription's partition, as one SQL condition per article, evaluated where the rows are.

A row of an article with a row filter belongs to the partition of every parameter set (``host_name``,
``login``) for which the filter keeps it. A row of a join-filtered article belongs to every partition
that a parent row it joins (by any of its join filters) belongs to: the union, through chains of any
length (Orders -> Customer -> SalesPerson). An article with neither is not filtered: every row belongs
to every partition. An article with both belongs where either says so.

``PartitionScheme.condition`` renders that rule for one article as a condition over a table alias
(nested ``EXISTS`` up the join chain), so that one query can ask "which rows of this article belong
to this partition" at the publisher (partitioned snapshots, SetupBelongs, the leak checks of the
tests) on either database.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sparksync.dialects.model import Column, TableInfo, from_table_dict
from sparksync.dialects.protocols import Dialect
from sparksync.filters import FilterError, JoinFilter, Params, RowFilter, parse_filter, parse_join_filter
from sparksync.metadata.records import ArticleRow
from sparksync.names import TableName
from sparksync.types import Kind


@dataclass(frozen=True)
class JoinLink:
    """One join filter of a child article: its parent article and the clause relating them.
    ``unique_key``: the join is on the parent's unique key (SQL Server's ``@join_unique_key``)."""

    parent: str
    filter: JoinFilter
    unique_key: bool = False


@dataclass(frozen=True)
class Chain:
    """A partition rule as joins: ``joins`` (to write after the article's table), ``where`` (the root's
    row filter), ``unique``: each row comes out once (every join on its parent's unique key)."""

    joins: str
    where: str
    unique: bool


@dataclass(frozen=True)
class FilteredArticle:
    """What partition evaluation needs of one article of a merge publication."""

    name: str
    table: TableName
    columns: tuple[Column, ...]
    row_filter: RowFilter | None = None
    joins: tuple[JoinLink, ...] = ()

    @property
    def filtered(self) -> bool:
        return self.row_filter is not None or bool(self.joins)


class PartitionScheme:
    """The filters of one publication's articles: checked once (every parent is an article of the
    publication; join filters form no cycle), then rendered per article and partition."""

    def __init__(self, articles: Iterable[FilteredArticle]):
        self.articles = {a.name: a for a in articles}
        for a in self.articles.values():
            for link in a.joins:
                if link.parent not in self.articles:
                    raise FilterError(f"article {a.name}: join filter parent {link.parent} is not an article of "
                                      "the publication", obj=a.name)
        for name in self.articles:
            self._check_acyclic(name, ())

    def _check_acyclic(self, name: str, path: tuple[str, ...]) -> None:
        if name in path:
            cycle = " -> ".join((*path[path.index(name):], name))
            raise FilterError(f"join filters form a cycle: {cycle}", obj=name)
        for link in self.articles[name].joins:
            self._check_acyclic(link.parent, (*path, name))

    def parameters(self, name: str) -> frozenset[str]:
        """The subscription settings (``host_name``, ``login``) the article's partition depends on."""
        a = self.articles[name]
        own = a.row_filter.parameters if a.row_filter is not None else frozenset()
        return own.union(*(self.parameters(link.parent) for link in a.joins))

    @property
    def filtered(self) -> bool:
        return any(a.filtered for a in self.articles.values())

    def condition(self, dialect: Dialect, name: str, alias: str, params: Params) -> str | None:
        """SQL that is true for the rows (table alias ``alias``) of article ``name`` that belong to the
        partition of ``params``; None when the article is not filtered (every row belongs)."""
        a = self.articles[name]
        if not a.filtered:
            return None
        sql = dialect.capabilities.sql
        parts = []
        if a.row_filter is not None:
            booleans = [c.name for c in a.columns if c.type.kind is Kind.BOOLEAN]
            parts.append("(" + a.row_filter.render(sql, row=alias, booleans=booleans, params=params) + ")")
        for i, link in enumerate(a.joins):
            parent = self.articles[link.parent]
            palias = f"{alias}_{i}"
            inner = self.condition(dialect, link.parent, palias, params)
            where = link.filter.render(sql, alias, palias) + (f" AND {inner}" if inner else "")
            parts.append(f"EXISTS (SELECT 1 FROM {dialect.table_sql(parent.table)} AS {palias} WHERE {where})")
        return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"

    def chain(self, dialect: Dialect, name: str, alias: str, params: Params) -> Chain | None:
        """The same rule as ``condition`` as joins, when the article's filters are one chain (each article
        of it has one join filter, up to one with only a row filter). Joined with a partitions table (the
        parameters as its columns) this finds the partitions of many rows in one pass, where
        ``condition`` is evaluated for every (row, partition) pair. None when the filters are not one
        chain."""
        sql = dialect.capabilities.sql
        joins: list[str] = []
        a, here, depth, unique = self.articles[name], alias, 0, True
        while True:
            if a.row_filter is not None and not a.joins:
                booleans = [c.name for c in a.columns if c.type.kind is Kind.BOOLEAN]
                return Chain(" ".join(joins), a.row_filter.render(sql, row=here, booleans=booleans, params=params),
                             unique)
            if a.row_filter is not None or len(a.joins) != 1:
                return None
            link = a.joins[0]
            parent = self.articles[link.parent]
            if not parent.filtered:
                return None
            depth += 1
            parent_alias = f"{alias}_{depth}"
            joins.append(f"JOIN {dialect.table_sql(parent.table)} AS {parent_alias} "
                         f"ON {link.filter.render(sql, here, parent_alias)}")
            unique = unique and link.unique_key
            a, here = parent, parent_alias

    def with_partitions(self, dialect: Dialect, name: str, alias: str, groups: str, pg: str, params: Params) -> Chain:
        """Rows ``alias`` of article ``name`` joined to the partitions (rows ``pg`` of the partitions table
        ``groups``) they belong to: the ``JOIN``s to write after the article's table, and whether each
        (row, partition) comes out once (else select DISTINCT)."""
        chain = self.chain(dialect, name, alias, params)
        if chain is not None:
            return Chain(f"{chain.joins} JOIN {groups} AS {pg} ON {chain.where}", "", chain.unique)
        return Chain(f"JOIN {groups} AS {pg} ON {self.condition(dialect, name, alias, params)}", "", True)

    def members_sql(self, dialect: Dialect, name: str, columns: Iterable[str],
                    params: Params, rows: str | None = None) -> str:
        """A query of ``columns`` of the rows of article ``name`` in the partition of ``params`` (``rows``: the
        relation its rows are read from, with their rowguids: ``identity.rows_sql``; else its table)."""
        a = self.articles[name]
        cond = self.condition(dialect, name, "m", params)
        select = ", ".join(f"m.{dialect.quote(c)}" for c in columns)
        return f"SELECT {select} FROM {rows or dialect.table_sql(a.table)} AS m" + (f" WHERE {cond}" if cond else "")


def filtered_article(key: str, table: TableName, info: TableInfo, filter_clause: str | None,
                     join_filters: list[dict] | None, infos: dict[str, TableInfo] | None = None) -> FilteredArticle:
    """An article's filters, parsed from their stored form (``sysmergearticles.filter_clause`` and
    ``join_filters``); ``infos``: the publication's tables by article key, for the join filters' parents
    (a parent's columns are not checked when it is missing: the scheme reports the unknown parent)."""
    columns = [c.name for c in info.columns]
    row_filter = parse_filter(filter_clause, columns, key, parameters=True) if filter_clause else None
    links = []
    for j in join_filters or []:
        parent = (infos or {}).get(j["parent"])
        parent_columns = [c.name for c in parent.columns] if parent is not None else []
        links.append(JoinLink(j["parent"], parse_join_filter(j["clause"], key, columns, j["parent"], parent_columns,
                                                             key), bool(j.get("unique_key"))))
    return FilteredArticle(key, table, tuple(info.columns), row_filter, tuple(links))


def scheme_of(articles: list[ArticleRow]) -> PartitionScheme:
    """The partition scheme of a publication from its ``sysmergearticles`` rows (``published_articles``)."""
    infos = {a.name: from_table_dict(a.table_schema) for a in articles}
    return PartitionScheme(filtered_article(a.name, TableName(a.source_schema, a.source_table),
                                            infos[a.name], a.filter_clause, a.join_filters, infos)
                           for a in articles)
