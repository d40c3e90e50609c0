"""Reading a topology: the configuration's structure (``config.py``), then the checks that need the
features' vocabularies — call syntaxes, resolvers, what each subscriber database can do. Every problem
is reported at once, with its key path."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sparksync.config import DEFAULT_CONFIG, MERGE_SUBSCRIPTION_KEYS, TRANSACTIONAL_SUBSCRIPTION_KEYS, Topology
from sparksync.config_read import list_at, named, read_config, validate_structure
from sparksync.dialects import dialect_for_url
from sparksync.errors import ConfigurationError, InvalidNameError
from sparksync.merge.conflicts.resolvers import BUILTIN, check_resolver
from sparksync.names import TableName
from sparksync.transactional.delivery.calls import CommandSyntaxError, effective_command, parse_command


def parse_topology(data: dict[str, Any], base_dir: Path, source: str = "config") -> Topology:
    """The validated topology of ``data`` (relative paths relative to ``base_dir``), or one
    ConfigurationError listing every problem."""
    topology, problems = validate_structure(data, base_dir)
    problems += _article_problems(data)
    if topology is not None:
        problems += _transactional_problems(topology, data)
    if problems or topology is None:
        raise ConfigurationError(f"{source}: invalid configuration", problems)
    return topology


def load_config(path: str | Path = DEFAULT_CONFIG) -> Topology:
    data, base_dir = read_config(path)
    return parse_topology(data, base_dir, str(path))


def _article_problems(data: dict[str, Any]) -> list[str]:
    """Each article's call syntaxes (every bad one at once) and resolver settings."""

    problems: list[str] = []
    pubs = list_at(data, "publications")
    for i, p in enumerate(pubs):
        arts = list_at(p, "articles")
        for j, a in enumerate(arts):
            if not isinstance(a, dict) or not isinstance(a.get("table"), str):
                continue
            where = f"{named(pubs, i, 'publications')}.articles[{j}] ({a['table']})"
            try:
                table = TableName.parse(a["table"])
            except InvalidNameError:
                continue        # reported by the structure
            bad = []
            for op in ("ins", "upd", "del"):
                text = a.get(f"{op}_cmd")
                try:
                    parse_command(text if isinstance(text, str) else None, op, table)
                except CommandSyntaxError as e:
                    bad.append(str(e))
            if bad:
                problems.append(f"{where}: {'; '.join(bad)}")
            resolver = a.get("resolver", "default")
            if not isinstance(resolver, str):
                continue
            if resolver not in BUILTIN and not re.fullmatch(r"[A-Za-z_][\w.]*[.:][A-Za-z_]\w*", resolver):
                problems.append(f"{where}: resolver {resolver!r}: use one of {', '.join(BUILTIN)} or a dotted path "
                                "'package.module:function' to a Python callable")
                continue
            column = a.get("resolver_column") if isinstance(a.get("resolver_column"), str) else None
            found = check_resolver(resolver, column, bool(a.get("column_tracking", False)), [])
            if found:
                problems.append(f"{where}: {'; '.join(found)}")
    return problems


def _transactional_problems(topology: Topology, data: dict[str, Any]) -> list[str]:
    """Rules between keys of transactional replication (on the validated topology)."""
    problems: list[str] = []
    subs_raw = list_at(data, "subscriptions")
    transactional = {p.name: p for p in topology.publications_of_kind("transactional")}
    known = {p.name for p in topology.publications}
    if transactional and topology.distributor is None:
        problems.append(f"distributor: required key is missing (transactional publication "
                        f"{', '.join(transactional)} needs a distribution database: [distributor] database = ...)")
    distributor = None
    if topology.distributor is not None:
        try:
            distributor = topology.distributor_url
        except ConfigurationError:
            distributor = None
    for i, s in enumerate(topology.subscriptions):
        where = named(subs_raw, i, "subscriptions")
        pub = transactional.get(s.publication)
        wrong = sorted(s.model_fields_set & (MERGE_SUBSCRIPTION_KEYS if pub else TRANSACTIONAL_SUBSCRIPTION_KEYS))
        if wrong and s.publication in known:
            problems.append(f"{where}: {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} for "
                            f"{'merge' if pub else 'transactional'} subscriptions; publication {s.publication} is "
                            f"{'transactional' if pub else 'merge'}")
        if s.transport == "web":
            if pub is not None:
                problems.append(f"{where}.transport: web synchronization is for merge publications; publication "
                                f"{s.publication} is transactional")
            continue
        try:
            url = topology.subscriber_url(s)
        except ConfigurationError:
            continue
        if distributor is not None and url == distributor:
            problems.append(f"{where}.database: is the distribution database")
        if pub is None:
            continue
        try:
            capabilities = dialect_for_url(url).capabilities
        except ConfigurationError:
            continue
        if not capabilities.concurrent_writers and s.subscription_streams > 1:
            problems.append(f"{where}.subscription_streams: a {capabilities.product} subscriber has one writer at a "
                            "time; use 1")
        for a in pub.articles:
            for op in ("ins", "upd", "del"):
                try:
                    parse_command(getattr(a, f"{op}_cmd"), op, a.table_name)
                except CommandSyntaxError:
                    continue        # reported once, by _article_problems
                try:
                    effective_command(getattr(a, f"{op}_cmd"), op, a.table_name,
                                      procedures=capabilities.supports_procedures)
                except CommandSyntaxError as e:
                    problems.append(f"{where}: publication {pub.name}, article {a.table}: {e}")
    return problems


