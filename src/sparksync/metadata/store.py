"""Installing replication metadata in a replica database, and reading/writing its rows."""

from __future__ import annotations

import datetime as dt
import enum
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sparksync.dialects.replica import Replica
from sparksync.errors import MetadataVersionError, NotInitialized, ReplicaDamaged
from sparksync.metadata.records import Record, ReplicaRow, Role, UnknownCode
from sparksync.metadata.schema import DISTRIBUTION, MERGE, TABLE_SETS, TABLES_BY_NAME, WEB, MetaTable, TableSet
from sparksync.types import Kind


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def new_guid() -> str:
    return str(uuid.uuid4())


# -- DDL ------------------------------------------------------------------------------------------

def render_metadata_ddl(replica: Replica, table: MetaTable, missing_only: bool = False) -> list[str]:
    """CREATE TABLE / CREATE INDEX of one metadata table (``missing_only``: no CREATE INDEX of an index
    that exists, which would lock the table against writes for the rest of the transaction)."""
    d = replica.dialect
    cols = []
    for c in table.columns:
        if c.name == table.serial:
            cols.append(d.serial_primary_key(c.name))
        else:
            cols.append(f"{d.quote(c.name)} {d.render_type(c.type)}{'' if c.nullable else ' NOT NULL'}")
    if table.serial is None and table.primary_key:
        cols.append("PRIMARY KEY (" + ", ".join(d.quote(c) for c in table.primary_key) + ")")
    stmts = [f"CREATE TABLE IF NOT EXISTS {d.metadata_table_sql(table.name)} (\n  " + ",\n  ".join(cols) + "\n)"]
    for idx in table.indexes:
        plain = idx.name.lower() if d.capabilities.supports_schemas else idx.name
        if missing_only and d.index_exists(replica, d.metadata_table_name(table.name).schema, plain):
            continue
        idx_name = d.quote(plain)
        stmts.append(
            f"CREATE {'UNIQUE ' if idx.unique else ''}INDEX IF NOT EXISTS {idx_name} ON "
            f"{d.metadata_table_sql(table.name)} (" + ", ".join(d.quote(c) for c in idx.columns) + ")"
        )
    return stmts


VERSION_TABLE = "sparksync_metadata_version"


def table_set_version(replica: Replica, tables: TableSet) -> int | None:
    """The version of ``tables`` installed in this database, or None if it is not installed."""
    return installed_versions(replica).get(tables.version_id)


def installed_versions(replica: Replica) -> dict[int, int]:
    """Every table set installed in this database: its version row id -> version."""
    if not replica.dialect.metadata_table_exists(replica, VERSION_TABLE):
        return {}
    return dict(replica.query(f"SELECT id, version FROM {replica.dialect.metadata_table_sql(VERSION_TABLE)}"))


def metadata_version(replica: Replica) -> int | None:
    """The merge metadata version installed in this database, or None if there is none."""
    return table_set_version(replica, MERGE)


def _add_column(table: str, column: str):
    """A migration adding one declared column to an existing metadata table."""

    def migrate(replica: Replica) -> None:
        d = replica.dialect
        c = next(c for c in TABLES_BY_NAME[table].columns if c.name == column)
        replica.execute(f"ALTER TABLE {d.metadata_table_sql(table)} ADD COLUMN {d.quote(c.name)} {d.render_type(c.type)}")

    return migrate


def _add_columns(table: str, *columns: str):
    steps = [_add_column(table, c) for c in columns]

    def migrate(replica: Replica) -> None:
        for step in steps:
            step(replica)

    return migrate


def _migrate_4(replica: Replica) -> None:
    _add_columns("sysmergepublications", "partitions_evaluated", "use_partition_groups")(replica)
    _add_columns("sysmergearticles", "filter_clause", "join_filters", "partition_options")(replica)
    _add_columns("sysmergesubscriptions", "login", "partition_id")(replica)
    _add_column("MSmerge_articlehistory", "removed")(replica)
    _add_columns("MSmerge_conflicts_info", "resolution", "resolved_at")(replica)
    _add_column("MSmerge_replica", "max_nickname")(replica)


