"""The topology configuration (TOML), validated with pydantic.

Every problem is reported with its key path (``subscriptions[1].priority: ...``), all at once.
"""

from __future__ import annotations

import functools
import os
import re
import string
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from sparksync import storage
from sparksync.config_fields import Model as _Model
from sparksync.config_fields import check_interval as _check_interval
from sparksync.config_fields import check_name as _check_name
from sparksync.config_fields import check_schedule as _check_schedule
from sparksync.config_fields import check_url as _check_url
from sparksync.config_fields import expand_env
from sparksync.errors import ConfigurationError, InvalidNameError
from sparksync.names import TableName
from sparksync.redaction import register_url
from sparksync.schedule import parse_interval
from sparksync.serve_config import AlertsConfig, ServerConfig

DEFAULT_CONFIG = "sparksync.toml"
DEFAULT_VALIDATE_SCHEDULE = "every 1h"   # a merge publication's subscriptions validated by serve this often
PUBLISHER_PRIORITY = 100.0
DEFAULT_SYNC_INTERVAL = "15m"       # how often a web device is expected to sync, unless its sync_interval says


class SparkConfig(_Model):
    master: str = "local[*]"
    conf: dict[str, str] = Field(default_factory=dict, description="extra Spark settings")
    driver_round_changes: int = Field(
        default=5000, ge=0, description="a merge direction that moves at most this many changes, or a distribution "
        "round of at most this many commands, is applied in the agent's own process, without a Spark job (0: every "
        "round on Spark)")
    executor_wait_s: float = Field(default=60.0, gt=0, description="on a cluster: seconds for it to give the "
                                   "application a first executor, else the command fails naming its master")
    serve_cores_max: int = Field(default=4, ge=1, description="on a cluster: the cores sparksync serve's warm "
                                 "application takes at most where conf sets no spark.cores.max (the others are left "
                                 "to the commands run beside it)")

    def application_conf(self, serving: bool = False) -> dict[str, str]:
        """The Spark settings of one application: ``conf`` (``${VAR}``s expanded: a secret the executors need, such
        as ``spark.executorEnv.AWS_SECRET_ACCESS_KEY``, stays out of the file); for ``serve`` on a cluster, capped at
        ``serve_cores_max`` cores unless ``conf`` says otherwise."""
        conf = {k: _expand(v, f"spark.conf.{k}") for k, v in self.conf.items()}
        local = self.master == "local" or self.master.startswith("local[")
        if serving and not local and "spark.cores.max" not in conf:
            return {**conf, "spark.cores.max": str(self.serve_cores_max)}
        return conf


class DistributorConfig(_Model):
    """Where transactional replication queues commands (the distribution database) and for how long."""

    database: str
    max_distretention: float = Field(72.0, ge=0, description="hours: commands older than this are removed, "
                                                                    "delivered or not")
    min_distretention: float = Field(0.0, ge=0, description="hours: delivered commands are kept at least this long")
    history_retention: float = Field(48.0, ge=0, description="hours of agent history and tracer tokens")

    _u = field_validator("database")(lambda cls, v: _check_url(v))

    @model_validator(mode="after")
    def _retention(self) -> DistributorConfig:
        if self.min_distretention > self.max_distretention:
            raise ValueError("min_distretention cannot be larger than max_distretention")
        return self


class PublisherConfig(_Model):
    name: str
    database: str
    snapshot_dir: str = "snapshots"
    change_capture: Literal["auto", "log", "triggers"] = Field(
        "triggers", description="how merge change tracking learns of the application's writes at a PostgreSQL publisher: "
        "'log' (read from the server's write-ahead log through a logical replication slot: no trigger on any write; "
        "needs wal_level = logical and a free replication slot), 'triggers' (statement triggers append to a log "
        "table; the default), 'auto' (log where the server allows it, else triggers). SQLite databases use triggers")

    _n = field_validator("name")(lambda cls, v: _check_name(v, "publisher name"))
    _u = field_validator("database")(lambda cls, v: _check_url(v))


