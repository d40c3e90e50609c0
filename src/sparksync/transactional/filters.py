"""Row filters of transactional articles: a WHERE clause without WHERE (``ActiveFlag = 1``).

The clause is parsed once with sqlglot, checked (one boolean expression over the article's own
published columns; no subqueries, no statements, no functions sqlglot cannot translate), and
rendered for each place it runs: the publisher's snapshot query and publication (PostgreSQL), the
capture triggers (SQLite, over ``NEW``/``OLD``). Column names are matched case-insensitively and
always rendered quoted, so a filter can never inject SQL.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from ..errors import ConfigurationError
from ..types import Kind

_STATEMENTS = (exp.Select, exp.Subquery, exp.Query, exp.Insert, exp.Update, exp.Delete, exp.Drop, exp.Create,
               exp.Command, exp.Alter, exp.Placeholder, exp.Parameter, exp.Star)


_SQLGLOT_DIALECT = {"postgresql": "postgres", "sqlite": "sqlite"}    # Capabilities.name -> sqlglot's


class FilterError(ConfigurationError):
    code = "filter"


@dataclass(frozen=True)
class RowFilter:
    """A checked row filter. ``columns``: the published columns it reads."""

    text: str
    tree: exp.Expr
    columns: frozenset[str]

    def render(self, dialect: str, row: str | None = None, booleans: Sequence[str] = ()) -> str:
        """SQL for ``dialect`` ("postgres" | "sqlite"); ``row`` qualifies every column (``NEW``).
        ``booleans``: boolean columns, whose comparisons with 0/1 become TRUE/FALSE on PostgreSQL."""
        bools = {b.lower() for b in booleans}

        def fix(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Column):
                return exp.column(exp.to_identifier(node.name, quoted=True),
                                  table=exp.to_identifier(row, quoted=False) if row else None)
            if dialect == "postgres" and isinstance(node, (exp.EQ, exp.NEQ)):
                col, lit = node.this, node.expression
                if isinstance(lit, exp.Column):
                    col, lit = lit, col
                if isinstance(col, exp.Column) and col.name.lower() in bools and isinstance(lit, exp.Literal) \
                        and not lit.is_string and lit.this in ("0", "1"):
                    node = node.copy()
                    node.set("this", col.copy())
                    node.set("expression", exp.Boolean(this=lit.this == "1"))
            return node

        return self.tree.transform(fix).sql(dialect=dialect)

    def sql_for(self, database: str, columns: Sequence) -> str:
        """The condition for a query on a ``database`` (``Capabilities.name``) over a table with
        ``columns`` (its boolean columns compare with TRUE/FALSE where the database wants them to)."""
        return self.render(_SQLGLOT_DIALECT[database], booleans=[c.name for c in columns if c.type.kind is Kind.BOOLEAN])


def parse_filter(text: str, columns: Sequence[str], where: str) -> RowFilter:
    """Parse and check ``text`` against the article's published ``columns``; raise FilterError naming ``where``."""
    what = f"{where}: filter {text!r}"
    try:
        trees = [t for t in sqlglot.parse(text) if t is not None]
    except ParseError as e:
        raise FilterError(f"{what} is not a valid SQL condition: {str(e).splitlines()[0]}", obj=where) from None
    if len(trees) != 1:
        raise FilterError(f"{what}: write one condition (no ';', no statements)", obj=where)
    tree = trees[0]
    for node in tree.walk():
        if isinstance(node, _STATEMENTS):
            raise FilterError(f"{what}: subqueries, statements and parameters are not allowed in a row filter",
                              obj=where)
        if isinstance(node, exp.Anonymous):
            raise FilterError(f"{what}: unknown function {node.name}(); use built-in functions only", obj=where)
    if not isinstance(tree, (exp.Predicate, exp.Connector, exp.Not, exp.Paren, exp.Boolean, exp.Condition)) \
            or isinstance(tree, (exp.Column, exp.Literal)):
        raise FilterError(f"{what}: a row filter is a condition, such as ActiveFlag = 1", obj=where)
    by_lower = {c.lower(): c for c in columns}
    used = set()
    for col in list(tree.find_all(exp.Column)):
        if col.table:
            raise FilterError(f"{what}: write {col.name} without a table name", obj=where)
        name = by_lower.get(col.name.lower())
        if name is None:
            close = difflib.get_close_matches(col.name, list(columns), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise FilterError(f"{what}: no published column {col.name}{hint}", obj=where)
        col.set("this", exp.to_identifier(name, quoted=True))
        used.add(name)
    if not used:
        raise FilterError(f"{what}: the condition reads no column of the table", obj=where)
    return RowFilter(text, tree, frozenset(used))
