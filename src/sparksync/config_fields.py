"""What the configuration's models share: the base model (unknown keys refused, frozen) and the checks of names,
URLs, schedules and intervals, and ``${VAR}`` expansion."""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, ConfigDict

from sparksync.errors import InvalidNameError
from sparksync.names import check_identifier
from sparksync.schedule import parse_interval, parse_schedule


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def check_name(v: str, what: str) -> str:
    try:
        return check_identifier(v, what)
    except InvalidNameError as e:
        raise ValueError(e.message) from None


_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(text: str) -> str:
    """Replace ``${VAR}`` with the environment variable (so passwords can stay out of the file)."""

    def sub(m: re.Match) -> str:
        if m.group(1) not in os.environ:
            raise ValueError(f"environment variable {m.group(1)} is not set")
        return os.environ[m.group(1)]

    return _ENV.sub(sub, text)


def check_schedule(v: str | None) -> str | None:
    return v if v is None else parse_schedule(v).text


def check_interval(v: str | None) -> str | None:
    if v is not None:
        parse_interval(v)
    return v


def check_url(v: str) -> str:
    scheme = v.split(":", 1)[0].lower()
    if scheme not in ("sqlite", "postgresql", "postgres"):
        raise ValueError("must start with sqlite:/// or postgresql://")
    if scheme == "sqlite" and not v.startswith("sqlite:///"):
        raise ValueError("a SQLite URL looks like sqlite:///path/to/file.db (relative to the config file)")
    return v
