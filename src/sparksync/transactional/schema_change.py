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

from dataclasses import replace

from .. import locks
from ..config import Topology
from ..dialects import connect
from ..dialects.model import Column, from_table_dict, to_table_dict
from ..errors import ConfigurationError, SchemaError
from ..filters import parse_filter
from ..metadata import store
from ..names import TableName, check_identifier
from . import distribution as dst
from .capture import capture_method


def parse_column_definition(text: str, where: str) -> tuple[str, str]:
    """``--add-column`` text -> (name, type). One column with a type and nothing else: a second
    statement, NOT NULL, DEFAULT, PRIMARY KEY, CHECK, REFERENCES or COLLATE are refused (a replicated
    schema change adds a plain nullable column), never silently dropped."""
    import sqlglot
    from sqlglot import exp

    usage = f"{where}: --add-column takes 'name type', e.g. 'Email varchar(100)'"
    if text.split():
        check_identifier(text.split()[0], "column name")     # a quote or a control character: said as such
    try:
        statements = sqlglot.parse(f"CREATE TABLE t ({text})", read="postgres")
    except sqlglot.errors.SqlglotError:
        raise ConfigurationError(f"{usage}; {text!r} is not one column definition") from None
    columns = statements[0].this.expressions if len(statements) == 1 and statements[0] else []
    if len(columns) != 1 or not isinstance(columns[0], exp.ColumnDef) or columns[0].args.get("kind") is None:
        raise ConfigurationError(f"{usage}; {text!r} is not one column definition")
    column = columns[0]
    constraints = column.args.get("constraints") or []
    if constraints:
        what = ", ".join(c.sql("postgres") for c in constraints)
        raise ConfigurationError(f"{where}: --add-column {text!r}: {what} is not replicated; a schema change adds a "
                                 "nullable column with a type and nothing else")
    return column.name, column.args["kind"].sql("postgres")


def change(topology: Topology, publication: str, article: str, add: str | None = None,
           drop: str | None = None) -> dict:
    """Add (``add``: "Name type") or drop (``drop``: "Name") a column of an article. Returns the command."""
    pcfg = topology.publication(publication)
    if pcfg.kind != "transactional":
        raise ConfigurationError(f"publication {publication} is a merge publication; its schema changes are "
                                 "sparksync.merge.schema_changes.change", obj=publication)
    if (add is None) == (drop is None):
        raise ConfigurationError("give exactly one of --add-column and --drop-column")
    with locks.hold(topology, "schema-change", [publication]), \
            connect(topology.distributor_url, "distributor") as dist, \
            connect(topology.publisher_url, topology.publisher.name) as pub:
        p = dst.require_publication(dist, publication)
        d = pub.dialect
        name = d.resolve_name(TableName.parse(article))
        rows = [a for a in p.articles if a["status"] == 1 and a["name"] == str(name)]
        if not rows:
            raise SchemaError(f"publication {publication} has no article {article} "
                              f"(articles: {', '.join(a['name'] for a in p.articles if a['status'] == 1)})",
                              obj=article)
        row = rows[0]
        info = from_table_dict(row["table_schema"])
        where = f"publication {publication}, article {row['name']}"
        cfg = next(a for a in pcfg.articles if str(d.resolve_name(a.table_name)) == row["name"])
        if add is not None:
            col, type_text = parse_column_definition(add, where)
            col = check_identifier(col, "column name")
            if info.column(col) is not None or (pub.reflect(name) or info).column(col) is not None:
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
            content = {"action": "add_column", "column": {"name": col, "type": sqltype.to_dict()}}
        else:
            assert drop is not None                # exactly one of the two (checked above)
            c = info.column(drop)
            if c is None:
                raise SchemaError(f"{where}: no published column {drop}", obj=drop)
            if c.name in info.primary_key:
                raise SchemaError(f"{where}: {c.name} is in the primary key and cannot be dropped", obj=drop)
            if any(c.name in fk.columns for fk in info.foreign_keys):
                raise SchemaError(f"{where}: {c.name} is in a foreign key; drop the foreign key first", obj=drop)
            if row["filter"] and c.name in parse_filter(row["filter"], info.column_names, where).columns:
                raise SchemaError(f"{where}: the row filter reads {c.name}", obj=drop)
            new = replace(info, columns=tuple(x for x in info.columns if x.name != c.name))
            ddl = f"ALTER TABLE {d.table_sql(name)} DROP COLUMN {d.quote(c.name)}"
            content = {"action": "drop_column", "column": {"name": c.name, "type": c.type.to_dict()}}
        content.update({"publication": publication, "article_id": row["article_id"], "table_schema": to_table_dict(new)})
        row_filter = parse_filter(row["filter"], new.column_names, where) if row["filter"] else None
        capture = capture_method(pub)
        with pub.transaction():
            capture.alter_table(pub, publication, row["article_id"], ddl, new, row_filter)
            capture.post_marker(pub, publication, "ddl", content, row["article_id"])
        with dist.transaction():
            store.update_rows(dist, "MSarticles", {"table_schema": to_table_dict(new)},
                              {"publication_id": p.publication_id, "article_id": row["article_id"]})
    return content
