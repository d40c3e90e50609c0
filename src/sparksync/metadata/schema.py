"""Replication metadata tables, declared once and rendered per dialect.

SQL Server's names are kept so the seeds read as our documentation. PostgreSQL keeps them in the
``sparksync`` schema, lower-cased; SQLite keeps them next to the user tables.
"""

from __future__ import annotations

from sparksync.metadata.declare import (
    BIG,
    BYTES,
    GUID,
    INT,
    JSON,
    REAL,
    SMALL,
    TEXT,
    TS,
    C,
    MetaIndex,
    MetaTable,
    TableSet,
)
from sparksync.metadata.web_tables import DEVICE, WEB

# 2: MSmerge_articlehistory.duration; 3: MSmerge_failed_changes.row_key, column_name, value;
# 4: filtered publications (article filters, subscription partitions, partition groups and mappings);
#    conflicts resolved after the fact (MSmerge_conflicts_info.resolution, resolved_at);
#    MSmerge_replica.max_nickname
# 5: metadata cleanup (sysmergepublications.cleanup_generation); merge schema changes (sysmergeschemachange,
#    sysmergepublications.schema_version)
# 6: MSsnapshot_history (every snapshot run, the failed ones with their error)
# 7: MSmerge_pending (lean change tracking: the triggers log which rows changed, a flush writes the metadata)
# 8: MSmerge_validations (each subscription's validations: on a schedule, at a device's sync, on demand)
# 9: MSmerge_applied_batches (what a session's batches applied, read back by a task that Spark runs again)
# 10: sysmergearticles.rowguid_keyed (a SQLite table's rowguids kept beside it, keyed by its primary key)
SCHEMA_VERSION = 10

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
         C("applying", SMALL, False, "1 while the merge agent writes rows that carry their own lineage"),
         C("max_nickname", INT, True, "the publisher: the highest replica nickname it ever gave (a nickname is "
           "never given twice: a dropped replica's generations and lineage keep it)")),
        ("id",),
    ),
    MetaTable(
        "sysmergepublications",
        "One row per merge publication known to this database.",
        (C("pubid", GUID, False), C("name", TEXT, False), C("kind", TEXT, False, "merge | transactional"),
         C("publisher", TEXT, False), C("generation_leveling_threshold", INT, False),
         C("retention", INT, False, "days"),
         C("snapshot_generation", BIG, True, "highest publisher generation contained in the snapshot"),
         C("snapshot_time", TS), C("snapshot_dir", TEXT), C("created_at", TS, False),
         C("partitions_evaluated", BIG, True, "filtered publications: the highest generation whose changes' "
           "partition membership is in the partition mappings"),
         C("use_partition_groups", SMALL, True, "filtered publications: 1 (or NULL) precomputed partitions, 0 "
           "membership evaluated at sync time (SetupBelongs)"),
         C("cleanup_generation", BIG, True, "the publisher: the highest generation whose history metadata cleanup "
           "removed; a snapshot older than it cannot initialize a subscription"),
         C("schema_version", INT, True, "the last schema change (sysmergeschemachange) made here: at the "
           "publisher when it was recorded, at a subscriber when it was replayed")),
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
         C("status", SMALL, False),
         C("filter_clause", TEXT, True, "row filter (static or parameterized), as configured"),
         C("join_filters", JSON, True, "join filters: [{parent, clause, unique_key}]"),
         C("partition_options", SMALL, True, "0 overlapping; 1 overlapping, out-of-partition subscriber changes "
           "refused; 2 non-overlapping; 3 non-overlapping, one subscription per partition"),
         C("rowguid_keyed", SMALL, True, "1: the rowguid is not a column of the table but kept beside it, in "
           "MSmerge_ids_<artid> keyed by the table's primary key (SQLite); 0 or NULL: a column of the table")),
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
         C("last_sync_date", TS), C("created_at", TS, False),
         C("login", TEXT, True, "what SUSER_SNAME() is for this subscription"),
         C("partition_id", INT, True, "filtered publications: the subscription's partition (MSmerge_partition_groups)")),
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
         C("changecount", INT, False),
         C("coldate", TS, True, "when the generation was opened (as SQL Server's), then when it was closed"),
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
    MetaTable(
        "MSmerge_pending",
        "The tracking triggers' log: which rows of an article an application changed since the last flush "
        "(no index, so a write pays one append). The flush (merge/tracking/pending.py) turns it into "
        "MSmerge_contents and MSmerge_tombstone rows, before anything reads them.",
        (C("tablenick", INT, False), C("rowguid", GUID, True), C("op", SMALL, False, "1 insert, 2 update, 3 delete"),
         C("cols", TEXT, True, "column-tracked updates: one '0' or '1' per column, in the article's column order")),
        (),
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
         C("direction", TEXT, False, "upload | download"), C("session_id", GUID), C("create_time", TS, False),
         C("resolution", TEXT, True, "set by 'sparksync conflicts --resolve': winner (kept) | loser (made the winner)"),
         C("resolved_at", TS, True)),
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
        (MetaIndex("MSmerge_sessions_time", ("pubid", "subscription", "start_time")),
         MetaIndex("MSmerge_sessions_start", ("start_time",))),     # the history's newest runs, of 10,000 devices
    ),
    MetaTable(
        "MSmerge_validations",
        "At the publisher: each validation of a subscription (row counts and checksums of its partition, by "
        "'sparksync serve' on the publication's validate_schedule, at a device's sync, or by 'sparksync validate'): "
        "passed, failed (what differs), or inconclusive (changes were pending either way). The newest few are kept.",
        (C("subscription", TEXT, False), C("pubid", GUID, False), C("validated_at", TS, False),
         C("result", TEXT, False, "passed | failed | inconclusive"), C("how", TEXT, False, "schedule | sync | validate"),
         C("articles", JSON, True, "article -> [publisher rows, subscriber rows, checksums equal]"),
         C("message", TEXT), C("seconds", REAL)),
        ("subscription", "pubid", "validated_at"),
    ),
    MetaTable(
        "MSsnapshot_history",
        "One row per snapshot run of a merge publication (SQL Server's snapshot agent history): when, "
        "the snapshot written, or the error that stopped it.",
        (C("run_id", GUID, False), C("pubid", GUID, False), C("start_time", TS, False), C("end_time", TS, False),
         C("status", TEXT, False, "succeeded | failed"), C("snapshot_id", TEXT, True, "the snapshot folder written"),
         C("generation", BIG, True, "the snapshot generation"), C("seconds", REAL, False), C("message", TEXT)),
        ("run_id",),
        (MetaIndex("MSsnapshot_history_time", ("pubid", "start_time")),),
    ),
    MetaTable(
        "MSmerge_articlehistory",
        "Per session, subscription, article and direction: inserts, updates, deletes, conflicts, retries, duration.",
        (C("session_id", GUID, False), C("subscription", TEXT, False), C("tablenick", INT, False),
         C("article", TEXT, False), C("direction", TEXT, False), C("inserts", INT, False), C("updates", INT, False),
         C("deletes", INT, False), C("conflicts", INT, False), C("retries", INT, False), C("failed", INT, False),
         C("duration", REAL, True, "seconds spent applying this article's changes at the destination"),
         C("removed", INT, True, "rows removed from the subscriber: they left its partition (filtered publications)")),
        ("session_id", "subscription", "tablenick", "direction"),
    ),
    MetaTable(
        "MSmerge_applied_batches",
        "At a destination: what each generation batch of the latest merge session from a source applied here (its "
        "counts per article and its conflicts, as its task reported them), written in the batch's transaction with "
        "the watermark. A task run again (Spark re-runs a task whose executor was lost) finds its batches already "
        "applied and reports these, so the session counts what was applied by whichever attempt. The rows of a "
        "source's earlier sessions go when a later session applies a batch from it.",
        (C("pubid", GUID, False), C("source_nickname", INT, False, "the replica the batch came from"),
         C("session_id", GUID, False), C("batch_seq", INT, False, "the batch's number in the session, from that source"),
         C("generation", BIG, False, "the watermark the batch moved to"),
         C("outcome", JSON, False, "{stats: {nickname: counts}, conflicts: [conflict]}: the batch's result row")),
        ("pubid", "source_nickname", "session_id", "batch_seq"),
    ),
    MetaTable(
        "MSmerge_failed_changes",
        "Changes that could not be applied here (a failed-change conflict): a constraint, a value this "
        "database cannot hold, a row its source could not read, a resolver that failed. With "
        "compensate_for_errors = false they are tried again at every merge until they succeed.",
        (C("tablenick", INT, False), C("rowguid", GUID, False), C("source_nickname", INT, False),
         C("conflict_type", SMALL, False), C("reason", TEXT, False), C("attempts", INT, False),
         C("first_time", TS, False), C("last_time", TS, False),
         C("row_key", TEXT, True, "the row's primary key, e.g. id=4"),
         C("column_name", TEXT, True, "the column whose value failed, when one did"),
         C("value", TEXT, True, "a short summary of that value")),
        ("tablenick", "rowguid", "source_nickname"),
    ),
    # -- filtered publications (seed 002) --
    MetaTable(
        "MSmerge_partition_groups",
        "One row per partition of a filtered publication: a distinct set of parameter values (what "
        "HOST_NAME() and SUSER_SNAME() return). Created from the publication's `partitions` and whenever a "
        "subscription needs one that does not exist yet.",
        (C("partition_id", INT, False), C("pubid", GUID, False), C("host_name", TEXT), C("login", TEXT),
         C("created_at", TS, False)),
        ("partition_id",),
        # evaluation joins rows to their partitions by these values (a filter like Territory = HOST_NAME());
        # no index on pubid: SQLite would start from every partition of the publication
        (MetaIndex("MSmerge_partition_groups_host", ("host_name",)),
         MetaIndex("MSmerge_partition_groups_login", ("login",))),
    ),
    MetaTable(
        "MSmerge_current_partition_mappings",
        "One row per row of a filtered article and partition it belongs to, as of the last partition "
        "evaluation (precomputed partitions).",
        (C("tablenick", INT, False), C("rowguid", GUID, False), C("partition_id", INT, False)),
        ("tablenick", "rowguid", "partition_id"),
        (MetaIndex("MSmerge_current_partition_mappings_part", ("partition_id", "tablenick")),),
    ),
    MetaTable(
        "MSmerge_past_partition_mappings",
        "One row each time a row of a filtered article left a partition: deleted, moved by a change of its "
        "filter columns or of a parent (realignment), or changed by a subscriber out of its partition; "
        "generation: the generation of that change.",
        (C("tablenick", INT, False), C("rowguid", GUID, False), C("partition_id", INT, False),
         C("generation", BIG, False)),
        ("tablenick", "rowguid", "partition_id", "generation"),
        (MetaIndex("MSmerge_past_partition_mappings_part", ("partition_id", "generation")),),
    ),
    MetaTable(
        "MSmerge_generation_partition_mappings",
        "One row per closed generation and partition that has changes for it (partition_id 0: changes of "
        "the publication's unfiltered articles, for every partition), written when the generation's "
        "partition membership is evaluated (precomputed partitions). A download skips the generations "
        "that have none for its subscriber's partition. changecount: the rows of that generation for that "
        "partition.",
        (C("pubid", GUID, False), C("generation", BIG, False), C("partition_id", INT, False),
         C("changecount", INT, False)),
        ("pubid", "generation", "partition_id"),
        (MetaIndex("MSmerge_generation_partition_mappings_part", ("partition_id", "generation")),),
    ),
    MetaTable(
        "sysmergeschemachange",
        "The publisher: one row per schema change of a merge publication's article (a column added, dropped, "
        "altered or renamed), in the order they were made; the merge agent replays each at every subscriber "
        "whose schema_version is lower, before the changes of later generations.",
        (C("pubid", GUID, False), C("schemaversion", INT, False, "1, 2, ... per publication"),
         C("artid", GUID, False), C("article", TEXT, False),
         C("schematype", TEXT, False, "add_column | drop_column | alter_column | rename_column"),
         C("column_name", TEXT, False, "the column (a renamed one: its old name)"),
         C("column_def", JSON, True, "add_column: the column as published (name, type, nullable, default); "
           "alter_column: its new type, nullability, default (set_default: whether the change sets it) and what "
           "it was (before); rename_column: its new name"),
         C("table_schema", JSON, False, "the article's published columns after the change"),
         C("generation", BIG, False, "the publisher's open generation when the change was recorded: rows "
           "changed from it on may carry the new column"),
         C("created_at", TS, False)),
        ("pubid", "schemaversion"),
    ),
    MetaTable(
        "MSmerge_partition_changes",
        "Work table of a partition evaluation (emptied when it starts): the rows whose partition "
        "membership it changed, where realignment finds the join-filter children to evaluate again.",
        (C("tablenick", INT, False), C("rowguid", GUID, False)),
        ("tablenick", "rowguid"),
    ),
)

