"""Typed rows of the metadata tables the code reads most, and the codes their columns hold.

Each row class declares the columns of one table of ``metadata/schema.py``, in its order: a class whose
column names differ from the declared table fails when this module is imported, and
``tests/unit/test_records.py`` checks each field's type against the column's kind and nullability.
``store.select`` / ``store.select_one`` read them (values converted as the dict helpers convert them,
codes as their enums), ``store.insert`` writes one, ``store.update`` / ``store.delete`` change them.
"""

from __future__ import annotations

import datetime as dt
import enum
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from sparksync.config import PUBLISHER_PRIORITY
from sparksync.metadata.schema import TABLES_BY_NAME, MetaTable
from sparksync.types import Kind

# -- the codes -----------------------------------------------------------------------------------------


class Role(enum.StrEnum):
    """A replica's role in a merge publication (``MSmerge_replica.role``, ``sysmergesubscriptions.role``)."""

    PUBLISHER = "publisher"
    SUBSCRIBER = "subscriber"


class SubscriptionStatus(enum.IntEnum):
    """``sysmergesubscriptions.status``: a subscription registered at the publisher is CREATED until its
    subscriber is initialized, then ACTIVE."""

    CREATED = 0
    ACTIVE = 1


class SubscriberType(enum.IntEnum):
    """``sysmergesubscriptions.subscriber_type``: GLOBAL (server) subscriptions have a priority, LOCAL
    (client) ones take the priority of the publisher for the changes they upload; the publisher's own
    row is PUBLISHER."""

    PUBLISHER = 0
    GLOBAL = 1
    LOCAL = 2


class SubscriptionType(enum.IntEnum):
    """``sysmergesubscriptions.subscription_type``: every subscription is a push subscription."""

    PUSH = 0


class GenStatus(enum.IntEnum):
    """``MSmerge_genhistory.genstatus``."""

    OPEN = 0            # the generation local changes are written into
    CLOSED = 1          # closed here: its changes are sent
    RECEIVED = 2        # closed, and received from another replica


class PublicationKind(enum.StrEnum):
    """``sysmergepublications.kind``."""

    MERGE = "merge"
    TRANSACTIONAL = "transactional"


class ArticleStatus(enum.IntEnum):
    """``sysmergearticles.status`` and ``MSarticles.status``: an article taken out of a transactional
    publication stays, INACTIVE."""

    INACTIVE = 0
    ACTIVE = 1


class PartitionOptions(enum.IntEnum):
    """``sysmergearticles.partition_options`` (a filtered article's partitions)."""

    OVERLAPPING = 0
    OVERLAPPING_NO_OUT_OF_PARTITION = 1     # out-of-partition subscriber changes refused
    NON_OVERLAPPING = 2
    NON_OVERLAPPING_SINGLE = 3              # one subscription per partition

    @property
    def non_overlapping(self) -> bool:
        """A row of the article belongs to one partition at most."""
        return self in (PartitionOptions.NON_OVERLAPPING, PartitionOptions.NON_OVERLAPPING_SINGLE)

    @property
    def refuses_out_of_partition(self) -> bool:
        """A subscriber's change that leaves the row outside the subscriber's partition is refused."""
        return self in (PartitionOptions.OVERLAPPING_NO_OUT_OF_PARTITION, PartitionOptions.NON_OVERLAPPING_SINGLE)


class DistSubscriptionStatus(enum.IntEnum):
    """``MSsubscriptions.status`` (a transactional subscription at the distributor)."""

    INITIALIZING = 0
    ACTIVE = 1
    INACTIVE = 2        # it missed commands retention removed: it must be reinitialized


# -- the rows --------------------------------------------------------------------------------------------

_INT_KINDS = (Kind.SMALLINT, Kind.INTEGER, Kind.BIGINT)
_FLOAT_KINDS = (Kind.REAL, Kind.DOUBLE)


