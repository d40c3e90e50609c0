"""A small merge topology for fault-injection tests: any tables, any dialect per replica, built once per
module (``module_cluster``) so many named checks share one setup."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from sparksync.dialects import connect
from sparksync.merge.agent import MergeAgent, MergeOptions
from sparksync.metadata import store
from sparksync.provision import setup
from sparksync.topology import parse_topology


class PgDatabases:
    """Throw-away PostgreSQL databases for a module (the function-scoped ``dbs`` fixture is too short)."""

    def __init__(self, admin_url: str):
        self.admin = admin_url
        self.created: list[str] = []

    def url(self, name: str) -> str:
        import psycopg

        db = f"sst_{name.lower()}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.admin, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{db}"')
        self.created.append(db)
        return self.admin.rsplit("/", 1)[0] + "/" + db

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.admin, autocommit=True) as c:
            for db in self.created:
                c.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s",
                          (db,))
                c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


class Cluster:
    """A publisher and subscribers of one merge publication ``Pub``.

    ``ddl(kind)`` returns the publisher's CREATE/INSERT statements; ``articles`` the article entries;
    ``subs``: name -> database kind (or a dict of subscription keys with ``kind``)."""

    def __init__(self, spark, tmp: Path, pg: PgDatabases | None, pub_kind: str, subs: dict, ddl, articles: list[dict],
                 publication: dict | None = None):
        self.spark, self.tmp = spark, tmp
        self.kinds = {"P": pub_kind}
        self.urls = {"P": self._url(pub_kind, "pub", pg)}
        with connect(self.urls["P"]) as r:
            for stmt in ddl(pub_kind):
                r.execute(stmt)
        sub_entries = []
        for name, spec in subs.items():
            spec = {"kind": spec} if isinstance(spec, str) else dict(spec)
            kind = spec.pop("kind")
            self.kinds[name] = kind
            self.urls[name] = self._url(kind, name, pg)
            sub_entries.append({"name": name, "publication": "Pub", "database": self.urls[name], **spec})
        self.data = {
            "publisher": {"name": "P", "database": self.urls["P"], "snapshot_dir": str(tmp / "snap")},
            "publications": [{"name": "Pub", **(publication or {}), "articles": articles}],
            "subscriptions": sub_entries,
        }
        self.topology = parse_topology(self.data, tmp)
        self.setup_summary = setup(self.topology, lambda: spark)
        self.agent = MergeAgent(self.topology, spark)

    def _url(self, kind: str, name: str, pg: PgDatabases | None) -> str:
        if kind == "sqlite":
            return f"sqlite:///{self.tmp / (name.lower() + '.db')}"
        assert pg is not None
        return pg.url(name)

    # -- acting -----------------------------------------------------------------------------------
    def sql(self, who: str, *statements: str) -> None:
        with connect(self.urls[who]) as r:
            for s in statements:
                r.execute(s)

    def shell(self, who: str, script: str) -> None:
        """Run SQL through the database's own command-line client (sqlite3 / psql)."""
        if self.kinds[who] == "sqlite":
            path = self.urls[who][len("sqlite:///"):]
            subprocess.run(["sqlite3", path], input=script, text=True, check=True, capture_output=True)
        else:
            subprocess.run(["psql", self.urls[who], "-v", "ON_ERROR_STOP=1", "-q"], input=script, text=True,
                           check=True, capture_output=True)

    def merge(self, **kw):
        return self.agent.run(MergeOptions(**kw))

    def merge_crashing(self, subscriptions, exchange: str, crash: str | None):
        """A merge of ``subscriptions`` that crashes at failpoint ``crash`` (None: no crash) in the
        first batch to (or the sender watermark of) the first of them."""
        import os

        from sparksync import failpoints as fp
        from sparksync.failpoints import InjectedFault

        fp_file = os.environ["SPARKSYNC_FAILPOINTS"]
        if crash:
            target = sorted(subscriptions)[0]
            fp.arm(fp_file, f"{crash} {target}" if crash == "agent.before_sender_watermark"
                   else f"{crash} {'P' if exchange == 'upload' else target}:0")
        try:
            return self.merge(exchange=exchange, subscriptions=sorted(subscriptions))
        except InjectedFault:
            return None
        finally:
            if os.path.exists(fp_file):
                os.remove(fp_file)

    # -- looking ----------------------------------------------------------------------------------
    def value(self, who: str, table: str, id_: int, col: str):
        with connect(self.urls[who]) as r:
            return r.scalar(f'SELECT "{col}" FROM "{table}" WHERE "id" = {r.p}', [id_])

    def exists(self, who: str, table: str, id_: int) -> bool:
        with connect(self.urls[who]) as r:
            return r.scalar(f'SELECT count(*) FROM "{table}" WHERE "id" = {r.p}', [id_]) == 1

    def failed(self, who: str) -> list[dict]:
        with connect(self.urls[who]) as r:
            return store.select_rows(r, "MSmerge_failed_changes")

    def conflicts(self, who: str = "P") -> list[dict]:
        with connect(self.urls[who]) as r:
            return store.select_rows(r, "MSmerge_conflicts_info")


def session(summary, name: str):
    return next(s for s in summary.subscriptions if s.subscription == name)