MERGE = TableSet("merge replication", 1, SCHEMA_VERSION, TABLES)

# -- transactional replication -----------------------------------------------------------------------

# 2: MSlogreader_history.status (failed runs are recorded, with their error)
# 3: MSrepl_commands.data and .shape, MSrepl_shapes (a PostgreSQL publisher's changes stored as the
#    server's own messages, decoded by the distribution agent's tasks)
DISTRIBUTION_VERSION = 3
DISTRIBUTION = TableSet("distribution database", 2, DISTRIBUTION_VERSION, (
    MetaTable(
        "MSpublications",
        "One row per transactional publication whose commands this distribution database queues, with the "
        "log reader's position: the last transaction it stored (xact_seqno).",
        (C("publication_id", GUID, False), C("name", TEXT, False), C("publisher", TEXT, False),
         C("publisher_db", TEXT, False, "the publisher database, never with a password"),
         C("source", TEXT, False, "postgresql (logical decoding) | sqlite (trigger-fed log)"),
         C("slot", TEXT, True, "PostgreSQL: the logical replication slot"),
         C("pg_publication", TEXT, True, "PostgreSQL: the publication the slot decodes"),
         C("logreader_seqno", BIG, True, "xact_seqno of the last transaction stored here"),
         C("logreader_time", TS), C("created_at", TS, False)),
        ("publication_id",),
        (MetaIndex("MSpublications_name", ("name",), True),),
    ),
    MetaTable(
        "MSarticles",
        "The articles of each transactional publication: the published columns (table_schema), the row "
        "filter and the configured commands (ins_cmd, upd_cmd, del_cmd; NULL = the default).",
        (C("publication_id", GUID, False), C("article_id", INT, False), C("name", TEXT, False),
         C("source_schema", TEXT), C("source_table", TEXT, False),
         C("table_schema", JSON, False, "published columns, primary key and foreign keys"),
         C("filter", TEXT), C("ins_cmd", TEXT), C("upd_cmd", TEXT), C("del_cmd", TEXT),
         C("status", SMALL, False)),
        ("publication_id", "article_id"),
    ),
    MetaTable(
        "MSsubscriptions",
        "One row per transactional subscription: its status (0 initializing, 1 active, 2 inactive: it must be "
        "reinitialized), the point its snapshot was taken at, and what it has been delivered.",
        (C("publication_id", GUID, False), C("subscription", TEXT, False), C("subscriber", TEXT, False),
         C("status", SMALL, False), C("sync_point", JSON, True, "the snapshot's position in the command stream"),
         C("delivered_seqno", BIG, True, "last xact_seqno committed at the subscriber"),
         C("last_delivery", TS), C("created_at", TS, False), C("message", TEXT)),
        ("publication_id", "subscription"),
    ),
    MetaTable(
        "MSrepl_transactions",
        "One row per replicated transaction, in commit order (xact_seqno: the commit LSN of a PostgreSQL "
        "publisher, the last log sequence number of a SQLite one).",
        (C("publication_id", GUID, False), C("xact_seqno", BIG, False),
         C("xact_id", TEXT, True, "the publisher's transaction id"),
         C("publisher_commit", TS), C("entry_time", TS, False), C("commands", INT, False)),
        ("publication_id", "xact_seqno"),
        (MetaIndex("MSrepl_transactions_time", ("entry_time",)),),
    ),
    MetaTable(
        "MSrepl_commands",
        "The commands of each transaction, in order: ins, upd, del, trunc, token (tracer) or ddl, with the "
        "row's values after and before the change (JSON, typed by the article's columns), or (a row change "
        "at a PostgreSQL publisher) the server's own message and the shape that decodes it.",
        (C("publication_id", GUID, False), C("xact_seqno", BIG, False), C("command_id", INT, False),
         C("article_id", INT, False), C("type", TEXT, False),
         C("origin", BIG, True, "PostgreSQL: the transaction's xid; SQLite: the change's log sequence number"),
         C("after", TEXT), C("before", TEXT, True, "an update's before image holds the key and the changed columns"),
         C("rowhash", BIG, True, "a hash of the row's key before the change: which subscription stream applies it"),
         C("data", BYTES, True, "a PostgreSQL publisher's row change: the pgoutput message, undecoded"),
         C("shape", TEXT, True, "the MSrepl_shapes row that decodes data")),
        ("publication_id", "xact_seqno", "command_id"),
    ),
    MetaTable(
        "MSrepl_shapes",
        "How stored pgoutput messages are decoded: the relation message the server sent before them and "
        "the article's columns in effect then (a later schema change makes a new shape; old changes keep "
        "theirs).",
        (C("publication_id", GUID, False), C("shape_id", TEXT, False, "a digest of relation and table_schema"),
         C("article_id", INT, False), C("relation", BYTES, False, "the pgoutput Relation message"),
         C("table_schema", JSON, False, "the article's columns when the shape was made")),
        ("publication_id", "shape_id"),
    ),
    MetaTable(
        "MSrepl_errors",
        "Commands that failed at a subscriber: skipped ones (skip_errors) and the one that stopped it.",
        (C("error_id", GUID, False), C("publication_id", GUID, False), C("subscription", TEXT, False),
         C("xact_seqno", BIG, False), C("command_id", INT, False), C("article_id", INT),
         C("error_code", TEXT, False, "SQL Server's number where there is one (2601, 2627, 20598, ...)"),
         C("native_code", TEXT), C("message", TEXT, False), C("skipped", SMALL, False), C("time", TS, False)),
        ("error_id",),
    ),
    MetaTable(
        "MSdistribution_history",
        "One row per subscription per distribution agent run.",
        (C("run_id", GUID, False), C("publication_id", GUID, False), C("subscription", TEXT, False),
         C("start_time", TS, False), C("end_time", TS, False), C("transactions", INT, False),
         C("commands", INT, False), C("batches", INT, False), C("fallbacks", INT, False, "batches retried on one "
         "connection after a stream failed"), C("skipped", INT, False), C("streams", INT, False),
         C("last_seqno", BIG), C("seconds", REAL, False), C("status", TEXT, False), C("message", TEXT)),
        ("run_id", "subscription"),
    ),
    MetaTable(
        "MSlogreader_history",
        "One row per log reader run.",
        (C("run_id", GUID, False), C("publication_id", GUID, False), C("start_time", TS, False),
         C("end_time", TS, False), C("transactions", INT, False), C("commands", INT, False),
         C("first_seqno", BIG), C("last_seqno", BIG), C("seconds", REAL, False),
         C("message", TEXT, True, "why the run failed"),
         C("status", TEXT, True, "succeeded | failed (NULL: a run recorded before version 2, which succeeded)")),
        ("run_id", "publication_id"),
    ),
    MetaTable(
        "MStracer_tokens",
        "Tracer tokens: posted at the publisher, stored here by the log reader.",
        (C("tracer_id", GUID, False), C("publication_id", GUID, False), C("posted_time", TS, True),
         C("publisher_commit", TS), C("distributor_commit", TS), C("xact_seqno", BIG)),
        ("tracer_id",),
    ),
    MetaTable(
        "MStracer_history",
        "When each tracer token was committed at each subscriber.",
        (C("tracer_id", GUID, False), C("subscription", TEXT, False), C("subscriber_commit", TS, False)),
        ("tracer_id", "subscription"),
    ),
))

