"""A subscriber edited by hand (seed 001's 20598, duplicate keys): skip_errors logs and goes on,
anything else stops that subscription with a clear error while the others go on; fixed, the next
run continues from where it stopped."""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.metadata import store
from tests.support.transactional import build, replicate, setup_topology, vendor_rows

pytestmark = pytest.mark.spark
T = '"Purchasing"."Vendor"'


def _errors(tx) -> list[dict]:
    with connect(tx.topology.distributor_url) as d:
        return store.select_rows(d, "MSrepl_errors", order_by=("xact_seqno", "command_id"))


def test_skip_errors_logs_and_continues(spark, dbs, tmp_path, pg_admin_url):
    tx = build(dbs, tmp_path, "postgresql", {"Skip": "postgresql", "Strict": "postgresql", "Lite": "sqlite"},
               subscription={"Skip": {"skip_errors": ["2627", "20598"]}, "Lite": {"skip_errors": ["20598", "2627"]}})
    setup_topology(tx, spark)
    for name in ("Skip", "Strict", "Lite"):        # hand edits at the subscribers
        with connect(tx.subscriber_urls[name]) as r:
            t = tx.sub_table(name)
            r.execute(f'DELETE FROM {t} WHERE "VendorID" = 2')
            r.execute(vendor_rows("postgresql" if name != "Lite" else "sqlite", [50]).replace(
                '"Purchasing"."Vendor"', t))
    tx.publish(f'UPDATE {T} SET "Name" = \'x\' WHERE "VendorID" = 2',       # 20598 at the subscribers
               vendor_rows("postgresql", [50]),                              # 2627 at the subscribers
               f'UPDATE {T} SET "Name" = \'y\' WHERE "VendorID" = 3')
    summary = replicate(tx, spark)
    by = {s.subscription: s for s in summary.subscriptions}
    assert by["Skip"].ok and by["Skip"].skipped == 2 and by["Lite"].ok and by["Lite"].skipped == 2
    assert sorted(e["error_code"] for e in by["Skip"].errors) == ["20598", "2627"]
    assert dict((r[0], r[1]) for r in tx.subscriber_rows("Skip"))[3] == "y"      # later commands applied
    assert dict((r[0], r[1]) for r in tx.subscriber_rows("Lite"))[3] == "y"
    strict = by["Strict"]
    assert not strict.ok and "failed with error 20598" in strict.message and "row was not found" in strict.message
    assert dict((r[0], r[1]) for r in tx.subscriber_rows("Strict"))[3] == "Vendor 3"   # stopped before it
    logged = _errors(tx)
    assert {(e["subscription"], e["error_code"], e["skipped"]) for e in logged} == {
        ("Skip", "20598", 1), ("Skip", "2627", 1), ("Lite", "20598", 1), ("Lite", "2627", 1), ("Strict", "20598", 0)}
    # fix the subscriber by hand: the next run goes on from the failed transaction
    with connect(tx.subscriber_urls["Strict"]) as r:
        r.execute(vendor_rows("postgresql", [2]))
        r.execute(f'DELETE FROM {T} WHERE "VendorID" = 50')
    again = replicate(tx, spark, ["Strict"])
    assert again.ok
    assert tx.subscriber_rows("Strict") == tx.publisher_rows()
