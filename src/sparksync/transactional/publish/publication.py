"""Publishing a transactional publication: validate every article, then set up capture at the
publisher and the publication's definition at the distributor.

Validation reads everything first and raises one error listing every problem (an unknown table or
column, no primary key, a primary key column left out of ``columns``, a malformed row filter, a
server without logical decoding, a table that changed since it was published), so bad input changes
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sparksync.config import PublicationConfig, Topology
from sparksync.dialects.base import table_not_found
from sparksync.dialects.model import TableInfo, describe_drift, from_table_dict, to_table_dict
from sparksync.dialects.replica import Replica
from sparksync.errors import InvalidNameError, SchemaDrift, SchemaError, SparksyncError
from sparksync.filters import FilterError, RowFilter, parse_filter
from sparksync.metadata import store
from sparksync.metadata.records import ArticleStatus, DistArticleRow, DistPublicationRow
from sparksync.names import TableName, check_identifier
from sparksync.transactional.articles import TxArticle
from sparksync.transactional.capture import capture_method
from sparksync.transactional.distribution import database as dst


@dataclass
class TxPublicationPlan:
    config: PublicationConfig
    articles: list[TxArticle] = field(default_factory=list)
    existing: dst.Publication | None = None


def published_table(info: TableInfo, columns: list[str] | None, where: str) -> TableInfo:
    """The table as published: the configured columns (all by default), in the table's order."""
    if columns is None:
        return info
    wanted = []
    for c in columns:
        col = info.column(c)
        if col is None:
            raise SchemaError(f"{where}: column {c} does not exist (columns = {columns})")
        wanted.append(col.name)
    missing = [k for k in info.primary_key if k not in wanted]
    if missing:
        raise SchemaError(f"{where}: columns must include the primary key ({', '.join(missing)} is missing)")
    keep = set(wanted)
    fks = tuple(fk for fk in info.foreign_keys if set(fk.columns) <= keep)
    return replace(info, columns=tuple(c for c in info.columns if c.name in keep), foreign_keys=fks,
                   unique_columns=frozenset(u for u in info.unique_columns if u in keep))


def plan_transactional(replica: Replica, dist: Replica | None, pub: PublicationConfig) -> TxPublicationPlan:
    """Reflect and check every article. Changes nothing. Raises one error listing all problems."""
    d = replica.dialect
    plan = TxPublicationPlan(pub)
    if dist is not None and store.table_set_version(dist, dst.DISTRIBUTION) is not None:
        plan.existing = dst.publication(dist, pub.name)
    existing = {a.name: a for a in (plan.existing.articles if plan.existing else [])}
    next_id = max([a.article_id for a in existing.values()] + [0]) + 1
    problems: list[str] = []
    problems += capture_method(replica).problems(replica, any(a.filter for a in pub.articles))
    keys = {str(d.resolve_name(a.table_name)) for a in pub.articles}
    for a in pub.articles:
        try:
            name = d.resolve_name(a.table_name)
            where = f"publication {pub.name}, article {name}"
            info = replica.reflect(name)
            if info is None:
                raise table_not_found(replica, a.table_name, pub.name)
            for c in info.columns:
                check_identifier(c.name, f"column name in {name}")
            if not info.primary_key:
                raise SchemaError(f"{where}: table has no primary key; a transactional article needs one", obj=str(name))
            published = published_table(info, a.columns, where)
            generated = [c.name for c in published.columns if c.generated]
            if generated:
                raise SchemaError(f"{where}: column {', '.join(generated)} is generated (GENERATED ALWAYS AS): the "
                                  "server's log does not carry generated values, so it would arrive as NULL; leave it "
                                  "out with columns = [...] (and compute it at the subscriber)", obj=str(name))
            published = replace(published, foreign_keys=tuple(
                fk for fk in published.foreign_keys if str(d.resolve_name(fk.ref_table)) in keys))
            row_filter = parse_filter(a.filter, [c.name for c in published.columns], where) if a.filter else None
            if row_filter is not None:
                _check_filter(replica, name, published, row_filter, where)
            key = str(name)
            old = existing.get(key)
            if old is not None:
                drift = describe_drift(from_table_dict(old.table_schema), published)
                if drift:
                    raise SchemaDrift(f"{where}: the table changed since it was published: " + "; ".join(drift)
                                      + ". Use 'sparksync schema-change' to change a published table", obj=str(name))
                if (old.filter or None) != (a.filter or None):
                    raise SchemaError(f"{where}: the row filter changed since it was published ({old.filter!r} -> "
                                      f"{a.filter!r}); subscribers hold rows of the old filter: drop the "
                                      "subscriptions' databases or tables and set them up again", obj=str(name))
                article_id = old.article_id
            else:
                article_id, next_id = next_id, next_id + 1
            plan.articles.append(TxArticle(article_id, key, name, published, row_filter, a))
        except (SchemaError, InvalidNameError, FilterError) as e:
            problems.append(e.message)
    if problems:
        raise SchemaError(f"publication {pub.name} cannot be published:\n" + "\n".join(f"  - {p}" for p in problems),
                          obj=pub.name)
    return plan


