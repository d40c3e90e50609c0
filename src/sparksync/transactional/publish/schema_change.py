"""Schema changes of published tables (SQL Server's replicated ALTER TABLE): add or drop a column of
a transactional article, at the publisher, and replicate the change in order with the data.

In one publisher transaction the table is altered and a schema change command is written to the
log (PostgreSQL: a logical decoding message; SQLite: a row of the capture log, whose triggers are
re-created for the new columns). Changes committed before it carry the old columns, after it the
new ones. The distribution agent applies the command at each subscriber in order, in the same
transaction as the commands around it and its watermark: it alters the table there and regenerates
the article's generated procedures for the new parameter layout (custom procedures are the user's
to change, as in SQL Server). An added column is nullable.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

from sparksync import locks
from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.dialects.column_changes import not_fitting, parse_alteration, parse_rename, target_column
from sparksync.dialects.model import Column, TableInfo, from_table_dict, parse_column_definition, to_table_dict
from sparksync.dialects.replica import Replica
from sparksync.errors import ConfigurationError, SchemaError
from sparksync.filters import parse_filter
from sparksync.metadata import store
from sparksync.metadata.records import DistArticleRow
from sparksync.names import TableName, check_identifier
from sparksync.transactional.capture import capture_method
from sparksync.transactional.distribution import database as dst
from sparksync.types import SqlType


def change(topology: Topology, publication: str, article: str, add: str | None = None,
           drop: str | None = None, alter: str | None = None, rename: str | None = None) -> dict:
    """One column of an article added (``add``: "Name type"), dropped (``drop``: "Name"), altered (``alter``:
    "Name [type] [NOT NULL | NULL] [DEFAULT value | DROP DEFAULT]", a narrowing only when the publisher's values
    fit) or renamed (``rename``: "Old New"). Returns the command."""
    pcfg = topology.publication(publication)
    if pcfg.kind != "transactional":
        raise ConfigurationError(f"publication {publication} is a merge publication; its schema changes are "
                                 "sparksync.merge.publish.schema_change.change", obj=publication)
    if sum(x is not None for x in (add, drop, alter, rename)) != 1:
        raise ConfigurationError("give exactly one of --add-column, --drop-column, --alter-column, --rename-column")
    with locks.hold(topology, "schema-change", [publication]), \
            connect(topology.distributor_url, "distributor") as dist, \
            connect(topology.publisher_url, topology.publisher.name) as pub:
        p = dst.require_publication(dist, publication)
        d = pub.dialect
        name = d.resolve_name(TableName.parse(article))
        rows = [a for a in p.articles if a.active and a.name == str(name)]
        if not rows:
            raise SchemaError(f"publication {publication} has no article {article} "
                              f"(articles: {', '.join(a.name for a in p.articles if a.active)})",
                              obj=article)
        row = rows[0]
        info = from_table_dict(row.table_schema)
        where = f"publication {publication}, article {row.name}"
        cfg = next(a for a in pcfg.articles if str(d.resolve_name(a.table_name)) == row.name)
        live = pub.reflect(name) or info
        alter_step: Callable[[Replica], object]
        if add is not None:
            col, type_text = parse_column_definition(add, where)
            col = check_identifier(col, "column name")
            if info.column(col) is not None or live.column(col) is not None:
                raise SchemaError(f"{where}: column {col} already exists", obj=col)
            if cfg.columns is not None and col not in cfg.columns:
                raise SchemaError(f"{where}: the article publishes the columns {cfg.columns}; add {col} to its "
                                  "columns in the configuration first", obj=col)
            try:
                sqltype = d.parse_type(type_text)
            except SchemaError as e:
                raise ConfigurationError(f"{where}: --add-column {add!r}: {e.message}") from None
            new = replace(info, columns=info.columns + (Column(col, sqltype, True),))
            ddl = f"ALTER TABLE {d.table_sql(name)} ADD COLUMN {d.quote(col)} {d.render_type(sqltype)}"
            alter_step = functools.partial(_run, ddl)
            content: dict = {"action": "add_column", "column": {"name": col, "type": sqltype.to_dict()}}
        elif drop is not None:
            c = _published(info, drop, where)
            _check_not_key(info, c.name, where, "dropped")
            if row.filter and c.name in parse_filter(row.filter, info.column_names, where).columns:
                raise SchemaError(f"{where}: the row filter reads {c.name}", obj=drop)
            new = replace(info, columns=tuple(x for x in info.columns if x.name != c.name))
            alter_step = functools.partial(_run, f"ALTER TABLE {d.table_sql(name)} DROP COLUMN {d.quote(c.name)}")
            content = {"action": "drop_column", "column": {"name": c.name, "type": c.type.to_dict()}}
        elif rename is not None:
            old, to = parse_rename(rename, where)
            c = _published(info, old, where)
            _check_not_key(info, c.name, where, "renamed")
            if info.column(to) is not None:
                raise SchemaError(f"{where}: column {to} already exists", obj=to)
            if row.filter and c.name in parse_filter(row.filter, info.column_names, where).columns:
                raise SchemaError(f"{where}: the row filter reads {c.name}; it cannot be renamed", obj=old)
            if cfg.columns is not None:
                raise SchemaError(f"{where}: the article publishes the columns {cfg.columns} named in the "
                                  "configuration; a rename would leave them behind", obj=old)
            new = replace(info, columns=tuple(replace(x, name=to) if x.name == c.name else x for x in info.columns))
            done = live.column(c.name) is None and live.column(to) is not None
            alter_step = (lambda r: None) if done else (lambda r: r.dialect.rename_column(r, name, c.name, to))
            content = {"action": "rename_column", "column": {"name": c.name, "type": c.type.to_dict()},
                       "to": to}
        else:
            assert alter is not None
            alteration = parse_alteration(alter, where)
            c = _published(info, alteration.column, where)
            _check_not_key(info, c.name, where, "altered")
            target = target_column(d, c, alteration, where)
            have = live.column(c.name) or c
            goal = target if alteration.changes_default else replace(target, default=have.default)
            cond = not_fitting(have, goal, d.quote(c.name))
            if cond is not None:
                n = int(pub.scalar(f"SELECT count(*) FROM {d.table_sql(name)} WHERE {cond}") or 0)
                if n:
                    raise SchemaError(f"{where}: column {c.name} cannot become {goal.type}"
                                      f"{'' if goal.nullable else ' NOT NULL'}: {n} row(s) at the publisher hold a "
                                      "value that does not fit. Nothing was changed", obj=c.name)
            new = replace(info, columns=tuple(replace(x, type=target.type, nullable=target.nullable)
                                              if x.name == c.name else x for x in info.columns))
            alter_step = functools.partial(_alter, replace(info, name=name), have, goal)
            content = {"action": "alter_column", "column": {
                "name": c.name, "type": target.type.to_dict(), "nullable": target.nullable,
                "default": target.default if alteration.changes_default else None,
                "set_default": alteration.changes_default}}
        content.update({"publication": publication, "article_id": row.article_id, "table_schema": to_table_dict(new)})
        row_filter = parse_filter(row.filter, new.column_names, where) if row.filter else None
        capture = capture_method(pub)
        with pub.transaction():
            capture.alter_table(pub, publication, row.article_id, alter_step, new, row_filter)
            capture.post_marker(pub, publication, "ddl", content, row.article_id)
        with dist.transaction():
            store.update(dist, DistArticleRow, {"table_schema": to_table_dict(new)},
                         {"publication_id": p.publication_id, "article_id": row.article_id})
    return content


def describe(content: dict) -> str:
    """A schema change command in words."""
    col = content["column"]
    action = content["action"]
    if action == "add_column":
        return f"column {col['name']} added"
    if action == "drop_column":
        return f"column {col['name']} dropped"
    if action == "rename_column":
        return f"column {col['name']} renamed to {content['to']}"
    said = [str(SqlType.from_dict(col["type"])), "NULL" if col["nullable"] else "NOT NULL"]
    if col.get("set_default"):
        said.append("no default" if col.get("default") in (None, "NULL") else f"DEFAULT {col['default']}")
    return f"column {col['name']} altered ({', '.join(said)})"


def _run(sql: str, replica: Replica) -> None:
    replica.execute(sql)


def _alter(table: TableInfo, old: Column, new: Column, replica: Replica) -> None:
    replica.dialect.alter_column(replica, table, old, new)


def _published(info: TableInfo, column: str, where: str) -> Column:
    c = info.column(column)
    if c is None:
        raise SchemaError(f"{where}: no published column {column}", obj=column)
    return c


def _check_not_key(info: TableInfo, column: str, where: str, done: str) -> None:
    if column in info.primary_key:
        raise SchemaError(f"{where}: {column} is in the primary key and cannot be {done}", obj=column)
    if any(column in fk.columns for fk in info.foreign_keys):
        raise SchemaError(f"{where}: {column} is in a foreign key; drop the foreign key first", obj=column)
