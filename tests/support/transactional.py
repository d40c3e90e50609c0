"""Transactional topologies on real databases: a publisher (SQLite or PostgreSQL) with seed 001's
Purchasing.Vendor table, a distribution database, subscribers; set up, and replicated by one pass of
the log reader and of the distribution agent."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.provision import setup
from sparksync.topology import parse_topology
from sparksync.transactional.delivery.agent import DistributeOptions, DistributionAgent
from sparksync.transactional.delivery.decoding import Decoder
from sparksync.transactional.delivery.subscriber import Command
from sparksync.transactional.distribution import database as dst
from sparksync.transactional.distribution.logreader import run_logreader

from .databases import Databases

# seed 001's Vendor (AdventureWorks), in each dialect; VendorID is an ordinary key here
VENDOR_DDL = {
    "postgresql": ['CREATE SCHEMA IF NOT EXISTS "Purchasing"',
                   'CREATE TABLE "Purchasing"."Vendor" ("VendorID" integer PRIMARY KEY, "AccountNumber" varchar(15) '
                   'NOT NULL, "Name" varchar(50) NOT NULL, "CreditRating" smallint NOT NULL, '
                   '"PreferredVendorStatus" boolean NOT NULL, "ActiveFlag" boolean NOT NULL, '
                   '"PurchasingWebServiceURL" varchar(1024), "ModifiedDate" timestamp NOT NULL)'],
    "sqlite": ['CREATE TABLE "Vendor" ("VendorID" INTEGER PRIMARY KEY, "AccountNumber" VARCHAR(15) NOT NULL, '
               '"Name" VARCHAR(50) NOT NULL, "CreditRating" SMALLINT NOT NULL, "PreferredVendorStatus" BOOLEAN NOT NULL, '
               '"ActiveFlag" BOOLEAN NOT NULL, "PurchasingWebServiceURL" VARCHAR(1024), "ModifiedDate" TIMESTAMP NOT NULL)'],
}
VENDOR_COLUMNS = ["VendorID", "AccountNumber", "Name", "CreditRating", "PreferredVendorStatus", "ActiveFlag",
                  "PurchasingWebServiceURL", "ModifiedDate"]


def vendor_table(kind: str) -> str:
    return '"Purchasing"."Vendor"' if kind == "postgresql" else '"Vendor"'


def vendor_article(kind: str) -> str:
    return "Purchasing.Vendor" if kind == "postgresql" else "Vendor"


def vendor_rows(kind: str, ids) -> str:
    """INSERT ... for vendors ``ids`` (even ids active)."""
    true, false = ("true", "false") if kind == "postgresql" else ("1", "0")
    now = "now()" if kind == "postgresql" else "'2024-05-01 10:00:00'"
    values = ", ".join(f"({i}, 'AW{i:08d}', 'Vendor {i}', {1 + i % 5}, {true}, {true if i % 2 == 0 else false}, "
                       f"NULL, {now})" for i in ids)
    cols = ", ".join(f'"{c}"' for c in VENDOR_COLUMNS)
    return f"INSERT INTO {vendor_table(kind)} ({cols}) VALUES {values}"


@dataclass
class TxTopology:
    topology: Topology
    publisher_kind: str
    publisher_url: str
    subscriber_urls: dict[str, str]
    data: dict | None = None        # the configuration it was parsed from (for the tests through the CLI)

    def sub_table(self, name: str) -> str:
        pg = self.subscriber_urls[name].startswith("postgresql") and self.publisher_kind == "postgresql"
        return '"Purchasing"."Vendor"' if pg else '"Vendor"'

    def rows(self, url: str, table: str, columns: str = '"VendorID", "Name", "CreditRating"') -> list[tuple]:
        with connect(url) as r:
            return [tuple(x) for x in r.query(f"SELECT {columns} FROM {table} ORDER BY 1")]

    def publisher_rows(self, columns: str = '"VendorID", "Name", "CreditRating"', where: str = "") -> list[tuple]:
        return self.rows(self.publisher_url, vendor_table(self.publisher_kind) + where, columns)

    def subscriber_rows(self, name: str, columns: str = '"VendorID", "Name", "CreditRating"') -> list[tuple]:
        return self.rows(self.subscriber_urls[name], self.sub_table(name), columns)

    def publish(self, sql: str, *more: str) -> None:
        with connect(self.publisher_url) as r:
            for s in (sql, *more):
                r.execute(s)


def build(dbs: Databases, tmp_path: Path, publisher: str, subscribers: dict[str, str], *, distributor: str = "sqlite",
          article: dict | None = None, subscription: dict | None = None, seed_ids=range(1, 11),
          extra_tables: list[str] | None = None, articles: list[dict] | None = None) -> TxTopology:
    """``subscribers``: name -> kind. ``article``: extra keys for the Vendor article."""
    pub_url = dbs.url(publisher, "txpub")
    with connect(pub_url) as r:
        for stmt in VENDOR_DDL[publisher] + (extra_tables or []):
            r.execute(stmt)
        if seed_ids:
            r.execute(vendor_rows(publisher, seed_ids))
    sub_urls = {name: dbs.url(kind, f"txsub_{name}") for name, kind in subscribers.items()}
    dist_url = dbs.url(distributor, "txdist")
    arts = articles if articles is not None else [{"table": vendor_article(publisher), **(article or {})}]
    data = {
        "distributor": {"database": dist_url},
        "publisher": {"name": "HQ", "database": pub_url, "snapshot_dir": str(tmp_path / "snapshots")},
        "publications": [{"name": "Purchasing", "kind": "transactional", "articles": arts}],
        "subscriptions": [{"name": n, "publication": "Purchasing", "database": u, **(subscription or {}).get(n, {})}
                          for n, u in sub_urls.items()],
    }
    return TxTopology(parse_topology(data, tmp_path), publisher, pub_url, sub_urls, data)


def setup_topology(tx: TxTopology, spark, report=lambda m: None):
    return setup(tx.topology, lambda: spark, report)


def replicate(tx: TxTopology, spark, subscriptions: list[str] | None = None):
    """One log reader pass, then one distribution agent pass. Returns the distribution summary."""
    run_logreader(tx.topology)
    return DistributionAgent(tx.topology, spark).run(DistributeOptions(subscriptions))


def stored_commands(distributor_url: str) -> list[Command]:
    """Every command stored at the distributor, decoded as the distribution agent decodes them (a
    PostgreSQL publisher's row changes are stored several to a row, as the server's messages)."""
    out: list[Command] = []
    with connect(distributor_url) as d:
        for p in store_publications(d):
            decoder = Decoder(dst.shapes(d, p))
            rows = d.query(dst.commands_query(d, ordered=True), ["", p, 0, 0, 2**62, dst.LAST_COMMAND])
            out += [c for row in rows for c in decoder.commands(row[1:])]
    return out


def store_publications(d) -> list[str]:
    return [r[0] for r in d.query(f"SELECT publication_id FROM {d.meta('MSpublications')} ORDER BY name")]