class JoinFilterConfig(_Model):
    """A join filter of a merge article: its rows belong to the partitions of the parent rows it joins."""

    parent: str = Field(description="the parent article (its table name, as in the publication)")
    clause: str = Field(description="how child rows join parent rows, e.g. Orders.CustomerID = Customer.CustomerID")
    unique_key: bool = Field(False, description="the join is on the parent's primary key (checked at setup)")

    @field_validator("clause")
    @classmethod
    def _clause(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("clause: empty")
        return v


class PartitionConfig(_Model):
    """A partition of a filtered publication (sp_addmergepartition): the parameter values it is for."""

    host_name: str | None = None
    login: str | None = None

    @model_validator(mode="after")
    def _some(self) -> PartitionConfig:
        if self.host_name is None and self.login is None:
            raise ValueError("a partition gives host_name, login or both")
        return self


class ArticleConfig(_Model):
    table: str
    column_tracking: bool = False
    rowguid_column: str | None = None
    resolver: str = "default"
    resolver_column: str | None = None
    compensate_for_errors: bool = False
    business_logic: str | None = Field(None, description="a business logic handler, module:Class (a subclass of "
                                       "sparksync.handlers.BusinessLogicHandler), called for every row merged")
    business_logic_timeout_s: float = Field(2.0, gt=0, le=3600, description="how long one call of the business "
                                            "logic handler may take; past it, its change fails (tried again)")
    # transactional articles (seed 001)
    ins_cmd: str | None = None
    upd_cmd: str | None = None
    del_cmd: str | None = None
    filter: str | None = Field(None, description="row filter: a WHERE clause without WHERE")
    # filtered merge publications (seed 002)
    join_filters: list[JoinFilterConfig] = Field(default_factory=list)
    partition_options: Literal[0, 1, 2, 3] = Field(0, description="0 overlapping; 1 overlapping, out-of-partition "
                                                   "subscriber changes refused; 2 non-overlapping; 3 non-overlapping, "
                                                   "one subscription per partition")
    columns: list[str] | None = Field(None, description="column filter: the published columns (all by default)")

    @model_validator(mode="after")
    def _filters(self) -> ArticleConfig:
        if self.columns is not None:
            if not self.columns:
                raise ValueError("columns: list at least the primary key columns (or leave it out for all)")
            for c in self.columns:
                _check_name(c, "column name")
            if len({c.lower() for c in self.columns}) != len(self.columns):
                raise ValueError("columns: a column is listed twice")
        if self.filter is not None and not self.filter.strip():
            raise ValueError("filter: empty (leave it out to publish every row)")
        return self

    @field_validator("table")
    @classmethod
    def _table(cls, v: str) -> str:
        try:
            TableName.parse(v)
        except InvalidNameError as e:
            raise ValueError(e.message) from None
        return v

    @field_validator("rowguid_column")
    @classmethod
    def _rg(cls, v: str | None) -> str | None:
        return None if v is None else _check_name(v, "column name")

    @property
    def table_name(self) -> TableName:
        return TableName.parse(self.table)


class PublicationConfig(_Model):
    name: str
    kind: Literal["merge", "transactional"] = "merge"
    articles: list[ArticleConfig] = Field(min_length=1)
    generation_leveling_threshold: int = Field(1000, ge=1)
    retention: int = Field(14, ge=0, description="days")
    conflict_logging: Literal["publisher", "subscriber", "both"] = "publisher"
    use_partition_groups: bool = Field(True, description="precomputed partitions (partition mappings); false: "
                                                         "membership evaluated at sync time (SetupBelongs)")
    partitions: list[PartitionConfig] = Field(default_factory=list, description="partitions made at setup")
    agent_schedule: str | None = Field(None, description="when 'sparksync serve' runs this publication's agents: "
                                       "continuous | every 30s | every 5m | a five-field cron expression (UTC)")
    validate_schedule: str | None = Field(DEFAULT_VALIDATE_SCHEDULE, description="a merge publication: when "
                                          "'sparksync serve' validates its direct subscriptions (row counts and "
                                          "checksums of each one's partition) and asks its devices to at their next "
                                          "sync; every N s/m/h or cron; \"never\": not at all")

    _n = field_validator("name")(lambda cls, v: _check_name(v, "publication name"))
    _s = field_validator("agent_schedule")(lambda cls, v: _check_schedule(v))
    _v = field_validator("validate_schedule")(lambda cls, v: None if v in (None, "never") else _check_schedule(v))

    @property
    def filtered(self) -> bool:
        return any(a.filter is not None or a.join_filters for a in self.articles)

    @model_validator(mode="after")
    def _kind_keys(self) -> PublicationConfig:
        """Keys of the other kind of publication are refused, not silently ignored."""
        other = TRANSACTIONAL_ARTICLE_KEYS if self.kind == "merge" else MERGE_ARTICLE_KEYS
        for a in self.articles:
            wrong = sorted(k for k in a.model_fields_set if k in other)
            if wrong:
                raise ValueError(f"article {a.table}: {', '.join(wrong)} "
                                 f"{'is' if len(wrong) == 1 else 'are'} for "
                                 f"{'transactional' if self.kind == 'merge' else 'merge'} publications; this one is "
                                 f"kind = \"{self.kind}\"")
        if self.kind == "merge" and not self.use_partition_groups:
            strict = sorted(a.table for a in self.articles if a.partition_options in (2, 3))
            if strict:
                raise ValueError(f"article {', '.join(strict)}: non-overlapping partitions (partition_options 2, 3) "
                                 "are checked when precomputed partitions are evaluated: they need "
                                 "use_partition_groups = true")
        if self.kind == "transactional":
            wrong = sorted(k for k in self.model_fields_set if k in MERGE_PUBLICATION_KEYS)
            if wrong:
                raise ValueError(f"{', '.join(wrong)}: only for merge publications; this one is kind = \"transactional\"")
        return self

    @model_validator(mode="after")
    def _unique_articles(self) -> PublicationConfig:
        seen: set[str] = set()
        for a in self.articles:
            key = str(a.table_name).lower()
            if key in seen:
                raise ValueError(f"table {a.table} is published twice")
            seen.add(key)
        return self


class SubscriptionConfig(_Model):
    name: str
    publication: str
    transport: Literal["direct", "web"] = Field(
        "direct", description="direct: the agents open the subscriber's database; web: the device syncs over HTTPS "
        "with 'sparksync sync' (no database here)")
    database: str | None = None
    subscriber_type: Literal["global", "local"] = "local"
    priority: float | None = None
    host_name: str | None = Field(None, description="what HOST_NAME() is for this subscription")
    login: str | None = Field(None, description="what SUSER_SNAME() is for this subscription")
    pre_creation_cmd: Literal["drop", "delete", "none"] = "drop"
    change_capture: Literal["auto", "log", "triggers"] = Field(
        "triggers", description="a PostgreSQL merge subscriber: its changes read from its write-ahead log or by "
        "triggers (as the publisher's change_capture; default triggers)")
    # transactional subscriptions (the distribution agent)
    commit_batch_size: int = Field(1000, ge=1, le=100_000, description="transactions per commit at the subscriber")
    commit_batch_threshold: int = Field(10_000, ge=1, le=1_000_000, description="commands per commit")
    subscription_streams: int = Field(1, ge=1, le=64, description="parallel connections applying commands")
    subscription_streams_threshold: int = Field(
        5000, ge=0, le=1_000_000, description="commands per stream below which a batch is applied over one connection")
    skip_errors: list[str] = Field(default_factory=list, description="error numbers to log and skip")
    agent_schedule: str | None = Field(None, description="this subscription's own schedule in 'sparksync serve' "
                                       "(default: its publication's)")
    sync_interval: str | None = Field(None, description="a web subscription: how often its device is expected to "
                                      f"sync ('90s', '15m', '4h', '1d'; default {DEFAULT_SYNC_INTERVAL}); longer "
                                      "without a sync, the monitor shows it offline")
    group: str | None = Field(None, exclude=True, description="the device group of an enrolled device (never "
                              "configured: ``DeviceGroupConfig.device``)")
    _s = field_validator("agent_schedule")(lambda cls, v: _check_schedule(v))
    _i = field_validator("sync_interval")(lambda cls, v: _check_interval(v))

    @field_validator("skip_errors")
    @classmethod
    def _skip(cls, v: list[str]) -> list[str]:
        for code in v:
            if not re.fullmatch(r"[0-9]{1,6}|[0-9A-Z]{5}|SQLITE_[A-Z_]+", str(code)):
                raise ValueError(f"skip_errors: {code!r} is not an error number (e.g. \"2601\", \"2627\", "
                                 "\"20598\"), a PostgreSQL SQLSTATE (\"23505\") or a SQLite error name")
        return [str(c) for c in v]

    _n = field_validator("name")(lambda cls, v: _check_name(v, "subscription name"))
    _u = field_validator("database")(lambda cls, v: v if v is None else _check_url(v))

    @model_validator(mode="after")
    def _transport(self) -> SubscriptionConfig:
        if self.transport == "direct" and self.database is None:
            raise ValueError("a subscription needs a database (or transport = \"web\": a device that syncs over HTTPS)")
        if self.transport == "web" and self.database is not None:
            raise ValueError("a web subscription has no database here: its database is on the device (remove "
                             "'database', or use transport = \"direct\")")
        if self.group is not None:
            raise ValueError("group: a device enrolled into a device group is not configured (remove 'group')")
        if self.transport == "direct" and self.sync_interval is not None:
            raise ValueError("sync_interval is for web subscriptions (a device that syncs when it wants); the agents "
                             "of a direct subscription run on its agent_schedule")
        return self

    @property
    def sync_interval_s(self) -> float:
        """Seconds between two syncs of a web subscription's device, as expected (``sync_interval``)."""
        return parse_interval(self.sync_interval or DEFAULT_SYNC_INTERVAL)

    @model_validator(mode="after")
    def _priority(self) -> SubscriptionConfig:
        if self.subscriber_type == "global":
            if self.priority is None:
                raise ValueError("a global subscription needs a priority (0 <= priority < 100)")
            if not 0 <= self.priority < PUBLISHER_PRIORITY:
                raise ValueError(f"priority {self.priority} is out of range: 0 <= priority < 100 (the publisher is 100)")
        elif self.priority not in (None, 0, 0.0):
            raise ValueError("a local subscription has no priority of its own (its changes take the publisher's "
                             "priority when they reach it); remove 'priority' or use subscriber_type = \"global\"")
        return self

    @property
    def effective_priority(self) -> float:
        return float(self.priority or 0.0)

    @property
    def subscriber_type_code(self) -> int:
        return 1 if self.subscriber_type == "global" else 2


MERGE_ARTICLE_KEYS = {"column_tracking", "rowguid_column", "resolver", "resolver_column", "compensate_for_errors",
                      "join_filters", "partition_options", "business_logic", "business_logic_timeout_s"}
TRANSACTIONAL_ARTICLE_KEYS = {"ins_cmd", "upd_cmd", "del_cmd", "columns"}
MERGE_PUBLICATION_KEYS = {"generation_leveling_threshold", "retention", "conflict_logging", "use_partition_groups",
                          "partitions", "validate_schedule"}
MERGE_SUBSCRIPTION_KEYS = {"subscriber_type", "priority", "host_name", "login", "change_capture"}
TRANSACTIONAL_SUBSCRIPTION_KEYS = {"commit_batch_size", "commit_batch_threshold", "subscription_streams",
                                   "subscription_streams_threshold", "skip_errors"}


JwtAlgorithm = Literal["RS256", "ES256", "EdDSA"]
JWT_ALGORITHMS: tuple[JwtAlgorithm, ...] = ("RS256", "ES256", "EdDSA")


class JwtTrust(_Model):
    """A device group that trusts the application's identity provider (docs/web-sync.md, "A fleet"): a device
    exchanges a JWT the provider signed for its own credential, once."""

    keys: str = Field(description="the issuer's public keys: a PEM file or a JWKS document (a path, relative to this "
                      "file; read at start and whenever it changes; nothing is fetched over the network)")
    issuer: str = Field(min_length=1, description="the 'iss' a token must carry")
    audience: str = Field(min_length=1, description="the 'aud' a token must carry")
    algorithms: list[JwtAlgorithm] = Field(
        default_factory=lambda: list(JWT_ALGORITHMS), min_length=1,
        description="the signature algorithms accepted (never 'none', never an HMAC)")
    leeway_s: int = Field(30, ge=0, le=300, description="seconds of clock skew allowed for 'exp' and 'nbf'")
    device_claim: str = Field("device_id", min_length=1, description="the claim that names the device, with 'sub'")


class DeviceGroupConfig(_Model):
    """A group of web devices that enroll themselves (``sparksync enroll-token``; docs/web-sync.md, "A fleet"): each
    device enrolled into it is a web subscription of its own, recorded in the publisher's metadata, not here."""

    name: str
    publication: str
    sync_interval: str | None = Field(None, description="how often its devices are expected to sync ('90s', '15m', "
                                      f"'4h', '1d'; default {DEFAULT_SYNC_INTERVAL}); longer without a sync, the "
                                      "monitor shows a device offline")
    retention: int | None = Field(None, ge=0, description="days a device may go without a sync before 'sparksync "
                                  "cleanup' expires it (its registration dropped; default: its publication's "
                                  "retention; 0: never)")

    jwt: JwtTrust | None = Field(None, description="devices enroll with a JWT of the application's identity "
                                 "provider instead of a group secret")
    host_name: str | None = Field(None, description="with jwt: what HOST_NAME() is for a device, from its token's "
                                  "claims ('{store}')")
    login: str | None = Field(None, description="with jwt: what SUSER_SNAME() is for a device ('{sub}')")

    _n = field_validator("name")(lambda cls, v: _check_name(v, "device group name"))
    _i = field_validator("sync_interval")(lambda cls, v: _check_interval(v))

    @model_validator(mode="after")
    def _claims(self) -> DeviceGroupConfig:
        if self.jwt is None and (self.host_name is not None or self.login is not None):
            raise ValueError("host_name and login are made from a JWT's claims (give [device_groups.jwt]); a group "
                             "secret names its partition itself (sparksync enroll-token --host-name)")
        for key in ("host_name", "login"):
            template = getattr(self, key)
            if template is not None:
                try:
                    names = [f[1] for f in string.Formatter().parse(template) if f[1] is not None]
                except ValueError as e:
                    raise ValueError(f"{key} {template!r}: {e}") from None
                if any(not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n) for n in names):
                    raise ValueError(f"{key} {template!r}: a claim is named as {{claim}}, a plain name")
        return self

    def partition_of(self, claims: dict) -> tuple[str | None, str | None]:
        """(host_name, login) of a device whose verified token carries ``claims``; KeyError naming a claim the
        templates need and the token does not carry (or not as a string or a number)."""
        values = {k: v for k, v in claims.items() if isinstance(v, str | int) and not isinstance(v, bool)}

        def made(template: str | None) -> str | None:
            if template is None:
                return None
            names = [f[1] for f in string.Formatter().parse(template) if f[1] is not None]
            for n in names:
                if n not in values:
                    raise KeyError(n)
            return template.format(**{n: values[n] for n in names})

        return made(self.host_name), made(self.login)

    def device(self, name: str, host_name: str | None, login: str | None) -> SubscriptionConfig:
        """The web subscription of a device enrolled into this group: what one configured by hand would be."""
        return SubscriptionConfig.model_construct(
            name=name, publication=self.publication, transport="web", database=None, subscriber_type="local",
            priority=None, host_name=host_name, login=login, pre_creation_cmd="drop", commit_batch_size=1000,
            commit_batch_threshold=10_000, subscription_streams=1, subscription_streams_threshold=5000,
            skip_errors=[], agent_schedule=None, sync_interval=self.sync_interval, group=self.name)