SUBSCRIBER_VERSION = 1
TRANSACTIONAL_SUBSCRIBER = TableSet("transactional subscription", 3, SUBSCRIBER_VERSION, (
    MetaTable(
        "MSreplication_subscriptions",
        "At a transactional subscriber: the last transaction delivered (transaction_timestamp = its "
        "xact_seqno), per subscription stream, written in the same transaction as the commands it covers.",
        (C("publication", TEXT, False), C("subscription", TEXT, False), C("publisher", TEXT, False),
         C("stream", INT, False), C("streams", INT, False, "the stream count the row was written with"),
         C("transaction_timestamp", BIG, False), C("time", TS, False)),
        ("publication", "subscription", "stream"),
    ),
    MetaTable(
        "MSsubscription_articles",
        "At a transactional subscriber: each article's published columns as they are here, changed by "
        "schema change commands in the same transaction as the ALTER TABLE they apply.",
        (C("publication", TEXT, False), C("subscription", TEXT, False), C("article_id", INT, False),
         C("table_schema", JSON, False)),
        ("publication", "subscription", "article_id"),
    ),
))

PUBLISHER_LOG_VERSION = 1
PUBLISHER_LOG = TableSet("transactional publication log", 4, PUBLISHER_LOG_VERSION, (
    MetaTable(
        "MSrepl_log",
        "At a SQLite publisher of transactional publications: every change to an article, in commit order, "
        "written by triggers; the log reader moves it to the distribution database and removes it here.",
        (C("seq", BIG, False), C("publication", TEXT, False), C("article_id", INT, False),
         C("op", TEXT, False, "ins | upd | del | token | ddl"), C("after", TEXT), C("before", TEXT),
         C("time", TEXT, False)),
        ("seq",),
        serial="seq",
    ),
))

TABLE_SETS = (MERGE, DISTRIBUTION, TRANSACTIONAL_SUBSCRIBER, PUBLISHER_LOG, WEB, DEVICE)
TABLES_BY_NAME = {t.name: t for ts in TABLE_SETS for t in ts.tables}