class Record:
    """A row of one metadata table (``table=`` names it): subclasses are frozen, keyword-only dataclasses
    whose fields are the table's columns, in its order."""

    TABLE: ClassVar[str]
    _coerce: ClassVar[tuple[tuple[str, Any], ...] | None] = None

    def __init_subclass__(cls, table: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.TABLE = table
        declared = [c.name for c in TABLES_BY_NAME[table].columns]
        fields = [n for n in cls.__dict__.get("__annotations__", {}) if not n.startswith("_")]
        if fields != declared:
            raise TypeError(f"{cls.__name__}: its fields {fields} are not the columns of {table} {declared}")

    @classmethod
    def meta(cls) -> MetaTable:
        return TABLES_BY_NAME[cls.TABLE]

    @classmethod
    def columns(cls) -> tuple[str, ...]:
        return tuple(c.name for c in cls.meta().columns)

    @classmethod
    def _converters(cls) -> tuple[tuple[str, Any], ...]:
        """Per column: what a value read from the database becomes (an enum, int, float), or None."""
        if cls.__dict__.get("_coerce") is None:
            hints = typing.get_type_hints(cls)
            out: list[tuple[str, Any]] = []
            for c in cls.meta().columns:
                target = field_class(hints[c.name])
                if isinstance(target, type) and issubclass(target, enum.Enum):
                    out.append((c.name, _member_of(target)))
                elif c.type.kind in _INT_KINDS:
                    out.append((c.name, int))
                elif c.type.kind in _FLOAT_KINDS:
                    out.append((c.name, float))
                else:
                    out.append((c.name, None))
            cls._coerce = tuple(out)
        assert cls._coerce is not None
        return cls._coerce

    @classmethod
    def from_values(cls, values: Sequence[Any]) -> Self:
        """A row from the values of its columns in table order, as ``store`` reads them (a value already of its
        field's class is taken as it is: reading 10,000 registrations converts only what needs it)."""
        converters = cls._converters()
        if len(values) != len(converters):
            raise ValueError(f"{cls.TABLE}: {len(values)} values for {len(converters)} columns")
        out = {}
        for (name, conv), v in zip(converters, values):
            if conv is None or v is None or type(v) is conv:
                out[name] = v
                continue
            try:
                out[name] = conv(v)
            except (TypeError, ValueError):
                raise UnknownCode(cls.TABLE, name, v) from None
        row = object.__new__(cls)            # every field given, none computed: the frozen dataclass's __init__
        row.__dict__.update(out)             # would set them one by one through object.__setattr__
        return row

    def values(self) -> list[Any]:
        """The row's values in table order."""
        return [getattr(self, c) for c in self.columns()]

    def to_dict(self) -> dict[str, Any]:
        return dict(zip(self.columns(), self.values()))


def _member_of(cls: type[enum.Enum]) -> Any:
    """``cls(value)``, a dictionary's lookup for the values it has (a row of metadata holds four codes)."""
    members = dict(cls._value2member_map_)

    def member(value: Any) -> Any:
        found = members.get(value)
        return found if found is not None else cls(value)
    return member


class UnknownCode(ValueError):
    """A metadata row holds a value its column cannot hold (a code no enum has: the metadata was changed by
    hand or by another program). ``store.select`` names the replica (``ReplicaDamaged``)."""

    def __init__(self, table: str, column: str, value: Any):
        super().__init__(f"{table}.{column} holds {value!r}, which sparksync never writes there")
        self.table, self.column, self.value = table, column, value


def field_class(hint: Any) -> Any:
    """The class of a field's type without its ``| None``."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if args and typing.get_origin(hint) in (typing.Union, types.UnionType):
        return args[0] if len(args) == 1 else hint
    return hint


def record_classes() -> tuple[type[Record], ...]:
    return tuple(Record.__subclasses__())


# -- merge replication ---------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class PublicationRow(Record, table="sysmergepublications"):
    pubid: str
    name: str
    kind: PublicationKind
    publisher: str
    generation_leveling_threshold: int
    retention: int
    snapshot_generation: int | None = None
    snapshot_time: dt.datetime | None = None
    snapshot_dir: str | None = None
    created_at: dt.datetime
    partitions_evaluated: int | None = None
    use_partition_groups: int | None = None
    cleanup_generation: int | None = None
    schema_version: int | None = None

    @property
    def precomputed(self) -> bool:
        """Partition membership kept in the partition mappings (``use_partition_groups`` 1 or NULL)."""
        return self.use_partition_groups in (None, 1)


@dataclass(frozen=True, kw_only=True)
class ArticleRow(Record, table="sysmergearticles"):
    pubid: str
    artid: str
    name: str
    source_schema: str | None = None
    source_table: str
    nickname: int
    column_tracking: int
    rowguid_column: str
    rowguid_added: int
    processing_group: int
    dri_related: int
    related_nicknames: list[int] | None = None
    table_schema: dict[str, Any]
    status: ArticleStatus
    filter_clause: str | None = None
    join_filters: list[dict[str, Any]] | None = None
    partition_options: PartitionOptions | None = None
    rowguid_keyed: int | None = None

    @property
    def non_overlapping(self) -> bool:
        return self.partition_options is not None and self.partition_options.non_overlapping

    @property
    def refuses_out_of_partition(self) -> bool:
        return self.partition_options is not None and self.partition_options.refuses_out_of_partition


@dataclass(frozen=True, kw_only=True)
class SubscriptionRow(Record, table="sysmergesubscriptions"):
    """A replica this database knows in one publication: build one with :meth:`for_publisher` or
    :meth:`for_subscriber`."""

    subid: str
    pubid: str
    name: str
    replica_id: str
    replnickname: int
    role: Role
    database_label: str
    subscriber_type: SubscriberType
    subscription_type: SubscriptionType
    priority: float
    host_name: str | None = None
    sentgen: int | None = None
    recgen: int | None = None
    status: SubscriptionStatus
    last_sync_date: dt.datetime | None = None
    created_at: dt.datetime
    login: str | None = None
    partition_id: int | None = None

    @classmethod
    def for_publisher(cls, *, subid: str, pubid: str, name: str, replica_id: str, replnickname: int,
                      database_label: str, created_at: dt.datetime, sentgen: int | None = None,
                      recgen: int | None = None, last_sync_date: dt.datetime | None = None) -> SubscriptionRow:
        """The publisher's row (at the publisher, or at a subscriber: its partner), always active."""
        return cls(subid=subid, pubid=pubid, name=name, replica_id=replica_id, replnickname=replnickname,
                   role=Role.PUBLISHER, database_label=database_label, subscriber_type=SubscriberType.PUBLISHER,
                   subscription_type=SubscriptionType.PUSH, priority=PUBLISHER_PRIORITY, host_name=None,
                   sentgen=sentgen, recgen=recgen, status=SubscriptionStatus.ACTIVE, last_sync_date=last_sync_date,
                   created_at=created_at)

    @classmethod
    def for_subscriber(cls, *, subid: str, pubid: str, name: str, replica_id: str, replnickname: int,
                       database_label: str, subscriber_type: int, priority: float, host_name: str | None,
                       login: str | None, partition_id: int | None, status: SubscriptionStatus,
                       created_at: dt.datetime) -> SubscriptionRow:
        """A subscriber's row (at the publisher: CREATED until initialized; at the subscriber: ACTIVE)."""
        return cls(subid=subid, pubid=pubid, name=name, replica_id=replica_id, replnickname=replnickname,
                   role=Role.SUBSCRIBER, database_label=database_label,
                   subscriber_type=SubscriberType(subscriber_type), subscription_type=SubscriptionType.PUSH,
                   priority=priority, host_name=host_name, sentgen=None, recgen=None, status=status,
                   last_sync_date=None, created_at=created_at, login=login, partition_id=partition_id)

    @property
    def active(self) -> bool:
        return self.status is SubscriptionStatus.ACTIVE

    @property
    def is_publisher(self) -> bool:
        return self.role is Role.PUBLISHER


@dataclass(frozen=True, kw_only=True)
class ReplicaRow(Record, table="MSmerge_replica"):
    id: int
    replica_id: str
    replnickname: int
    name: str
    role: Role
    applying: int
    max_nickname: int | None = None


@dataclass(frozen=True, kw_only=True)
class GenerationRow(Record, table="MSmerge_genhistory"):
    generation: int
    guidsrc: str
    pubid: str | None = None
    genstatus: GenStatus
    settled: int
    nicknames: list[int]
    changecount: int
    coldate: dt.datetime | None = None
    source_nickname: int | None = None
    source_generation: int | None = None


@dataclass(frozen=True, kw_only=True)
class FailedChangeRow(Record, table="MSmerge_failed_changes"):
    tablenick: int
    rowguid: str
    source_nickname: int
    conflict_type: int
    reason: str
    attempts: int
    first_time: dt.datetime
    last_time: dt.datetime
    row_key: str | None = None
    column_name: str | None = None
    value: str | None = None


# -- transactional replication ---------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class DistPublicationRow(Record, table="MSpublications"):
    publication_id: str
    name: str
    publisher: str
    publisher_db: str
    source: str
    slot: str | None = None
    pg_publication: str | None = None
    logreader_seqno: int | None = None
    logreader_time: dt.datetime | None = None
    created_at: dt.datetime


@dataclass(frozen=True, kw_only=True)
class DistArticleRow(Record, table="MSarticles"):
    publication_id: str
    article_id: int
    name: str
    source_schema: str | None = None
    source_table: str
    table_schema: dict[str, Any]
    filter: str | None = None
    ins_cmd: str | None = None
    upd_cmd: str | None = None
    del_cmd: str | None = None
    status: ArticleStatus

    @property
    def active(self) -> bool:
        return self.status is ArticleStatus.ACTIVE


@dataclass(frozen=True, kw_only=True)
class DistSubscriptionRow(Record, table="MSsubscriptions"):
    publication_id: str
    subscription: str
    subscriber: str
    status: DistSubscriptionStatus
    sync_point: dict[str, Any] | None = None
    delivered_seqno: int | None = None
    last_delivery: dt.datetime | None = None
    created_at: dt.datetime
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class DeliveryMarkRow(Record, table="MSreplication_subscriptions"):
    """At a transactional subscriber: the last transaction one stream delivered."""

    publication: str
    subscription: str
    publisher: str
    stream: int
    streams: int
    transaction_timestamp: int
    time: dt.datetime


@dataclass(frozen=True, kw_only=True)
class SubscriptionArticleRow(Record, table="MSsubscription_articles"):
    publication: str
    subscription: str
    article_id: int
    table_schema: dict[str, Any]
