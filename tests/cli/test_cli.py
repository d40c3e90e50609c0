"""The CLI: help everywhere, one clear message and a non-zero exit for bad input, nothing changed."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from sparksync.cli.app import app
from sparksync.demo.adventureworks import create_demo_database
from sparksync.dialects import connect
from sparksync.metadata import store
from tests.support.cli import run, runner
from tests.support.config import write_config


def sales_config(path: Path, pub_url: str, articles: list[str], subs: list[tuple[str, str]] = ()) -> Path:
    """A sparksync.toml in ``path``: publisher HQ at ``pub_url``, merge publication Sales of ``articles``,
    subscriptions ``subs`` (name, database URL)."""
    return write_config(path, {
        "publisher": {"name": "HQ", "database": pub_url, "snapshot_dir": str(path / "snap")},
        "publications": [{"name": "Sales", "articles": [{"table": a} for a in articles]}],
        "subscriptions": [{"name": n, "publication": "Sales", "database": u} for n, u in subs],
    })


@pytest.mark.parametrize("command", ["setup", "snapshot", "status", "demo"])
def test_every_command_has_help(command):
    code, out = run(command, "--help")
    assert code == 0 and "Usage" in out and ("--config" in out or command == "demo")


def test_top_level_help_lists_commands():
    code, out = run("--help")
    assert code == 0
    for c in ("setup", "snapshot", "status", "demo"):
        assert c in out


def test_invalid_config_reports_every_problem_with_its_key_path(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[publisher]\nname = "HQ"\ndatabase = "mysql://x"\n'
                   '[[publications]]\nname = "Sales"\nkind = "merge"\n'
                   '  [[publications.articles]]\n  table = "a.b.c"\n'
                   '[[subscriptions]]\nname = "S1"\npublication = "Sales"\ndatabase = "sqlite:///s.db"\n'
                   'subscriber_type = "global"\npriority = 100\ncolour = "red"\n', encoding="utf-8")
    code, out = run("status", "-c", str(cfg))
    assert code == 2
    assert "publisher.database" in out
    assert "publications[0] (Sales).articles[0] (a.b.c).table" in out
    assert "subscriptions[0] (S1).colour: unknown key" in out


def test_missing_and_malformed_config_files(tmp_path):
    code, out = run("status", "-c", str(tmp_path / "nope.toml"))
    assert code == 2 and "config file not found" in out
    bad = tmp_path / "broken.toml"
    bad.write_text("[publisher\nname=", encoding="utf-8")
    code, out = run("status", "-c", str(bad))
    assert code == 2 and "not valid TOML" in out


def _demo_publisher(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'hq.db'}"
    with connect(url) as r:
        create_demo_database(r, customers=5, products=3, orders=4, vendors=2, employees=2)
        r.execute('CREATE TABLE "NoKey" ("a" INTEGER, "b" TEXT)')
    return url


def _untouched(url: str) -> None:
    with connect(url) as r:
        assert store.metadata_version(r) is None
        cols = [c for (c,) in r.query("SELECT name FROM pragma_table_info('Customer')")]
        assert "rowguid" not in cols
        assert r.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'") == 0


@pytest.mark.parametrize("articles,expected", [
    (["Customer", "Custmer"], "table Custmer does not exist"),
    (["Customer", "NoKey"], "NoKey: table has no primary key"),
])
def test_bad_articles_change_nothing(tmp_path, articles, expected):
    url = _demo_publisher(tmp_path)
    code, out = run("setup", "-c", str(sales_config(tmp_path, url, articles)))
    assert code == 1 and expected in out
    _untouched(url)


def test_names_with_quotes_are_refused(tmp_path):
    url = _demo_publisher(tmp_path)
    code, out = run("setup", "-c", str(sales_config(tmp_path, url, ['Cust"omer'])))
    assert code == 2 and "is not allowed in replicated names" in out
    _untouched(url)


def test_unreachable_databases_change_nothing_and_hide_passwords(tmp_path, pg_admin_url):
    url = _demo_publisher(tmp_path)
    secret = "postgresql://postgres:hunter2@127.0.0.1:1/nowhere"
    code, out = run("setup", "-c", str(sales_config(tmp_path, url, ["Customer"], [("S1", secret)])))
    assert code == 2 and "S1" in out and "cannot connect" in out
    assert "hunter2" not in out and "***" in out
    _untouched(url)
    code, out = run("status", "-c", str(sales_config(tmp_path, secret, ["Customer"])))
    assert code == 1 and "hunter2" not in out
    code, out = run("status", "-c", str(sales_config(tmp_path, "sqlite:////no/such/folder/hq.db", ["Customer"])))
    assert code == 1 and "/no/such/folder" in out


@pytest.mark.spark
def test_setup_status_and_drift(spark, tmp_path, dbs):
    url = _demo_publisher(tmp_path)
    sub_sqlite = dbs.url("sqlite", "s1")
    sub_pg = dbs.url("postgresql", "s2")
    cfg = sales_config(tmp_path, url, ["Customer", "Product", "SalesOrderHeader", "SalesOrderDetail"],
                       [("S1", sub_sqlite), ("S2", sub_pg)])
    code, out = run("status", "-c", str(cfg))
    assert code == 0 and "not set up" in out
    code, out = run("setup", "-c", str(cfg))
    assert code == 0 and "setup complete" in out and "2 subscription(s) initialized" in out
    code, out = run("setup", "-c", str(cfg))
    assert code == 0 and "0 subscription(s) initialized" in out
    result = runner.invoke(app, ["status", "-c", str(cfg), "--json"])
    assert result.exit_code == 0
    st = json.loads(result.stdout)
    assert [a["name"] for a in st["publications"][0]["articles"]] == ["Customer", "Product", "SalesOrderHeader",
                                                                     "SalesOrderDetail"]
    subs = {s["name"]: s for s in st["subscriptions"]}
    assert subs["S1"]["status"] == subs["S2"]["status"] == "active"
    assert subs["S1"]["publisher_sentgen"] == subs["S1"]["subscriber_recgen"]
    assert subs["S2"]["pending_upload"] == 0
    with connect(sub_pg) as s:
        s.execute('UPDATE "public"."Customer" SET "Territory" = \'Moon\'')
    st = json.loads(runner.invoke(app, ["status", "-c", str(cfg), "--json"]).stdout)
    assert {s["name"]: s for s in st["subscriptions"]}["S2"]["pending_upload"] == 5
    code, out = run("snapshot", "-c", str(cfg))
    assert code == 0 and "snapshot Sales" in out

    # Drift at the publisher: a column added to a published table is a schema change that setup
    # replicates (snapshot says so first); a renamed column is refused by both, naming the column.
    with connect(url) as r:
        r.execute('ALTER TABLE "Product" ADD COLUMN "Color" TEXT')
    code, out = run("snapshot", "-c", str(cfg))
    assert code == 1 and "Product changed since they were published; run 'sparksync setup' first" in out
    code, out = run("setup", "-c", str(cfg))
    assert code == 0 and "Product: added column Color (schema version 1)" in " ".join(out.split())
    with connect(url) as r:
        r.execute('ALTER TABLE "Product" RENAME COLUMN "ProductLine" TO "Line"')
    for command in ("setup", "snapshot"):
        code, out = run(command, "-c", str(cfg))
        flat = " ".join(out.split())
        assert code == 1 and "article Product" in flat and "column ProductLine is gone and column Line appeared" in flat
        assert ('sparksync schema-change --publication Sales --article Product --rename-column "ProductLine Line"'
                in flat and "Traceback" not in flat), out
    with connect(url) as r:
        r.execute('ALTER TABLE "Product" RENAME COLUMN "Line" TO "ProductLine"')
    # Drift at a subscriber: setup names the subscriber and the table, and changes nothing.
    with connect(sub_sqlite) as s:
        s.execute('ALTER TABLE "Customer" ADD COLUMN "Extra" TEXT')
    code, out = run("setup", "-c", str(cfg))
    assert code == 1 and "S1" in out and "Customer" in out and "Extra" in out


@pytest.fixture(scope="module")
def demo(built_demo, tmp_path_factory):
    """The demo (run once for the whole run, ``built_demo``): its output, and a copy of its folder of this module's
    own for the commands that follow it."""
    import shutil

    code, out, folder = built_demo
    directory = tmp_path_factory.mktemp("cli") / "demo"
    shutil.copytree(folder, directory)
    return code, out, directory


@pytest.mark.spark
def test_demo_runs(demo):
    code, out, directory = demo
    assert code == 0
    assert "Store1" in out and "Store2" in out and "Store3" in out
    assert "─" * 100 not in out             # a section rule is a short line, also where the output is not a terminal
    assert out.count("active") == 6     # three stores and two territory stores (merge), the reporting database
    assert "update wins delete" in out and "update between Store2 (lost) and Store1 (won)" in out
    assert "identical: HQ and 3 stores hold the same" in out
    # a business logic handler: Store3's delete of a vendor kept at HQ as an inactive vendor, and back at Store3
    assert "vendor 1002: at HQ ActiveFlag = 0, at Store3 ActiveFlag = 0" in " ".join(out.split())
    assert "the handler logged: vendor 1002 deleted at Store3: kept at HQ, flagged" in " ".join(out.split())
    # transactional: the stores' changes merged into HQ reach the reporting database, filtered
    assert "tracer token: HQ -> distributor" in out and "identical: Reporting holds HQ's" in out
    # filtered: each territory store holds its partition, and a customer moved from one to the other
    assert "at Northwest no, at Canada yes" in out and "partitioned: each territory store holds exactly" in out
    assert "validated (sparksync validate --checksum): the territory stores'" in out
    # a merge schema change: the column added at HQ, replayed at each store, its value there
    flat = " ".join(out.split())
    assert "HQ: Vendor: added column Website (schema version 1)" in flat
    assert "Store3: schema change replayed: Vendor: added column Website" in flat
    assert "Store3 has Website = https://vendor1001.example" in flat
    assert (directory / "sparksync.toml").is_file()


@pytest.mark.spark
def test_merge_and_conflicts_commands(demo):
    code, out, directory = demo
    assert code == 0
    cfg = str(directory / "sparksync.toml")
    with connect(f"sqlite:///{directory / 'store3.db'}") as s:
        s.execute('UPDATE "Vendor" SET "CreditRating" = 5 WHERE "BusinessEntityID" = 1001')
    result = runner.invoke(app, ["merge", "-c", cfg, "--json", "--subscription", "Store3"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    (s3,) = summary["subscriptions"]
    assert s3["subscription"] == "Store3" and s3["upload"]["Vendor"]["updates"] == 1
    assert s3["upload"]["Vendor"]["seconds"] > 0           # per-article duration
    # --continuous keeps the Spark session and syncs again: the change reaches the other stores
    code, out = run("merge", "-c", cfg, "--continuous", "--polling-interval", "0", "--rounds", "2")
    assert code == 0 and out.count("merge Sales: closing generations") == 2
    assert "starting Spark" not in out, "rounds this small are applied without starting Spark"
    # live progress from the Spark tasks, one line per article of each generation batch applied
    assert "download HQ -> Store1 batch 1/1, Vendor: 1 change(s) (1 upd)" in " ".join(out.split())
    with connect(f"sqlite:///{directory / 'store1.db'}") as s:
        assert s.scalar('SELECT "CreditRating" FROM "Vendor" WHERE "BusinessEntityID" = 1001') == 5
    code, out = run("conflicts", "-c", cfg, "--article", "Customer")
    assert code == 0 and "1 conflict(s)" in out
    result = runner.invoke(app, ["conflicts", "-c", cfg, "--json"])
    rows = json.loads(result.stdout)
    assert {r["conflict_type"] for r in rows} == {1, 4}
    code, out = run("merge", "-c", cfg, "--subscription", "Nope")
    assert code == 2 and "no subscription named 'Nope'" in out
    # a conflict resolved again after the fact, once
    cid = str(rows[0]["conflict_id"])
    code, out = run("conflicts", "-c", cfg, "--resolve", cid, "--keep", "winner")
    assert code == 0 and "the winner is kept" in out
    code, out = run("conflicts", "-c", cfg, "--resolve", cid, "--keep", "winner")
    assert code == 1 and "was resolved already" in out
    code, out = run("conflicts", "-c", cfg, "--resolve", cid)
    assert code == 2 and "--keep" in out
    listed = json.loads(runner.invoke(app, ["conflicts", "-c", cfg, "--json"]).stdout)
    assert [r["resolution"] for r in listed if str(r["conflict_id"]) == cid] == ["winner"]


def piped(*args: str) -> str:
    """``sparksync ARGS | cat``, through a real pipe: what a log or a pager gets."""
    exe = Path(sys.executable).parent / "sparksync"
    out = subprocess.run(f"{shlex.quote(str(exe))} {' '.join(shlex.quote(a) for a in args)} | cat", shell=True,
                         capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.spark
def test_output_that_is_not_a_terminal_is_never_cut(demo):
    """status, merge and --help through a pipe: no name cut to fit 80 columns (no ellipsis), every
    subscription, article and option name whole."""
    from typer.main import get_command

    _, _, directory = demo
    cfg = str(directory / "sparksync.toml")
    status = json.loads(runner.invoke(app, ["status", "-c", cfg, "--json"]).stdout)
    subscriptions = {s["name"] for s in status["subscriptions"]}
    articles = {a["name"] for p in status["publications"] for a in p.get("articles", [])}
    assert len(subscriptions) >= 5 and len(articles) >= 5
    outputs = {"status": piped("status", "-c", cfg), "merge": piped("merge", "-c", cfg)}
    for command in ("merge", "status", "distribute", "validate"):
        outputs[f"{command} --help"] = piped(command, "--help")
    for name, out in outputs.items():
        assert "…" not in out, f"{name}: cut: " + next(x for x in out.splitlines() if "…" in x)
    words = set(re.findall(r"[\w.\-]+", outputs["status"]))
    assert subscriptions <= words and articles <= words
    merge_pubs = {p["name"] for p in status["publications"] if p.get("kind") == "merge"}
    merged = {s["name"] for s in status["subscriptions"] if s["publication"] in merge_pubs}
    rows = [line.split() for line in outputs["merge"].splitlines()[1:] if line.strip()]
    assert {"Store1", "Store2", "Store3"} <= {r[0] for r in rows} <= merged       # (a web device syncs itself)
    assert {r[1] for r in rows} <= articles | {"total"}
    group = get_command(app)
    for command in ("merge", "status", "distribute", "validate"):
        opts = {o for p in group.commands[command].params for o in p.opts if o.startswith("--")}
        assert opts <= set(re.findall(r"--[\w-]+", outputs[f"{command} --help"])), command


@pytest.mark.spark
def test_validate_command(demo):
    """After the demo: every merge subscriber validates; one damaged behind the triggers' back (as a
    restore of an old file would) is listed with the row, exit 1; --repair --yes fixes it."""
    from sparksync.merge.tracking.articles import agent_writes

    _, _, directory = demo
    cfg = str(directory / "sparksync.toml")
    code, out = run("merge", "-c", cfg)            # whatever earlier checks left pending
    assert code == 0
    # the demo moved a customer out of the reporting database's filter after distributing: not delivered yet
    code, out = run("validate", "-c", cfg, "--checksum", "-p", "Reports")
    assert code == 1 and "Reporting has changes not delivered yet" in out and "run 'sparksync logreader'" in out
    assert run("logreader", "-c", cfg)[0] == 0 and run("distribute", "-c", cfg)[0] == 0
    code, out = run("validate", "-c", cfg, "--checksum")             # merge and transactional together
    assert code == 0 and "differs" not in out and "Northwest" in out and "Store3" in out and "Reporting" in out
    with connect(f"sqlite:///{directory / 'store2.db'}") as s, s.transaction(), agent_writes(s):
        s.execute('UPDATE "Vendor" SET "CreditRating" = "CreditRating" % 5 + 1 WHERE "BusinessEntityID" = 1002')
    code, out = run("validate", "-c", cfg, "--publication", "Sales")     # row counts: a changed value passes
    assert code == 0
    result = runner.invoke(app, ["validate", "-c", cfg, "--checksum", "--json", "-s", "Store2"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    (vendor,) = [a for a in report["subscriptions"][0]["articles"] if not a["ok"]]
    assert vendor["article"] == "Vendor" and vendor["differences"][0]["key"] == "BusinessEntityID=1002"
    assert vendor["changed"] == 1 and vendor["missing"] == vendor["extra"] == 0
    code, out = run("validate", "-c", cfg, "--repair", "-s", "Store2")     # no terminal: needs --yes
    assert code == 2 and "pass --yes" in out
    code, out = run("validate", "-c", cfg, "--repair", "--yes", "-s", "Store2")
    assert code == 0 and "repaired 1 row(s)" in out
    with connect(f"sqlite:///{directory / 'reporting.db'}") as s:
        s.execute('DELETE FROM "Customer" WHERE "CustomerID" = (SELECT min("CustomerID") FROM "Customer")')
    code, out = run("validate", "-c", cfg, "--publication", "Reports", "--checksum")
    assert code == 1 and "missing row CustomerID=" in out
    code, out = run("validate", "-c", cfg, "--publication", "Reports", "--repair", "--yes")
    assert code == 1 and "is transactional: --repair writes merge replicas" in out


@pytest.mark.spark
def test_cleanup_command(demo):
    """On the demo (retention 14 days, everything young): nothing is due; the JSON names each replica
    and what holds it; a transactional or unknown publication is one clear line, exit 2."""
    _, _, directory = demo
    cfg = str(directory / "sparksync.toml")
    result = runner.invoke(app, ["cleanup", "-c", cfg, "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["dry_run"] and summary["ok"]
    names = [r["replica"] for r in summary["replicas"]]
    assert names[0] == "HQ" and {"Store1", "Store2", "Store3", "Northwest", "Canada"} <= set(names)
    assert all(r["total"] == 0 and r["held_by"] for r in summary["replicas"])
    code, out = run("cleanup", "-c", cfg, "-p", "Territories")
    assert code == 0 and "through generation" in out and "Northwest" in out and "Store1" not in out
    code, out = run("cleanup", "-c", cfg, "-p", "Reports")
    assert code == 2 and "not a merge publication" in out
    code, out = run("cleanup", "-c", cfg, "-p", "Nope")
    assert code == 2 and "no publication named 'Nope'" in out


@pytest.mark.spark
def test_schema_change_command_for_a_merge_publication(demo):
    _, _, directory = demo
    cfg = str(directory / "sparksync.toml")
    code, out = run("schema-change", "-c", cfg, "-p", "Sales", "-a", "Employee", "--drop-column", "BusinessEntityID")
    assert code == 1 and "BusinessEntityID was dropped but it is in the primary key" in out
    assert "Traceback" not in out
    code, out = run("schema-change", "-c", cfg, "-p", "Sales", "-a", "Employee", "--drop-column", "JobTitle")
    assert code == 0 and "Employee: dropped column JobTitle (schema version 2)" in " ".join(out.split())
    code, out = run("merge", "-c", cfg, "-s", "Store1")
    assert code == 0 and "Store1: schema change replayed: Employee: dropped column JobTitle" in " ".join(out.split())
    with connect(f"sqlite:///{directory / 'store1.db'}") as s:
        assert "JobTitle" not in [c for (_, c, *_) in s.query('PRAGMA table_info("Employee")')]
    code, out = run("status", "-c", cfg)
    assert code == 0


@pytest.mark.spark
def test_reinit_command_recreates_a_damaged_transactional_subscriber(demo):
    """The reporting database's SQLite file damaged (pages overwritten): distribute names it as damaged;
    reinit keeps the damaged file aside, initializes a new one from a snapshot, and says the next
    distribute brings what follows; the new one validates."""
    _, _, directory = demo
    cfg = str(directory / "sparksync.toml")
    path = directory / "reporting.db"
    with open(path, "r+b") as f:
        f.seek(2 * 4096)
        f.write(b"\xde\xad" * (max(path.stat().st_size - 2 * 4096, 4096) // 2))
    code, out = run("distribute", "-c", cfg)
    assert code == 1 and "Reporting: " in out and "the SQLite file is damaged" in out and "Reporting: Reporting:" not in out
    code, out = run("reinit", "-c", cfg, "-s", "Reporting")
    assert code == 0 and "its database is damaged" in out and "the next distribute brings the changes since" in out
    assert [p for p in directory.iterdir() if p.name.startswith("reporting.db.damaged-") and p.suffix != ".db-wal"]
    code, out = run("validate", "-c", cfg, "-p", "Reports", "--checksum")
    assert code == 0 and "Reporting" in out and "differs" not in out


def _with_unset_variable(tmp_path: Path) -> Path:
    """A valid configuration but for one key: ``[server] tls_cert`` names a variable that is not set (a key
    most commands never read)."""
    return write_config(tmp_path, {
        "publisher": {"name": "HQ", "database": _demo_publisher(tmp_path), "snapshot_dir": str(tmp_path / "snap")},
        "server": {"tls_cert": "${SPARKSYNC_TEST_UNSET_CERTS}/sync.pem", "tls_key": "certs/sync.key"},
        "publications": [{"name": "Sales", "articles": [{"table": "Customer"}]}],
        "subscriptions": [{"name": "Till", "publication": "Sales", "transport": "web"}],
    })


def test_an_unset_variable_stops_token_loudly_and_writes_nothing_to_stdout(tmp_path, monkeypatch):
    """``sparksync token ... > tokfile``: exit 2, the key and the variable named on stderr, the file empty."""
    monkeypatch.delenv("SPARKSYNC_TEST_UNSET_CERTS", raising=False)
    cfg = _with_unset_variable(tmp_path)
    tokfile = tmp_path / "tokfile"
    with open(tokfile, "w") as out:
        p = subprocess.run([str(Path(sys.executable).parent / "sparksync"), "token", "-c", str(cfg), "-s", "Till"],
                           stdout=out, stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "server.tls_cert: environment variable SPARKSYNC_TEST_UNSET_CERTS is not set" in p.stderr
    assert tokfile.read_text() == "" and "Traceback" not in p.stderr


def test_an_unset_variable_stops_every_command_that_reads_the_configuration(tmp_path, monkeypatch):
    from typer.main import get_command

    monkeypatch.delenv("SPARKSYNC_TEST_UNSET_CERTS", raising=False)
    cfg = str(_with_unset_variable(tmp_path))
    values = {"publication": "Sales", "subscription": "Till", "article": "Customer", "add_column": "Note text"}
    commands = {name: cmd for name, cmd in get_command(app).commands.items()
                if any("--config" in p.opts for p in cmd.params)}
    assert {"status", "merge", "setup", "serve", "token", "logreader", "schema-change"} <= set(commands)
    for name, cmd in commands.items():
        args = [a for p in cmd.params if p.required or p.name == "subscription" or (name == "schema-change"
                and p.name == "add_column") for a in (p.opts[0], values[str(p.name)])]
        code, out = run(name, "-c", cfg, *args)
        assert code == 2 and "server.tls_cert: environment variable SPARKSYNC_TEST_UNSET_CERTS is not set" in out, \
            f"{name}: exit {code}: {out}"


def test_a_section_rule_in_output_that_is_not_a_terminal_is_a_short_line():
    """Through a real pipe (the console's width is WIDE there, so that tables are never cut): a rule is 80
    columns, or its title's width when that is longer, and a table beside it is still whole."""
    title = " ".join(["a long section title"] * 6)
    script = (
        "from rich.table import Table\n"
        "from sparksync.cli.common import console, handle_errors\n"
        "@handle_errors\n"
        "def show():\n"
        "    console.rule('[bold]4. sparksync status')\n"
        f"    console.rule('[bold]{title}')\n"
        "    console.rule()\n"
        "    table = Table('subscription', 'article')\n"
        "    table.add_row('S' * 150, 'Article' * 20)\n"
        "    console.print(table)\n"
        "show()\n")
    p = subprocess.run(f"{shlex.quote(sys.executable)} -c {shlex.quote(script)} | cat", shell=True, capture_output=True,
                       text=True, timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert p.returncode == 0 and p.stderr == "", p.stderr
    lines = p.stdout.splitlines()
    assert [len(x) for x in lines[:3]] == [80, len(title) + 6, 80], lines[:3]
    assert lines[1] == f"── {title} ──"
    assert lines[0].startswith("─" * 20) and " 4. sparksync status " in lines[0] and set(lines[2]) == {"─"}
    assert "S" * 150 in p.stdout and "Article" * 20 in p.stdout
