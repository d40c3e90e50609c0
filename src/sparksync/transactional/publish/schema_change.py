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

from sparksync import locks
from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.dialects.model import Column, from_table_dict, parse_column_definition, to_table_dict
from sparksync.errors import ConfigurationError, SchemaError
from sparksync.filters import parse_filter
from sparksync.metadata import store
from sparksync.metadata.records import DistArticleRow
from sparksync.names import TableName, check_identifier
from sparksync.transactional.capture import capture_method
from sparksync.transactional.distribution import database as dst


def change(topology: Topology, publication: str, article: str, add: str | None = None,
           drop: str | None = None) -> dict:
    """Add (``add``: "Name type") or drop (``drop``: "Name") a column of an article. Returns the command."""
    pcfg = topology.publication(publication)
    if pcfg.kind != "transactional":
        raise ConfigurationError(f"publication {publication} is a merge publication; its schema changes are "
                                 "sparksync.merge.publish.schema_change.change", obj=publication)
    if (add is None) == (drop is None):
        raise ConfigurationError("give exactly one of --add-column and --drop-column")
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
            content: dict = {"action": "add_column", "column": {"name": col, "type": sqltype.to_dict()}}
        else:
            assert drop is not None                # exactly one of the two (checked above)
            c = info.column(drop)
            if c is None:
                raise SchemaError(f"{where}: no published column {drop}", obj=drop)
            if c.name in info.primary_key:
                raise SchemaError(f"{where}: {c.name} is in the primary key and cannot be dropped", obj=drop)
            if any(c.name in fk.columns for fk in info.foreign_keys):
                raise SchemaError(f"{where}: {c.name} is in a foreign key; drop the foreign key first", obj=drop)
            if row.filter and c.name in parse_filter(row.filter, info.column_names, where).columns:
                raise SchemaError(f"{where}: the row filter reads {c.name}", obj=drop)
            new = replace(info, columns=tuple(x for x in info.columns if x.name != c.name))
            ddl = f"ALTER TABLE {d.table_sql(name)} DROP COLUMN {d.quote(c.name)}"
            content = {"action": "drop_column", "column": {"name": c.name, "type": c.type.to_dict()}}
        content.update({"publication": publication, "article_id": row.article_id, "table_schema": to_table_dict(new)})
        row_filter = parse_filter(row.filter, new.column_names, where) if row.filter else None
        capture = capture_method(pub)
        with pub.transaction():
            capture.alter_table(pub, publication, row.article_id, ddl, new, row_filter)
            capture.post_marker(pub, publication, "ddl", content, row.article_id)
        with dist.transaction():
            store.update(dist, DistArticleRow, {"table_schema": to_table_dict(new)},
                         {"publication_id": p.publication_id, "article_id": row.article_id})
    return content
