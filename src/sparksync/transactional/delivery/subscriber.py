"""Applying replicated commands at one subscriber: each article's operations as procedure calls or
plain statements, in its call syntax (seed 001), and SQL Server's error numbers for what fails.

:class:`Applier` runs on one connection, inside the caller's transaction. ``apply`` takes a run of
commands in order and sends consecutive commands of the same article and operation with one
``executemany`` (PostgreSQL pipelines them); an update or delete that finds no row is error 20598,
checked by the generated procedures or, for plain statements, by the rows affected. When anything
fails the caller rolls back and replays the commands one at a time (``apply_one``) to find which.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sparksync.dialects.model import Column, TableInfo, from_table_dict
from sparksync.dialects.replica import Replica
from sparksync.errors import ConstraintViolation, DatabaseError, RowNotFound, SparksyncError, ValueRejected
from sparksync.metadata import store
from sparksync.metadata.records import DeliveryMarkRow, DistArticleRow
from sparksync.metadata.schema import TRANSACTIONAL_SUBSCRIBER
from sparksync.names import TableName
from sparksync.rows import RowCodec
from sparksync.transactional.delivery.calls import (
    OP_WORDS,
    CallSpec,
    arguments,
    effective_command,
    parameters,
    procedure_statements,
)
from sparksync.types import SqlType

# SQL Server's numbers for the errors a distribution agent meets (skip_errors speaks them).
ROW_NOT_FOUND = "20598"
UNSTORABLE = "22000"        # a value this subscriber cannot hold (NaN at SQLite): SQLSTATE's data exception
# SQL Server's numbers for values a subscriber rejects, by SQLSTATE: too long, out of range,
# not a date/time, not of the type
_VALUE_NUMBERS = {"22001": "8152", "22003": "8115", "22007": "241", "22008": "242", "22P02": "245"}
_CONSTRAINT_NUMBERS = {"primary_key": "2627", "unique": "2601", "foreign_key": "547", "check": "547",
                       "not_null": "515"}


def error_number(e: SparksyncError) -> str:
    """SQL Server's error number for a failed command (2627, 2601, 547, 515, 20598), else the
    database's own code."""
    if isinstance(e, RowNotFound):
        return ROW_NOT_FOUND
    if isinstance(e, ConstraintViolation):
        return _CONSTRAINT_NUMBERS.get(e.kind, e.native_code or "constraint")
    if isinstance(e, ValueRejected) and e.native_code in _VALUE_NUMBERS:
        return _VALUE_NUMBERS[e.native_code]
    if isinstance(e, DatabaseError) and e.native_code:
        return e.native_code
    return e.code


def skippable(e: SparksyncError, skip_errors: Sequence[str]) -> bool:
    native = getattr(e, "native_code", None)
    return error_number(e) in skip_errors or (native is not None and native in skip_errors)


_LAZY: Any = object()


class Command:
    """One replicated command as the distribution agent reads it. ``after`` / ``before`` are JSON images
    (``after``: the row after the change; ``before``: before it, an update's holding the key and the
    changed columns). A PostgreSQL publisher's row change arrives as the server's message (``change``,
    a ``decoding.RawChange``): its images and rowhash are made from it the first time they are read,
    and a set-based apply at a PostgreSQL subscriber takes its values without making them."""

    __slots__ = ("xact_seqno", "command_id", "article_id", "type", "origin", "_after", "_before", "_rowhash", "change")

    def __init__(self, xact_seqno: int, command_id: int, article_id: int, type: str, origin: int | None,
                 after: str | None = None, before: str | None = None, rowhash: int | None = None,
                 change: Any = None):
        self.xact_seqno, self.command_id, self.article_id = xact_seqno, command_id, article_id
        self.type, self.origin = type, origin          # ins, upd, del, trunc, token or ddl
        self.change = change
        if change is None:
            self._after, self._before, self._rowhash = after, before, rowhash
        else:
            self._after = self._before = self._rowhash = _LAZY

    def _decode(self) -> None:
        self._after, self._before, self._rowhash = self.change.images()

    @property
    def after(self) -> str | None:
        if self._after is _LAZY:
            self._decode()
        return self._after

    @property
    def before(self) -> str | None:
        if self._before is _LAZY:
            self._decode()
        return self._before

    @property
    def rowhash(self) -> int | None:
        """A hash of the row's key before the change (after it, for an insert): its subscription stream."""
        if self._rowhash is _LAZY:
            self._rowhash = self.change.rowhash()
        return self._rowhash

    def fields(self) -> tuple:
        return (self.xact_seqno, self.command_id, self.article_id, self.type, self.origin, self.after, self.before,
                self.rowhash)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Command) and self.fields() == other.fields()

    def __hash__(self) -> int:
        return hash(self.fields())

    def __repr__(self) -> str:
        return f"Command{self.fields()!r}"


