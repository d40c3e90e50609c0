"""The release before the tracking log, recreated in place on a replica: its tracking triggers (the
templates as that release shipped them, in previous_release/) on every article, no MSmerge_pending,
merge metadata version 6, and the rowguid a column of every table (as every release before keyed rowguids
had it on SQLite)."""

from __future__ import annotations

from pathlib import Path

import jinja2

from sparksync.dialects import connect
from sparksync.merge.tracking import identity, pending
from sparksync.merge.tracking.articles import published_articles
from sparksync.merge.tracking.tracked import tracked_article, trigger_context
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow
from sparksync.names import quote_ident, quote_literal

PREVIOUS = Path(__file__).resolve().parent / "previous_release"


def previous_triggers(r, ctx: dict) -> list[str]:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(PREVIOUS)), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["q"], env.filters["lit"] = quote_ident, quote_literal
    kind = r.dialect.capabilities.name
    name = "sqlite" if kind == "sqlite" else "postgres"
    extra = {} if kind == "sqlite" else {"schema": "sparksync", "columns": [
        {**c, "cmp": "::text" if c["type"].kind.name == "JSON" else ""} for c in ctx["columns"]]}
    text = env.get_template(f"{name}_merge_triggers.sql").render(**{**ctx, **extra})
    return [s.strip() for s in text.split("-- statement") if s.strip()]


def unkey(r, art) -> None:
    """A keyed article's rowguids back in a column of its table, as a release before keyed rowguids kept them."""
    d = r.dialect
    t, rg, ids = d.table_sql(art.table), d.quote(art.rowguid_column), r.meta(art.ids_table)
    d.drop_merge_triggers(r, art.table, art.trigger_id)
    r.execute(f"ALTER TABLE {t} ADD COLUMN {rg} UUID")
    r.execute(f"UPDATE {t} SET {rg} = (SELECT i.{rg} FROM {ids} AS i WHERE {identity.key_match(d, art, 'i', t)})")
    r.execute(d.render_rowguid_index(art.table, art.rowguid_column))
    identity.drop_rowguids(r, art)


def downgrade(url: str) -> None:
    """This replica as the previous release left it."""
    with connect(url) as r, r.transaction():
        pending.flush(r)
        ident = store.replica_identity(r)
        done = set()
        for row in store.select(r, ArticleRow):
            if row.rowguid_keyed and row.artid not in done:
                unkey(r, tracked_article(row))
                done.add(row.artid)
        for prow in store.select_rows(r, "sysmergepublications"):
            for a in published_articles(r, prow["pubid"]):
                for stmt in previous_triggers(r, trigger_context(r, tracked_article(a), ident.nickname)):
                    r.execute(stmt)
        r.execute(f"ALTER TABLE {r.meta('sysmergearticles')} DROP COLUMN rowguid_keyed")
        r.execute(f"DROP TABLE {r.dialect.metadata_table_sql('MSmerge_pending')}")
        r.execute(f"UPDATE {r.dialect.metadata_table_sql('sparksync_metadata_version')} SET version = 6 WHERE id = 1")
