"""Schema changes of merge articles (SQL Server's replicated ALTER TABLE for merge publications).

``ALTER TABLE ... ADD COLUMN`` (nullable, or with a constant default) made at the publisher with any client is
found by ``setup``; ``sparksync schema-change`` adds, drops, alters (type, nullability, default) or renames a
column. Either way the publisher's triggers are regenerated and each change recorded in
``sysmergeschemachange`` with a per-publication number. The merge agent replays, at the start of every session,
the changes a subscriber has not had (its ``sysmergepublications.schema_version``), in order, in one
transaction per subscriber (a device: at the start of its sync): its triggers go, its table is altered in its
own dialect (an added column with the same default fills the existing rows as it did at the publisher), the
article's conflict table, column versions and a device's outbox rows follow, its triggers come back for the
new columns. Data moves only after that, so no change ever carries a column the destination does not have.

A change of type, nullability or name made with a client is named with the ``schema-change`` command that
replicates it. Refused naming the article and what to do instead: a primary-key change, a NOT NULL column added
without a default, a default that is not a constant (every replica would compute its own), dropping the
rowguid, a key, a foreign-key or a filter column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import sqlglot
from sqlglot import exp

from sparksync import failpoints
from sparksync.dialects.column_changes import narrows, neutral_default
from sparksync.dialects.model import Column, TableInfo, describe_drift, to_table_dict
from sparksync.dialects.replica import Replica
from sparksync.errors import SchemaDrift
from sparksync.filters import parse_filter
from sparksync.merge.conflicts.model import conflict_table_name
from sparksync.merge.tracking import identity
from sparksync.merge.tracking.articles import install_tracking, remove_tracking
from sparksync.merge.tracking.pending import flush as flush_log
from sparksync.merge.tracking.tracked import TrackedArticle, tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, PublicationRow
from sparksync.types import SqlType

REINIT = ("restore the table's shape, or drop the article from the publication's configuration, run "
          "'sparksync setup', add it back and run setup again (every subscriber receives a new snapshot of it)")


def constant_default(text: str | None, sqlglot_dialect: str, where: str) -> str | None:
    """A column default as a dialect-neutral SQL literal (``column_changes.neutral_default``), a default that is
    not a constant refused with what to do instead."""
    return neutral_default(text, sqlglot_dialect, where, REINIT)


def plan_changes(published: TableInfo, current: TableInfo, row: ArticleRow, others: list[ArticleRow], d,
                 where: str, publication: str, declared: Sequence[dict] = ()) -> list[dict]:
    """The replicable changes that turn ``published`` into ``current`` (``d``: the publisher's dialect), or
    SchemaDrift naming every change that cannot be replicated, with the ``schema-change`` command that would
    replicate it where one would. ``declared``: the renames and alterations ``schema-change`` is making (a
    change of type, nullability or name is replicated only so: a client's ALTER is named, never guessed);
    they come first, then added columns in table order, then dropped ones."""
    renamed = {ch["column_name"]: ch["column_def"]["name"] for ch in declared if ch["schematype"] == "rename_column"}
    altered = {ch["column_name"] for ch in declared if ch["schematype"] == "alter_column"}
    before = {renamed.get(c.name, c.name): c for c in published.columns}
    after = {c.name: c for c in current.columns}
    command = change_command(publication, row.name)
    problems = []
    for n in before:
        if n not in after or n in altered:
            continue
        b, a = before[n], after[n]
        said, alteration = [], []
        if str(b.type) != str(a.type):
            said.append(f"type from {b.type} to {a.type}")
            alteration.append(d.render_type(a.type))
        if _nullability_tracked(n, row, published) and b.nullable != a.nullable:
            said.append("to NOT NULL" if not a.nullable else "to allow NULL")
            alteration.append("NOT NULL" if not a.nullable else "NULL")
        if said:
            problems.append(f"column {n} changed {' and '.join(said)} (replicate it with: {command} "
                            f"--alter-column \"{n} {' '.join(alteration)}\")")
    if tuple(renamed.get(k, k) for k in published.primary_key) != tuple(current.primary_key):
        problems.append(f"primary key changed from {list(published.primary_key)} to {list(current.primary_key)}")
    gone = [c for c in before.values() if renamed.get(c.name, c.name) not in after]
    new = [c for c in current.columns if c.name not in before]
    used = filter_columns(row, published, others)
    changes: list[dict] = [ch for ch in declared if ch["schematype"] in ("rename_column", "alter_column")]
    for c in new:
        default = constant_default(c.default, d.capabilities.sql.sqlglot, f"{where}, column {c.name}")
        if not c.nullable and default in (None, "NULL"):
            problems.append(f"column {c.name} was added NOT NULL without a default (the rows of every replica "
                            "would need a value)")
            continue
        changes.append({"schematype": "add_column", "column_name": c.name,
                        "column_def": {"name": c.name, "type": c.type.to_dict(), "nullable": c.nullable,
                                       "default": default}})
    for c in gone:
        why = ("it is the rowguid column" if c.name == row.rowguid_column else
               "it is in the primary key" if c.name in published.primary_key else
               "it is in a foreign key" if any(c.name in fk.columns for fk in published.foreign_keys) else
               "a filter of the publication reads it" if c.name in used else None)
        if why:
            problems.append(f"column {c.name} was dropped but {why}")
            continue
        changes.append({"schematype": "drop_column", "column_name": c.name, "column_def": None})
    if problems:
        raise SchemaDrift(f"{where}: the table changed in a way that cannot be replicated as it is: "
                          + "; ".join(problems) + f". Otherwise {REINIT}", obj=where)
    return changes


def change_command(publication: str, article: str) -> str:
    """The start of the ``schema-change`` command of an article."""
    return f"sparksync schema-change --publication {publication} --article {article}"


def _nullability_tracked(column: str, row: ArticleRow, published: TableInfo) -> bool:
    """Whether a client's change of this column's nullability is a drift to name (a key's and the rowguid's
    are the database's own)."""
    return column != row.rowguid_column and column not in published.primary_key


def drifted(published: TableInfo, current: TableInfo, row: ArticleRow) -> list[str]:
    """How the publisher's table differs from what was published (``describe_drift``, and nullability)."""
    out = describe_drift(published, current)
    for c in published.columns:
        now = current.column(c.name)
        if now is not None and now.name == c.name and _nullability_tracked(c.name, row, published) and \
                now.nullable != c.nullable:
            out.append(f"column {c.name} was made {'NOT NULL' if not now.nullable else 'nullable'}")
    return out


def describe(ch: dict) -> str:
    """One schema change in words."""
    kind, name, col = ch["schematype"], ch["column_name"], ch.get("column_def") or {}
    if kind == "add_column":
        return f"added column {name}"
    if kind == "drop_column":
        return f"dropped column {name}"
    if kind == "rename_column":
        return f"renamed column {name} to {col['name']}"
    parts = []
    if col.get("type") != (col.get("before") or {}).get("type"):
        parts.append(f"type {SqlType.from_dict(col['type'])}")
    if col.get("nullable") != (col.get("before") or {}).get("nullable"):
        parts.append("NULL" if col["nullable"] else "NOT NULL")
    if col.get("set_default"):
        parts.append("no default" if col.get("default") in (None, "NULL") else f"DEFAULT {col['default']}")
    return f"altered column {name} ({', '.join(parts) or 'as it was'})"


def check_added_values(replica: Replica, table, changes: list[dict], where: str, command: str = "") -> None:
    """An added column must hold its default in every existing row: a value written before ``setup``
    picked the column up was not tracked (the triggers did not know the column), and a renamed column
    looks like one dropped and one added; either way the values would never reach the subscribers.
    ``command``: the ``schema-change`` command of the article, to name a rename with."""
    d = replica.dialect
    dropped = [ch["column_name"] for ch in changes if ch["schematype"] == "drop_column"]
    for ch in changes:
        if ch["schematype"] != "add_column":
            continue
        col, default = d.quote(ch["column_name"]), ch["column_def"]["default"]
        differs = f"{col} IS NOT NULL" if default in (None, "NULL") else f"({col} IS NULL OR {col} <> {default})"
        n = int(replica.scalar(f"SELECT count(*) FROM {d.table_sql(table)} WHERE {differs}") or 0)
        if n and len(dropped) == 1 and command:
            raise SchemaDrift(
                f"{where}: column {dropped[0]} is gone and column {ch['column_name']} appeared holding values in {n} "
                f"row(s): if it was renamed, replicate the rename with: {command} --rename-column "
                f"\"{dropped[0]} {ch['column_name']}\" (nothing was changed)", obj=where)
        if n:
            raise SchemaDrift(
                f"{where}: column {ch['column_name']} was added but {n} existing row(s) hold a value other than its "
                f"default ({default or 'NULL'}): a renamed column, or values written before 'sparksync setup' picked "
                "the column up (not tracked); they would not reach the subscribers. Set them back to the default, run "
                f"setup, then write them again (tracked), or {REINIT}", obj=where)


def filter_columns(row: ArticleRow, info: TableInfo, others: list[ArticleRow]) -> set[str]:
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
                if art.info.column(col.name) is None:
                    sub.execute(f"ALTER TABLE {table} ADD COLUMN {_column_sql(sub, art.info, col)}")
                info = replace(art.info, columns=art.info.columns + (col,))
            elif ch["schematype"] == "drop_column":
                if art.info.column(name) is not None:
                    sub.execute(f"ALTER TABLE {table} DROP COLUMN {d.quote(name)}")
                info = replace(art.info, columns=tuple(c for c in art.info.columns if c.name != name))
            elif ch["schematype"] == "rename_column":
                to = ch["column_def"]["name"]
                live = sub.reflect(art.table)
                if live is not None and live.column(name) is not None and live.column(to) is None:
                    d.rename_column(sub, art.table, name, to)
                info = replace(art.info, columns=tuple(replace(c, name=to) if c.name == name else c
                                                       for c in art.info.columns))
            else:
                info = _replay_alteration(sub, art, ch)
            _alter_conflict_table(sub, publication, art, ch)
            _forget_column_versions(sub, art, ch)
            _outbox_follows(sub, art, ch)
            new = replace(art, info=info)
            store.update(sub, ArticleRow, {"table_schema": to_table_dict(info)}, {"pubid": pubid, "artid": ch["artid"]})
            install_tracking(sub, new, nickname)
            failpoints.hit("schema_change.replayed", sub.label)     # tests: replayed, not yet committed
            done.append(f"{row.name}: {describe(ch)}")
        if changes:
            store.update(sub, PublicationRow, {"schema_version": int(changes[-1]["schemaversion"])}, {"pubid": pubid})
    return done


def _replay_alteration(sub: Replica, art: TrackedArticle, ch: dict) -> TableInfo:
    """An ``alter_column`` change at a replica: its own column (as its database declares it) given the new type,
    nullability and, when the change sets one, default. Returns the article's columns after it."""
    name, definition = ch["column_name"], ch["column_def"]
    table = replace(art.info, name=art.table)
    live = sub.reflect(art.table)
    have = live.column(name) if live is not None else None
    if have is None:
        raise SchemaDrift(f"{sub.label}: table {art.table} has no column {name} to alter (schema change "
                          f"{ch['schemaversion']})", obj=str(art.table))
    new_type = SqlType.from_dict(definition["type"])
    default = definition.get("default") if definition.get("set_default") else have.default
    sub.dialect.alter_column(sub, table, have, replace(have, type=new_type, nullable=bool(definition["nullable"]),
                                                       default=default))
    return replace(art.info, columns=tuple(replace(c, type=new_type, nullable=bool(definition["nullable"]))
                                           if c.name == name else c for c in art.info.columns))


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
    """A dropped column leaves the column versions (colv) of the article's rows; a renamed one's versions go
    under its new name."""
    if art.column_tracking and (expr := _json_follows(replica, "colv", ch)):
        replica.execute(f"UPDATE {replica.meta('MSmerge_contents')} SET colv = {expr} "
                        f"WHERE tablenick = {int(art.nickname)} AND colv IS NOT NULL")


def _outbox_follows(replica: Replica, art: TrackedArticle, ch: dict) -> None:
    """On a device: the rows its outbox keeps for the application (the winning row of a lost change, its own
    version) name a renamed column by its new name, and lose a dropped one."""
    if not replica.dialect.metadata_table_exists(replica, "MSdevice_outbox"):
        return
    for col in ("winner_row", "mine"):
        if expr := _json_follows(replica, col, ch):
            replica.execute(f"UPDATE {replica.meta('MSdevice_outbox')} SET {col} = {expr} "
                            f"WHERE tablenick = {int(art.nickname)} AND {col} IS NOT NULL AND json_valid({col})")


def _json_follows(replica: Replica, column: str, ch: dict) -> str | None:
    """A JSON object column keyed by the article's columns (``column``) as change ``ch`` leaves it: without a
    dropped column's key, with a renamed one's under its new name; None: the change leaves it as it is."""
    d = replica.dialect
    if ch["schematype"] == "drop_column":
        return d.json_without_key_sql(column, ch["column_name"])
    if ch["schematype"] == "rename_column":
        return d.json_rename_key_sql(column, ch["column_name"], ch["column_def"]["name"])
    return None


def _alter_conflict_table(replica: Replica, publication: str, art: TrackedArticle, ch: dict) -> None:
    """The article's conflict table (the losing rows) follows: columns it gains are nullable there, a renamed
    one is renamed, an altered one takes the new type (never NOT NULL: a losing delete keeps only the key)."""
    d = replica.dialect
    name = conflict_table_name(publication, art)
    if not d.metadata_table_exists(replica, name):
        return
    info = replica.reflect(d.metadata_table_name(name))
    have = {c.name: c for c in info.columns} if info is not None else {}
    col = ch["column_name"]
    if ch["schematype"] == "add_column" and col not in have:
        t = SqlType.from_dict(ch["column_def"]["type"])
        replica.execute(f"ALTER TABLE {d.metadata_table_sql(name)} ADD COLUMN {d.quote(col)} {d.render_type(t)}")
    elif ch["schematype"] == "drop_column" and col in have:
        replica.execute(f"ALTER TABLE {d.metadata_table_sql(name)} DROP COLUMN {d.quote(col)}")
    elif ch["schematype"] == "rename_column" and col in have and ch["column_def"]["name"] not in have:
        d.rename_column(replica, d.metadata_table_name(name), col, ch["column_def"]["name"])
    elif ch["schematype"] == "alter_column" and col in have and info is not None:
        old = have[col]
        new = replace(old, type=SqlType.from_dict(ch["column_def"]["type"]))
        if not narrows(old, new):                  # a losing row kept there may not fit a narrower type
            d.alter_column(replica, info, old, new)


def publisher_drift(publisher: Replica, articles: list[ArticleRow], publication: str) -> list[str]:
    """Articles whose table at the publisher differs from what was published (changed by a client since the
    last ``setup``), each with how and what replicates it: ``setup`` (columns added or dropped), or the
    ``schema-change`` command that would (a type, a nullability, a name), or why nothing can."""

    out = []
    for row in articles:
        art = tracked_article(row)
        current = identity.reflect(publisher, art)
        drift = ["the table was dropped"] if current is None else drifted(art.info, current, row)
        if not drift:
            continue
        said = f"{row.name} ({'; '.join(drift)})"
        if current is None:
            out.append(said)
            continue
        where = f"article {row.name}"
        try:
            changes = plan_changes(art.info, current, row, articles, publisher.dialect, where, publication)
            check_added_values(publisher, art.table, changes, where, change_command(publication, row.name))
        except SchemaDrift as e:
            out.append(f"{said}: {e.message}")
        else:
            out.append(f"{said}: run 'sparksync setup' to replicate it")
    return out
