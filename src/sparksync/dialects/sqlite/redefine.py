"""A column's declared type, nullability and default changed on SQLite, which has no ALTER COLUMN.

SQLite documents two ways (https://sqlite.org/lang_altertable.html, "Making Other Kinds Of Table Schema
Changes"): rebuild the table (copy every row into a new one, which needs foreign keys switched off outside any
transaction, and every index and trigger made again), or, for a change that leaves what is stored as it is,
rewrite the table's definition in ``sqlite_schema`` and bump the schema version, in the same transaction as
the rest. A replicated column change is of the second kind: a type of the same family keeps the column's
affinity (integers INTEGER, texts TEXT, decimals NUMERIC; SQLite enforces neither width nor length), a default
is only read when a row is inserted, and NOT NULL is set only once no row holds a NULL (checked here, in the
transaction). So the definition of that one column is rewritten, its other clauses (PRIMARY KEY, REFERENCES,
CHECK, COLLATE) kept word for word; the indexes, triggers and foreign keys of other tables are not touched, and
no row is read or written (but for counting the NULLs a NOT NULL needs), whatever the table's size. The new
definition is read by SQLite on a database of its own before it is written, so a file is never left with one it
cannot read.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sparksync.dialects.model import Column
from sparksync.errors import SchemaError

if TYPE_CHECKING:
    from sparksync.dialects.replica import Replica

_TOKEN = re.compile(r"""\s+|--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'|"(?:[^"]|"")*"|`(?:[^`]|``)*`|\[[^\]]*\]"""
                    r"""|[A-Za-z_][A-Za-z0-9_$]*|[0-9.]+(?:[eE][+-]?[0-9]+)?|.""", re.S)
_CONSTRAINT_WORDS = {"CONSTRAINT", "PRIMARY", "NOT", "NULL", "UNIQUE", "CHECK", "DEFAULT", "COLLATE", "REFERENCES",
                     "GENERATED", "AS"}


def _tokens(sql: str) -> list[tuple[str, int, int]]:
    """(text, start, end) of each token that is not blank or a comment."""
    out = []
    for m in _TOKEN.finditer(sql):
        t = m.group(0)
        if t.isspace() or t.startswith("--") or t.startswith("/*"):
            continue
        out.append((t, m.start(), m.end()))
    return out


def _unquote(t: str) -> str:
    if t[:1] in "\"`" and t[-1:] == t[:1]:
        return t[1:-1].replace(t[0] * 2, t[0])
    if t[:1] == "[" and t[-1:] == "]":
        return t[1:-1]
    return t


def _column_definitions(sql: str) -> list[list[tuple[str, int, int]]]:
    """The tokens of each top-level element of a CREATE TABLE's parenthesized list."""
    tokens = _tokens(sql)
    depth = 0
    out: list[list[tuple[str, int, int]]] = []
    cur: list[tuple[str, int, int]] = []
    for tok in tokens:
        t = tok[0]
        if t == "(":
            depth += 1
            if depth == 1:
                continue
        elif t == ")":
            depth -= 1
            if depth == 0:
                out.append(cur)
                break
        if depth == 1 and t == ",":
            out.append(cur)
            cur = []
        elif depth >= 1:
            cur.append(tok)
    return [d for d in out if d]


def _clauses(definition: list[tuple[str, int, int]]) -> tuple[int, list[tuple[int, int]]]:
    """The index of the first constraint token of a column definition (after its name and type), and the
    spans (start, end) of its NOT NULL / NULL and DEFAULT clauses."""
    i = 1
    while i < len(definition) and definition[i][0].upper() not in _CONSTRAINT_WORDS:
        if definition[i][0] == "(":             # varchar(10), numeric(10, 2)
            while i < len(definition) and definition[i][0] != ")":
                i += 1
        i += 1
    first = i
    spans = []
    while i < len(definition):
        word = definition[i][0].upper()
        if word == "NOT" and i + 1 < len(definition) and definition[i + 1][0].upper() == "NULL":
            spans.append((definition[i][1], definition[i + 1][2]))
            i += 2
            continue
        if word == "NULL":
            spans.append((definition[i][1], definition[i][2]))
        elif word == "DEFAULT" and i + 1 < len(definition):
            j = i + 1
            if definition[j][0] in "+-" and j + 1 < len(definition):
                j += 1
            elif definition[j][0] == "(":
                depth = 0
                while j < len(definition):
                    depth += {"(": 1, ")": -1}.get(definition[j][0], 0)
                    if depth == 0:
                        break
                    j += 1
            spans.append((definition[i][1], definition[j][2]))
            i = j
        i += 1
    return first, spans


def redefine_column(replica: Replica, table: str, old: Column, new: Column, new_type: str) -> str | None:
    """Make column ``old`` of ``table`` (its name as created) ``new`` in place, in the caller's transaction:
    declared type ``new_type``, ``new``'s nullability and default. Returns the new CREATE TABLE, or None when
    the declaration already says so."""
    if old.nullable and not new.nullable:
        q = replica.dialect.quote
        n = int(replica.scalar(f"SELECT count(*) FROM {q(table)} WHERE {q(old.name)} IS NULL") or 0)
        if n:
            raise SchemaError(f"table {table}: column {old.name} cannot be made NOT NULL: {n} row(s) hold NULL",
                              obj=f"{table}.{old.name}")
    sql = replica.scalar("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
    if not sql:
        raise SchemaError(f"table {table} not found", obj=table)
    found = [d for d in _column_definitions(sql) if _unquote(d[0][0]).lower() == old.name.lower()]
    if len(found) != 1:
        raise SchemaError(f"table {table}: the definition of column {old.name} could not be read from its "
                          "CREATE TABLE", obj=f"{table}.{old.name}")
    definition = found[0]
    first, spans = _clauses(definition)
    type_end = definition[first - 1][2]
    pieces = [sql[:definition[0][2]], f" {new_type}"]
    cut = type_end
    for s, e in spans:                       # the other clauses as they were, without nullability and default
        pieces.append(sql[cut:s].rstrip())
        cut = e
    end = definition[-1][2]
    pieces.append(sql[cut:end])
    if not new.nullable:
        pieces.append(" NOT NULL")
    if new.default not in (None, "NULL"):
        pieces.append(f" DEFAULT {new.default}")
    pieces.append(sql[end:])
    rewritten = "".join(pieces)
    if rewritten == sql:
        return None
    _check_definition(rewritten, table, old.name)
    version = int(replica.scalar("PRAGMA schema_version"))
    replica.execute("PRAGMA writable_schema = ON")
    try:
        replica.execute("UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = ?", (rewritten, table))
        replica.execute(f"PRAGMA schema_version = {version + 1}")
    finally:
        replica.execute("PRAGMA writable_schema = OFF")
    return rewritten


def _check_definition(sql: str, table: str, column: str) -> None:
    """The rewritten CREATE TABLE is one SQLite reads (tried on a database of its own first: a definition it
    could not read would leave the file unreadable)."""
    import sqlite3

    probe = sqlite3.connect(":memory:")
    try:
        probe.execute(sql)
    except sqlite3.Error as e:
        raise SchemaError(f"table {table}: column {column} could not be redefined ({e}); nothing was changed",
                          obj=f"{table}.{column}") from None
    finally:
        probe.close()
