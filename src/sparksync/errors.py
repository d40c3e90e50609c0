"""Typed errors raised by the sparksync library.

The library raises; the CLI turns these into one-line messages and a non-zero exit.
Every error carries a stable ``code`` (for tests and logs) and names the object it is about.
``Transient`` errors may succeed if retried (a busy database, a lost connection, a serialization
failure); ``Terminal`` errors will not (bad configuration, a missing table, a constraint violation).
"""

from __future__ import annotations


class SparksyncError(Exception):
    """Base class of every error sparksync raises on purpose."""

    code = "error"

    def __init__(self, message: str, *, obj: str | None = None):
        super().__init__(message)
        self.message = message
        self.obj = obj

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message


class Transient:
    """Marker: the operation may succeed if retried."""

    transient = True


class Terminal:
    """Marker: retrying will not help."""

    transient = False


class ConfigurationError(Terminal, SparksyncError):
    """The topology configuration is invalid. ``problems`` lists every problem with its key path."""

    code = "config"

    def __init__(self, message: str, problems: list[str] | None = None, *, obj: str | None = None):
        self.problems = problems or []
        if self.problems:
            message = message + "\n" + "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(message, obj=obj)


class InvalidNameError(ConfigurationError):
    """A table, schema or column name that cannot be used (quotes, control characters, too long)."""

    code = "invalid_name"


class ConnectionFailed(Transient, SparksyncError):
    """A database could not be reached. The message never contains a password."""

    code = "connection"


class DatabaseError(SparksyncError):
    """A driver error, translated by the dialect. ``transient`` says whether to retry."""

    code = "database"

    def __init__(self, message: str, *, transient: bool, native_code: str | None = None, obj: str | None = None):
        super().__init__(message, obj=obj)
        self.transient = transient
        self.native_code = native_code


class ConstraintViolation(Terminal, DatabaseError):
    """A primary key, unique, foreign key, not null or check constraint rejected a change."""

    code = "constraint"

    def __init__(self, message: str, *, kind: str, native_code: str | None = None, obj: str | None = None):
        DatabaseError.__init__(self, message, transient=False, native_code=native_code, obj=obj)
        self.kind = kind  # "primary_key" | "unique" | "foreign_key" | "not_null" | "check"


class RowNotFound(Terminal, DatabaseError):
    """A replicated update or delete found no row at the subscriber (SQL Server's error 20598)."""

    code = "row_not_found"

    def __init__(self, message: str, *, obj: str | None = None):
        DatabaseError.__init__(self, message, transient=False, native_code="20598", obj=obj)


class SchemaError(Terminal, SparksyncError):
    """A published table cannot be used as an article (unknown table, no primary key, unsupported type)."""

    code = "schema"


class SchemaDrift(SchemaError):
    """A table no longer matches what was published or initialized."""

    code = "schema_drift"


class MetadataVersionError(Terminal, SparksyncError):
    """The replication metadata in a database was written by a newer sparksync."""

    code = "metadata_version"


class NotInitialized(Terminal, SparksyncError):
    """An operation needs a publication, snapshot or subscription that has not been set up yet."""

    code = "not_initialized"


class SnapshotError(Terminal, SparksyncError):
    """A snapshot is missing, incomplete or does not match the publication."""

    code = "snapshot"


class GenerationBusy(Transient, SparksyncError):
    """A generation could not be settled because transactions that wrote into it are still running."""

    code = "generation_busy"
