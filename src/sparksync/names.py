"""Object names: parsing ``schema.table``, validating, and the one quoting rule.

A name that could confuse SQL (quotes, backslashes, semicolons, control characters) is refused
with :class:`InvalidNameError` before it reaches a database; every name that is accepted is still
quoted by :func:`quote_ident` wherever it is rendered, so no name can inject SQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparksync.errors import InvalidNameError

MAX_IDENTIFIER_LENGTH = 63  # PostgreSQL's NAMEDATALEN - 1; SQLite has no limit, we keep one rule.
_FORBIDDEN = re.compile(r"[\"'`\\;\x00-\x1f\x7f-\x9f\[\]]")


def check_identifier(name: str, what: str = "name") -> str:
    """Return ``name`` if it is usable as an identifier, else raise InvalidNameError naming it."""
    if not isinstance(name, str) or not name:
        raise InvalidNameError(f"invalid {what}: empty", obj=str(name))
    if name != name.strip():
        raise InvalidNameError(f"invalid {what} {name!r}: leading or trailing spaces", obj=name)
    bad = _FORBIDDEN.search(name)
    if bad:
        raise InvalidNameError(
            f"invalid {what} {name!r}: the character {bad.group()!r} is not allowed in replicated names",
            obj=name,
        )
    if len(name.encode("utf-8")) > MAX_IDENTIFIER_LENGTH:
        raise InvalidNameError(f"invalid {what} {name!r}: longer than {MAX_IDENTIFIER_LENGTH} bytes", obj=name)
    return name


def quote_ident(name: str) -> str:
    """Quote one identifier for SQL (the standard double-quote rule shared by SQLite and PostgreSQL)."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """Quote a string as an SQL literal (the standard single-quote rule)."""
    return "'" + str(text).replace("'", "''") + "'"


@dataclass(frozen=True)
class TableName:
    """A table name with an optional schema (``None`` = the database's default schema)."""

    schema: str | None
    name: str

    @classmethod
    def parse(cls, text: str) -> TableName:
        if not isinstance(text, str) or not text.strip():
            raise InvalidNameError("invalid table name: empty", obj=str(text))
        parts = text.split(".")
        if len(parts) == 1:
            return cls(None, check_identifier(parts[0], "table name"))
        if len(parts) == 2:
            return cls(check_identifier(parts[0], "schema name"), check_identifier(parts[1], "table name"))
        raise InvalidNameError(f"invalid table name {text!r}: use 'table' or 'schema.table'", obj=text)

    def __str__(self) -> str:
        return self.name if self.schema is None else f"{self.schema}.{self.name}"

    def __lt__(self, other: TableName) -> bool:
        return (self.schema or "", self.name) < (other.schema or "", other.name)

    @property
    def slug(self) -> str:
        """A file-system and identifier friendly form (``Purchasing.Vendor`` -> ``Purchasing_Vendor``)."""
        return str(self).replace(".", "_")
