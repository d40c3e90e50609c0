"""Publications that share tables or databases (issue 9, cases 13-15).

* The same table in two merge publications is published once (one rowguid column, one set of
  triggers; seed 000: the metadata belongs to the database) and changes flow between their
  subscribers through the publisher.
* Publications that disagree about a shared table, or one subscriber database receiving the same
  table from two publications, are refused before anything changes.
* An article added to a publication whose subscriptions are initialized is delivered to them; a
  dropped one loses its tracking there (the table stays).
* A database subscribed to two publications has each publication's priority.
"""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.errors import ConfigurationError
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.metadata import store
from sparksync.names import TableName
from sparksync.provision import setup
from sparksync.topology import parse_topology
from tests.support.publishing import rowguids

pytestmark = pytest.mark.spark


def publisher(tmp, *tables: str) -> str:
    url = f"sqlite:///{tmp / 'pub.db'}"
    with connect(url) as r:
        for t in tables:
            r.execute(f'CREATE TABLE "{t}" ("id" INTEGER PRIMARY KEY, "v" TEXT)')
            r.executemany(f'INSERT INTO "{t}" VALUES (?, ?)', [(i, f"v{i}") for i in range(1, 6)])
    return url


def topo(tmp, url, publications, subscriptions):
    return parse_topology({"publisher": {"name": "P", "database": url, "snapshot_dir": str(tmp / "snap")},
                           "publications": publications, "subscriptions": subscriptions}, tmp)


def value(url, table, id_):
    with connect(url) as r:
        return r.scalar(f'SELECT "v" FROM "{table}" WHERE "id" = {r.p}', [id_])


def test_a_table_in_two_publications_is_published_once_and_flows_between_them(spark, tmp_path):
    url = publisher(tmp_path, "T")
    sa, sb = f"sqlite:///{tmp_path / 'sa.db'}", f"sqlite:///{tmp_path / 'sb.db'}"
    t = topo(tmp_path, url, [{"name": "A", "articles": [{"table": "T"}]}, {"name": "B", "articles": [{"table": "T"}]}],
             [{"name": "SA", "publication": "A", "database": sa}, {"name": "SB", "publication": "B", "database": sb}])
    setup(t, lambda: spark)
    with connect(url) as r:
        # one rowguid (SQLite: kept beside the table, one table of rowguids), one set of triggers
        assert r.reflect(TableName(None, "T")).column("rowguid") is None
        assert len({a["rowguid_keyed"] for a in store.select_rows(r, "sysmergearticles")}) == 1
        assert len(set(rowguids(r, "T"))) == r.scalar('SELECT count(*) FROM "T"')
        assert len(r.dialect.list_merge_triggers(r, TableName(None, "T"))) == 4
    with connect(sa) as r:
        r.execute('UPDATE "T" SET "v" = \'from SA\' WHERE "id" = 2')
    summary = MergeAgent(t, spark).run(MergeOptions())
    assert summary.ok, [s.errors for s in summary.subscriptions]
    assert value(url, "T", 2) == value(sb, "T", 2) == "from SA"
    setup(t, lambda: spark)                                   # idempotent


def test_publications_that_disagree_about_a_shared_table_are_refused(spark, tmp_path):
    url = publisher(tmp_path, "T")
    t = topo(tmp_path, url, [{"name": "A", "articles": [{"table": "T"}]},
                             {"name": "B", "articles": [{"table": "T", "column_tracking": True}]}],
             [{"name": "SA", "publication": "A", "database": f"sqlite:///{tmp_path / 'sa.db'}"}])
    with pytest.raises(ConfigurationError, match="table T is in publications A and B with different column_tracking"):
        setup(t, lambda: spark)


def test_one_database_receiving_a_table_from_two_publications_is_refused(spark, tmp_path):
    url = publisher(tmp_path, "T")
    db = f"sqlite:///{tmp_path / 's.db'}"
    t = topo(tmp_path, url, [{"name": "A", "articles": [{"table": "T"}]}, {"name": "B", "articles": [{"table": "T"}]}],
             [{"name": "SA", "publication": "A", "database": db}, {"name": "SB", "publication": "B", "database": db}])
    with pytest.raises(ConfigurationError, match="SA and SB share a database .* both publish T"):
        setup(t, lambda: spark)


def test_articles_added_to_and_dropped_from_an_initialized_publication_follow_at_the_subscriber(spark, tmp_path):
    url = publisher(tmp_path, "T", "U")
    subs = [{"name": "S", "publication": "A", "database": f"sqlite:///{tmp_path / 's.db'}"}]
    setup(topo(tmp_path, url, [{"name": "A", "articles": [{"table": "T"}]}], subs), lambda: spark)
    grown = topo(tmp_path, url, [{"name": "A", "articles": [{"table": "T"}, {"table": "U"}]}], subs)
    setup(grown, lambda: spark)
    with connect(url) as p, connect(subs[0]["database"]) as s:
        assert s.scalar('SELECT count(*) FROM "U"') == p.scalar('SELECT count(*) FROM "U"') > 0
        assert {a["source_table"] for a in store.select_rows(s, "sysmergearticles")} == {"T", "U"}
    shrunk = topo(tmp_path, url, [{"name": "A", "articles": [{"table": "U"}]}], subs)
    setup(shrunk, lambda: spark)
    for db in (url, subs[0]["database"]):
        with connect(db) as r:
            assert {a["source_table"] for a in store.select_rows(r, "sysmergearticles")} == {"U"}
            assert r.reflect(TableName(None, "T")) is not None                    # the table stays
    assert MergeAgent(shrunk, spark).run(MergeOptions()).ok                   # the subscription still works


def test_a_database_in_two_publications_has_each_publications_priority(spark, tmp_path):
    url = publisher(tmp_path, "TA", "TB")
    x, y = f"sqlite:///{tmp_path / 'x.db'}", f"sqlite:///{tmp_path / 'y.db'}"
    # B is registered first, A last: a lookup that ignores the publication finds x's priority in A (90)
    t = topo(tmp_path, url, [{"name": "B", "articles": [{"table": "TB"}]}, {"name": "A", "articles": [{"table": "TA"}]}],
             [{"name": "YB", "publication": "B", "database": y, "subscriber_type": "global", "priority": 50},
              {"name": "XB", "publication": "B", "database": x, "subscriber_type": "global", "priority": 10},
              {"name": "XA", "publication": "A", "database": x, "subscriber_type": "global", "priority": 90}])
    setup(t, lambda: spark)
    with connect(y) as r:
        r.execute('UPDATE "TB" SET "v" = \'Y (50)\' WHERE "id" = 1')
    with connect(x) as r:
        r.execute('UPDATE "TB" SET "v" = \'X (10 in B, 90 in A)\' WHERE "id" = 1')
    summary = MergeAgent(t, spark).run(MergeOptions())
    assert summary.ok
    assert value(url, "TB", 1) == value(x, "TB", 1) == value(y, "TB", 1) == "Y (50)"