# Migrations: table set -> version -> function(replica) bringing it from version-1 to version. Tables
# new in a version need none: installing creates every missing table before migrating.
MIGRATIONS: dict[str, dict[int, Any]] = {
    MERGE.name: {
        2: _add_column("MSmerge_articlehistory", "duration"),
        3: _add_columns("MSmerge_failed_changes", "row_key", "column_name", "value"),
        4: _migrate_4,
        5: _add_columns("sysmergepublications", "cleanup_generation", "schema_version"),
        6: lambda replica: None,            # MSsnapshot_history: a new table
        7: lambda replica: None,            # MSmerge_pending: a new table (the triggers: merge.tracking.upgrade)
        8: lambda replica: None,            # MSmerge_validations: a new table
        9: lambda replica: None,            # MSmerge_applied_batches: a new table
        10: _add_column("sysmergearticles", "rowguid_keyed"),
    },
    WEB.name: {
        2: lambda replica: None,            # MSweb_recoveries: a new table
        3: lambda replica: None,            # MSweb_file, MSweb_holders, MSweb_strays: new tables
        4: lambda replica: None,            # MSweb_enrollments, MSweb_devices, MSweb_credential: new tables
    },
    DISTRIBUTION.name: {
        2: _add_column("MSlogreader_history", "status"),
        3: _add_columns("MSrepl_commands", "data", "shape"),     # (and MSrepl_shapes: a new table)
    },
}


def install_table_set(replica: Replica, tables: TableSet) -> int:
    """Create (or migrate) one set of metadata tables. Idempotent; call inside a transaction."""
    current = table_set_version(replica, tables)
    if current is not None and current > tables.version:
        raise MetadataVersionError(
            f"{replica.label}: {tables.name} metadata version {current} is newer than this sparksync "
            f"(supports {tables.version}); upgrade sparksync", obj=replica.label)
    replica.dialect.install_support_objects(replica)
    for table in (TABLES_BY_NAME[VERSION_TABLE], *tables.tables):
        for stmt in render_metadata_ddl(replica, table, missing_only=True):
            replica.execute(stmt)
    if current is None:
        insert_row(replica, VERSION_TABLE, {"id": tables.version_id, "version": tables.version, "updated_at": utcnow()})
    elif current < tables.version:
        for v in range(current + 1, tables.version + 1):
            MIGRATIONS[tables.name][v](replica)
        update_rows(replica, VERSION_TABLE, {"version": tables.version, "updated_at": utcnow()},
                    {"id": tables.version_id})
    return tables.version


def install_metadata(replica: Replica) -> int:
    """Create (or migrate) the merge replication metadata. Idempotent; call inside a transaction."""
    return install_table_set(replica, MERGE)


def require_table_set(replica: Replica, tables: TableSet) -> None:
    v = table_set_version(replica, tables)
    if v is None:
        raise NotInitialized(f"{replica.label}: no {tables.name} metadata here; run 'sparksync setup' first",
                             obj=replica.label)
    if v > tables.version:
        raise MetadataVersionError(f"{replica.label}: {tables.name} metadata version {v} is newer than this "
                                   "sparksync", obj=replica.label)
    if v < tables.version:
        raise MetadataVersionError(f"{replica.label}: {tables.name} metadata version {v} is older than this "
                                   f"sparksync ({tables.version}); run 'sparksync setup' to upgrade it",
                                   obj=replica.label)


def require_metadata(replica: Replica) -> None:
    require_table_set(replica, MERGE)


def outdated(replica: Replica) -> list:
    """The table sets installed here at a version older than this release's (``upgrade_metadata`` migrates them)."""
    installed = installed_versions(replica)
    return [ts for ts in TABLE_SETS if installed.get(ts.version_id, ts.version) < ts.version]


def upgrade_metadata(replica: Replica) -> bool:
    """Migrate older metadata (every set installed here) in place, one transaction. True when it did."""
    old = outdated(replica)
    if not old:
        return False
    with replica.transaction():
        for ts in old:
            install_table_set(replica, ts)
    return True


# -- row helpers -----------------------------------------------------------------------------------

def to_param(replica: Replica, kind: Kind, value: Any) -> Any:
    """A metadata value as this driver takes it as a parameter."""
    if value is None:
        return None
    if isinstance(value, enum.Enum):
        # a code: its integer or text (psycopg would adapt an Enum by its name)
        value = value.value
    if kind is Kind.JSON:
        return replica.dialect.json_param(value)
    if kind is Kind.UUID:
        return str(value)
    return value


_CONVERTED = (Kind.JSON, Kind.UUID, Kind.TIMESTAMPTZ)      # the kinds ``from_db`` changes


def from_db(kind: Kind, value: Any) -> Any:
    """A value read from a metadata column of ``kind`` as the records hold it."""
    if value is None:
        return None
    if kind is Kind.JSON:
        return json.loads(value) if isinstance(value, (str, bytes)) else value
    if kind is Kind.UUID:
        return str(value)
    if kind is Kind.TIMESTAMPTZ and isinstance(value, str):
        ts = dt.datetime.fromisoformat(value)
        return ts if ts.tzinfo else ts.replace(tzinfo=dt.UTC)
    return value


def _kinds(table: str) -> dict[str, Kind]:
    return {c.name: c.type.kind for c in TABLES_BY_NAME[table].columns}


