"""Filters of published tables, shared by both replication models.

A **row filter** is a WHERE clause without WHERE (``ActiveFlag = 1``, ``Territory = HOST_NAME()``); a
**join filter** relates a child article's rows to its parent article's
(``Customer.SalesPersonID = SalesPerson.SalesPersonID``). Each clause is parsed once with sqlglot,
checked (one boolean expression over the published columns; no subqueries, statements, other tables,
aggregates, or non-deterministic functions; only functions sqlglot translates), and rendered for each
place it runs: the publisher's snapshot query and publication (PostgreSQL), the capture triggers
(SQLite, over ``NEW``/``OLD``), partition evaluation. Column names are matched case-insensitively and
always rendered quoted, and parameter values are rendered as escaped literals, so a filter can never
inject SQL.

**Parameterized** row filters (merge publications, seed 002) call ``HOST_NAME()`` or ``SUSER_SNAME()``;
each subscription gives their values (its ``host_name`` and ``login``), so each one's partition is the
rows the filter keeps for its values.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from sparksync.errors import ConfigurationError
from sparksync.sql_flavor import SqlFlavor
from sparksync.types import Kind

_STATEMENTS = (exp.Select, exp.Subquery, exp.Query, exp.Insert, exp.Update, exp.Delete, exp.Drop, exp.Create,
               exp.Command, exp.Alter, exp.Placeholder, exp.Parameter, exp.Star)
_NOT_ROW_FUNCTIONS = (exp.AggFunc, exp.Window)
_NON_DETERMINISTIC_PREFIXES = ("Current", "Rand", "Uuid")     # now(), random(), current_user, uuid() ...

# The parameter functions of a filter (SQL Server's) -> the subscription setting that gives their value.
PARAMETER_FUNCTIONS = {"HOST_NAME": "host_name", "SUSER_SNAME": "login"}


class FilterError(ConfigurationError):
    code = "filter"


def _parameter(node: exp.Expr) -> str | None:
    """The subscription setting a parameter function call reads (``HOST_NAME()`` -> "host_name")."""
    if isinstance(node, exp.Anonymous) and not node.expressions:
        return PARAMETER_FUNCTIONS.get(str(node.name).upper())
    return None


Params = Mapping[str, "str | exp.Expr | None"]
"""What a parameter function stands for: a subscription's value (bound as an escaped literal), or an
SQL expression (a column of the partitions table, when one query evaluates every partition)."""


def partition_column(table: str, setting: str) -> exp.Expr:
    """``table.setting`` as a parameter's value: evaluate a filter for every row of a partitions table."""
    return exp.column(exp.to_identifier(setting, quoted=True), table=exp.to_identifier(table, quoted=False))


def _bind(node: exp.Expr, params: Params, what: str) -> exp.Expr:
    key = _parameter(node)
    if key is None:
        return node
    value = params.get(key)
    if isinstance(value, exp.Expr):
        return value.copy()
    if value is None:
        raise FilterError(f"{what} calls {str(node.name).upper()}(), which needs the subscription's {key}",
                          obj=key)
    return exp.Literal.string(value)