@dataclass(frozen=True)
class ArticleTarget:
    """One article at one subscriber: its table there, published columns and commands (picklable)."""

    article_id: int
    name: str
    table: TableName
    columns: tuple[tuple[str, dict], ...]      # (name, SqlType dict), in order
    key: tuple[str, ...]
    ins: CallSpec
    upd: CallSpec
    dele: CallSpec
    parents: tuple[int, ...] = ()              # articles its foreign keys reference

    def spec(self, op: str) -> CallSpec:
        return self.ins if op == "ins" else self.upd if op == "upd" else self.dele


class _Prepared:
    """An article's statements and converters at one connection."""

    def __init__(self, replica: Replica, t: ArticleTarget):
        d = replica.dialect
        self.t = t
        self.dialect, self.label, self.markers = d, replica.label, d.unstorable_markers()
        self.names = [c for c, _ in t.columns]
        self.types = {c: SqlType.from_dict(x) for c, x in t.columns}
        self.codec = RowCodec([(c, self.types[c]) for c in self.names])
        conv = d.db_converters([self.types[c] for c in self.names])
        self.conv = dict(zip(self.names, conv))
        table = d.table_sql(t.table)
        self.sql: dict[str, str | None] = {}
        self.kinds: dict[str, Sequence[str | None]] = {}   # per parameter: its column (None: the bitmap)
        for op in ("ins", "upd", "del"):
            spec = t.spec(op)
            if not spec.replicated:
                self.sql[op] = None
            elif spec.uses_procedure:
                params = parameters(spec, self.names, t.key)
                # a generated procedure lives in its table's schema; a custom one named without a schema
                # is found through the subscriber's search_path, as a CALL typed in psql would find it
                proc = spec.procedure
                assert proc is not None            # a procedure syntax always names one
                if proc.schema is None and d.capabilities.supports_schemas:
                    table_schema = d.resolve_name(t.table).schema
                    proc = TableName(table_schema if spec.generated else
                                     d.procedure_schema(replica, proc.name, table_schema) or table_schema, proc.name)
                marks = [d.typed_param(self.types[p.column]) if p.column is not None else
                         d.typed_param(SqlType.from_dict({"kind": "bytes"})) for p in params]
                self.sql[op] = f"CALL {d.table_sql(proc)}({', '.join(marks)})"
                self.kinds[op] = [p.column for p in params]
            else:
                self.sql[op], self.kinds[op] = self._plain(d, table, op)
        self.truncate = f"DELETE FROM {table}"

    def _plain(self, d, table: str, op: str) -> tuple[str, list[str]]:
        q, mark = d.quote, lambda c: d.typed_param(self.types[c])
        where = " AND ".join(f"{q(k)} = {mark(k)}" for k in self.t.key)
        if op == "ins":
            return (f"INSERT INTO {table} ({', '.join(q(c) for c in self.names)}) VALUES "
                    f"({', '.join(mark(c) for c in self.names)})", list(self.names))
        if op == "upd":
            sets = ", ".join(f"{q(c)} = {mark(c)}" for c in self.names)
            return f"UPDATE {table} SET {sets} WHERE {where}", list(self.names) + [f"\0{k}" for k in self.t.key]
        return f"DELETE FROM {table} WHERE {where}", [f"\0{k}" for k in self.t.key]

    def args(self, op: str, c: Command) -> list[Any]:
        after = self.codec.decode(c.after, verbatim=True) if c.after is not None else None
        before = None
        if c.before is not None:   # an update's before image may be compact: unchanged columns are as after
            before = {**(after or {}), **(self.codec.decode(c.before, partial=True, verbatim=True) or {})}
        if c.after is not None and after is not None and self.markers and any(m in c.after for m in self.markers):
            for name in self.names:
                why = self.dialect.unstorable(self.types[name], after.get(name))
                if why:
                    raise ValueRejected(f"{self.label}: {OP_WORDS[op]} of {self.t.name} (key "
                                        f"{json.dumps({k: (before or after).get(k) for k in self.t.key}, default=str)}):"
                                        f" column {name}: {why}", native_code=UNSTORABLE, column=name)
        spec = self.t.spec(op)
        if spec.uses_procedure:
            values = arguments(spec, self.names, self.t.key, before, after)
        else:   # plain statement: "\0k" is the original value of key column k
            after = after or {}
            original = before if before is not None else after
            plain = cast(list[str], self.kinds[op])      # a plain statement's parameters are all columns
            values = [original[k[1:]] if k.startswith("\0") else after[k] for k in plain]
        out = []
        for v, col in zip(values, self.kinds[op]):
            conv = self.conv.get(col.lstrip("\0")) if col is not None else None
            out.append(v if v is None or conv is None else conv(v))
        return out

    def checks_rows(self, op: str) -> bool:
        """Plain updates and deletes are checked by the rows they affect (procedures raise 20598)."""
        return op in ("upd", "del") and not self.t.spec(op).uses_procedure