def insert_row(replica: Replica, table: str, values: dict[str, Any]) -> None:
    d, kinds = replica.dialect, _kinds(table)
    cols = list(values)
    sql = (f"INSERT INTO {replica.meta(table)} (" + ", ".join(d.quote(c) for c in cols) + ") VALUES ("
           + ", ".join([replica.p] * len(cols)) + ")")
    replica.execute(sql, [to_param(replica, kinds[c], values[c]) for c in cols])


def insert_rows(replica: Replica, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    d, kinds = replica.dialect, _kinds(table)
    sql = (f"INSERT INTO {replica.meta(table)} (" + ", ".join(d.quote(c) for c in columns) + ") VALUES ("
           + ", ".join([replica.p] * len(columns)) + ")")
    ks = [kinds[c] for c in columns]
    replica.executemany(sql, ([to_param(replica, k, v) for k, v in zip(ks, r)] for r in rows))


def _where(replica: Replica, table: str, where: Mapping[str, Any]) -> tuple[str, list]:
    parts, params = _conditions(replica, table, where)
    return (" WHERE " + " AND ".join(parts), params) if parts else ("", [])


def _conditions(replica: Replica, table: str, where: Mapping[str, Any], alias: str = "") -> tuple[list[str], list]:
    d, kinds = replica.dialect, _kinds(table)
    parts, params = [], []
    for c, v in where.items():
        if v is None:
            parts.append(f"{alias}{d.quote(c)} IS NULL")
        else:
            parts.append(f"{alias}{d.quote(c)} = {replica.p}")
            params.append(to_param(replica, kinds[c], v))
    return parts, params


def update_rows(replica: Replica, table: str, values: Mapping[str, Any], where: Mapping[str, Any]) -> None:
    d, kinds = replica.dialect, _kinds(table)
    sets = ", ".join(f"{d.quote(c)} = {replica.p}" for c in values)
    w, wp = _where(replica, table, where)
    replica.execute(f"UPDATE {replica.meta(table)} SET {sets}{w}",
                    [to_param(replica, kinds[c], v) for c, v in values.items()] + wp)


def delete_rows(replica: Replica, table: str, where: Mapping[str, Any]) -> None:
    w, wp = _where(replica, table, where)
    replica.execute(f"DELETE FROM {replica.meta(table)}{w}", wp)


def _select(replica: Replica, table: str, where: Mapping[str, Any] | None,
            order_by: Sequence[str]) -> tuple[list[str], list[Kind], list[tuple[Any, ...]]]:
    d, kinds = replica.dialect, _kinds(table)
    cols = list(kinds)
    w, wp = _where(replica, table, where or {})
    order = (" ORDER BY " + ", ".join(d.quote(c) for c in order_by)) if order_by else ""
    missing = _not_yet_there(replica, table)
    select = ", ".join("NULL" if c in missing else d.quote(c) for c in cols)
    rows = replica.query(f"SELECT {select} FROM {replica.meta(table)}{w}{order}", wp)
    return cols, [kinds[c] for c in cols], rows


def _not_yet_there(replica: Replica, table: str) -> set[str]:
    """Columns of ``table`` that its metadata of an earlier release does not have yet (read as NULL, so that what
    plans an upgrade can read it): none once every set installed here is this release's."""
    if replica.metadata_current:
        return set()
    installed = installed_versions(replica)
    if all(installed.get(ts.version_id, ts.version) >= ts.version for ts in TABLE_SETS):
        replica.metadata_current = True
        return set()
    info = replica.reflect(replica.dialect.metadata_table_name(table))
    return set() if info is None else {c.name for c in TABLES_BY_NAME[table].columns} - set(info.column_names)


def select_rows(replica: Replica, table: str, where: dict[str, Any] | None = None,
                order_by: Sequence[str] = ()) -> list[dict[str, Any]]:
    cols, ks, rows = _select(replica, table, where, order_by)
    return [{c: from_db(k, v) for c, k, v in zip(cols, ks, r)} for r in rows]


# -- typed rows (metadata/records.py) ------------------------------------------------------------------

R = TypeVar("R", bound=Record)


def select(replica: Replica, cls: type[R], where: Mapping[str, Any] | None = None,
           order_by: Sequence[str] = ()) -> list[R]:
    """The rows of ``cls``'s table matching ``where`` (column -> value; None: IS NULL)."""
    _, ks, rows = _select(replica, cls.TABLE, where, order_by)
    converted = [i for i, k in enumerate(ks) if k in _CONVERTED]     # the others are read as they are
    try:
        out = []
        for r in rows:
            values = list(r)
            for i in converted:
                values[i] = from_db(ks[i], values[i])
            out.append(cls.from_values(values))
        return out
    except UnknownCode as e:
        raise ReplicaDamaged(f"{replica.label}: its replication metadata was changed outside sparksync: {e}",
                             obj=replica.label) from None


S = TypeVar("S", bound=Record)


def select_joined(replica: Replica, first: type[R], second: type[S], on: str, where_first: Mapping[str, Any],
                  where_second: Mapping[str, Any]) -> tuple[R, S] | None:
    """The first row of ``first`` joined to ``second`` on their column ``on``, each matching its ``where``
    (one round trip where two ``select_one`` would take two), or None."""
    d = replica.dialect
    k1, k2 = _kinds(first.TABLE), _kinds(second.TABLE)
    c1, p1 = _conditions(replica, first.TABLE, where_first, "a.")
    c2, p2 = _conditions(replica, second.TABLE, where_second, "b.")
    where = " AND ".join(c1 + c2)
    cols = [f"a.{d.quote(c)}" for c in k1] + [f"b.{d.quote(c)}" for c in k2]
    rows = replica.query(f"SELECT {', '.join(cols)} FROM {replica.meta(first.TABLE)} a JOIN {replica.meta(second.TABLE)} b "
                         f"ON b.{d.quote(on)} = a.{d.quote(on)}" + (f" WHERE {where}" if where else "") + " LIMIT 1",
                         p1 + p2)
    if not rows:
        return None
    ks = list(k1.values()) + list(k2.values())
    values = [from_db(k, v) for k, v in zip(ks, rows[0])]
    try:
        return first.from_values(values[:len(k1)]), second.from_values(values[len(k1):])
    except UnknownCode as e:
        raise ReplicaDamaged(f"{replica.label}: its replication metadata was changed outside sparksync: {e}",
                             obj=replica.label) from None


def select_one(replica: Replica, cls: type[R], where: Mapping[str, Any] | None = None,
               order_by: Sequence[str] = ()) -> R | None:
    """The first row of ``select``, or None."""
    rows = select(replica, cls, where, order_by)
    return rows[0] if rows else None


def insert(replica: Replica, row: Record) -> None:
    insert_row(replica, row.TABLE, row.to_dict())


def _check_columns(cls: type[Record], names: Iterable[str]) -> None:
    unknown = set(names) - set(cls.columns())
    if unknown:
        raise KeyError(f"{cls.TABLE} has no column {', '.join(sorted(unknown))}")


def update(replica: Replica, cls: type[Record], values: Mapping[str, Any], where: Mapping[str, Any]) -> None:
    """Set ``values`` (column -> value) in the rows of ``cls``'s table matching ``where``."""
    _check_columns(cls, [*values, *where])
    update_rows(replica, cls.TABLE, dict(values), dict(where))


def delete(replica: Replica, cls: type[Record], where: Mapping[str, Any]) -> None:
    _check_columns(cls, where)
    delete_rows(replica, cls.TABLE, dict(where))


# -- replica identity --------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReplicaIdentity:
    replica_id: str
    nickname: int
    name: str
    role: Role


def replica_identity(replica: Replica) -> ReplicaIdentity | None:
    r = select_one(replica, ReplicaRow, {"id": 1})
    if r is None:
        return None
    return ReplicaIdentity(r.replica_id, r.replnickname, r.name, r.role)


def note_nickname(replica: Replica, nickname: int) -> None:
    """The publisher gave (or gave once) ``nickname``: never give it again."""
    r = select_one(replica, ReplicaRow, {"id": 1})
    if r is not None and (r.max_nickname or 0) < nickname:
        update(replica, ReplicaRow, {"max_nickname": nickname}, {"id": 1})


def next_nickname(replica: Replica) -> int:
    """A replica nickname the publisher never gave."""
    r = select_one(replica, ReplicaRow, {"id": 1})
    given = int(replica.scalar(f"SELECT coalesce(max(replnickname), 1) FROM {replica.meta('sysmergesubscriptions')}") or 1)
    return max(given, (r.max_nickname if r is not None else None) or 0) + 1


def set_replica_identity(replica: Replica, *, nickname: int, name: str, role: Role,
                         replica_id: str | None = None) -> ReplicaIdentity:
    """Record who this database is. A database keeps its nickname once it has one."""
    current = replica_identity(replica)
    if current is not None:
        if current.nickname != nickname:
            raise MetadataVersionError(
                f"{replica.label}: this database is already replica {current.name!r} (nickname {current.nickname}) "
                f"and cannot also be {name!r} (nickname {nickname})", obj=replica.label)
        return current
    rid = replica_id or new_guid()
    insert(replica, ReplicaRow(id=1, replica_id=rid, replnickname=nickname, name=name, role=role, applying=0))
    return ReplicaIdentity(rid, nickname, name, Role(role))
