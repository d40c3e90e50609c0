"""Configuration data (what ``parse_topology`` takes) as a sparksync.toml, for the tests that go
through the CLI."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path


def toml(data: dict) -> str:
    """``data`` as TOML: tables (``[publisher]``), arrays of tables at any depth (``[[publications]]``,
    ``[[publications.articles]]``, ``[[publications.articles.join_filters]]``), strings, booleans,
    numbers and lists of them. Checked: the text reads back as ``data``."""
    text = "\n\n".join(_table("", data, array=False)) + "\n"
    assert tomllib.loads(text) == json.loads(json.dumps(data)), f"not written faithfully as TOML:\n{text}"
    return text


def write_config(folder: Path, data: dict, name: str = "sparksync.toml") -> Path:
    """``data`` written as ``folder/name`` (sparksync.toml); its path."""
    path = Path(folder) / name
    path.write_text(toml(data), encoding="utf-8")
    return path


def _is_tables(v) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def _table(path: str, d: dict, array: bool) -> list[str]:
    lines = [f"[[{path}]]" if array else f"[{path}]"] if path else []
    lines += [f"{_key(k)} = {_value(v)}" for k, v in d.items() if not isinstance(v, dict) and not _is_tables(v)]
    blocks = ["\n".join(lines)] if lines else []
    for k, v in d.items():
        sub = f"{path}.{_key(k)}" if path else _key(k)
        if isinstance(v, dict):
            blocks += _table(sub, v, array=False)
        elif _is_tables(v):
            for item in v:
                blocks += _table(sub, item, array=True)
    return blocks


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() and k.isascii() else json.dumps(k)


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return ("nan" if math.isnan(v) else "inf" if v > 0 else "-inf") if not math.isfinite(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)              # a TOML basic string: JSON's escapes are TOML's
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r} ({type(v).__name__})")
