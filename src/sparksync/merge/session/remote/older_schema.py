"""A remote subscriber's upload made under an older schema, mapped at the publisher to the current one.

A device replays the publication's schema changes before it reads its upload, so its changes normally carry the
current columns. But a schema change made while a device syncs (after the door told it the schema, before its
upload arrives), or a device whose replay failed, sends rows of an older schema version; the upload says which
(its frame's ``schema_version``). The door maps each row by what the changes since then define, in order, before
anything checks or applies it: a renamed column's values (and its column versions) go under the new name; a
dropped column's are left out; a column added since gets, for a row the publisher has, the publisher's value
(the device never saw the column, so it cannot have changed it), and for a new row the column's default. A value
of an altered column stays the value it was: a widened column holds it, and one that no longer fits a narrowed
column is refused by the database as that row's failed change, naming the column.
"""

from __future__ import annotations

import json
from typing import Any

import sqlglot
from sqlglot import exp

from sparksync.dialects.replica import Replica
from sparksync.errors import ProtocolError
from sparksync.merge.tracking import identity
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata.records import ArticleRow
from sparksync.rows import RowCodec


def schema_version_of(metadata: dict, current: int, what: str) -> int | None:
    """The schema version an upload says it was made under (None: it does not say, as uploads of releases before
    this one do not); refused when it is not a version of this publication."""
    v = metadata.get("schema_version") if isinstance(metadata, dict) else None
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= current:
        raise ProtocolError(f"{what}: schema version {str(v)[:20]} is not one of this publication (0 to {current})",
                            obj=what)
    return v


def mapped(pub: Replica, rows: Any, changes: list[dict], articles: list[ArticleRow]) -> Any:
    """``rows`` (an upload's change rows, Arrow) with each row's JSON as ``changes`` (the schema changes after the
    version the upload was made under, in order) make it."""
    import pyarrow as pa

    by_nick = {a.nickname: a for a in articles}
    per_article: dict[str, list[dict]] = {}
    for ch in changes:
        per_article.setdefault(ch["artid"], []).append(ch)
    nicks = rows.column("tablenick").to_pylist()
    if not any(by_nick.get(n) is not None and by_nick[n].artid in per_article for n in nicks):
        return rows
    ops, guids = rows.column("op").to_pylist(), rows.column("rowguid").to_pylist()
    texts, colvs = rows.column("row").to_pylist(), rows.column("colv").to_pylist()
    added = _added_values(pub, rows, by_nick, per_article)
    for i, nick in enumerate(nicks):
        art = by_nick.get(nick)
        mine = per_article.get(art.artid, []) if art is not None else []
        if not mine:
            continue
        row = _object(texts[i]) if ops[i] == "upsert" else None
        colv = _object(colvs[i])
        for ch in mine:
            name = ch["column_name"]
            if ch["schematype"] == "rename_column":
                for d in (row, colv):
                    if d is not None and name in d:
                        d[ch["column_def"]["name"]] = d.pop(name)
            elif ch["schematype"] == "drop_column":
                for d in (row, colv):
                    if d is not None:
                        d.pop(name, None)
            elif ch["schematype"] == "add_column" and row is not None and name not in row:
                have = added.get((nick, str(guids[i])))
                row[name] = have[name] if have is not None and name in have else \
                    _literal(ch["column_def"].get("default"))
        if row is not None:
            texts[i] = json.dumps(row, separators=(",", ":"), ensure_ascii=False)
        if colv is not None:
            colvs[i] = json.dumps(colv, separators=(",", ":"))
    return rows.set_column(rows.schema.get_field_index("row"), "row", pa.array(texts, pa.string())) \
        .set_column(rows.schema.get_field_index("colv"), "colv", pa.array(colvs, pa.string()))


def _object(text: Any) -> dict | None:
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None                  # said by the upload's checks, row by row
    return value if isinstance(value, dict) else None


def _added_values(pub: Replica, rows: Any, by_nick: dict[int, ArticleRow], per_article: dict[str, list[dict]]
                  ) -> dict[tuple[int, str], dict]:
    """For each uploaded row the publisher has, its values of the columns added since the upload's version (read
    as change rows carry them), keyed by (tablenick, rowguid)."""
    out: dict[tuple[int, str], dict] = {}
    nicks, guids = rows.column("tablenick").to_pylist(), rows.column("rowguid").to_pylist()
    for nick, art in by_nick.items():
        columns = [ch["column_name"] for ch in per_article.get(art.artid, []) if ch["schematype"] == "add_column"]
        t = tracked_article(art)
        found = [c for c in (t.info.column(name) for name in columns) if c is not None]
        wanted = sorted({str(g) for n, g in zip(nicks, guids) if n == nick})
        if not found or not wanted:
            continue
        d = pub.dialect
        codec = RowCodec([(c.name, c.type) for c in found])
        columns = [c.name for c in found]
        cols = ", ".join(d.quote(c) for c in columns)
        for start in range(0, len(wanted), 500):
            part = wanted[start:start + 500]
            marks = ", ".join([d.uuid_param()] * len(part))
            for guid, *values in pub.query(f"SELECT {d.quote(t.rowguid_column)}, {cols} FROM {identity.rows_sql(d, t)} "
                                           f"WHERE {d.quote(t.rowguid_column)} IN ({marks})", part):
                out[(nick, str(guid))] = json.loads(codec.encode(values))
    return out


def _literal(default: str | None) -> Any:
    """A column's default (a constant SQL literal, as schema changes record it) as a JSON value."""
    if default in (None, "NULL"):
        return None
    node = sqlglot.parse_one(default)
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    negative = isinstance(node, exp.Neg)
    node = node.this if negative else node
    if isinstance(node, exp.Literal) and node.is_string:
        return node.name
    if isinstance(node, exp.Literal):
        text = ("-" if negative else "") + node.name
        return int(text) if text.lstrip("-").isdigit() else float(text)
    return None