class Applier:
    """Applies commands on one connection (inside the caller's transaction). ``schema_change``:
    called with (replica, command) for a ``ddl`` command; returns the article's new target."""

    def __init__(self, replica: Replica, targets: dict[int, ArticleTarget], schema_change=None):
        self.replica = replica
        self.schema_change = schema_change
        self.prepared = {aid: _Prepared(replica, t) for aid, t in targets.items()}

    def _op(self, c: Command) -> str | None:
        return c.type if c.type in ("ins", "upd", "del") else None

    def apply(self, commands: Sequence[Command]) -> None:
        """Apply ``commands`` in order, consecutive commands of one statement with one executemany.
        Raises the first failure (the caller rolls back and replays with :meth:`apply_one`)."""
        run: list[list[Any]] = []
        key: tuple | None = None
        for c in commands:
            op = self._op(c)
            if op is None:
                if key is not None:
                    self._flush(key, run)
                    key, run = None, []
                self.apply_one(c)
                continue
            p = self.prepared[c.article_id]
            if p.sql[op] is None:
                continue
            k = (c.article_id, op)
            if k != key and key is not None:
                self._flush(key, run)
                run = []
            key = k
            run.append(p.args(op, c))
        if key is not None:
            self._flush(key, run)

    def _flush(self, key: tuple, rows: list[list[Any]]) -> None:
        if not rows:
            return
        p = self.prepared[key[0]]
        op = key[1]
        sql = p.sql[op]
        assert sql is not None                     # commands of an operation not replicated are not queued
        n = self.replica.executemany(sql, rows)
        if p.checks_rows(op) and n is not None and 0 <= n < len(rows):
            raise RowNotFound(f"{self.replica.label}: {len(rows) - n} of {len(rows)} {op}s of {p.t.name} found "
                              "no row")

    def apply_one(self, c: Command) -> None:
        """One command; raises a SparksyncError (RowNotFound for 20598)."""
        if c.type == "token":
            return   # a tracer token changes nothing
        if c.type == "ddl":
            if self.schema_change is not None:
                t = self.schema_change(self.replica, c)
                self.prepared[t.article_id] = _Prepared(self.replica, t)
            return
        p = self.prepared[c.article_id]
        if c.type == "trunc":
            if p.t.dele.replicated:
                self.replica.execute(p.truncate)
            return
        op = c.type
        sql = p.sql[op]
        if sql is None:
            return
        cur = self.replica.execute(sql, p.args(op, c))
        if p.checks_rows(op) and getattr(cur, "rowcount", 1) == 0:
            raise RowNotFound(f"{self.replica.label}: the row was not found at the subscriber when applying the "
                              f"replicated command ({'update' if op == 'upd' else 'delete'} of {p.t.name}, "
                              f"key {json.dumps(self._key(p, c), default=str)})")

    @staticmethod
    def _key(p: _Prepared, c: Command) -> dict:
        row = p.codec.decode(c.before if c.before is not None else c.after) or {}
        return {k: row.get(k) for k in p.t.key}


