"""Schema changes of merge articles (SQL Server's replicated ALTER TABLE for merge publications).

``ALTER TABLE ... ADD COLUMN`` (nullable, or with a constant default) and ``DROP COLUMN`` made at the
publisher are found by ``setup`` (or made by ``sparksync schema-change``), which regenerates the
publisher's triggers and records each change in ``sysmergeschemachange`` with a per-publication
number. The merge agent replays, at the start of every session, the changes a subscriber has not had
(its ``sysmergepublications.schema_version``), in order, in one transaction per subscriber: its
triggers go, its table is altered in its own dialect (an added column with the same default fills
the existing rows as it did at the publisher), the article's conflict table follows, its triggers come
back for the new columns. Data moves only after that, so no change ever carries a column the
destination does not have.

Changes that cannot be replicated are refused naming the article and what to do instead: a type
change, a primary-key change, a NOT NULL column without a default, a default that is not a constant
(every replica would compute its own), dropping the rowguid, a key, a foreign-key or a filter column.
"""

from __future__ import annotations

from dataclasses import replace

import sqlglot
from sqlglot import exp

from sparksync.dialects.model import Column, TableInfo, describe_drift, to_table_dict
from sparksync.dialects.replica import Replica
from sparksync.errors import SchemaDrift
from sparksync.filters import parse_filter
from sparksync.merge.conflicts.model import conflict_table_name
from sparksync.merge.tracking.articles import install_tracking, remove_tracking
from sparksync.merge.tracking.pending import flush as flush_log
from sparksync.merge.tracking.tracked import TrackedArticle, tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, PublicationRow
from sparksync.types import SqlType

REINIT = ("restore the table's shape, or drop the article from the publication's configuration, run "
          "'sparksync setup', add it back and run setup again (every subscriber receives a new snapshot of it)")


def constant_default(text: str | None, sqlglot_dialect: str, where: str) -> str | None:
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
                      f"for the existing rows, so it cannot be replicated: {REINIT}", obj=where)


def plan_changes(published: TableInfo, current: TableInfo, row: ArticleRow, others: list[ArticleRow], sqlglot_dialect: str,
                 where: str) -> list[dict]:
    """The replicable changes that turn ``published`` into ``current`` (added columns first, in table
    order, then dropped ones), or SchemaDrift naming every change that cannot be replicated."""
    before = {c.name: c for c in published.columns}
    after = {c.name: c for c in current.columns}
    problems = [f"column {n} changed type from {before[n].type} to {after[n].type}" for n in before
                if n in after and str(before[n].type) != str(after[n].type)]
    if tuple(published.primary_key) != tuple(current.primary_key):
        problems.append(f"primary key changed from {list(published.primary_key)} to {list(current.primary_key)}")
    used = _filter_columns(row, published, others)
    changes: list[dict] = []
    for c in current.columns:
        if c.name in before:
            continue
        default = constant_default(c.default, sqlglot_dialect, f"{where}, column {c.name}")
        if not c.nullable and default in (None, "NULL"):
            problems.append(f"column {c.name} was added NOT NULL without a default (the rows of every replica "
                            "would need a value)")
            continue
        changes.append({"schematype": "add_column", "column_name": c.name,
                        "column_def": {"name": c.name, "type": c.type.to_dict(), "nullable": c.nullable,
                                       "default": default}})
    for c in published.columns:
        if c.name in after:
            continue
        why = ("it is the rowguid column" if c.name == row.rowguid_column else
               "it is in the primary key" if c.name in published.primary_key else
               "it is in a foreign key" if any(c.name in fk.columns for fk in published.foreign_keys) else
               "a filter of the publication reads it" if c.name in used else None)
        if why:
            problems.append(f"column {c.name} was dropped but {why}")
            continue
        changes.append({"schematype": "drop_column", "column_name": c.name, "column_def": None})
    if problems:
        raise SchemaDrift(f"{where}: the table changed in a way that cannot be replicated: " + "; ".join(problems)
                          + f". {REINIT}", obj=where)
    return changes


