"""``sparksync schema-change`` for a merge publication: one column added or dropped at the publisher, in one
transaction with the publication published again (the mechanics: ``schema_changes.py``)."""

from __future__ import annotations

from dataclasses import replace

from sparksync import locks
from sparksync.dialects import connect
from sparksync.dialects.model import parse_column_definition
from sparksync.errors import ConfigurationError, SchemaError
from sparksync.merge.publish.publication import apply_publication, plan_publication
from sparksync.merge.publish.schema_changes import plan_changes
from sparksync.merge.tracking.articles import remove_tracking
from sparksync.merge.tracking.pending import flush
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, PublicationRow
from sparksync.names import TableName, check_identifier

SQLGLOT_DIALECT = {"sqlite": "sqlite", "postgresql": "postgres"}
REINIT = ("restore the table's shape, or drop the article from the publication's configuration, run "
          "'sparksync setup', add it back and run setup again (every subscriber receives a new snapshot of it)")


def change(topology, publication: str, article: str, add: str | None = None, drop: str | None = None) -> list[str]:
    """``sparksync schema-change`` for a merge publication: in one publisher transaction the article's
    triggers go, the table is altered (``add``: "Name type", a nullable column; ``drop``: "Name"), and
    the publication is published again, which records the change and regenerates the triggers. A
    change that cannot be replicated rolls back whole. Returns what was recorded."""

    pcfg = topology.publication(publication)
    if (add is None) == (drop is None):
        raise ConfigurationError("give exactly one of --add-column and --drop-column")
    with locks.hold(topology, "schema-change", [publication]), \
            connect(topology.publisher_url, topology.publisher.name) as pub:
        store.require_metadata(pub)
        d = pub.dialect
        prow = store.select_one(pub, PublicationRow, {"name": publication})
        if prow is None:
            raise SchemaError(f"publication {publication} is not published; run 'sparksync setup'", obj=publication)
        name = d.resolve_name(TableName.parse(article))
        siblings = store.select(pub, ArticleRow, {"pubid": prow.pubid})
        rows = [r for r in siblings if r.name == str(name)]
        if not rows:
            raise SchemaError(f"publication {publication} has no article {article}", obj=article)
        art = tracked_article(rows[0])
        where = f"publication {publication}, article {rows[0].name}"
        if add is not None:
            col, type_text = parse_column_definition(add, where)
            col = check_identifier(col, "column name")
            if art.info.column(col) is not None:
                raise SchemaError(f"{where}: column {col} already exists", obj=col)
            try:
                sqltype = d.parse_type(type_text)
            except SchemaError as e:
                raise ConfigurationError(f"{where}: --add-column {add!r}: {e.message}") from None
            ddl = f"ALTER TABLE {d.table_sql(art.table)} ADD COLUMN {d.quote(col)} {d.render_type(sqltype)}"
        else:
            assert drop is not None
            found = art.info.column(drop)
            if found is None:
                raise SchemaError(f"{where}: no published column {drop}", obj=drop)
            plan_changes(art.info, replace(art.info, columns=tuple(c for c in art.info.columns if c is not found)),
                         rows[0], siblings, d.capabilities.sql.sqlglot, where)     # refused before anything changes
            ddl = f"ALTER TABLE {d.table_sql(art.table)} DROP COLUMN {d.quote(found.name)}"
        with pub.transaction():
            remove_tracking(pub, art)   # (locks the table: no write is logged until the transaction ends)
            flush(pub, wait=True)       # what was logged is read with the columns it was logged with
            pub.execute(ddl)
            plan = plan_publication(pub, pcfg)
            result = apply_publication(pub, topology, plan)
    return list(result.get("schema_changes", []))
