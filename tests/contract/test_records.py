"""Typed metadata rows written and read back on both databases: a code is stored as its integer or
text (not as an enum's name, which is how psycopg would adapt an Enum), and read back as the code."""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.errors import ReplicaDamaged
from sparksync.metadata import store
from sparksync.metadata.records import (
    GenerationRow,
    GenStatus,
    Role,
    SubscriberType,
    SubscriptionRow,
    SubscriptionStatus,
)


def test_typed_rows_round_trip(kind, dbs):
    url = dbs.url(kind, "records")
    now = store.utcnow()
    with connect(url) as r:
        with r.transaction():
            store.install_metadata(r)
            store.insert(r, SubscriptionRow.for_publisher(
                subid=store.new_guid(), pubid=store.new_guid(), name="Pub", replica_id=store.new_guid(),
                replnickname=1, database_label="pub", created_at=now))
            row = SubscriptionRow.for_subscriber(
                subid=store.new_guid(), pubid=store.new_guid(), name="Sub", replica_id=store.new_guid(),
                replnickname=2, database_label="sub", subscriber_type=SubscriberType.LOCAL, priority=0.0,
                host_name="h", login=None, partition_id=None, status=SubscriptionStatus.CREATED, created_at=now)
            store.insert(r, row)
            store.insert(r, GenerationRow(generation=5, guidsrc=store.new_guid(), genstatus=GenStatus.RECEIVED,
                                          settled=1, nicknames=[1, 2], changecount=3, coldate=now))
            store.update(r, SubscriptionRow, {"status": SubscriptionStatus.ACTIVE, "recgen": 5},
                         {"name": "Sub", "role": Role.SUBSCRIBER})
        raw = r.query(f"SELECT role, subscriber_type, status FROM {r.meta('sysmergesubscriptions')} ORDER BY name")
        assert [tuple(x) for x in raw] == [("publisher", 0, 1), ("subscriber", 2, 1)]
        assert r.scalar(f"SELECT genstatus FROM {r.meta('MSmerge_genhistory')} WHERE generation = 5") == 2
        back = store.select_one(r, SubscriptionRow, {"name": "Sub"})
        assert back is not None and back.role is Role.SUBSCRIBER and back.status is SubscriptionStatus.ACTIVE
        assert back.subscriber_type is SubscriberType.LOCAL and back.recgen == 5
        assert back.subid == row.subid and back.host_name == "h"
        (publisher,) = store.select(r, SubscriptionRow, {"role": Role.PUBLISHER})
        assert publisher.subscriber_type is SubscriberType.PUBLISHER and publisher.priority == 100.0
        gen = store.select_one(r, GenerationRow, {"genstatus": GenStatus.RECEIVED})
        assert gen is not None and gen.genstatus is GenStatus.RECEIVED and gen.nicknames == [1, 2]
        store.delete(r, GenerationRow, {"generation": 5})
        assert store.select(r, GenerationRow, {"generation": 5}) == []


def test_a_code_written_by_hand_is_a_damaged_replica_named(kind, dbs):
    """A code no enum has (the metadata changed by hand or by another program) is one clear error naming the
    replica, the table, the column and the value; nothing is guessed."""
    url = dbs.url(kind, "handmade")
    with connect(url, "Store7") as r:
        with r.transaction():
            store.install_metadata(r)
            store.insert(r, SubscriptionRow.for_publisher(
                subid=store.new_guid(), pubid=store.new_guid(), name="Pub", replica_id=store.new_guid(),
                replnickname=1, database_label="pub", created_at=store.utcnow()))
        r.execute(f"UPDATE {r.meta('sysmergesubscriptions')} SET subscriber_type = 9")
        with pytest.raises(ReplicaDamaged) as e:
            store.select(r, SubscriptionRow)
        assert "Store7" in e.value.message and "sysmergesubscriptions.subscriber_type holds 9" in e.value.message
