"""How a replication metadata table is declared (its columns, key, indexes) and grouped into a table set with a
version row of its own; ``schema.py`` declares the tables themselves."""

from __future__ import annotations

from dataclasses import dataclass

from sparksync.types import Kind, SqlType

INT = SqlType(Kind.INTEGER)
BIG = SqlType(Kind.BIGINT)
SMALL = SqlType(Kind.SMALLINT)
TEXT = SqlType(Kind.TEXT)
GUID = SqlType(Kind.UUID)
JSON = SqlType(Kind.JSON)
REAL = SqlType(Kind.DOUBLE)
BYTES = SqlType(Kind.BYTES)
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
    serial: str | None = None        # a primary key column numbered by the database (in insert order)


@dataclass(frozen=True)
class TableSet:
    """The metadata one role needs in a database, with its own version row (``version_id``)."""

    name: str
    version_id: int
    version: int
    tables: tuple[MetaTable, ...]


def C(name, type_, nullable=True, description=""):
    return MetaColumn(name, type_, nullable, description)
