"""The transactional commands end to end through the CLI: setup, logreader, distribute,
tracer-token, status; and bad input gets one clear message and changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparksync.cli.app import app
from sparksync.dialects import connect
from tests.support.cli import run, runner
from tests.support.config import write_config
from tests.support.transactional import VENDOR_DDL, vendor_rows

pytestmark = pytest.mark.spark


def _config(tmp: Path, pub: str, sub: str, dist: str, article: dict | None = None,
            subscription: dict | None = None) -> Path:
    return write_config(tmp, {
        "distributor": {"database": dist},
        "publisher": {"name": "HQ", "database": pub, "snapshot_dir": str(tmp / "snap")},
        "publications": [{"name": "Purchasing", "kind": "transactional",
                          "articles": [{"table": "Purchasing.Vendor", **(article or {})}]}],
        "subscriptions": [{"name": "Reporting", "publication": "Purchasing", "database": sub, **(subscription or {})}],
    })


def test_the_agents_through_the_cli(spark, dbs, tmp_path, pg_admin_url):
    pub, sub = dbs.url("postgresql", "clipub"), dbs.url("postgresql", "clisub")
    with connect(pub) as r:
        for s in VENDOR_DDL["postgresql"]:
            r.execute(s)
        r.execute(vendor_rows("postgresql", range(1, 6)))
    cfg = str(_config(tmp_path, pub, sub, f"sqlite:///{tmp_path / 'dist.db'}",
                      {"upd_cmd": "MCALL sp_MSupd_PurchasingVendor"}, {"subscription_streams": 2}))
    code, out = run("setup", "-c", cfg)
    assert code == 0 and "1 subscription(s) initialized" in out and "logical decoding" in out
    with connect(pub) as r:
        r.execute('UPDATE "Purchasing"."Vendor" SET "Name" = \'x\' WHERE "VendorID" = 1')
    code, out = run("tracer-token", "-c", cfg, "-p", "Purchasing", "--wait", "0")
    assert code == 0 and "pending" in out
    result = runner.invoke(app, ["logreader", "-c", cfg, "--json"])
    assert result.exit_code == 0, result.output
    (lr,) = json.loads(result.stdout)
    assert lr["transactions"] == 2 and len(lr["tokens"]) == 1
    result = runner.invoke(app, ["distribute", "-c", cfg, "--json"])
    assert result.exit_code == 0, result.output
    (s,) = json.loads(result.stdout)["subscriptions"]
    assert s["subscription"] == "Reporting" and s["transactions"] == 2 and s["status"] == "ok"
    with connect(sub) as r:
        assert r.scalar('SELECT "Name" FROM "Purchasing"."Vendor" WHERE "VendorID" = 1') == "x"
    result = runner.invoke(app, ["tracer-token", "-c", cfg, "-p", "Purchasing", "--history", "--json"])
    (token,) = json.loads(result.stdout)
    assert token["subscribers"]["Reporting"]["distributor_to_subscriber"] is not None
    code, out = run("logreader", "-c", cfg, "--continuous", "--polling-interval", "0", "--rounds", "2")
    assert code == 0 and out.count("logreader Purchasing: 0 transaction(s)") == 2
    result = runner.invoke(app, ["status", "-c", cfg, "--json"])
    st = json.loads(result.stdout)["transactional"]
    assert st["subscriptions"][0]["status"] == "active" and st["subscriptions"][0]["pending_transactions"] == 0
    code, out = run("status", "-c", cfg)
    assert code == 0 and "Distributor" in out and "Reporting" in out
    code, out = run("distribute", "-c", cfg, "--subscription", "Nope")
    assert code == 2 and "no subscription named 'Nope'" in out
    code, out = run("tracer-token", "-c", cfg, "-p", "Nope")
    assert code == 2 and "no publication named 'Nope'" in out
    code, out = run("snapshot", "-c", cfg, "-p", "Purchasing")
    assert code == 2 and "is transactional: its snapshot is taken by 'sparksync setup'" in out


def test_bad_input_changes_nothing(dbs, tmp_path, pg_admin_url):
    pub = dbs.url("postgresql", "clibad")
    with connect(pub) as r:
        for s in VENDOR_DDL["postgresql"]:
            r.execute(s)
    dist = tmp_path / "dist.db"
    # a SQLite subscriber cannot take procedure calls: a configuration error (exit 2)
    cfg = str(_config(tmp_path, pub, f"sqlite:///{tmp_path / 's.db'}", f"sqlite:///{dist}",
                      {"upd_cmd": "XCALL sp_MSupd_PurchasingVendor"}))
    code, out = run("setup", "-c", cfg)
    assert code == 2 and "has no stored procedures" in out and "subscriptions[0] (Reporting)" in out
    # an unknown column in the filter: one message naming the article, nothing changed
    cfg = str(_config(tmp_path, pub, f"sqlite:///{tmp_path / 's.db'}", f"sqlite:///{dist}", {"filter": "Activ = 1"}))
    code, out = run("setup", "-c", cfg)
    assert code == 1 and "article Purchasing.Vendor: filter 'Activ = 1': no published column Activ" in out
    # an unreachable distributor (with a password, which is never shown)
    cfg = str(_config(tmp_path, pub, f"sqlite:///{tmp_path / 's.db'}",
                      "postgresql://postgres:s3cret@127.0.0.1:1/dist"))
    code, out = run("setup", "-c", cfg)
    assert code == 2 and "distributor" in out and "s3cret" not in out and "nothing was changed" in out
    for f in (dist, tmp_path / "s.db"):                 # no table was created anywhere
        if f.exists():
            with connect(f"sqlite:///{f}") as r:
                assert r.scalar("SELECT count(*) FROM sqlite_master") == 0
    with connect(pub) as r:
        assert r.scalar("SELECT count(*) FROM pg_publication") == 0
