"""``sparksync schema-change`` for a merge publication: a column added, dropped, altered (type, nullability,
default) or renamed at the publisher, in one transaction with the publication published again (the mechanics:
``schema_changes.py``; a narrowing is checked on every replica first: ``fitting.py``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

from sparksync import failpoints, locks
from sparksync.dialects import connect
from sparksync.dialects.column_changes import Alteration, parse_alteration, parse_rename, target_column
from sparksync.dialects.model import Column, parse_column_definition
from sparksync.errors import ConfigurationError, SchemaError
from sparksync.merge.publish.fitting import check_values_fit
from sparksync.merge.publish.publication import apply_publication, plan_publication
from sparksync.merge.publish.schema_changes import constant_default, filter_columns, plan_changes
from sparksync.merge.tracking.articles import remove_tracking
from sparksync.merge.tracking.pending import flush
from sparksync.merge.tracking.tracked import TrackedArticle, tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, PublicationRow
from sparksync.names import TableName, check_identifier

OPTIONS = ("--add-column", "--drop-column", "--alter-column", "--rename-column")


def change(topology, publication: str, article: str, add: str | None = None, drop: str | None = None,
           alter: str | None = None, rename: str | None = None) -> list[str]:
    """``sparksync schema-change`` for a merge publication: in one publisher transaction the article's
    triggers go, the table is altered (``add``: "Name type", a nullable column; ``drop``: "Name"; ``alter``:
    "Name [type] [NOT NULL | NULL] [DEFAULT value | DROP DEFAULT]"; ``rename``: "Old New"), and the
    publication is published again, which records the change and regenerates the triggers. A change that
    cannot be replicated rolls back whole; a narrowing is refused unless every replica's values fit. A table
    a client already altered that way is not altered again: the change is recorded. Returns what was recorded."""

    pcfg = topology.publication(publication)
    if sum(x is not None for x in (add, drop, alter, rename)) != 1:
        raise ConfigurationError(f"give exactly one of {', '.join(OPTIONS)}")
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
        row = rows[0]
        art = tracked_article(row)
        live = pub.reflect(art.table)
        if live is None:
            raise SchemaError(f"publication {publication}, article {row.name}: the table is gone", obj=row.name)
        where = f"publication {publication}, article {row.name}"
        declared: list[dict] = []
        notes: list[str] = []                          # what is said of the replicas not counted
        alter_table: Callable[[], object] | None      # the ALTER, None: a client made it already
        if add is not None:
            col, type_text = parse_column_definition(add, where)
            col = check_identifier(col, "column name")
            if art.info.column(col) is not None:
                raise SchemaError(f"{where}: column {col} already exists", obj=col)
            try:
                sqltype = d.parse_type(type_text)
            except SchemaError as e:
                raise ConfigurationError(f"{where}: --add-column {add!r}: {e.message}") from None
            alter_table = functools.partial(
                pub.execute, f"ALTER TABLE {d.table_sql(art.table)} ADD COLUMN {d.quote(col)} {d.render_type(sqltype)}")
        elif drop is not None:
            found = _published(art, drop, where)
            plan_changes(art.info, replace(art.info, columns=tuple(c for c in art.info.columns if c is not found)),
                         row, siblings, d, where, publication)     # refused before anything changes
            alter_table = functools.partial(pub.execute, f"ALTER TABLE {d.table_sql(art.table)} DROP COLUMN "
                                            f"{d.quote(found.name)}")
        elif rename is not None:
            old, new = parse_rename(rename, where)
            found = _published(art, old, where)
            _check_rename(topology, publication, row, siblings, found.name, new, where)
            declared = [{"schematype": "rename_column", "column_name": found.name, "column_def": {"name": new}}]
            alter_table = None if live.column(found.name) is None and live.column(new) is not None else \
                functools.partial(d.rename_column, pub, art.table, found.name, new)
        else:
            assert alter is not None
            alteration = parse_alteration(alter, where)
            found = _published(art, alteration.column, where)
            target = _target(pub, art, row, found, alteration, where)
            notes = check_values_fit(topology, publication, pub, prow, art, found, target, where)
            before = {"name": found.name, "type": found.type.to_dict(), "nullable": found.nullable}
            declared = [{"schematype": "alter_column", "column_name": found.name, "column_def": {
                "name": found.name, "type": target.type.to_dict(), "nullable": target.nullable,
                "default": target.default if alteration.changes_default else None,
                "set_default": alteration.changes_default, "before": before}}]
            have = live.column(found.name) or found
            goal = target if alteration.changes_default else replace(target, default=have.default)
            done = str(have.type) == str(goal.type) and have.nullable == goal.nullable and (
                not alteration.changes_default or
                constant_default(have.default, d.capabilities.sql.sqlglot, where) == goal.default)
            alter_table = None if done else \
                functools.partial(d.alter_column, pub, replace(art.info, name=art.table), have, goal)
        with pub.transaction():
            remove_tracking(pub, art)   # (locks the table: no write is logged until the transaction ends)
            flush(pub, wait=True)       # what was logged is read with the columns it was logged with
            if alter_table is not None:
                alter_table()
            failpoints.hit("schema_change.altered", publication)      # tests: altered, not yet recorded
            plan = plan_publication(pub, pcfg, {row.name: declared} if declared else None)
            result = apply_publication(pub, topology, plan)
    return [*result.get("schema_changes", []), *notes]


def _published(art: TrackedArticle, column: str, where: str) -> Column:
    found = art.info.column(column)
    if found is None:
        raise SchemaError(f"{where}: no published column {column} (columns: {', '.join(art.info.column_names)})",
                          obj=column)
    return found


def _check_rename(topology, publication: str, row: ArticleRow, siblings: list[ArticleRow], old: str, new: str,
                  where: str) -> None:
    """A rename the replicas can all follow: not the rowguid, a key or a foreign key (another article's
    published foreign key names it), nor a column the configuration names (a filter, a resolver's column, the
    published columns), which would have to change with it."""
    info = tracked_article(row).info
    if info.column(new) is not None:
        raise SchemaError(f"{where}: column {new} already exists", obj=new)
    why = ("it is the rowguid column" if old == row.rowguid_column else
           "it is in the primary key" if old in info.primary_key else
           "it is in a foreign key" if any(old in fk.columns for fk in info.foreign_keys) or any(
               old in fk.ref_columns and str(fk.ref_table) == row.name
               for s in siblings for fk in tracked_article(s).info.foreign_keys) else
           "a filter of the publication reads it" if old in filter_columns(row, info, siblings) else None)
    if why is None:
        cfg = next((a for a in topology.publication(publication).articles
                    if a.table_name.name.lower() == TableName.parse(row.name).name.lower()), None)
        if cfg is not None and cfg.resolver_column == old:
            why = "the article's resolver_column names it"
        elif cfg is not None and cfg.columns is not None and old in cfg.columns:
            why = "the article's columns in the configuration name it"
    if why:
        raise SchemaError(f"{where}: column {old} cannot be renamed: {why} (a rename every replica follows changes "
                          "nothing else; change that first)", obj=old)


def _target(pub, art: TrackedArticle, row: ArticleRow, found: Column, alteration: Alteration, where: str) -> Column:
    """The column as ``--alter-column`` leaves it, refused by name when a replica could not follow."""
    d = pub.dialect
    if found.name == row.rowguid_column or found.name in art.info.primary_key or \
            any(found.name in fk.columns for fk in art.info.foreign_keys):
        role = "the rowguid column" if found.name == row.rowguid_column else \
            "in the primary key" if found.name in art.info.primary_key else "in a foreign key"
        raise SchemaError(f"{where}: column {found.name} is {role}; its type, nullability and default are those of "
                          "the snapshot (reinitialize to change them)", obj=found.name)
    target = target_column(d, found, alteration, where)
    if target == found and not alteration.changes_default:
        raise SchemaError(f"{where}: column {found.name} already is {found.type}"
                          f"{'' if found.nullable else ' NOT NULL'}; nothing to change", obj=found.name)
    return target
