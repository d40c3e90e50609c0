"""Transactional replication with values and tables that used to stop the log reader or arrive wrong
(issue 9, cases 8-12 and 16): every value a PostgreSQL publisher holds reaches a PostgreSQL subscriber
exactly; a SQLite subscriber gets the documented mapping or a per-command error, never a stalled
publication; generated columns, partitioned tables and a REPLICA IDENTITY changed behind our back
are handled or refused by name."""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.errors import SparksyncError
from sparksync.transactional.distribution.logreader import run_logreader
from tests.support.databases import databases
from tests.support.transactional import build, replicate, setup_topology

pytestmark = pytest.mark.spark

VALUES_DDL = ['CREATE TABLE "V" ("id" integer PRIMARY KEY, "ts" timestamp, "tz" timestamptz, "d" date, '
              '"n" numeric, "nn" numeric(10,2), "c" character(5), "r" real, "t" text, "f" double precision)']
# written after initialization: only the log carries them
CHANGES = [
    "INSERT INTO \"V\" VALUES (1, 'infinity', '-infinity', 'infinity', 'NaN', 'NaN', 'ab', 1.1, 'x', 1)",
    "INSERT INTO \"V\" VALUES (2, '10000-01-01 00:00:00', '2024-01-01 00:00:00+00', '0044-03-15 BC', "
    "'123456789012345678901234567890.123456789012', 1.25, 'abcde', 3.4e38, 'y', 2)",
    "INSERT INTO \"V\" VALUES (3, '2024-05-01 10:00:00', '2024-05-01 10:00:00+02', '2024-05-01', 0.1, 2.5, 'z', "
    "-0.25, 'z', 3)",
    "INSERT INTO \"V\" VALUES (4, '2024-05-01 10:00:00', NULL, NULL, 1, 1, 'nan', 1, 'nan', 'NaN')",
]


def pg_text(url: str) -> list[tuple]:
    with connect(url) as r:
        return r.query('SELECT "id", "ts"::text, "tz"::text, "d"::text, "n"::text, "nn"::text, "c" || \'|\', '
                       '"r"::text, "t", "f"::text FROM "V" ORDER BY 1')


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory, pg_admin_url):
    tmp = tmp_path_factory.mktemp("txvalues")
    with databases(tmp, pg_admin_url) as dbs:
        tx = build(dbs, tmp, "postgresql", {"PG": "postgresql", "LITE": "sqlite"},
                   articles=[{"table": "public.V"}], extra_tables=VALUES_DDL, seed_ids=None,
                   subscription={"LITE": {"skip_errors": ["22000"]}})
        setup_topology(tx, spark)
        tx.publish(*CHANGES)
        tx.summary = replicate(tx, spark)
        yield tx


def test_the_log_reader_and_the_distribution_agent_complete(world):
    assert world.summary.ok, world.summary


def test_postgresql_to_postgresql_is_exact_for_every_value(world):
    assert pg_text(world.subscriber_urls["PG"]) == pg_text(world.publisher_url)


