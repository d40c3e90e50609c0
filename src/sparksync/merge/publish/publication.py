"""Publishing a merge publication at the publisher: validate, then add rowguids, metadata and triggers.

Validation reads everything first and raises one error listing every problem; only when all articles
are usable does one transaction change the database, so bad input changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparksync.config import PublicationConfig, Topology
from sparksync.dialects.base import table_not_found
from sparksync.dialects.model import Column, TableInfo, from_table_dict, to_table_dict
from sparksync.dialects.replica import Replica
from sparksync.errors import InvalidNameError, SchemaDrift, SchemaError
from sparksync.filters import FilterError, parse_filter, parse_join_filter
from sparksync.merge.partitions.scheme import PartitionScheme, filtered_article
from sparksync.merge.publish import processing_order as art
from sparksync.merge.publish.schema_changes import change_command, check_added_values, describe, drifted, plan_changes
from sparksync.merge.publish.schema_changes import record as record_schema_changes
from sparksync.merge.tracking import identity, pending
from sparksync.merge.tracking.articles import install_tracking, remove_tracking
from sparksync.merge.tracking.identity import with_rowguid
from sparksync.merge.tracking.open_generation import ensure_open_generation
from sparksync.merge.tracking.tracked import TrackedArticle, tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import (
    ArticleRow,
    ArticleStatus,
    PartitionOptions,
    PublicationKind,
    PublicationRow,
    Role,
    SubscriptionRow,
)
from sparksync.names import TableName, check_identifier
from sparksync.types import Kind, SqlType

PUBLISHER_NICKNAME = 1
DEFAULT_ROWGUID = "rowguid"


@dataclass
class ArticlePlan:
    key: str                      # resolved "schema.table" (or "table" on SQLite)
    name: TableName
    info: TableInfo               # as it will be once published (with the rowguid column)
    rowguid_column: str
    rowguid_action: str           # "add" | "adopt" | "keep"
    column_tracking: bool
    parents: list[str]
    existing: ArticleRow | None = None
    filter_clause: str | None = None          # row filter (filtered publications, seed 002)
    join_filters: list[dict] = field(default_factory=list)   # [{parent (article key), clause, unique_key}]
    partition_options: int = 0
    schema_changes: list[dict] = field(default_factory=list)  # columns added or dropped since it was published
    keyed: bool = False           # the rowguid kept beside the table, not added to it (merge/tracking/identity.py)

    @property
    def join_parents(self) -> list[str]:
        return [j["parent"] for j in self.join_filters]


@dataclass
class PublicationPlan:
    config: PublicationConfig
    articles: list[ArticlePlan] = field(default_factory=list)
    existing: PublicationRow | None = None


def _guid_like(replica: Replica, c: Column) -> bool:
    return c.type.kind is Kind.UUID or (not replica.dialect.capabilities.supports_schemas and c.type.kind is Kind.TEXT)


def _choose_rowguid(replica: Replica, info: TableInfo, configured: str | None, where: str) -> tuple[str, str]:
    if configured:
        col = info.column(configured)
        if col is None:
            raise SchemaError(f"{where}: rowguid_column {configured!r} does not exist")
        if not _guid_like(replica, col) or col.name not in info.unique_columns:
            raise SchemaError(f"{where}: rowguid_column {col.name!r} must be a unique GUID column")
        return col.name, "adopt"
    existing = info.column(DEFAULT_ROWGUID)
    if existing is not None:
        if not _guid_like(replica, existing) or existing.name not in info.unique_columns:
            raise SchemaError(f"{where}: has a column {existing.name!r} that is not a unique GUID; set rowguid_column "
                              "or rename it")
        return existing.name, "adopt"
    guids = [c for c in info.columns if c.type.kind is Kind.UUID and c.name in info.unique_columns]
    if len(guids) == 1:
        return guids[0].name, "adopt"
    return DEFAULT_ROWGUID, "add"


def plan_publication(replica: Replica, pub: PublicationConfig, declared: dict[str, list[dict]] | None = None
                     ) -> PublicationPlan:
    """Reflect and validate every article of ``pub``. Changes nothing. Raises one error listing all problems.
    ``declared``: per article, the renames and alterations ``schema-change`` is making (``schema_changes.py``)."""
    d = replica.dialect
    plan = PublicationPlan(pub)
    problems: list[str] = []
    metadata_present = store.metadata_version(replica) is not None
    if metadata_present:
        plan.existing = store.select_one(replica, PublicationRow, {"name": pub.name})
    existing_articles: dict[str, ArticleRow] = {}
    if metadata_present:
        for r in store.select(replica, ArticleRow):
            key = str(TableName(r.source_schema, r.source_table))
            if plan.existing is not None and r.pubid == plan.existing.pubid:
                existing_articles[key] = r
            else:
                existing_articles.setdefault(key, r)
    infos: dict[str, TableInfo] = {}
    for a in pub.articles:
        try:
            name = d.resolve_name(a.table_name)
            info = replica.reflect(name)
            if info is None:
                raise table_not_found(replica, a.table_name, pub.name)
            where = f"publication {pub.name}, article {name}"
            for c in info.columns:
                check_identifier(c.name, f"column name in {name}")
            if not info.primary_key:
                raise SchemaError(f"{where}: table has no primary key; a merge article needs one", obj=str(name))
            generated = [c.name for c in info.columns if c.generated]
            if generated:
                raise SchemaError(f"{where}: column {', '.join(generated)} is generated (GENERATED ALWAYS AS); merge "
                                  "articles cannot have generated columns (every replica writes every column): make "
                                  "it a plain column, or compute it in a view", obj=str(name))
            key = str(name)
            existing = existing_articles.get(key)
            if existing is not None and existing.rowguid_keyed:     # the table as published: with its rowguid
                info = with_rowguid(info, existing.rowguid_column, from_table_dict(existing.table_schema))
            rg, action = _choose_rowguid(replica, info, a.rowguid_column, where)
            keyed = action == "add" and d.capabilities.keyed_rowguids
            changes: list[dict] = []
            if existing is not None:
                published = from_table_dict(existing.table_schema)
                if drifted(published, info, existing) or (declared or {}).get(key):
                    if plan.existing is None or existing.pubid != plan.existing.pubid:
                        raise SchemaDrift(f"{where}: the table changed since another publication published it; "
                                          "run setup for that publication's configuration first", obj=str(name))
                    siblings = [r for r in existing_articles.values() if r.pubid == existing.pubid]
                    changes = plan_changes(published, info, existing, siblings, d, where, pub.name,
                                           (declared or {}).get(key, []))
                    check_added_values(replica, name, changes, where, change_command(pub.name, key))
                rg, action, keyed = existing.rowguid_column, "keep", bool(existing.rowguid_keyed)
                if bool(existing.column_tracking) != a.column_tracking:
                    same = plan.existing is not None and existing.pubid == plan.existing.pubid
                    raise SchemaError(f"{where}: column_tracking cannot change after publishing "
                                      "(reinitialize the publication)" if same else
                                      f"{where}: the table is already published with column_tracking = "
                                      f"{str(bool(existing.column_tracking)).lower()}; a table has one change "
                                      "tracking in every publication", obj=str(name))
            if action == "add":
                info = TableInfo(info.name, info.columns + (Column(rg, SqlType(Kind.UUID), False),),
                                 info.primary_key, info.foreign_keys, info.unique_columns | {rg})
            infos[key] = info
            plan.articles.append(ArticlePlan(key, name, info, rg, action, a.column_tracking, [], existing,
                                             schema_changes=changes, keyed=keyed))
        except (SchemaError, InvalidNameError) as e:
            problems.append(e.message)
    if not problems:
        problems += _plan_filters(replica, plan)
    if problems:
        raise SchemaError(f"publication {pub.name} cannot be published:\n" + "\n".join(f"  - {p}" for p in problems),
                          obj=pub.name)
    for p in plan.articles:
        p.parents = [str(d.resolve_name(fk.ref_table)) for fk in p.info.foreign_keys
                     if str(d.resolve_name(fk.ref_table)) in infos]
    return plan


def _plan_filters(replica: Replica, plan: PublicationPlan) -> list[str]:
    """Parse and check each article's row filter and join filters against the reflected tables (every
    problem, each naming its article); a published article's filters cannot change (reinitialize)."""
    d = replica.dialect
    problems: list[str] = []
    by_key = {a.key: a for a in plan.articles}
    key_of = {}
    for cfg, a in zip(plan.config.articles, plan.articles):
        key_of[cfg.table.lower()] = a.key
        key_of[a.key.lower()] = a.key
    for cfg, a in zip(plan.config.articles, plan.articles):
        where = f"publication {plan.config.name}, article {a.key}"
        columns = [c.name for c in a.info.columns]
        try:
            if cfg.filter is not None:
                parse_filter(cfg.filter, columns, where, parameters=True)
                a.filter_clause = cfg.filter
            for j in cfg.join_filters:
                parent_key = (key_of.get(j.parent.lower())
                              or key_of.get(str(d.resolve_name(TableName.parse(j.parent))).lower()))
                if parent_key is None:
                    raise FilterError(f"{where}: join filter parent {j.parent} is not an article of the publication",
                                      obj=a.key)
                parent = by_key[parent_key]
                jf = parse_join_filter(j.clause, cfg.table, columns, j.parent, [c.name for c in parent.info.columns],
                                       where)
                if j.unique_key and not _joins_unique_key(jf, parent.info):
                    raise FilterError(f"{where}: join filter {j.clause!r} has unique_key = true but does not join "
                                      f"on {parent.key}'s primary key ({', '.join(parent.info.primary_key)}) with "
                                      "equalities only", obj=a.key)
                a.join_filters.append({"parent": parent_key, "clause": j.clause, "unique_key": j.unique_key})
            a.partition_options = cfg.partition_options
            if cfg.partition_options and cfg.filter is None and not cfg.join_filters:
                raise FilterError(f"{where}: partition_options = {cfg.partition_options} is for a filtered article "
                                  "(give it a filter or join_filters, or leave partition_options out)", obj=a.key)
            if a.existing is not None and plan.existing is not None and a.existing.pubid == plan.existing.pubid and (
                    (a.existing.filter_clause, a.existing.join_filters or [])
                    != (a.filter_clause, a.join_filters)):
                raise FilterError(f"{where}: its filters differ from the ones it was published with; filters cannot "
                                  "change after publishing (reinitialize the publication)", obj=a.key)
        except FilterError as e:
            problems.append(e.message)
    if plan.existing is not None and plan.existing.precomputed != plan.config.use_partition_groups:
        problems.append(f"publication {plan.config.name}: use_partition_groups cannot change after publishing "
                        "(reinitialize the publication)")
    if not problems:
        try:
            scheme_of_plan(plan)            # every parent an article, no cycle
        except FilterError as e:
            problems.append(f"publication {plan.config.name}: {e.message}")
    return problems