def _check_filter(replica: Replica, name: TableName, info: TableInfo, f: RowFilter, where: str) -> None:
    """Run the filter once against the table: a type error shows now, not in the first sync."""
    d = replica.dialect
    try:
        replica.query(f"SELECT 1 FROM {d.table_sql(name)} WHERE {f.sql_for(d.capabilities.sql, info.columns)} LIMIT 1")
    except SparksyncError as e:
        raise FilterError(f"{where}: filter {f.text!r} does not run: {e.message.split(': ', 1)[-1]}", obj=where) \
            from None


def apply_transactional(replica: Replica, dist: Replica, topology: Topology, plan: TxPublicationPlan) -> dst.Publication:
    """Set up capture at the publisher and record the publication at the distributor. Idempotent."""
    d = replica.dialect
    pub = plan.config
    slot, pgpub = capture_method(replica).install(replica, pub.name, plan.articles)
    with dist.transaction():
        store.install_table_set(dist, dst.DISTRIBUTION)
        existing = dst.publication(dist, pub.name)
        if existing is None:
            publication_id = store.new_guid()
            store.insert(dist, DistPublicationRow(
                publication_id=publication_id, name=pub.name, publisher=topology.publisher.name,
                publisher_db=replica.label, source=d.capabilities.name, slot=slot, pg_publication=pgpub,
                logreader_seqno=None, logreader_time=None, created_at=store.utcnow()))
        else:
            publication_id = existing.publication_id
            store.update(dist, DistPublicationRow, {"publisher": topology.publisher.name, "slot": slot,
                                                    "pg_publication": pgpub}, {"publication_id": publication_id})
        known = {a.article_id for a in (existing.articles if existing else [])}
        for a in plan.articles:
            row = DistArticleRow(publication_id=publication_id, article_id=a.article_id, name=a.key,
                                 source_schema=a.name.schema, source_table=a.name.name,
                                 table_schema=to_table_dict(a.published), filter=a.config.filter,
                                 ins_cmd=a.config.ins_cmd, upd_cmd=a.config.upd_cmd, del_cmd=a.config.del_cmd,
                                 status=ArticleStatus.ACTIVE)
            if a.article_id in known:
                key = {"publication_id": publication_id, "article_id": a.article_id}
                store.update(dist, DistArticleRow, {c: v for c, v in row.to_dict().items() if c not in key}, key)
            else:
                store.insert(dist, row)
        for article_id in known - {a.article_id for a in plan.articles}:
            store.update(dist, DistArticleRow, {"status": ArticleStatus.INACTIVE},
                         {"publication_id": publication_id, "article_id": article_id})
    return dst.require_publication(dist, pub.name)


