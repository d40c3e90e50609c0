"""Bad input gets one clear message, the right exit code, and changes nothing (issue 9, case 18)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sparksync.cli.app import app
from sparksync.dialects import connect
from sparksync.dialects.model import parse_column_definition
from sparksync.errors import ConfigurationError
from sparksync.metadata import store
from sparksync.provision import setup
from sparksync.topology import parse_topology
from tests.support.config import write_config


@pytest.mark.parametrize("text, expected", [
    ("Email varchar(100)", ("Email", "VARCHAR(100)")),
    ("Price numeric(10,2)", ("Price", "DECIMAL(10, 2)")),
])
def test_add_column_takes_one_plain_column(text, expected):
    assert parse_column_definition(text, "W") == expected


@pytest.mark.parametrize("text, why", [
    ("x int; drop table x", "is not one column definition"),
    ("x int, y int", "is not one column definition"),
    ("x", "is not one column definition"),
    ("x int not null", "NOT NULL is not replicated"),
    ("x int primary key", "PRIMARY KEY is not replicated"),
    ("x int check (x > 0)", "CHECK (x > 0) is not replicated"),
    ("x int references t(a)", "REFERENCES t (a) is not replicated"),
    ("x int default 5", "DEFAULT 5 is not replicated"),
])
def test_add_column_refuses_what_is_not_replicated(text, why):
    with pytest.raises(ConfigurationError, match=why.replace("(", r"\(").replace(")", r"\)")):
        parse_column_definition(text, "W")


def test_an_unknown_exchange_type_is_a_usage_error(tmp_path):
    cfg = write_config(tmp_path, {"publisher": {"name": "P", "database": "sqlite:///p.db"},
                                  "publications": [{"name": "Pub", "articles": [{"table": "T"}]}], "subscriptions": []})
    result = CliRunner().invoke(app, ["merge", "-c", str(cfg), "--exchange-type", "sideways"])
    assert result.exit_code == 2 and "use both, upload or download" in result.output
    assert "SPARKSYNC_DEBUG" not in result.output


def test_every_bad_command_of_an_article_is_reported_at_once(tmp_path):
    with pytest.raises(ConfigurationError) as e:
        parse_topology({"distributor": {"database": "sqlite:///d.db"}, "publisher": {"name": "P", "database": "sqlite:///p.db"},
                        "publications": [{"name": "X", "kind": "transactional", "articles": [
                            {"table": "T", "ins_cmd": "XCALL a", "upd_cmd": "BOGUS", "del_cmd": "SCALL b"}]}],
                        "subscriptions": []}, tmp_path)
    text = str(e.value)
    assert "ins_cmd 'XCALL a'" in text and "upd_cmd 'BOGUS'" in text and "del_cmd 'SCALL b'" in text


@pytest.mark.parametrize("where", ["a file", "a URL"])
def test_a_snapshot_dir_that_cannot_be_written_is_refused_before_anything_changes(tmp_path, where):
    url = f"sqlite:///{tmp_path / 'p.db'}"
    with connect(url) as r:
        r.execute('CREATE TABLE "T" ("id" INTEGER PRIMARY KEY)')
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the snapshot folder should be")
    snapshot_dir = str(blocker / "snap") if where == "a file" else "ftp://files.example/snap"   # no file system
    topology = parse_topology({"publisher": {"name": "P", "database": url, "snapshot_dir": snapshot_dir},
                               "publications": [{"name": "Pub", "articles": [{"table": "T"}]}],
                               "subscriptions": [{"name": "S", "publication": "Pub",
                                                  "database": f"sqlite:///{tmp_path / 's.db'}"}]}, tmp_path)
    with pytest.raises(ConfigurationError, match="publisher.snapshot_dir: cannot write snapshots to") as e:
        setup(topology, lambda: pytest.fail("Spark must not start"))
    assert ("ftp://files.example/snap" in str(e.value)) == (where == "a URL")
    with connect(url) as r:
        assert store.metadata_version(r) is None
