"""A small merge topology for fault-injection tests: any tables, any dialect per replica, usually built
once per module so that many named checks share one setup."""

from __future__ import annotations

from sparksync.dialects import connect
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.metadata import store
from sparksync.provision import setup
from sparksync.topology import parse_topology

from .clients import shell
from .databases import Databases


class Cluster:
    """A publisher and subscribers of one merge publication ``Pub``, in ``dbs`` (its folder holds the
    SQLite files and the snapshots).

    ``ddl(kind)`` returns the publisher's CREATE/INSERT statements; ``articles`` the article entries;
    ``subs``: name -> database kind (or a dict of subscription keys with ``kind``)."""

    def __init__(self, spark, dbs: Databases, pub_kind: str, subs: dict, ddl, articles: list[dict],
                 publication: dict | None = None, publisher: dict | None = None):
        self.spark, self.tmp = spark, dbs.folder
        tmp = self.tmp
        self.kinds = {"P": pub_kind}
        self.urls = {"P": dbs.url(pub_kind, "pub")}
        with connect(self.urls["P"]) as r:
            for stmt in ddl(pub_kind):
                r.execute(stmt)
        sub_entries = []
        for name, spec in subs.items():
            spec = {"kind": spec} if isinstance(spec, str) else dict(spec)
            kind = spec.pop("kind")
            self.kinds[name] = kind
            self.urls[name] = dbs.url(kind, name.lower())
            sub_entries.append({"name": name, "publication": "Pub", "database": self.urls[name], **spec})
        self.data = {
            "publisher": {"name": "P", "database": self.urls["P"], "snapshot_dir": str(tmp / "snap"), **(publisher or {})},
            "publications": [{"name": "Pub", **(publication or {}), "articles": articles}],
            "subscriptions": sub_entries,
        }
        self.topology = parse_topology(self.data, tmp)
        self.setup_summary = setup(self.topology, lambda: spark)
        self.agent = MergeAgent(self.topology, spark)

    # -- acting -----------------------------------------------------------------------------------
    def sql(self, who: str, *statements: str) -> None:
        with connect(self.urls[who]) as r:
            for s in statements:
                r.execute(s)

    def shell(self, who: str, script: str) -> None:
        """Run SQL through the database's own command-line client (sqlite3 / psql)."""
        shell(self.urls[who], script)

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
    """The session of subscription ``name`` in a merge summary."""
    return next(s for s in summary.subscriptions if s.subscription == name)