def check_added_values(replica: Replica, table, changes: list[dict], where: str) -> None:
    """An added column must hold its default in every existing row: a value written before ``setup``
    picked the column up was not tracked (the triggers did not know the column), and a renamed column
    looks like one dropped and one added; either way the values would never reach the subscribers."""
    d = replica.dialect
    for ch in changes:
        if ch["schematype"] != "add_column":
            continue
        col, default = d.quote(ch["column_name"]), ch["column_def"]["default"]
        differs = f"{col} IS NOT NULL" if default in (None, "NULL") else f"({col} IS NULL OR {col} <> {default})"
        n = int(replica.scalar(f"SELECT count(*) FROM {d.table_sql(table)} WHERE {differs}") or 0)
        if n:
            raise SchemaDrift(
                f"{where}: column {ch['column_name']} was added but {n} existing row(s) hold a value other than its "
                f"default ({default or 'NULL'}): a renamed column, or values written before 'sparksync setup' picked "
                "the column up (not tracked); they would not reach the subscribers. Set them back to the default, run "
                f"setup, then write them again (tracked), or {REINIT}", obj=where)


def _filter_columns(row: ArticleRow, info: TableInfo, others: list[ArticleRow]) -> set[str]:
    """The columns of the article that a filter reads: its row filter, its join filters (its side),
    and the join filters of other articles of which it is the parent."""
    used: set[str] = set()
    if row.filter_clause:
        used |= set(parse_filter(row.filter_clause, [c.name for c in info.columns], "", parameters=True).columns)
    for j in row.join_filters or []:
        used |= _clause_columns(j["clause"], row.source_table)
    for other in others:
        for j in other.join_filters or []:
            if j["parent"] == row.name:
                used |= _clause_columns(j["clause"], row.source_table)
    return used


def _clause_columns(clause: str, table: str) -> set[str]:
    """Columns of ``table`` (qualified by its name) that a join clause reads."""
    try:
        tree = sqlglot.parse_one(clause)
    except sqlglot.errors.SqlglotError:
        return set()
    return {c.name for c in tree.find_all(exp.Column) if c.table.lower() == table.lower()}


def record(replica: Replica, pubid: str, publication: str, article: ArticleRow, changes: list[dict],
           new: TableInfo) -> int:
    """At the publisher, inside the transaction that regenerates the article's triggers: the changes
    in ``sysmergeschemachange``, the publication's schema version, the article's conflict table.
    Returns the new schema version."""
    version = schema_version(replica, pubid)
    generation = int(replica.dialect.current_open_generation(replica) or 0)
    for ch in changes:
        version += 1
        store.insert_row(replica, "sysmergeschemachange", {
            "pubid": pubid, "schemaversion": version, "artid": article.artid, "article": article.name,
            "schematype": ch["schematype"], "column_name": ch["column_name"], "column_def": ch["column_def"],
            "table_schema": to_table_dict(new), "generation": generation, "created_at": store.utcnow()})
        _alter_conflict_table(replica, publication, tracked_article(article), ch)
        _forget_column_versions(replica, tracked_article(article), ch)
    store.update(replica, PublicationRow, {"schema_version": version}, {"pubid": pubid})
    return version


def pending(publisher: Replica, pubid: str, after: int) -> list[dict]:
    """The publication's schema changes numbered above ``after``, in order."""
    rows = store.select_rows(publisher, "sysmergeschemachange", {"pubid": pubid}, order_by=("schemaversion",))
    return [r for r in rows if int(r["schemaversion"]) > after]


def schema_version(replica: Replica, pubid: str) -> int:
    prow = store.select_one(replica, PublicationRow, {"pubid": pubid})
    return (prow.schema_version or 0) if prow is not None else 0


