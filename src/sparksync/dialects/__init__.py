"""Dialect registry: pick a dialect from a database URL."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparksync.dialects.protocols import Dialect
from sparksync.dialects.replica import Replica
from sparksync.errors import ConfigurationError
from sparksync.redaction import redact

if TYPE_CHECKING:
    from sparksync.dialects.postgres.dialect import PostgresDialect
    from sparksync.dialects.sqlite.dialect import SQLiteDialect


def dialect_for_url(url: str) -> Dialect:
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        from sparksync.dialects.sqlite.dialect import SQLiteDialect

        return SQLiteDialect()
    if scheme in ("postgresql", "postgres"):
        from sparksync.dialects.postgres.dialect import PostgresDialect

        return PostgresDialect()
    raise ConfigurationError(f"unsupported database URL {redact(url)!r}: use sqlite:/// or postgresql://")


def connect(url: str, label: str | None = None) -> Replica:
    """Open a replica database by URL."""
    return dialect_for_url(url).connect(url, label)


if TYPE_CHECKING:
    from sparksync.dialects.protocols import (
        Catalog,
        DataMovement,
        Ddl,
        Driver,
        Files,
        Locks,
        MergeHooks,
        MergeStaging,
        Naming,
        StagedRows,
        TransactionalHooks,
        ValueChecks,
    )

    def _satisfies_every_protocol(d: SQLiteDialect | PostgresDialect) -> None:
        """Never run: mypy checks that each dialect is each concern's protocol (and so a ``Dialect``)."""
        driver: Driver[Replica] = d
        naming: Naming = d
        catalog: Catalog[Replica] = d
        ddl: Ddl = d
        data_movement: DataMovement[Replica] = d
        staged_rows: StagedRows = d
        merge_staging: MergeStaging[Replica] = d
        merge_hooks: MergeHooks[Replica] = d
        transactional: TransactionalHooks[Replica] = d
        files: Files = d
        locks: Locks = d
        value_checks: ValueChecks = d
        dialect: Dialect[Replica] = d
        del driver, naming, catalog, ddl, data_movement, staged_rows, merge_staging, merge_hooks, transactional
        del files, locks, value_checks, dialect


__all__ = ["connect", "dialect_for_url"]
