"""Partition evaluation at sync time (SetupBelongs, seed 002): filtered publications with
``use_partition_groups = false`` keep no partition mappings; the download evaluates the membership of
the changes since the subscriptions' last sync, for all the partitions of the run in one pass per
article (the reads join the changed rows with the partitions being synced).

* **belongs**: a changed row of a filtered article that is in a partition of the run (an insert, an
  update that keeps it there or brings it in) goes to that partition's subscribers; so do the
  join-filter descendants of changed rows (their partition may have changed with their parent's), as
  ``REALIGN_GENERATION`` rows, applied in each subscriber's last batch, after their parents;
* **not belongs**: a changed row (or such a descendant) that is not in a partition of the run is
  removed from that partition's subscribers if they hold it (an update that moved it out, a
  subscriber's change out of its partition);
* deletes go to every subscriber of the run (who held the row is not known).

It costs more than precomputed partitions (every changed row is evaluated against every partition of
the run at every sync, and a subscriber receives a removal for every changed row outside its
partition), which ``bench/partitions.py`` measures.
"""

from __future__ import annotations

from sparksync.dialects.replica import Replica
from sparksync.filters import partition_column
from sparksync.merge.partitions.evaluation import PARTITION_ALIAS, SETTINGS, member_sql
from sparksync.merge.partitions.scheme import PartitionScheme
from sparksync.merge.session.changes import OP_REMOVE, REALIGN_GENERATION, REMOVE_GENERATION, change_read
from sparksync.merge.tracking import identity
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata.records import ArticleRow
from sparksync.spark.reads import ReadPartition


def _paths(scheme: PartitionScheme, name: str) -> list[list]:
    """Every chain of join filters from article ``name`` up to an ancestor: [(article, link), ...]."""
    out = []
    for link in scheme.articles[name].joins:
        out.append([(name, link)])
        out += [[(name, link), *rest] for rest in _paths(scheme, link.parent)]
    return out


def descendants_of_changes(replica: Replica, scheme: PartitionScheme, by_name: dict[str, ArticleRow], name: str,
                           lo: int, hi: int) -> str | None:
    """A query of the rowguids (column ``g``) of article ``name``'s rows with an ancestor (through join
    filters) changed in generations (lo, hi]; None when the article has no join filter."""

    d = replica.dialect
    sql = d.capabilities.sql
    contents = replica.meta("MSmerge_contents")
    selects = []
    for path in _paths(scheme, name):
        first = tracked_article(by_name[name])
        joins, here = [], "x0"
        for depth, (_, link) in enumerate(path, start=1):
            parent = tracked_article(by_name[link.parent])
            alias = f"x{depth}"
            joins.append(f"JOIN {identity.rows_sql(d, parent)} AS {alias} ON {link.filter.render(sql, here, alias)}")
            here, top = alias, parent
        selects.append(f"SELECT x0.{d.quote(first.rowguid_column)} AS g FROM {identity.rows_sql(d, first)} AS x0 "
                       + " ".join(joins) + f" JOIN {contents} ca ON ca.tablenick = {int(top.nickname)} "
                       f"AND ca.rowguid = {here}.{d.quote(top.rowguid_column)} "
                       f"WHERE ca.generation > {int(lo)} AND ca.generation <= {int(hi)}")
    return " UNION ".join(selects) if selects else None


def belongs_reads(url: str, label: str, replica: Replica, scheme: PartitionScheme, a: ArticleRow,
                  by_name: dict[str, ArticleRow], base: dict, ids: str, lo: int, hi: int) -> list[ReadPartition]:
    """The rows of filtered article ``a`` that belong to the partitions ``ids`` of the run: its changes
    in (lo, hi], and the descendants of changed rows (under ``REALIGN_GENERATION``)."""
    d, art = replica.dialect, tracked_article(a)
    contents, groups = replica.meta("MSmerge_contents"), replica.meta("MSmerge_partition_groups")
    params = {k: partition_column(PARTITION_ALIAS, k) for k in SETTINGS}
    joined = scheme.with_partitions(d, a.name, "m", groups, PARTITION_ALIAS, params)
    distinct = "" if joined.unique else "DISTINCT "
    cols = [[c.name, c.type.to_dict()] for c in art.info.columns]
    select = ", ".join(f"m.{d.quote(c.name)}" for c in art.info.columns)
    rg = f"m.{d.quote(art.rowguid_column)}"
    base = {**base, "op": "upsert", "partitioned": True}
    out = [change_read(
        url, f"SELECT {distinct}c.generation, c.rowguid, c.lineage, c.colv, {PARTITION_ALIAS}.partition_id, "
        + ", ".join(identity.column_sql(d, art, "m", c.name) for c in art.info.columns)
        + f" FROM {contents} c {identity.join_rows(d, art, 'm', 'c.rowguid')} {joined.joins} "
        f"WHERE c.tablenick = {int(art.nickname)} AND c.generation > {int(lo)} AND c.generation <= {int(hi)} "
        f"AND {PARTITION_ALIAS}.partition_id IN ({ids})", [], cols, f"{label}/{a.name} belongs", base)]
    below = descendants_of_changes(replica, scheme, by_name, a.name, lo, hi)
    if below is not None:
        out.append(change_read(
            url, f"SELECT {distinct}0, {rg}, coalesce(c.lineage, {d.json_literal('{}')}), c.colv, "
            f"{PARTITION_ALIAS}.partition_id, {select} FROM {identity.rows_sql(d, art)} AS m "
            f"LEFT JOIN {contents} c ON c.tablenick = {int(art.nickname)} AND c.rowguid = {rg} {joined.joins} "
            f"WHERE {rg} IN ({below}) AND {PARTITION_ALIAS}.partition_id IN ({ids})", [], cols,
            f"{label}/{a.name} realigned", {**base, "generation": REALIGN_GENERATION}))
    return out


def not_belongs_read(url: str, label: str, replica: Replica, scheme: PartitionScheme, a: ArticleRow,
                     by_name: dict[str, ArticleRow], base: dict, ids: str, lo: int, hi: int) -> ReadPartition:
    """Removals: each changed row of filtered article ``a`` (or descendant of one) that is not in a
    partition of the run, for that partition (removed where a subscriber of it holds the row)."""
    art = tracked_article(a)
    contents, groups = replica.meta("MSmerge_contents"), replica.meta("MSmerge_partition_groups")
    changed = (f"SELECT c.rowguid AS g FROM {contents} c WHERE c.tablenick = {int(art.nickname)} "
               f"AND c.generation > {int(lo)} AND c.generation <= {int(hi)}")
    below = descendants_of_changes(replica, scheme, by_name, a.name, lo, hi)
    rows = changed + (f" UNION {below}" if below else "")
    return change_read(
        url, f"SELECT DISTINCT 0, x.g, '{{}}', NULL, pgr.partition_id FROM ({rows}) AS x CROSS JOIN {groups} pgr "
        f"WHERE pgr.partition_id IN ({ids}) AND NOT {member_sql(replica, scheme, a, 'x.g', 'pgr.partition_id')}",
        [], [], f"{label}/{a.name} not belongs",
        {**base, "op": OP_REMOVE, "generation": REMOVE_GENERATION, "partitioned": True})