@dataclass(frozen=True)
class RowFilter:
    """A checked row filter. ``columns``: the published columns it reads; ``parameters``: the
    subscription settings it reads (empty: a static filter)."""

    text: str
    tree: exp.Expr
    columns: frozenset[str]
    parameters: frozenset[str] = frozenset()

    def render(self, sql: SqlFlavor, row: str | None = None, booleans: Sequence[str] = (),
               params: Params | None = None) -> str:
        """SQL for a database of flavor ``sql``; ``row`` qualifies every column (``NEW``).
        ``booleans``: boolean columns, whose comparisons with 0/1 become TRUE/FALSE where the database
        has a boolean type (``SqlFlavor.typed_booleans``).
        ``params``: the subscription's values of the parameter functions (``{"host_name": "N"}``)."""
        bools = {b.lower() for b in booleans}
        values = params or {}

        def fix(node: exp.Expr) -> exp.Expr:
            if isinstance(node, exp.Column):
                return exp.column(exp.to_identifier(node.name, quoted=True),
                                  table=exp.to_identifier(row, quoted=False) if row else None)
            if isinstance(node, exp.Anonymous):
                return _bind(node, values, f"filter {self.text!r}")
            if sql.typed_booleans and isinstance(node, (exp.EQ, exp.NEQ)):
                col, lit = node.this, node.expression
                if isinstance(lit, exp.Column):
                    col, lit = lit, col
                if isinstance(col, exp.Column) and col.name.lower() in bools and isinstance(lit, exp.Literal) \
                        and not lit.is_string and lit.this in ("0", "1"):
                    node = node.copy()
                    node.set("this", col.copy())
                    node.set("expression", exp.Boolean(this=lit.this == "1"))
            return node

        return self.tree.transform(fix).sql(dialect=sql.sqlglot)

    def sql_for(self, sql: SqlFlavor, columns: Sequence, params: Params | None = None) -> str:
        """The condition for a query on a database of flavor ``sql`` over a table with ``columns`` (its
        boolean columns compare with TRUE/FALSE where the database wants them to)."""
        return self.render(sql, booleans=[c.name for c in columns if c.type.kind is Kind.BOOLEAN], params=params)


def _parse_one(text: str, what: str, where: str) -> exp.Expr:
    try:
        trees = [t for t in sqlglot.parse(text) if t is not None]
    except ParseError as e:
        raise FilterError(f"{what} is not a valid SQL condition: {str(e).splitlines()[0]}", obj=where) from None
    if len(trees) != 1:
        raise FilterError(f"{what}: write one condition (no ';', no statements)", obj=where)
    tree = trees[0]
    for node in tree.walk():
        if isinstance(node, _STATEMENTS):
            raise FilterError(f"{what}: subqueries, statements and parameters are not allowed", obj=where)
        if isinstance(node, _NOT_ROW_FUNCTIONS):
            raise FilterError(f"{what}: {node.sql()} is not a function of one row", obj=where)
        if isinstance(node, exp.Anonymous) and _parameter(node) is None:
            name = str(node.name)
            hint = (f" ({name.upper()}() takes no arguments)" if name.upper() in PARAMETER_FUNCTIONS
                    else "; use built-in functions only")
            raise FilterError(f"{what}: unknown function {name}(){hint}", obj=where)
        if isinstance(node, exp.Func) and type(node).__name__.startswith(_NON_DETERMINISTIC_PREFIXES):
            raise FilterError(f"{what}: {node.sql()} is not deterministic: a row's partition must not change "
                              "unless the row does", obj=where)
    if not isinstance(tree, (exp.Predicate, exp.Connector, exp.Not, exp.Paren, exp.Boolean, exp.Condition)) \
            or isinstance(tree, (exp.Column, exp.Literal, exp.Anonymous)):
        raise FilterError(f"{what}: a filter is a condition, such as ActiveFlag = 1", obj=where)
    return tree