def replay(sub: Replica, pubid: str, publication: str, changes: list[dict], nickname: int) -> list[str]:
    """Apply the publisher's schema changes at a subscriber, in order, in one transaction (its triggers
    regenerated for the new columns). Returns one line per change."""
    d = sub.dialect
    done = []
    with sub.transaction():
        for ch in changes:
            row = store.select_one(sub, ArticleRow, {"pubid": pubid, "artid": ch["artid"]})
            if row is None:           # an article it does not have (added later, delivered from a snapshot)
                continue
            art = tracked_article(row)
            remove_tracking(sub, art)
            flush_log(sub, wait=True)   # logged with the columns as they are, before the table changes
            table = d.table_sql(art.table)
            name = ch["column_name"]
            if ch["schematype"] == "add_column":
                col = _column(ch["column_def"])
                if art.info.column(name) is None:
                    sub.execute(f"ALTER TABLE {table} ADD COLUMN {_column_sql(sub, art.info, col)}")
                info = replace(art.info, columns=art.info.columns + (col,))
            else:
                if art.info.column(name) is not None:
                    sub.execute(f"ALTER TABLE {table} DROP COLUMN {d.quote(name)}")
                info = replace(art.info, columns=tuple(c for c in art.info.columns if c.name != name))
            _alter_conflict_table(sub, publication, art, ch)
            _forget_column_versions(sub, art, ch)
            new = TrackedArticle(art.artid, art.table, art.nickname, art.rowguid_column, art.column_tracking, info)
            store.update(sub, ArticleRow, {"table_schema": to_table_dict(info)}, {"pubid": pubid, "artid": ch["artid"]})
            install_tracking(sub, new, nickname)
            done.append(f"{row.name}: {'added' if ch['schematype'] == 'add_column' else 'dropped'} column {name}")
        if changes:
            store.update(sub, PublicationRow, {"schema_version": int(changes[-1]["schemaversion"])}, {"pubid": pubid})
    return done


def _column(definition: dict) -> Column:
    return Column(definition["name"], SqlType.from_dict(definition["type"]), bool(definition["nullable"]),
                  definition.get("default"))


def _column_sql(replica: Replica, info: TableInfo, col: Column) -> str:
    d = replica.dialect
    sql = f"{d.quote(col.name)} {d.render_column_type(info, col)}"
    if col.default not in (None, "NULL"):
        sql += f" DEFAULT {col.default}"
    if not col.nullable:
        sql += " NOT NULL"
    return sql


def _forget_column_versions(replica: Replica, art: TrackedArticle, ch: dict) -> None:
    """A dropped column leaves the column versions (colv) of the article's rows."""
    if ch["schematype"] != "drop_column" or not art.column_tracking:
        return
    contents = replica.meta("MSmerge_contents")
    replica.execute(f"UPDATE {contents} SET colv = {replica.dialect.json_without_key_sql('colv', ch['column_name'])} "
                    f"WHERE tablenick = {int(art.nickname)} AND colv IS NOT NULL")


def _alter_conflict_table(replica: Replica, publication: str, art: TrackedArticle, ch: dict) -> None:
    """The article's conflict table (the losing rows) follows: columns it gains are nullable there."""
    d = replica.dialect
    name = conflict_table_name(publication, art)
    if not d.metadata_table_exists(replica, name):
        return
    info = replica.reflect(d.metadata_table_name(name))
    have = {c.name for c in info.columns} if info is not None else set()
    col = ch["column_name"]
    if ch["schematype"] == "add_column" and col not in have:
        t = SqlType.from_dict(ch["column_def"]["type"])
        replica.execute(f"ALTER TABLE {d.metadata_table_sql(name)} ADD COLUMN {d.quote(col)} {d.render_type(t)}")
    elif ch["schematype"] == "drop_column" and col in have:
        replica.execute(f"ALTER TABLE {d.metadata_table_sql(name)} DROP COLUMN {d.quote(col)}")


def publisher_drift(publisher: Replica, articles: list[ArticleRow]) -> list[str]:
    """Articles whose table at the publisher differs from what was published (changed by a client
    since the last ``setup``), each with how."""

    out = []
    for row in articles:
        art = tracked_article(row)
        current = publisher.reflect(art.table)
        drift = ["the table was dropped"] if current is None else describe_drift(art.info, current)
        if drift:
            out.append(f"{row.name} ({'; '.join(drift)})")
    return out


