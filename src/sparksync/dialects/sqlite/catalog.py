"""SQLite's catalog: a table reflected from ``sqlite_master`` and its pragmas (columns, primary and
foreign keys, the columns a unique index covers alone; names matched as SQLite matches them, without
regard to case), declared column types as logical types, which tables and indexes exist."""

from __future__ import annotations

import re

from sparksync.dialects.model import Column, ForeignKey, TableInfo
from sparksync.dialects.protocols import Dialect
from sparksync.dialects.replica import Replica
from sparksync.errors import SchemaError
from sparksync.names import TableName
from sparksync.types import Kind, SqlType, decimal_type

_TYPE = re.compile(r"^\s*([A-Za-z_ ]*?)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*$")


def real_name(replica: Replica, name: TableName) -> str | None:
    """The table's name as it was created (SQLite matches names without regard to case), or None."""
    row = replica.query_one(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE", (name.name,)
    )
    return None if row is None else row[0]


class SQLiteCatalog:
    """``Catalog`` on SQLite."""

    def metadata_table_exists(self, replica: Replica, name: str) -> bool:
        return replica.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)) > 0

    def reflect_table(self: Dialect, replica: Replica, name: TableName) -> TableInfo | None:
        name = self.resolve_name(name)
        real = real_name(replica, name)
        if real is None:
            return None
        cols, pk = [], []
        for cname, ctype, notnull, dflt, pkpos, hidden in replica.query(
            "SELECT name, type, \"notnull\", dflt_value, pk, hidden FROM pragma_table_xinfo(?) "
            "WHERE hidden IN (0, 2, 3) ORDER BY cid", (real,)
        ):
            try:
                cols.append(Column(cname, self.parse_type(ctype or ""), not notnull, dflt, hidden in (2, 3)))
            except SchemaError as e:
                raise SchemaError(f"table {real}, column {cname}: {e.message}", obj=f"{real}.{cname}") from None
            if pkpos:
                pk.append((pkpos, cname))
        fks: dict[int, list] = {}
        for fid, ref, frm, to in replica.query(
            "SELECT id, \"table\", \"from\", \"to\" FROM pragma_foreign_key_list(?) ORDER BY id, seq", (real,)
        ):
            fks.setdefault(fid, []).append((ref, frm, to))
        foreign_keys = []
        for parts in fks.values():
            ref = parts[0][0]
            ref_cols = [p[2] for p in parts]
            if any(c is None for c in ref_cols):
                ref_info = self.reflect_table(replica, TableName(None, ref)) if ref != real else None
                ref_pk = ref_info.primary_key if ref_info else tuple(c for _, c in sorted(pk))
                ref_cols = list(ref_pk)
            ref_real = real_name(replica, TableName(None, ref)) or ref
            foreign_keys.append(ForeignKey(tuple(p[1] for p in parts), TableName(None, ref_real), tuple(ref_cols)))
        unique = set()
        for idx_name, is_unique in replica.query("SELECT name, \"unique\" FROM pragma_index_list(?)", (real,)):
            if is_unique:
                idx_cols = replica.query("SELECT name FROM pragma_index_info(?)", (idx_name,))
                if len(idx_cols) == 1 and idx_cols[0][0] is not None:
                    unique.add(idx_cols[0][0])
        if len(pk) == 1:
            unique.add(pk[0][1])
        return TableInfo(TableName(None, real), tuple(cols), tuple(c for _, c in sorted(pk)),
                         tuple(foreign_keys), frozenset(unique))

    def similar_tables(self, replica: Replica, name: TableName) -> list[str]:
        import difflib

        rows = replica.query("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        return difflib.get_close_matches(name.name, [r[0] for r in rows], n=3)

    def parse_type(self, type_text: str) -> SqlType:
        m = _TYPE.match(type_text or "")
        base = (m.group(1) if m else type_text).upper().strip()
        a = int(m.group(2)) if m and m.group(2) else None
        b = int(m.group(3)) if m and m.group(3) else None
        if base in ("UUID", "GUID", "UNIQUEIDENTIFIER"):
            return SqlType(Kind.UUID)
        if "BOOL" in base:
            return SqlType(Kind.BOOLEAN)
        if base in ("SMALLINT", "INT2", "TINYINT"):
            return SqlType(Kind.SMALLINT)
        if base in ("INT4", "MEDIUMINT"):
            return SqlType(Kind.INTEGER)
        if "INT" in base:
            return SqlType(Kind.BIGINT)       # SQLite integers are 64-bit
        if base in ("TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE", "DATETIMEOFFSET"):
            return SqlType(Kind.TIMESTAMPTZ)
        if base in ("DATETIME", "TIMESTAMP", "TIMESTAMP WITHOUT TIME ZONE", "DATETIME2", "SMALLDATETIME"):
            return SqlType(Kind.TIMESTAMP)
        if base == "DATE":
            return SqlType(Kind.DATE)
        if base in ("TIME", "TIME WITHOUT TIME ZONE"):
            return SqlType(Kind.TIME)
        if base in ("JSON", "JSONB"):
            return SqlType(Kind.JSON)
        if "CHAR" in base or "CLOB" in base or "TEXT" in base:
            return SqlType(Kind.TEXT, length=a)
        if base == "" or "BLOB" in base or base in ("BYTEA", "BINARY", "VARBINARY"):
            return SqlType(Kind.BYTES)
        if base == "REAL" or "FLOA" in base or "DOUB" in base:
            return SqlType(Kind.DOUBLE)
        if base in ("MONEY",):
            return decimal_type(19, 4)
        if "DEC" in base or "NUMERIC" in base:
            return decimal_type(a, b)
        raise SchemaError(f"unsupported SQLite column type {type_text!r}")

    def index_exists(self, replica: Replica, schema: str | None, name: str) -> bool:
        return bool(replica.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?", (name,)))
