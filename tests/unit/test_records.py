"""The typed metadata rows (metadata/records.py) are the tables metadata/schema.py declares: the same
columns in the same order, nullable where the column is, of the Python type its kind is read as."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import typing

import pytest

from sparksync.metadata import records, store
from sparksync.metadata.records import (
    GenStatus,
    Record,
    Role,
    SubscriberType,
    SubscriptionRow,
    SubscriptionStatus,
)
from sparksync.metadata.schema import TABLES_BY_NAME
from sparksync.types import Kind

PYTHON_TYPE = {Kind.SMALLINT: int, Kind.INTEGER: int, Kind.BIGINT: int, Kind.DOUBLE: float, Kind.REAL: float,
               Kind.TEXT: str, Kind.UUID: str, Kind.TIMESTAMPTZ: dt.datetime}

CLASSES = records.record_classes()


def test_the_row_classes_cover_the_tables_the_code_reads_most():
    tables = {cls.TABLE for cls in CLASSES}
    assert {"sysmergesubscriptions", "sysmergepublications", "sysmergearticles", "MSmerge_genhistory",
            "MSmerge_failed_changes", "MSpublications", "MSarticles", "MSsubscriptions",
            "MSreplication_subscriptions"} <= tables
    assert len(tables) == len(CLASSES)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_a_row_class_is_its_declared_table(cls: type[Record]):
    table = TABLES_BY_NAME[cls.TABLE]
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen     # type: ignore[attr-defined]
    assert [f.name for f in dataclasses.fields(cls)] == [c.name for c in table.columns]
    hints = typing.get_type_hints(cls)
    for c in table.columns:
        hint = hints[c.name]
        args = typing.get_args(hint)
        nullable = type(None) in args
        assert nullable == c.nullable, f"{cls.__name__}.{c.name}: nullable should be {c.nullable}"
        base = records.field_class(hint)
        if c.type.kind is Kind.JSON:
            continue                                # any JSON value (a dict, a list)
        expected = PYTHON_TYPE[c.type.kind]
        if isinstance(base, type) and issubclass(base, enum.Enum):
            assert issubclass(base, expected), f"{cls.__name__}.{c.name}: {base.__name__} is not a {expected.__name__}"
        else:
            assert base is expected, f"{cls.__name__}.{c.name}: {base} should be {expected.__name__}"
        field = next(f for f in dataclasses.fields(cls) if f.name == c.name)
        if not c.nullable:
            assert field.default is dataclasses.MISSING, f"{cls.__name__}.{c.name}: NOT NULL needs a value"


def test_a_class_whose_fields_differ_from_its_table_is_refused_when_defined():
    with pytest.raises(TypeError, match="not the columns of MSmerge_genhistory"):
        @dataclasses.dataclass(frozen=True, kw_only=True)
        class Wrong(Record, table="MSmerge_genhistory"):       # noqa: F841
            generation: int


def test_values_read_become_codes_and_numbers():
    row = SubscriptionRow.from_values(["s", "p", "Sub1", "r", 2, "subscriber", "db", 2, 0, 0, None, None, "7", 1,
                                       None, None, None, None])
    assert row.role is Role.SUBSCRIBER and row.subscriber_type is SubscriberType.LOCAL
    assert row.status is SubscriptionStatus.ACTIVE and row.active
    assert row.priority == 0.0 and isinstance(row.priority, float)
    assert row.recgen == 7 and row.sentgen is None
    assert row.to_dict()["name"] == "Sub1"


def test_the_subscription_row_constructors():
    now = dt.datetime.now(dt.UTC)
    pub = SubscriptionRow.for_publisher(subid="a", pubid="p", name="Pub", replica_id="r", replnickname=1,
                                        database_label="pub.db", created_at=now)
    assert pub.role is Role.PUBLISHER and pub.subscriber_type is SubscriberType.PUBLISHER and pub.active
    assert pub.priority == 100.0
    sub = SubscriptionRow.for_subscriber(subid="b", pubid="p", name="S", replica_id="q", replnickname=2,
                                         database_label="s.db", subscriber_type=1, priority=50.0, host_name="h",
                                         login=None, partition_id=None, status=SubscriptionStatus.CREATED,
                                         created_at=now)
    assert sub.subscriber_type is SubscriberType.GLOBAL and not sub.active and not sub.is_publisher


class _Replica:
    class dialect:          # noqa: N801 - what to_param reads of a replica
        @staticmethod
        def json_param(value):
            return value


@pytest.mark.parametrize("code, plain", [(GenStatus.RECEIVED, 2), (Role.PUBLISHER, "publisher"),
                                         (SubscriptionStatus.ACTIVE, 1)])
def test_a_code_is_written_as_its_plain_value(code, plain):
    kind = Kind.TEXT if isinstance(plain, str) else Kind.SMALLINT
    value = store.to_param(_Replica(), kind, code)      # type: ignore[arg-type]
    assert value == plain and type(value) is type(plain)
