"""PostgreSQL's agent lock: a session advisory lock taken on a connection of its own, whose
``application_name`` names the holder (command, pid, host); the server's ``pg_locks`` and
``pg_stat_activity`` say who holds it and since when. The server drops it when the connection ends
(the holder exits, dies or loses its connection).

``PostgresLocks`` is the dialect's ``Locks``: it makes one."""

from __future__ import annotations

import contextlib
import re
from typing import Any

from sparksync.dialects.agent_locks import AgentLock, LockHolder
from sparksync.dialects.postgres.driver import open_connection

AGENT_LOCK_CLASS = 1397771084     # advisory lock class of agent locks (generation locks use 1397771083)
_TAG = re.compile(r"^sparksync (?P<command>.+?) pid (?P<pid>\d+)(?:@(?P<host>.*))?$")


def _tag(holder: LockHolder) -> str:
    tag = f"sparksync {holder.command} pid {holder.pid}" + (f"@{holder.host}" if holder.host else "")
    return tag.encode()[:63].decode("utf-8", "ignore")     # NAMEDATALEN - 1


class AdvisoryLock:
    def __init__(self, url: str, key: str):
        self.url, self.key = url, key
        self._conn: Any = None

    def _connection(self):
        if self._conn is None:
            self._conn = open_connection(self.url)
        return self._conn

    def try_acquire(self, holder: LockHolder) -> bool:
        conn = self._connection()
        got = conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (AGENT_LOCK_CLASS, self.key)).fetchone()[0]
        if got:
            # set after taking it: this idle connection's state_change is then when the lock was taken
            conn.execute("SELECT set_config('application_name', %s, false)", (_tag(holder),))
        return bool(got)

    def holder(self) -> LockHolder | None:
        row = self._connection().execute(
            "SELECT a.application_name, a.state_change, a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE "
            "datname = current_database()) AND l.classid = %s::bigint::oid AND l.objsubid = 2 "
            "AND l.objid = (hashtext(%s)::bigint & 4294967295)::oid", (AGENT_LOCK_CLASS, self.key)).fetchone()
        if row is None:
            return None
        name, since, backend = row
        m = _TAG.match(name or "")
        if m is None:       # held by something that is not a sparksync agent lock connection
            return LockHolder(f"backend {backend} ({name or 'no application name'})", None, None, since)
        return LockHolder(m["command"], int(m["pid"]), m["host"], since)

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()          # the session's advisory locks go with it


class PostgresLocks:
    """``Locks`` on PostgreSQL: an advisory lock on a connection of its own."""

    def agent_lock(self, url: str, key: str) -> AgentLock:
        return AdvisoryLock(url, key)
