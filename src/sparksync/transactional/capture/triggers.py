"""SQLite capture: a trigger-fed log.

SQLite has no log a client can decode, so setup installs, per article of each transactional
publication, row triggers that write every change (published columns only, through the row filter)
to ``MSrepl_log``. SQLite has one writer at a time, so the log's sequence numbers follow commit
order. What it cannot tell is where one transaction ended and the next began: the log reader takes
everything committed since its last read as one transaction. Transactions are therefore never
split and never reordered, but several that committed between two reads arrive as one (read often,
``--continuous``, to keep them apart). ``confirm`` deletes what was stored at the distributor.
"""

from __future__ import annotations

import datetime as dt
import json
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from sparksync.dialects.model import TableInfo, from_table_dict
from sparksync.dialects.replica import Replica
from sparksync.dialects.templates import render_statements
from sparksync.errors import SparksyncError
from sparksync.filters import RowFilter
from sparksync.metadata import store
from sparksync.metadata.records import DistArticleRow
from sparksync.metadata.schema import PUBLISHER_LOG
from sparksync.progress import Reporter
from sparksync.rows import RowCodec
from sparksync.transactional.capture.model import Begin, End, StoredCommand
from sparksync.types import Kind

FETCH = 5_000


def trigger_tag(publication: str, article_id: int) -> str:
    return f"{publication}_{article_id}"


def install(replica: Replica, publication: str, article_id: int, info: TableInfo, row_filter: RowFilter | None) -> None:
    """Inside a transaction: the log table and the article's capture triggers (re-created)."""
    store.install_table_set(replica, PUBLISHER_LOG)
    d = replica.dialect
    ctx = {
        "publication": publication, "article_id": int(article_id), "tag": trigger_tag(publication, article_id),
        "table": d.table_sql(info.name), "log": d.metadata_table_sql("MSrepl_log"),
        "columns": [{"name": c.name, "bytes": c.type.kind is Kind.BYTES} for c in info.columns],
        "filter_new": row_filter.render(d.capabilities.sql, "NEW") if row_filter else None,
        "filter_old": row_filter.render(d.capabilities.sql, "OLD") if row_filter else None,
    }
    for stmt in render_statements("sqlite/templates/transactional_capture.sql", ctx):
        replica.execute(stmt)


def installed_tags(replica: Replica, publication: str) -> dict[int, list[str]]:
    """article_id -> capture trigger names of ``publication`` in this database."""
    out: dict[int, list[str]] = {}
    prefix = f"_{publication}_"
    for (name,) in replica.query("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'MSrepl_%'"):
        rest = name[len("MSrepl_") + 3:]             # after "MSrepl_ins"
        if rest.startswith(prefix) and rest[len(prefix):].isdigit():
            out.setdefault(int(rest[len(prefix):]), []).append(name)
    return out


def uninstall(replica: Replica, names: list[str]) -> None:
    for n in names:
        replica.execute(f"DROP TRIGGER IF EXISTS {replica.dialect.quote(n)}")


def post(replica: Replica, publication: str, op: str, content: dict, article_id: int = 0) -> None:
    """Write a marker into the log (``token``: a tracer token, ``ddl``: a schema change), in the
    caller's transaction."""
    store.insert_row(replica, "MSrepl_log", {
        "publication": publication, "article_id": article_id, "op": op, "after": json.dumps(content),
        "before": None, "time": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]})


class _Article:
    def __init__(self, article_id: int, table_schema: dict):
        self.id = article_id
        info = from_table_dict(table_schema)
        self.columns = [c.name for c in info.columns]
        self.key = list(info.primary_key)
        self.hex = {c.name for c in info.columns if c.type.kind is Kind.BYTES}
        self.codec = RowCodec([(c.name, c.type) for c in info.columns])

    def encode(self, text: str | None) -> tuple[str | None, int | None]:
        """A log row's JSON (SQLite's values) -> the command's JSON, and the hash of the row's key."""
        if text is None:
            return None, None
        row = json.loads(text)
        values = []
        for c in self.columns:
            v = row.get(c)
            if c in self.hex and isinstance(v, str):
                v = bytes.fromhex(v)
            values.append(v)
        key = json.dumps([row.get(k) for k in self.key], separators=(",", ":"), default=str)
        return self.codec.encode(values), zlib.crc32(key.encode("utf-8"), self.id)


def _time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)