def _joins_unique_key(jf, parent: TableInfo) -> bool:
    return bool(jf.pairs) and {p for _, p in jf.pairs} == set(parent.primary_key)


def scheme_of_plan(plan: PublicationPlan) -> PartitionScheme:
    """The partition scheme of a planned publication (checks parents and cycles)."""
    infos = {a.key: a.info for a in plan.articles}
    return PartitionScheme(filtered_article(a.key, a.name, a.info, a.filter_clause, a.join_filters, infos)
                           for a in plan.articles)


def apply_publication(replica: Replica, topology: Topology, plan: PublicationPlan) -> dict:
    """Create or refresh the publication's metadata, rowguids and triggers. Inside a transaction."""
    d = replica.dialect
    pub = plan.config
    ident = store.set_replica_identity(replica, nickname=PUBLISHER_NICKNAME, name=topology.publisher.name,
                                       role=Role.PUBLISHER)
    ensure_open_generation(replica, ident.nickname)
    pending.flush(replica)      # logged by the triggers as they are, before any is re-created
    if plan.existing is None:
        pubid = store.new_guid()
        store.insert(replica, PublicationRow(
            pubid=pubid, name=pub.name, kind=PublicationKind(pub.kind), publisher=topology.publisher.name,
            generation_leveling_threshold=pub.generation_leveling_threshold, retention=pub.retention,
            snapshot_generation=None, snapshot_time=None, snapshot_dir=None, created_at=store.utcnow(),
            use_partition_groups=int(pub.use_partition_groups)))
    else:
        pubid = plan.existing.pubid
        store.update(replica, PublicationRow, {
            "generation_leveling_threshold": pub.generation_leveling_threshold, "retention": pub.retention},
            {"pubid": pubid})
    if store.select_one(replica, SubscriptionRow, {"pubid": pubid, "role": Role.PUBLISHER}) is None:
        store.insert(replica, SubscriptionRow.for_publisher(
            subid=store.new_guid(), pubid=pubid, name=topology.publisher.name, replica_id=ident.replica_id,
            replnickname=ident.nickname, database_label=replica.label, created_at=store.utcnow()))

    # Nicknames follow DRI; a table published before keeps its nickname (also across publications), and
    # a nickname names one table in the database: the tracking metadata of every publication is keyed by it
    known = {str(TableName(r.source_schema, r.source_table)): r.nickname
             for r in store.select(replica, ArticleRow)}
    keys = [a.key for a in plan.articles]
    parents_of = {a.key: a.parents for a in plan.articles}
    # a join filter's parent is evaluated (and applied) before its children, like a foreign key's
    ordered = {a.key: list(dict.fromkeys(a.parents + a.join_parents)) for a in plan.articles}
    nicknames = art.assign_nicknames(keys, ordered, known)
    groups = art.processing_groups(parents_of, [a.key for a in plan.articles if a.join_filters]
                                   + [p for a in plan.articles for p in a.join_parents])
    related = art.related_articles(parents_of)
    created: list[str] = []
    schema_changes: list[str] = []
    for a in plan.articles:
        same_pub = a.existing is not None and a.existing.pubid == pubid
        artid = a.existing.artid if a.existing is not None else store.new_guid()
        tracked = TrackedArticle(artid, a.name, nicknames[a.key], a.rowguid_column, a.column_tracking, a.info,
                                 a.keyed)
        if a.keyed:
            if a.rowguid_action == "add":
                identity.keep_rowguids(replica, tracked)
        elif a.rowguid_action == "add":
            d.add_rowguid_column(replica, a.name, a.rowguid_column)
        elif a.rowguid_action == "adopt":
            d.adopt_rowguid_column(replica, a.name, a.rowguid_column)
        if not a.keyed and not d.index_exists(replica, a.name.schema, d.rowguid_index_name(a.name, a.rowguid_column)):
            replica.execute(d.render_rowguid_index(a.name, a.rowguid_column))
        row = ArticleRow(
            pubid=pubid, artid=artid, name=a.key, source_schema=a.name.schema, source_table=a.name.name,
            nickname=nicknames[a.key], column_tracking=int(a.column_tracking),
            rowguid_column=a.rowguid_column,
            rowguid_added=int(a.rowguid_action == "add" or bool(a.existing and a.existing.rowguid_added)),
            processing_group=groups[a.key], dri_related=int(bool(related[a.key])),
            related_nicknames=sorted(nicknames[k] for k in related[a.key]),
            table_schema=to_table_dict(a.info), status=ArticleStatus.ACTIVE,
            filter_clause=a.filter_clause, join_filters=a.join_filters or None,
            partition_options=PartitionOptions(a.partition_options), rowguid_keyed=int(a.keyed),
        )
        if same_pub:
            key = {"pubid": pubid, "artid": artid}
            store.update(replica, ArticleRow, {c: v for c, v in row.to_dict().items() if c not in key}, key)
            if a.schema_changes:
                version = record_schema_changes(replica, pubid, pub.name, row, a.schema_changes, a.info)
                schema_changes.append(f"{a.key}: " + ", ".join(describe(c) for c in a.schema_changes)
                                      + f" (schema version {version})")
        else:
            store.insert(replica, row)
            created.append(a.key)
        install_tracking(replica, tracked, ident.nickname)
    gone = [r for r in store.select(replica, ArticleRow, {"pubid": pubid})
            if str(TableName(r.source_schema, r.source_table)) not in set(keys)]
    removed = remove_articles(replica, pubid, gone)
    return {"pubid": pubid, "created_articles": created, "removed_articles": removed, "nicknames": nicknames,
            "schema_changes": schema_changes}


def remove_articles(replica: Replica, pubid: str, rows: list[ArticleRow]) -> list[str]:
    """Articles (their ``sysmergearticles`` rows) dropped from a publication at one replica, inside a
    transaction: their rows there, and, when no other publication has the table, its tracking
    triggers and merge metadata. The tables stay. Returns their names."""
    if rows:
        pending.flush(replica)          # the other articles' logged changes are recorded first
    for r in rows:
        store.delete(replica, ArticleRow, {"pubid": pubid, "artid": r.artid})
        if store.select(replica, ArticleRow, {"source_schema": r.source_schema, "source_table": r.source_table}):
            continue
        remove_tracking(replica, tracked_article(r))
        if r.rowguid_keyed:
            identity.drop_rowguids(replica, tracked_article(r))
        for table in ("MSmerge_contents", "MSmerge_tombstone", "MSmerge_current_partition_mappings",
                      "MSmerge_past_partition_mappings", "MSmerge_failed_changes"):
            replica.execute(f"DELETE FROM {replica.meta(table)} WHERE tablenick = {r.nickname}")
    return [r.name for r in rows]
