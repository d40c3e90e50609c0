"""User resolvers (issue 9, case 7): checked by setup before anything changes, imported from the
configuration file's folder (not the current directory), and one that raises at run time fails that
change only."""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.errors import ConfigurationError
from sparksync.metadata import store
from sparksync.provision import setup
from sparksync.topology import parse_topology
from tests.support.cluster import Cluster, session
from tests.support.databases import Databases

pytestmark = pytest.mark.spark

RESOLVERS = '''
def pick_longer(publisher_row, subscriber_row, conflict_type):
    if publisher_row is None or subscriber_row is None:
        return "publisher"
    return "subscriber" if len(subscriber_row["v"]) > len(publisher_row["v"]) else "publisher"


def explode(publisher_row, subscriber_row, conflict_type):
    if subscriber_row and subscriber_row["v"] == "boom":
        raise RuntimeError("cannot decide about boom")
    return "publisher"


def two_args(a, b):
    return "publisher"
'''


def ddl(kind: str) -> list[str]:
    return ['CREATE TABLE "R" ("id" INTEGER PRIMARY KEY, "v" TEXT)',
            'CREATE TABLE "X" ("id" INTEGER PRIMARY KEY, "v" TEXT)'] + \
        [f"INSERT INTO \"{t}\" VALUES ({i}, 'v{i}')" for t in ("R", "X") for i in range(1, 6)]


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resolvers")
    (tmp / "site_resolvers.py").write_text(RESOLVERS, encoding="utf-8")    # next to the config, not on the path
    return Cluster(spark, Databases(tmp), "sqlite", {"S": "sqlite"}, ddl,
                   [{"table": "R", "resolver": "site_resolvers:pick_longer"},
                    {"table": "X", "resolver": "site_resolvers:explode"}])


@pytest.mark.parametrize("resolver, why", [
    ("nomodule:fn", "cannot be imported: ModuleNotFoundError"),
    ("site_resolvers:missing", "cannot be imported: AttributeError"),
    ("site_resolvers:two_args", "must take (publisher_row, subscriber_row, conflict_type)"),
])
def test_setup_refuses_a_resolver_it_cannot_use_and_changes_nothing(spark, tmp_path, resolver, why):
    (tmp_path / "site_resolvers.py").write_text(RESOLVERS, encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'p.db'}"
    with connect(url) as r:
        r.execute('CREATE TABLE "R" ("id" INTEGER PRIMARY KEY, "v" TEXT)')
    topology = parse_topology({
        "publisher": {"name": "P", "database": url},
        "publications": [{"name": "Pub", "articles": [{"table": "R", "resolver": resolver}]}],
        "subscriptions": [{"name": "S", "publication": "Pub", "database": f"sqlite:///{tmp_path / 's.db'}"}]},
        tmp_path)
    with pytest.raises(ConfigurationError) as e:
        setup(topology, lambda: spark)
    assert "articles (R).resolver" in str(e.value) and why in str(e.value)
    with connect(url) as r:
        assert store.metadata_version(r) is None                 # nothing was published


def test_a_resolver_next_to_the_config_file_resolves_in_the_spark_tasks(world):
    world.sql("P", "UPDATE \"R\" SET \"v\" = 'p' WHERE \"id\" = 1")
    world.sql("S", "UPDATE \"R\" SET \"v\" = 'longer at S' WHERE \"id\" = 1")
    summary = world.merge()
    assert summary.ok
    assert world.value("P", "R", 1, "v") == world.value("S", "R", 1, "v") == "longer at S"


def test_a_resolver_that_raises_fails_that_change_only(world):
    world.sql("P", "UPDATE \"X\" SET \"v\" = 'p2' WHERE \"id\" = 2", "UPDATE \"X\" SET \"v\" = 'p3' WHERE \"id\" = 3")
    world.sql("S", "UPDATE \"X\" SET \"v\" = 'boom' WHERE \"id\" = 2", "UPDATE \"X\" SET \"v\" = 's3' WHERE \"id\" = 3",
              "UPDATE \"X\" SET \"v\" = 's4' WHERE \"id\" = 4")
    summary = world.merge()
    assert summary.ok, [s.errors for s in summary.subscriptions]
    assert session(summary, "S").total("upload").failed == 1
    failed = world.failed("P")
    assert len(failed) == 1 and failed[0]["row_key"] == "id=2" and "cannot decide about boom" in failed[0]["reason"]
    assert world.value("P", "X", 3, "v") == world.value("S", "X", 3, "v") == "p3"   # resolved: publisher wins
    assert world.value("P", "X", 4, "v") == "s4"                                      # the rest of the batch
    world.sql("S", "UPDATE \"X\" SET \"v\" = 'calm' WHERE \"id\" = 2")
    assert world.merge().ok
    assert world.failed("P") == []
    assert world.value("P", "X", 2, "v") == world.value("S", "X", 2, "v")