def position(sub: Replica, publication: str, subscription: str) -> int | None:
    """The last transaction (xact_seqno) every stream of the subscription has committed, None when
    the subscriber holds no record of the publication (or no transactional metadata at all: a lost
    or replaced database)."""
    if store.table_set_version(sub, TRANSACTIONAL_SUBSCRIBER) is None:
        return None
    store.require_table_set(sub, TRANSACTIONAL_SUBSCRIBER)
    marks = store.select(sub, DeliveryMarkRow, {"publication": publication, "subscription": subscription})
    return min(m.transaction_timestamp for m in marks) if marks else None


def article_targets(dialect, articles: Sequence[DistArticleRow]) -> dict[int, ArticleTarget]:
    """The subscriber-side view of a publication's active articles (MSarticles rows): destination
    table, published columns, and each operation's command for this kind of subscriber."""

    out = {}
    procedures = dialect.capabilities.supports_procedures
    active = [a for a in articles if a.active]
    ids = {str(TableName(a.source_schema, a.source_table)): a.article_id for a in active}
    for a in active:
        info = from_table_dict(a.table_schema)
        source = TableName(a.source_schema, a.source_table)
        commands = {"ins": a.ins_cmd, "upd": a.upd_cmd, "del": a.del_cmd}
        specs = {op: effective_command(cmd, op, source, procedures, dialect.fold_identifier)
                 for op, cmd in commands.items()}
        parents = tuple(ids[str(fk.ref_table)] for fk in info.foreign_keys
                        if str(fk.ref_table) in ids and ids[str(fk.ref_table)] != a.article_id)
        out[a.article_id] = ArticleTarget(
            a.article_id, a.name, dialect.destination_table(source),
            tuple((c.name, c.type.to_dict()) for c in info.columns), tuple(info.primary_key),
            specs["ins"], specs["upd"], specs["del"], parents)
    return out


def schema_change(replica: Replica, target: ArticleTarget, content: dict) -> tuple[ArticleTarget, list[str]]:
    """Apply a schema change command (``content``: action, column) to an article's table at a
    subscriber and regenerate its generated procedures. Returns the new target and the statements run."""
    from dataclasses import replace

    d = replica.dialect
    col = content["column"]
    name, t = col["name"], SqlType.from_dict(col["type"])
    table = d.table_sql(target.table)
    done: list[str] = []
    if content["action"] == "add_column":
        stmts = [f"ALTER TABLE {table} ADD COLUMN {d.quote(name)} {d.render_type(t)}"]
        columns = target.columns + ((name, t.to_dict()),)
    elif content["action"] == "drop_column":
        stmts = [f"ALTER TABLE {table} DROP COLUMN {d.quote(name)}"]
        columns = tuple(c for c in target.columns if c[0] != name)
    elif content["action"] == "rename_column":
        stmts = []
        live = replica.reflect(target.table)
        if live is not None and live.column(name) is not None and live.column(content["to"]) is None:
            done = d.rename_column(replica, target.table, name, content["to"])
        columns = tuple((content["to"], x) if c == name else (c, x) for c, x in target.columns)
    elif content["action"] == "alter_column":
        stmts = []
        live = replica.reflect(target.table)
        have = live.column(name) if live is not None else None
        if have is None:
            raise SparksyncError(f"{replica.label}: table {target.table} has no column {name} to alter", obj=target.name)
        info = TableInfo(target.table, tuple(Column(c, SqlType.from_dict(x)) for c, x in target.columns), target.key)
        default = col.get("default") if col.get("set_default") else have.default
        done = d.alter_column(replica, info, have, replace(have, type=t, nullable=bool(col["nullable"]),
                                                           default=default))
        columns = tuple((c, t.to_dict()) if c == name else (c, x) for c, x in target.columns)
    else:
        raise SparksyncError(f"unknown schema change {content['action']!r} for article {target.name}")
    new = replace(target, columns=columns)
    for op in ("ins", "upd", "del"):
        spec = new.spec(op)
        if spec.uses_procedure and spec.generated:
            stmts += procedure_statements(d, spec, new.table, [(c, SqlType.from_dict(x)) for c, x in columns],
                                          new.key)
    for stmt in stmts:
        replica.execute(stmt)
    return new, done + stmts
