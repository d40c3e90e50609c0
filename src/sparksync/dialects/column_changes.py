"""A published column changed in place: its type, its nullability, its default (``--alter-column``), or its
name (``--rename-column``), in either database's words.

What a replicated change may be: a type of the same family (integers of any width, text of any length,
decimals of any precision and scale), a nullability, a constant default. A change that widens keeps every
value; one that narrows (a smaller integer, a shorter text, fewer digits, NOT NULL) keeps them only where
every value fits, which ``not_fitting_sql`` counts on each replica before anything changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import sqlglot
from sqlglot import exp

from sparksync.dialects.model import Column
from sparksync.errors import ConfigurationError, SchemaDrift, SchemaError
from sparksync.names import check_identifier
from sparksync.types import Kind, SqlType

CONSTANT = "give a constant instead (a number, a quoted text, TRUE, FALSE or NULL)"
UNCHANGED = object()      # an alteration that leaves the default as it is

_INTEGERS = {Kind.SMALLINT: 16, Kind.INTEGER: 32, Kind.BIGINT: 64}


@dataclass(frozen=True)
class Alteration:
    """What ``--alter-column`` asks of one column: a new type, nullability and default (None: unchanged; the
    default ``UNCHANGED``, or a constant SQL literal, or None to drop it)."""

    column: str
    type_text: str | None = None
    nullable: bool | None = None
    default: object = UNCHANGED

    @property
    def changes_default(self) -> bool:
        return self.default is not UNCHANGED


_TYPE_TEXT = re.compile(r"^[A-Za-z][A-Za-z0-9_ ]*(\(\s*\d+\s*(,\s*\d+\s*)?\))?$")
_NOT_NULL = re.compile(r"\bNOT\s+NULL\s*$", re.I)
_NULL = re.compile(r"\bNULL\s*$", re.I)
_DROP_DEFAULT = re.compile(r"\bDROP\s+DEFAULT\s*$", re.I)
_DEFAULT = re.compile(r"\bDEFAULT\s+(.+)$", re.I | re.S)


def neutral_default(text: str | None, sqlglot_dialect: str, where: str, remedy: str = "") -> str | None:
    """A column default (as the database of ``sqlglot_dialect``, sqlglot's name of its SQL, writes it)
    as a dialect-neutral SQL literal ('x', 0, -1.5, TRUE, NULL), or None when there is none. Anything
    else (a function call, an expression) is refused."""
    if text is None:
        return None
    try:
        node = sqlglot.parse_one(text, read=sqlglot_dialect)
    except sqlglot.errors.SqlglotError:
        node = None
    while isinstance(node, (exp.Cast, exp.Paren)):
        node = node.this
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return "-" + node.this.name
    if isinstance(node, exp.Literal):
        return node.sql()
    if isinstance(node, exp.Boolean):
        return "TRUE" if node.this else "FALSE"
    if isinstance(node, exp.Null):
        return "NULL"
    raise SchemaDrift(f"{where}: the default {text} is not a constant; every replica would compute its own value "
                      f"for the existing rows, so it cannot be replicated{': ' + remedy if remedy else ''}", obj=where)


def parse_alteration(text: str, where: str) -> Alteration:
    """``'Name [type] [NOT NULL | NULL] [DEFAULT literal | DROP DEFAULT]'`` (at least one of the three)."""
    usage = (f"{where}: --alter-column takes 'name [type] [NOT NULL | NULL] [DEFAULT value | DROP DEFAULT]', e.g. "
             "'Phone varchar(40)' or 'Phone NOT NULL'")
    parts = text.strip().split(None, 1)
    if not parts:
        raise ConfigurationError(usage)
    column = check_identifier(parts[0], "column name")
    rest = parts[1].strip() if len(parts) > 1 else ""
    nullable: bool | None = None
    default: object = UNCHANGED
    changed = True
    while rest and changed:              # the clauses, from the end, in any order
        changed = False
        if (m := _DROP_DEFAULT.search(rest)) and default is UNCHANGED:
            default, rest, changed = None, rest[:m.start()].strip(), True
        elif (m := _NOT_NULL.search(rest)) and nullable is None:
            nullable, rest, changed = False, rest[:m.start()].strip(), True
        elif (m := _NULL.search(rest)) and nullable is None and not re.search(r"\bDEFAULT\s+NULL\s*$", rest, re.I):
            nullable, rest, changed = True, rest[:m.start()].strip(), True
        elif (m := _DEFAULT.search(rest)) and default is UNCHANGED:
            literal = m.group(1).strip()
            for clause in (_NOT_NULL, _NULL):           # DEFAULT 5 NOT NULL: the nullability after it
                if (n := clause.search(literal)) and nullable is None and literal[:n.start()].strip():
                    nullable = clause is _NULL
                    literal = literal[:n.start()].strip()
                    break
            default, rest, changed = literal, rest[:m.start()].strip(), True
    type_text = rest or None
    if type_text is None and nullable is None and default is UNCHANGED:
        raise ConfigurationError(f"{usage}; {text!r} changes nothing")
    if type_text is not None and (re.search(r"\b(PRIMARY|REFERENCES|CHECK|UNIQUE|COLLATE|CONSTRAINT)\b", type_text,
                                            re.I) or not _TYPE_TEXT.match(type_text)):
        raise ConfigurationError(f"{usage}; {type_text!r} is not a type (a name, with its length or precision "
                                 "and scale; constraints are not replicated)")
    return Alteration(column, type_text, nullable, default)


def parse_rename(text: str, where: str) -> tuple[str, str]:
    """``'Old New'`` -> (old, new)."""
    parts = text.split()
    if len(parts) != 2:
        raise ConfigurationError(f"{where}: --rename-column takes 'old new', e.g. 'Phone PhoneNumber'; got {text!r}")
    return check_identifier(parts[0], "column name"), check_identifier(parts[1], "column name")


def altered(old: Column, new_type: SqlType | None, alteration: Alteration, default: str | None) -> Column:
    """``old`` as the alteration leaves it (``default``: the alteration's default, as a constant literal)."""
    return replace(old, type=new_type or old.type,
                   nullable=old.nullable if alteration.nullable is None else alteration.nullable,
                   default=default if alteration.changes_default else old.default)


def target_column(d, column: Column, alteration: Alteration, where: str) -> Column:
    """``column`` as ``alteration`` leaves it, read in the words of dialect ``d`` (the publisher's): a type not of
    the column's family, or a default that is not a constant, refused by name."""
    new_type = None
    if alteration.type_text is not None:
        try:
            new_type = d.parse_type(alteration.type_text)
        except SchemaError as e:
            raise ConfigurationError(f"{where}: --alter-column: {e.message}") from None
        problem = type_change_problem(column.type, new_type)
        if problem:
            raise SchemaError(f"{where}: column {column.name} cannot become {new_type}: {problem}", obj=column.name)
    default = None
    if isinstance(alteration.default, str):
        default = neutral_default(alteration.default, d.capabilities.sql.sqlglot, f"{where}, column {column.name}",
                                  CONSTANT)
    return altered(column, new_type, alteration, default)


def type_change_problem(old: SqlType, new: SqlType) -> str | None:
    """Why a column of type ``old`` cannot become ``new`` in place at every replica, or None."""
    if old.kind in _INTEGERS and new.kind in _INTEGERS:
        return None
    if old.kind is Kind.TEXT and new.kind is Kind.TEXT:
        return None if old.fixed == new.fixed else "a blank-padded text and a varying one store different values"
    if old.kind is Kind.DECIMAL and new.kind is Kind.DECIMAL:
        return None
    if old == new:
        return None
    return (f"{old} and {new} are not of one family (an integer of another width, a text of another length or a "
            "decimal of other digits); its values would be converted differently by each database")


def narrows(old: Column, new: Column) -> bool:
    """Whether some value ``old`` holds may not fit ``new`` (checked on every replica first)."""
    return not_fitting(old, new, "x") is not None


def not_fitting(old: Column, new: Column, col: str) -> str | None:
    """An SQL condition (both databases) true of a value of column ``col`` that does not fit ``new``, or None
    when every value of ``old`` does."""
    conds = []
    a, b = old.type, new.type
    if a.kind in _INTEGERS and b.kind in _INTEGERS and _INTEGERS[b.kind] < _INTEGERS[a.kind]:
        bits = _INTEGERS[b.kind]
        conds.append(f"{col} < {-(2 ** (bits - 1))} OR {col} > {2 ** (bits - 1) - 1}")
    if a.kind is Kind.TEXT and b.kind is Kind.TEXT and b.length is not None and \
            (a.length is None or b.length < a.length):
        conds.append(f"length({col}) > {int(b.length)}")
    if a.kind is Kind.DECIMAL and b.kind is Kind.DECIMAL and b.precision is not None:
        whole_b = b.precision - (b.scale or 0)
        if a.precision is None or whole_b < a.precision - (a.scale or 0):
            conds.append(f"abs({col}) >= 1{'0' * whole_b}")
        if a.precision is None or (b.scale or 0) < (a.scale or 0):
            conds.append(f"{col} <> round({col}, {int(b.scale or 0)})")
    if old.nullable and not new.nullable:
        conds.append(f"{col} IS NULL")
    return " OR ".join(f"({c})" for c in conds) if conds else None