def test_character_n_keeps_its_semantics(world):
    with connect(world.subscriber_urls["PG"]) as r:
        assert r.scalar('SELECT count(*) FROM "V" WHERE "c" = \'ab\'') == 1          # blank-padded comparison
        assert r.scalar("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                        "'\"V\"'::regclass AND attname = 'c'") == "character(5)"
        assert r.scalar("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                        "'\"V\"'::regclass AND attname = 'n'") == "numeric"


def test_sqlite_gets_the_documented_mapping_and_nan_is_a_logged_error(world):
    with connect(world.subscriber_urls["LITE"]) as r:
        rows = {row[0]: row for row in r.query('SELECT "id", "ts", "d", "n", "r", "f" FROM "V" ORDER BY 1')}
    assert rows[1][1:4] == ("infinity", "infinity", "NaN")            # PostgreSQL's text, as documented
    assert rows[2][2] == "0044-03-15 BC"
    assert rows[1][4] == 1.1                                          # float4 as its shortest decimal
    assert 4 not in rows                                              # NaN in a float: a per-command error ...
    with connect(world.topology.distributor_url) as d:
        errors = d.query('SELECT "error_code", "message", "skipped" FROM "MSrepl_errors"')
    assert any(code == "22000" and "NaN" in msg and skipped == 1 for code, msg, skipped in errors), errors


def test_the_snapshot_and_the_log_store_the_same_float4(world, spark, tmp_path, pg_admin_url):
    with databases(tmp_path, pg_admin_url) as dbs:
        tx = build(dbs, tmp_path, "postgresql", {"LITE": "sqlite"}, articles=[{"table": "public.V"}],
                   extra_tables=VALUES_DDL + ["INSERT INTO \"V\" (\"id\", \"r\") VALUES (1, 1.1)"], seed_ids=None)
        setup_topology(tx, spark)                                     # row 1 by the snapshot
        tx.publish("INSERT INTO \"V\" (\"id\", \"r\") VALUES (2, 1.1)")
        assert replicate(tx, spark).ok                                # row 2 by the log
        with connect(tx.subscriber_urls["LITE"]) as r:
            assert [v for (v,) in r.query('SELECT "r" FROM "V" ORDER BY "id"')] == [1.1, 1.1]


def test_generated_columns_are_refused_with_advice(spark, dbs, tmp_path, pg_admin_url):
    tx = build(dbs, tmp_path, "postgresql", {"S": "postgresql"}, articles=[{"table": "public.G"}], seed_ids=None,
               extra_tables=['CREATE TABLE "G" ("id" integer PRIMARY KEY, "a" integer, '
                             '"b" integer GENERATED ALWAYS AS ("a" * 2) STORED)'])
    with pytest.raises(SparksyncError, match="column b is generated .* leave it out with columns"):
        setup_topology(tx, spark)
    tx2 = build(dbs, tmp_path / "2", "postgresql", {"S": "postgresql"}, seed_ids=None,
                articles=[{"table": "public.G", "columns": ["id", "a"]}],
                extra_tables=['CREATE TABLE "G" ("id" integer PRIMARY KEY, "a" integer, '
                              '"b" integer GENERATED ALWAYS AS ("a" * 2) STORED)'])
    setup_topology(tx2, spark)
    tx2.publish('INSERT INTO "G" ("id", "a") VALUES (1, 21)')
    assert replicate(tx2, spark).ok
    assert tx2.rows(tx2.subscriber_urls["S"], '"G"', '"id", "a"') == [(1, 21)]


def test_a_partitioned_table_replicates_through_its_root(spark, dbs, tmp_path, pg_admin_url):
    tx = build(dbs, tmp_path, "postgresql", {"S": "postgresql", "L": "sqlite"}, articles=[{"table": "public.P"}],
               seed_ids=None, extra_tables=[
                   'CREATE TABLE "P" ("id" integer, "region" text, "v" text, PRIMARY KEY ("id", "region")) '
                   'PARTITION BY LIST ("region")',
                   'CREATE TABLE "P_n" PARTITION OF "P" FOR VALUES IN (\'n\')',
                   'CREATE TABLE "P_s" PARTITION OF "P" FOR VALUES IN (\'s\')',
                   "INSERT INTO \"P\" VALUES (1, 'n', 'a'), (2, 's', 'b')"])
    setup_topology(tx, spark)
    tx.publish("INSERT INTO \"P\" VALUES (3, 'n', 'c')", "UPDATE \"P\" SET \"v\" = 'B' WHERE \"id\" = 2",
               "DELETE FROM \"P\" WHERE \"id\" = 1")
    assert replicate(tx, spark).ok
    for name in ("S", "L"):
        assert tx.rows(tx.subscriber_urls[name], '"P"', '"id", "region", "v"') == [(2, "s", "B"), (3, "n", "c")]


def test_a_replica_identity_changed_after_setup_stops_with_the_cause(spark, dbs, tmp_path, pg_admin_url):
    tx = build(dbs, tmp_path, "postgresql", {"S": "postgresql"}, seed_ids=range(1, 4))
    setup_topology(tx, spark)
    tx.publish('ALTER TABLE "Purchasing"."Vendor" REPLICA IDENTITY DEFAULT')
    with pytest.raises(SparksyncError, match="REPLICA IDENTITY of .*Vendor.* is no longer FULL.*sparksync setup"):
        run_logreader(tx.topology)
    tx.publish('UPDATE "Purchasing"."Vendor" SET "Name" = \'changed meanwhile\' WHERE "VendorID" = 1')
    setup_topology(tx, spark)                                         # restores it ...
    with pytest.raises(SparksyncError, match="update of Purchasing.Vendor arrived without its before image"):
        run_logreader(tx.topology)                                    # ... and the lost before image is named
