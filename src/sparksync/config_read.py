"""Reading a configuration: the TOML file, then its structure validated (``config.Topology``, pydantic) and the
checks between keys made on the raw data (names declared twice, references, unset ``${VAR}``s, a subscriber
at the publisher's address), every problem with its key path; every secret it holds known to the redaction
before anything runs. ``topology.parse_topology`` adds the checks that need the features."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sparksync.config import DEFAULT_CONFIG, Topology, expand_env
from sparksync.errors import ConfigurationError
from sparksync.redaction import register_url, register_webhook


def list_at(data: Any, key: str) -> list[Any]:
    """``data[key]`` when ``data`` is a mapping and the value a list, else ``[]`` (raw, unvalidated
    config: the checks that read it report every problem, not only the first)."""
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, list) else []


def dict_at(data: Any, key: str) -> dict[str, Any]:
    """``data[key]`` when ``data`` is a mapping and the value a mapping, else ``{}``."""
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, dict) else {}


def named(items: Any, i: int, what: str) -> str:
    item = items[i] if isinstance(items, list) and i < len(items) else None
    name = item.get("name") if isinstance(item, dict) else None
    return f"{what}[{i}]" + (f" ({name})" if name else "")


def _reference_problems(data: dict[str, Any], base_dir: Path) -> list[str]:
    """Problems between keys (names, references, environment variables), from the raw data."""
    problems: list[str] = []
    pubs = list_at(data, "publications")
    subs = list_at(data, "subscriptions")
    publisher = dict_at(data, "publisher")

    def env_ok(value: Any, where: str) -> None:
        if isinstance(value, str):
            try:
                expand_env(value)
            except ValueError as e:
                problems.append(f"{where}: {e}")

    # every key whose ${VAR}s are expanded (Topology.resolve_url, resolve_path, snapshots), checked here so
    # that every command refuses a configuration with an unset variable before it does anything, naming the
    # key and the variable, whether or not it uses that key (the subscriptions' databases: below)
    env_ok(publisher.get("database"), "publisher.database")
    env_ok(publisher.get("snapshot_dir"), "publisher.snapshot_dir")
    env_ok(dict_at(data, "distributor").get("database"), "distributor.database")
    for key in ("tls_cert", "tls_key", "feed_dir"):
        env_ok(dict_at(data, "server").get(key), f"server.{key}")
    for key, value in dict_at(dict_at(data, "spark"), "conf").items():
        env_ok(value, f"spark.conf.{key}")
    pub_names: set[str] = set()
    for i, p in enumerate(pubs):
        name = p.get("name") if isinstance(p, dict) else None
        if isinstance(name, str):
            if name in pub_names:
                problems.append(f"{named(pubs, i, 'publications')}.name: publication {name!r} is declared twice")
            pub_names.add(name)
    sub_names: set[str] = set()
    pairs: dict[tuple[str, str], str] = {}

    def resolved(url: Any) -> Any:
        if not isinstance(url, str):
            return url
        try:
            url = expand_env(url)
        except ValueError:
            return url
        if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
            return "sqlite:///" + str((base_dir / url[len("sqlite:///"):]).resolve())
        return url

    publisher_db = resolved(publisher.get("database"))
    for i, s_ in enumerate(subs):
        if not isinstance(s_, dict):
            continue
        where = named(subs, i, "subscriptions")
        name = s_.get("name")
        if isinstance(name, str):
            if name in sub_names:
                problems.append(f"{where}.name: subscription {name!r} is declared twice")
            sub_names.add(name)
        pub = s_.get("publication")
        if isinstance(pub, str) and pub not in pub_names:
            problems.append(f"{where}.publication: no publication named {pub!r}")
        env_ok(s_.get("database"), f"{where}.database")
        db = resolved(s_.get("database"))
        if db is not None and db == publisher_db:
            problems.append(f"{where}.database: is the publisher's database")
        if isinstance(db, str) and isinstance(pub, str):
            if (db, pub) in pairs:
                problems.append(f"{where}.database: already subscribes to {pub!r} as {pairs[(db, pub)]!r}")
            pairs[(db, pub)] = str(name)
    groups = list_at(data, "device_groups")
    group_names: set[str] = set()
    kinds = {p.get("name"): p.get("kind", "merge") for p in pubs if isinstance(p, dict)}
    trusted: dict[tuple[str, str], str] = {}
    for i, g in enumerate(groups):
        if not isinstance(g, dict):
            continue
        where = named(groups, i, "device_groups")
        name, pub = g.get("name"), g.get("publication")
        if isinstance(name, str):
            if name in group_names:
                problems.append(f"{where}.name: device group {name!r} is declared twice")
            if name in sub_names:
                problems.append(f"{where}.name: {name!r} is a subscription's name too")
            group_names.add(name)
        trust = g.get("jwt")
        if isinstance(trust, dict) and isinstance(trust.get("issuer"), str) and isinstance(trust.get("audience"), str):
            pair = (trust["issuer"], trust["audience"])
            if pair in trusted:
                problems.append(f"{where}.jwt: device group {trusted[pair]!r} trusts the same issuer and audience; "
                                "give each group an audience of its own (a token names the group by them)")
            trusted[pair] = str(name)
        if isinstance(pub, str) and pub not in pub_names:
            problems.append(f"{where}.publication: no publication named {pub!r}")
        elif isinstance(pub, str) and kinds.get(pub) != "merge":
            problems.append(f"{where}.publication: {pub!r} is a transactional publication; devices sync merge "
                            "publications")
    return problems


def _loc(loc: tuple, data: Any) -> str:
    out, cur = "", data
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            item = cur[part] if isinstance(cur, list) and part < len(cur) else None
            name = item.get("name") if isinstance(item, dict) else None
            if name is None and isinstance(cur, list) and part < len(cur) and isinstance(cur[part], dict):
                name = cur[part].get("table")
            if name:
                out += f" ({name})"
            cur = cur[part] if isinstance(cur, list) and part < len(cur) else None
        else:
            out += ("." if out else "") + str(part)
            cur = cur.get(part) if isinstance(cur, dict) else None
    return out


def _register_secrets(data: dict[str, Any]) -> None:
    """Every database password in the configuration is known to the redaction before anything runs."""
    sections = [data.get("publisher"), data.get("distributor"), *(data.get("subscriptions") or [])]
    hook = data["alerts"].get("webhook") if isinstance(data.get("alerts"), dict) else None
    if isinstance(hook, str):
        register_webhook(hook)
    for sec in sections:
        url = sec.get("database") if isinstance(sec, dict) else None
        if isinstance(url, str):
            try:
                register_url(expand_env(url))
            except ValueError:
                register_url(url)


def validate_structure(data: dict[str, Any], base_dir: Path) -> tuple[Topology | None, list[str]]:
    """The topology, if its structure is valid, and every structural problem (keys, types, values,
    references between keys), each with its key path. The checks that need the features (call
    syntaxes, resolvers, the subscribers' databases) are ``topology.parse_topology``'s."""
    problems: list[str] = []
    topology = None
    _register_secrets(data)
    try:
        topology = Topology.model_validate({**data, "base_dir": base_dir})
    except ValidationError as exc:
        for err in exc.errors():
            loc = _loc(tuple(err["loc"]), data)
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            elif err["type"] == "missing":
                msg = "required key is missing"
            problems.append(f"{loc}: {msg}" if loc else msg)
    problems += _reference_problems(data, base_dir)
    return topology, problems


def read_config(path: str | Path = DEFAULT_CONFIG) -> tuple[dict[str, Any], Path]:
    """The configuration file's data and its folder (relative paths are relative to it)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigurationError(f"config file not found: {p} (pass -c/--config)", obj=str(p))
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{p}: not valid TOML: {exc}", obj=str(p)) from None
    return data, p.resolve().parent