class TriggerCapture:
    def __init__(self, replica: Replica, publication, articles: list[DistArticleRow], read_batch: int):
        self.replica = replica
        self.publication = publication
        self.articles = {a.article_id: _Article(a.article_id, a.table_schema) for a in articles}
        self._read_to: int | None = None
        self._horizon = 0
        self.caught_up = False

    def read_batch(self, after: int | None) -> Iterator[Any]:
        r, log, pub = self.replica, self.replica.meta("MSrepl_log"), self.publication.name
        self._read_to = None
        self.caught_up = True            # unless a batch below the horizon is read
        if not store.table_set_version(r, PUBLISHER_LOG):
            return
        start = int(after or 0)
        r.execute("BEGIN")       # one read transaction: everything committed up to now, nothing later
        try:
            hi, last_time = r.query_one(f"SELECT max(seq), max(time) FROM {log} WHERE publication = ? AND seq > ?",
                                        (pub, start)) or (None, None)
            if hi is None:
                return
            yield Begin(int(hi), None, _time(last_time))
            for rows in r.dialect.stream(r, f"SELECT seq, article_id, op, after, before FROM {log} "
                                            f"WHERE publication = ? AND seq > ? AND seq <= ? ORDER BY seq",
                                         (pub, start, hi), FETCH):
                for seq, article_id, op, after_text, before_text in rows:
                    if op == "ddl":                   # later changes of the article carry its new columns
                        content = json.loads(after_text)
                        self.articles[int(article_id)] = _Article(int(article_id), content["table_schema"])
                    if op in ("token", "ddl"):
                        yield StoredCommand(int(article_id), op, int(seq), after_text, None)
                        continue
                    art = self.articles.get(article_id)
                    if art is None:
                        raise SparksyncError(f"{r.label}: MSrepl_log has a change of article {article_id}, which "
                                             f"publication {pub} does not have; run 'sparksync setup'")
                    after_json, new_hash = art.encode(after_text)       # (``after`` is the position read from)
                    before_json, old_hash = art.encode(before_text)
                    yield StoredCommand(art.id, op, int(seq), after_json, before_json,
                                        old_hash if before_json is not None else new_hash)
            yield End()
            self._read_to = int(hi)
            self.caught_up = self._read_to >= self._horizon
        finally:
            r.execute("COMMIT")

    def horizon(self) -> int:
        if not store.table_set_version(self.replica, PUBLISHER_LOG):
            return 0
        self._horizon = int(self.replica.scalar(f"SELECT coalesce(max(seq), 0) FROM {self.replica.meta('MSrepl_log')}")
                            or 0)
        return self._horizon

    def close(self, clean: bool = True) -> None:
        """Nothing is held between batches (each reads in a transaction of its own)."""

    def confirm(self) -> bool:
        """Trim what was stored from the log. False: nothing was read."""
        if self._read_to is None:
            return False
        with self.replica.transaction():
            self.replica.execute(f"DELETE FROM {self.replica.meta('MSrepl_log')} WHERE publication = ? AND seq <= ?",
                                 (self.publication.name, self._read_to))
        self._read_to = None
        return True


# -- the capture method -----------------------------------------------------------------------------

class TriggerLog:
    """SQLite's :class:`~sparksync.transactional.capture.CaptureMethod`."""

    def problems(self, replica: Replica, wants_filters: bool) -> list[str]:
        return []

    def install(self, replica: Replica, publication: str, articles: list) -> tuple[str | None, str | None]:
        with replica.transaction():
            keep = set()
            for a in articles:
                install(replica, publication, a.article_id, a.published, a.filter)
                keep.add(a.article_id)
            for article_id, names in installed_tags(replica, publication).items():
                if article_id not in keep:
                    uninstall(replica, names)
        return None, None

    def log_position(self, replica: Replica) -> int | None:
        return None             # positions are the log table's; the reader's last one is the distributor's

    def sync_point(self, publisher: Replica, frozen: Replica, report: Reporter) -> tuple[dict, int]:
        """The last log sequence number in the copy (one writer at a time: everything up to it is in
        the copy, nothing after it); delivery starts after it."""
        seq = 0
        if frozen.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_sequence'"):
            seq = int(frozen.scalar("SELECT seq FROM sqlite_sequence WHERE name = 'MSrepl_log'") or 0)
        return {"kind": "seq", "seq": seq}, seq

    def post_marker(self, replica: Replica, publication: str, kind: str, content: dict, article_id: int = 0) -> None:
        post(replica, publication, kind, content, article_id)

    def alter_table(self, replica: Replica, publication: str, article_id: int, alter: Callable[[Replica], object],
                    new: TableInfo, row_filter: RowFilter | None) -> None:
        uninstall(replica, installed_tags(replica, publication).get(article_id, []))     # triggers name the columns
        alter(replica)
        install(replica, publication, article_id, new, row_filter)

    def backlog(self, replica: Replica, publication) -> dict:
        if store.table_set_version(replica, PUBLISHER_LOG) is None:
            return {"log_rows": 0}
        n, oldest = replica.aggregate(f"SELECT count(*), min(time) FROM {replica.meta('MSrepl_log')} "
                                      "WHERE publication = ?", (publication.name,))
        return {"log_rows": int(n or 0), "oldest_unread": oldest}

    def reader(self, replica: Replica, publication, articles: list[DistArticleRow], read_batch: int,
               needed_by=None) -> TriggerCapture:
        # the capture triggers log every change whole: there is never one it cannot read
        return TriggerCapture(replica, publication, articles, read_batch)


def seen_by_snapshot(sync: dict, xact_seqno: int, origin: int | None) -> bool:
    """The copy holds the change logged at sequence number ``origin``."""
    return origin is not None and origin <= sync["seq"]
