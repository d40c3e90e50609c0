"""Replication metadata tables, declared once and rendered per dialect.

SQL Server's names are kept so the seeds read as our documentation. PostgreSQL keeps them in the
``sparksync`` schema, lower-cased; SQLite keeps them next to the user tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..types import Kind, SqlType

SCHEMA_VERSION = 2   # 2: MSmerge_articlehistory.duration

INT = SqlType(Kind.INTEGER)
BIG = SqlType(Kind.BIGINT)
SMALL = SqlType(Kind.SMALLINT)
TEXT = SqlType(Kind.TEXT)
GUID = SqlType(Kind.UUID)
JSON = SqlType(Kind.JSON)
REAL = SqlType(Kind.DOUBLE)
TS = SqlType(Kind.TIMESTAMPTZ)


@dataclass(frozen=True)
class MetaColumn:
    name: str
    type: SqlType
    nullable: bool = True
    description: str = ""


@dataclass(frozen=True)
class MetaIndex:
    name: str
    columns: tuple[str, ...]
    unique: bool = False


@dataclass(frozen=True)
class MetaTable:
    name: str
    description: str
    columns: tuple[MetaColumn, ...]
    primary_key: tuple[str, ...]
    indexes: tuple[MetaIndex, ...] = ()


def C(name, type_, nullable=True, description=""):
    return MetaColumn(name, type_, nullable, description)


TABLES: tuple[MetaTable, ...] = (
    MetaTable(
        "sparksync_metadata_version",
        "One row: the version of this database's replication metadata, so later releases can migrate it.",
        (C("id", INT, False), C("version", INT, False), C("updated_at", TS, False)),
        ("id",),
    ),
    MetaTable(
        "MSmerge_replica",
        "One row: who this replica is (its nickname in the topology) and whether the merge agent is "
        "writing in the current transaction (SQLite; PostgreSQL uses a transaction-local setting).",
        (C("id", INT, False), C("replica_id", GUID, False), C("replnickname", INT, False),
         C("name", TEXT, False), C("role", TEXT, False, "publisher | subscriber"),
         C("applying", SMALL, False, "1 while the merge agent writes rows that carry their own lineage")),
        ("id",),
    ),
    MetaTable(
        "sysmergepublications",
        "One row per merge publication known to this database.",
        (C("pubid", GUID, False), C("name", TEXT, False), C("kind", TEXT, False, "merge | transactional"),
         C("publisher", TEXT, False), C("generation_leveling_threshold", INT, False),
         C("retention", INT, False, "days"),
         C("snapshot_generation", BIG, True, "highest publisher generation contained in the snapshot"),
         C("snapshot_time", TS), C("snapshot_dir", TEXT), C("created_at", TS, False)),
        ("pubid",),
        (MetaIndex("sysmergepublications_name", ("name",), True),),
    ),
    MetaTable(
        "sysmergearticles",
        "One row per published table (article) and publication. The nickname orders processing: a table "
        "referenced by a foreign key has a lower nickname than the table referencing it.",
        (C("pubid", GUID, False), C("artid", GUID, False), C("name", TEXT, False),
         C("source_schema", TEXT), C("source_table", TEXT, False), C("nickname", INT, False),
         C("column_tracking", SMALL, False), C("rowguid_column", TEXT, False),
         C("rowguid_added", SMALL, False, "1 when publishing added the column"),
         C("processing_group", SMALL, False, "1 = not related to join filters; 2 = join-filter articles and "
           "articles related to them through DRI (seed 003/004)"),
         C("dri_related", SMALL, False, "1 when a foreign key links this article to another article"),
         C("related_nicknames", JSON, True, "nicknames of articles linked to this one by foreign keys"),
         C("table_schema", JSON, False, "columns, primary key and foreign keys as published"),
         C("status", SMALL, False)),
        ("pubid", "artid"),
        (MetaIndex("sysmergearticles_nick", ("pubid", "nickname"), True),),
    ),
    MetaTable(
        "sysmergesubscriptions",
        "The replicas this database knows, with the watermarks of what was sent to and received from each. "
        "In the publication database: the publisher and every subscriber; in a subscription database: "
        "the subscriber itself and its publisher.",
        (C("subid", GUID, False), C("pubid", GUID, False), C("name", TEXT, False),
         C("replica_id", GUID, False), C("replnickname", INT, False),
         C("role", TEXT, False, "publisher | subscriber"), C("database_label", TEXT, False, "never a password"),
         C("subscriber_type", SMALL, False, "1 global (server), 2 local (client); 0 for the publisher"),
         C("subscription_type", SMALL, False, "0 push"),
         C("priority", REAL, False), C("host_name", TEXT),
         C("sentgen", BIG, True, "last generation of this database sent to that replica"),
         C("recgen", BIG, True, "last generation of that replica received by this database"),
         C("status", SMALL, False, "0 created, 1 active (initialized)"),
         C("last_sync_date", TS), C("created_at", TS, False)),
        ("subid",),
        (MetaIndex("sysmergesubscriptions_name", ("pubid", "name"), True),),
    ),
    MetaTable(
        "MSmerge_genhistory",
        "One row per generation: a batch of changes. genstatus 0 open, 1 closed, 2 closed and received "
        "from another replica. nicknames lists the replicas known to have it. A closed generation is "
        "settled when no transaction that wrote into it is still running.",
        (C("generation", BIG, False), C("guidsrc", GUID, False), C("pubid", GUID),
         C("genstatus", SMALL, False), C("settled", SMALL, False), C("nicknames", JSON, False),
         C("changecount", INT, False), C("coldate", TS),
         C("source_nickname", INT, True, "replica the generation came from (received generations)"),
         C("source_generation", BIG, True, "the generation's number at that replica")),
        ("generation",),
        (MetaIndex("MSmerge_genhistory_status", ("genstatus", "generation")),),
    ),
    MetaTable(
        "MSmerge_contents",
        "One row per inserted or updated row of an article: its generation and lineage.",
        (C("tablenick", INT, False), C("rowguid", GUID, False), C("generation", BIG, False),
         C("lineage", JSON, False, "version vector {replica nickname: version}"),
         C("colv", JSON, True, "column versions {column: [nickname, version]} (column tracking only)")),
        ("tablenick", "rowguid"),
        (MetaIndex("MSmerge_contents_gen", ("generation",)),),
    ),
    MetaTable(
        "MSmerge_tombstone",
        "One row per deleted row of an article (type 1 user delete, 5 partition move, 6 system delete).",
        (C("tablenick", INT, False), C("rowguid", GUID, False), C("type", SMALL, False),
         C("lineage", JSON, False), C("generation", BIG, False)),
        ("tablenick", "rowguid"),
        (MetaIndex("MSmerge_tombstone_gen", ("generation",)),),
    ),
)

TABLES = TABLES + (
    MetaTable(
        "MSmerge_conflicts_info",
        "One row per conflict: its type (1-10, as SQL Server), reason, the replica whose version lost, the "
        "winner, and the conflicting columns. The losing row is in the article's conflict table.",
        (C("conflict_id", GUID, False), C("pubid", GUID, False), C("tablenick", INT, False), C("rowguid", GUID, False),
         C("conflict_type", SMALL, False), C("reason_code", TEXT, False), C("reason_text", TEXT, False),
         C("origin_datasource", TEXT, False, "the replica whose version lost or whose change failed"),
         C("winner", TEXT, False), C("columns", JSON), C("subscription", TEXT, False),
         C("direction", TEXT, False, "upload | download"), C("session_id", GUID), C("create_time", TS, False)),
        ("conflict_id",),
        (MetaIndex("MSmerge_conflicts_info_nick", ("pubid", "tablenick")),),
    ),
    MetaTable(
        "MSmerge_sessions",
        "One row per subscription per merge session: what moved each way, conflicts, retries, duration.",
        (C("session_id", GUID, False), C("subscription", TEXT, False), C("pubid", GUID, False),
         C("start_time", TS, False), C("end_time", TS), C("duration", REAL), C("status", TEXT, False),
         C("upload_inserts", INT, False), C("upload_updates", INT, False), C("upload_deletes", INT, False),
         C("upload_conflicts", INT, False), C("download_inserts", INT, False), C("download_updates", INT, False),
         C("download_deletes", INT, False), C("download_conflicts", INT, False), C("retries", INT, False),
         C("failed", INT, False), C("message", TEXT)),
        ("session_id", "subscription"),
    ),
    MetaTable(
        "MSmerge_articlehistory",
        "Per session, subscription, article and direction: inserts, updates, deletes, conflicts, retries, duration.",
        (C("session_id", GUID, False), C("subscription", TEXT, False), C("tablenick", INT, False),
         C("article", TEXT, False), C("direction", TEXT, False), C("inserts", INT, False), C("updates", INT, False),
         C("deletes", INT, False), C("conflicts", INT, False), C("retries", INT, False), C("failed", INT, False),
         C("duration", REAL, True, "seconds spent applying this article's changes at the destination")),
        ("session_id", "subscription", "tablenick", "direction"),
    ),
    MetaTable(
        "MSmerge_failed_changes",
        "Changes that could not be applied here (a failed-change conflict). With compensate_for_errors = "
        "false they are tried again at every merge until they succeed.",
        (C("tablenick", INT, False), C("rowguid", GUID, False), C("source_nickname", INT, False),
         C("conflict_type", SMALL, False), C("reason", TEXT, False), C("attempts", INT, False),
         C("first_time", TS, False), C("last_time", TS, False)),
        ("tablenick", "rowguid", "source_nickname"),
    ),
)

TABLES_BY_NAME = {t.name: t for t in TABLES}