def _match_column(col: exp.Column, columns: Sequence[str], what: str, where: str, table: str = "") -> str:
    name = {c.lower(): c for c in columns}.get(col.name.lower())
    if name is None:
        close = difflib.get_close_matches(col.name, list(columns), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise FilterError(f"{what}: no published column {col.name}{' in ' + table if table else ''}{hint}", obj=where)
    return name


def parse_filter(text: str, columns: Sequence[str], where: str, parameters: bool = False) -> RowFilter:
    """Parse and check ``text`` against the article's published ``columns``; raise FilterError naming
    ``where``. ``parameters``: whether HOST_NAME() / SUSER_SNAME() may be used (merge publications)."""
    what = f"{where}: filter {text!r}"
    tree = _parse_one(text, what, where)
    used = set()
    for col in list(tree.find_all(exp.Column)):
        if col.table:
            raise FilterError(f"{what}: write {col.name} without a table name", obj=where)
        name = _match_column(col, columns, what, where)
        col.set("this", exp.to_identifier(name, quoted=True))
        used.add(name)
    params = {p for node in tree.find_all(exp.Anonymous) if (p := _parameter(node)) is not None}
    if params and not parameters:
        raise FilterError(f"{what}: HOST_NAME() and SUSER_SNAME() filter merge publications only (a "
                          "transactional publication sends the same rows to every subscriber)", obj=where)
    if not used:
        raise FilterError(f"{what}: the condition reads no column of the table", obj=where)
    return RowFilter(text, tree, frozenset(used), frozenset(params))


@dataclass(frozen=True)
class JoinFilter:
    """A checked join filter: a child article's row belongs to the partitions of the parent rows it
    joins. ``pairs``: (child column, parent column) of the clause's equalities when it is only a
    conjunction of them (an equi-join), else empty."""

    text: str
    tree: exp.Expr
    child_columns: frozenset[str]
    parent_columns: frozenset[str]
    pairs: tuple[tuple[str, str], ...]

    def render(self, sql: SqlFlavor, child: str, parent: str) -> str:
        """SQL for a database of flavor ``sql`` with the child's columns qualified by ``child`` and the
        parent's by ``parent`` (table aliases of the query the clause goes into)."""
        def fix(node: exp.Expr) -> exp.Expr:
            if isinstance(node, exp.Column):
                side = child if node.table == "child" else parent
                return exp.column(exp.to_identifier(node.name, quoted=True), table=exp.to_identifier(side, quoted=True))
            return node

        return self.tree.transform(fix).sql(dialect=sql.sqlglot)


def _table_matches(col: exp.Column, table: str) -> bool:
    """``Customer.X`` or ``Sales.Customer.X`` refers to table ``table`` (``Customer`` or ``Sales.Customer``)."""
    parts = [p.lower() for p in table.split(".")]
    ref = [p.lower() for p in (col.db, col.table) if p]
    return ref == parts[-len(ref):] if ref else False


def parse_join_filter(text: str, child: str, child_columns: Sequence[str], parent: str,
                      parent_columns: Sequence[str], where: str) -> JoinFilter:
    """Parse and check a join filter between ``child`` and ``parent`` (table names as configured);
    every column is written with its table (``Customer.SalesPersonID``)."""
    what = f"{where}: join filter {text!r}"
    if child.split(".")[-1].lower() == parent.split(".")[-1].lower():
        raise FilterError(f"{what}: a table cannot be filtered by a join with itself", obj=where)
    tree = _parse_one(text, what, where)
    if any(_parameter(n) is not None for n in tree.find_all(exp.Anonymous)):
        raise FilterError(f"{what}: parameters belong in the parent's row filter, not in a join filter", obj=where)
    used: dict[str, set[str]] = {"child": set(), "parent": set()}
    for col in list(tree.find_all(exp.Column)):
        if not col.table:
            raise FilterError(f"{what}: write {col.name} with its table ({child}.{col.name} or "
                              f"{parent}.{col.name})", obj=where)
        if _table_matches(col, child):
            side, table, columns = "child", child, child_columns
        elif _table_matches(col, parent):
            side, table, columns = "parent", parent, parent_columns
        else:
            raise FilterError(f"{what}: {col.sql()} is neither {child} nor {parent}", obj=where)
        name = _match_column(col, columns, what, where, table)
        col.replace(exp.column(exp.to_identifier(name, quoted=True), table=side))
        used[side].add(name)
    if not used["child"] or not used["parent"]:
        raise FilterError(f"{what}: the clause must relate a column of {child} to a column of {parent}", obj=where)
    return JoinFilter(text, tree, frozenset(used["child"]), frozenset(used["parent"]), _equi_pairs(tree))


def _equi_pairs(tree: exp.Expr) -> tuple[tuple[str, str], ...]:
    conjuncts = list(tree.flatten()) if isinstance(tree, exp.And) else [tree]
    pairs = []
    for c in conjuncts:
        if isinstance(c, exp.Paren):
            c = c.unnest()
        if not (isinstance(c, exp.EQ) and isinstance(c.this, exp.Column) and isinstance(c.expression, exp.Column)):
            return ()
        sides = {c.this.table: c.this.name, c.expression.table: c.expression.name}
        if set(sides) != {"child", "parent"}:
            return ()
        pairs.append((sides["child"], sides["parent"]))
    return tuple(pairs)
