"""Dialect registry: pick a dialect from a database URL."""

from __future__ import annotations

from ..errors import ConfigurationError
from ..redaction import redact
from .base import Dialect
from .replica import Replica


def dialect_for_url(url: str) -> Dialect:
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        from .sqlite.dialect import SQLiteDialect

        return SQLiteDialect()
    if scheme in ("postgresql", "postgres"):
        from .postgres.dialect import PostgresDialect

        return PostgresDialect()
    raise ConfigurationError(f"unsupported database URL {redact(url)!r}: use sqlite:/// or postgresql://")


def connect(url: str, label: str | None = None) -> Replica:
    """Open a replica database by URL."""
    return dialect_for_url(url).connect(url, label)


__all__ = ["connect", "dialect_for_url"]