class Topology(_Model):
    spark: SparkConfig = Field(default_factory=SparkConfig)
    distributor: DistributorConfig | None = None
    publisher: PublisherConfig
    server: ServerConfig = Field(default_factory=ServerConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    publications: list[PublicationConfig] = Field(default_factory=list)
    subscriptions: list[SubscriptionConfig] = Field(default_factory=list)
    device_groups: list[DeviceGroupConfig] = Field(default_factory=list)
    base_dir: Path = Field(default=Path("."), exclude=True)

    # -- lookups ----------------------------------------------------------------------------
    def publication(self, name: str) -> PublicationConfig:
        for p in self.publications:
            if p.name == name:
                return p
        raise ConfigurationError(f"no publication named {name!r}", obj=name)

    def subscription(self, name: str) -> SubscriptionConfig:
        found = self._by_name.get(name)
        if found is not None:
            return found
        known = ", ".join(x.name for x in self.subscriptions[:20]) or "none"
        more = f" and {len(self.subscriptions) - 20} more" if len(self.subscriptions) > 20 else ""
        raise ConfigurationError(f"no subscription named {name!r} (known: {known}{more})", obj=name)

    @functools.cached_property
    def _by_name(self) -> dict[str, SubscriptionConfig]:
        return {s.name: s for s in self.subscriptions}

    def device_group(self, name: str) -> DeviceGroupConfig:
        for g in self.device_groups:
            if g.name == name:
                return g
        known = ", ".join(g.name for g in self.device_groups) or "none"
        raise ConfigurationError(f"no device group named {name!r} (known: {known})", obj=name)

    def with_devices(self, devices: list[SubscriptionConfig]) -> Topology:
        """This topology with the web subscriptions of enrolled devices (``fleet/registry.py``) beside the ones
        configured by hand: what every operation that lists subscriptions reads."""
        if not devices:
            return self
        out = self.model_copy(update={"subscriptions": [*self.subscriptions, *devices]})
        out.__dict__.pop("_by_name", None)            # the copy's own index, made when first asked
        return out

    @property
    def enrolled(self) -> list[SubscriptionConfig]:
        """The web subscriptions of enrolled devices this topology holds (``with_devices``)."""
        return [s for s in self.subscriptions if s.group is not None]

    def schedule_of(self, s: SubscriptionConfig) -> str | None:
        """When ``sparksync serve`` runs the agent of ``s``: its own schedule, else its publication's."""
        return s.agent_schedule or self.publication(s.publication).agent_schedule

    def log_reader_schedule(self, publication: str) -> str | None:
        """When ``sparksync serve`` runs a transactional publication's log reader: on the publication's
        schedule, or, when only its subscriptions have one, on the first of theirs (what they receive must be
        read first)."""
        own = self.publication(publication).agent_schedule
        return own or next(filter(None, (self.schedule_of(s) for s in self.subscriptions_of(publication))), None)

    def subscriptions_of(self, publication: str) -> list[SubscriptionConfig]:
        """The subscriptions of ``publication`` the agents reach (``transport = "direct"``)."""
        return [s for s in self.subscriptions if s.publication == publication and s.transport == "direct"]

    @property
    def direct_subscriptions(self) -> list[SubscriptionConfig]:
        """Every subscription the agents reach (not the web ones)."""
        return [s for s in self.subscriptions if s.transport == "direct"]

    def web_subscriptions_of(self, publication: str) -> list[SubscriptionConfig]:
        """The subscriptions of ``publication`` whose devices sync over the web (``sparksync sync``)."""
        return [s for s in self.subscriptions if s.publication == publication and s.transport == "web"]

    def subscriber_url(self, s: SubscriptionConfig) -> str:
        """The database URL of a direct subscription; a web one has none here (typed error)."""
        if s.database is None:
            raise ConfigurationError(f"subscription {s.name} syncs over the web: its database is on the device "
                                     "(the device runs 'sparksync sync')", obj=s.name)
        return self.resolve_url(s.database)

    def resolve_url(self, url: str) -> str:
        """Expand ``${VAR}``s; make a relative SQLite path relative to the config file's folder."""
        url = _expand(url, "database URL")
        register_url(url)
        if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
            rel = url[len("sqlite:///"):]
            if rel and rel != ":memory:":
                return "sqlite:///" + str((self.base_dir / rel).resolve())
        return url

    def publications_of_kind(self, kind: str) -> list[PublicationConfig]:
        return [p for p in self.publications if p.kind == kind]

    def subscriptions_by_publication(self, kind: str,
                                     names: list[str] | None) -> list[tuple[PublicationConfig, list[SubscriptionConfig]]]:
        """What an agent for ``kind`` publications serves: each publication with its subscriptions
        (only ``names`` when given). A named subscription of the other kind is an error."""
        wanted = set(names or [])
        for name in wanted:
            s = self.subscription(name)
            if s.transport == "web":
                raise ConfigurationError(f"subscription {name} syncs over the web: the device runs 'sparksync sync' "
                                         "against 'sparksync serve'; no agent opens its database", obj=name)
            other = self.publication(s.publication).kind
            if other != kind:
                raise ConfigurationError(f"subscription {name} belongs to {other} publication {s.publication}, "
                                         f"not a {kind} one", obj=name)
        out = []
        for pub in self.publications_of_kind(kind):
            subs = [s for s in self.subscriptions_of(pub.name) if not wanted or s.name in wanted]
            if subs:
                out.append((pub, subs))
        return out

    @property
    def distributor_url(self) -> str:
        return self.resolve_url(self.distributor_config.database)

    @property
    def distributor_config(self) -> DistributorConfig:
        """The [distributor] section (transactional publications need one)."""
        if self.distributor is None:
            raise ConfigurationError("transactional publications need a [distributor] database", obj="distributor")
        return self.distributor

    @property
    def publisher_url(self) -> str:
        return self.resolve_url(self.publisher.database)

    def resolve_path(self, path: str) -> str:
        """A path of the configuration (``${VAR}`` expanded), relative to the config file's folder."""
        p = Path(_expand(path, "path"))
        return str(p if p.is_absolute() else (self.base_dir / p).resolve())

    @property
    def snapshots(self) -> storage.Folder:
        """``[publisher] snapshot_dir``: a path (relative to the config file's folder) or a URL (``storage.Folder``)."""
        raw = _expand(self.publisher.snapshot_dir, "publisher.snapshot_dir")
        return storage.Folder(raw if "://" in raw else self.resolve_path(self.publisher.snapshot_dir))

    @property
    def feed_root(self) -> str:
        """``[server] feed_dir``: a path (relative to the config file's folder) or a URL (``storage.Folder``)."""
        raw = _expand(self.server.feed_dir, "server.feed_dir")
        return raw if "://" in raw else self.resolve_path(self.server.feed_dir)

    @property
    def spark_master(self) -> str:
        return os.environ.get("SPARK_MASTER") or self.spark.master


def _expand(text: str, what: str) -> str:
    try:
        return expand_env(text)
    except ValueError as e:
        raise ConfigurationError(f"{what}: {e}") from None
