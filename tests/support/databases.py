"""The one factory of throw-away databases: SQLite files in a folder, PostgreSQL databases on the test
server, dropped at the end (their logical replication slots first: a slot keeps its database, and
the server's log, alive).

``Databases`` serves one test (the ``dbs`` fixture of tests/conftest.py) or a module: a module's
fixture opens it with ``databases(folder, pg_admin_url)`` around what it yields.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PG_ADMIN_URL = os.environ.get("SPARKSYNC_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def pg_problem(admin_url: str = PG_ADMIN_URL) -> str | None:
    """Why the PostgreSQL server at ``admin_url`` cannot be used (None: it can)."""
    try:
        import psycopg

        with psycopg.connect(admin_url, connect_timeout=5) as c:
            c.execute("SELECT 1")
        return None
    except Exception as e:  # noqa: BLE001
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


class Databases:
    """Creates databases and drops the PostgreSQL ones in ``drop``.

    ``url("sqlite", name)`` is the file ``folder/<name>.db``; ``url("postgresql", name)`` a new database
    ``sst_<name>_<random>`` on the server of ``admin_url``: the URL itself, or a function giving it
    (asked on the first PostgreSQL database, so that a test using only SQLite needs no server; the
    ``dbs`` fixture asks for the ``pg_admin_url`` fixture, which skips or fails when the server is
    not reachable), or None when no PostgreSQL database may be made."""

    def __init__(self, folder: Path, admin_url: str | Callable[[], str] | None = None):
        self.folder = Path(folder)
        self._admin = admin_url
        self._admin_url: str | None = None
        self.created: list[str] = []

    @property
    def admin_url(self) -> str:
        if self._admin_url is None:
            if self._admin is None:
                raise RuntimeError("these databases have no PostgreSQL server (no admin URL was given)")
            self._admin_url = self._admin if isinstance(self._admin, str) else self._admin()
        return self._admin_url

    def url(self, kind: str, name: str = "db") -> str:
        if kind == "sqlite":
            return f"sqlite:///{self.folder / (name + '.db')}"
        if kind != "postgresql":
            raise ValueError(f"unknown database kind {kind!r}")
        import psycopg

        admin = self.admin_url
        db = f"sst_{name.lower()}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{db}"')
        self.created.append(db)
        return admin.rsplit("/", 1)[0] + "/" + db

    def urls(self, kinds: dict[str, str], prefix: str = "") -> dict[str, str]:
        """A database per replica (``kinds``: name -> sqlite | postgresql), named ``<prefix><name>``."""
        return {who: self.url(kind, prefix + who) for who, kind in kinds.items()}

    def drop(self) -> None:
        """Drop every PostgreSQL database made here, each after its logical replication slots."""
        if not self.created:
            return
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as c:
            for db in self.created:
                c.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s",
                          (db,))
                c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        self.created.clear()


@contextmanager
def databases(folder: Path, admin_url: str | Callable[[], str] | None = None) -> Iterator[Databases]:
    """``Databases`` in ``folder``, dropped when the block ends, however it ends."""
    d = Databases(folder, admin_url)
    try:
        yield d
    finally:
        d.drop()
