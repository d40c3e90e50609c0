"""Typed errors raised by the sparksync library.

The library raises; the CLI turns these into one-line messages and an exit code chosen by the
error's ``code`` (``cli/common.py``). Every error carries a stable ``code`` (for tests, logs and
result rows) and names the object it is about. ``Transient`` errors may succeed if retried (a busy
database, a lost connection, a deadlock): ``retry.with_retries`` tries them again with backoff.
``Terminal`` errors will not (bad configuration, a missing table, a constraint violation).

An error that happens inside a Spark task travels back to the driver as data, an
:class:`ErrorInfo` in the task's result row (or, when the task must fail, in the one tagged line
``spark/failures.py`` reads back): its code, object and message, never a traceback to scrape.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass

from sparksync.redaction import redact


class SparksyncError(Exception):
    """Base class of every error sparksync raises on purpose."""

    code = "error"
    transient = False

    def __init__(self, message: str, *, obj: str | None = None):
        super().__init__(message)
        self.message = message
        self.obj = obj

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message

    def info(self) -> ErrorInfo:
        return ErrorInfo(self.code, self.message, self.obj, bool(self.transient))


@dataclass(frozen=True)
class ErrorInfo:
    """An error as data: what crosses from a Spark task to the driver, and what a session records."""

    code: str
    message: str
    obj: str | None = None
    transient: bool = False

    INTERNAL = "internal"             # an exception sparksync did not raise on purpose (a bug, or worse)

    @classmethod
    def of(cls, e: BaseException) -> ErrorInfo:
        """A typed error's own fields; anything else as ``internal``, with where it happened."""
        if isinstance(e, SparksyncError):
            return e.info()
        where = "".join(traceback.format_exception(e, limit=-3)).strip()
        return cls(cls.INTERNAL, f"{type(e).__name__}: {e}\n{where}")

    def to_dict(self) -> dict:
        return {"code": self.code, "message": self.message, "object": self.obj, "transient": self.transient}

    @classmethod
    def from_dict(cls, d: dict) -> ErrorInfo:
        return cls(str(d["code"]), str(d["message"]), d.get("object"), bool(d.get("transient", False)))

    def first_line(self) -> str:
        return self.message.splitlines()[0] if self.message else self.code

    def recorded(self) -> str:
        """The text a history row keeps of it: a typed error's message, the first line of anything else
        (not its traceback), without a password."""

        return redact(self.first_line() if self.code == self.INTERNAL else self.message)


class ReportedError(SparksyncError):
    """An error reported by a Spark task (an :class:`ErrorInfo`), raised again on the driver."""

    def __init__(self, info: ErrorInfo):
        super().__init__(info.message, obj=info.obj)
        self.code = info.code
        self.transient = info.transient


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


class EncryptionKeyError(ConfigurationError):
    """An encrypted device file opened without its key or with another, or a key that cannot be had (an unset
    variable, a key file others can read): named with the file, the key never shown."""

    code = "encryption_key"


class SparkUnavailable(Terminal, SparksyncError):
    """A command that runs Spark jobs where Spark cannot start: pyspark is not installed (a device
    installs ``sparksync`` without it) or no Java is found."""

    code = "spark_unavailable"


class SparkClusterUnavailable(Transient, SparksyncError):
    """The Spark cluster a command runs its jobs on cannot run them: its master cannot be reached or does
    not take the application, or it gives the application no executor within ``[spark] executor_wait_s``
    (its cores held by other applications). Named in one line with the master; it may pass."""

    code = "spark_cluster"


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


class ValueRejected(Terminal, DatabaseError):
    """The database cannot hold a value: too long for its column, out of range, not of its type, a NUL
    character in PostgreSQL text. Like a constraint, it rejects one change, not a whole batch."""

    code = "value"

    def __init__(self, message: str, *, native_code: str | None = None, column: str | None = None,
                 obj: str | None = None):
        DatabaseError.__init__(self, message, transient=False, native_code=native_code, obj=obj)
        self.column = column


class ValueUnreadable(Terminal, SparksyncError):
    """A stored value that cannot be read as its column's declared type says (validation's digests name the
    row and the column): a failed validation, never a crash of the job that read it."""

    code = "value_unreadable"


# What makes one change fail at its destination (a failed change), as opposed to the batch.
CHANGE_REJECTED = (ConstraintViolation, ValueRejected)


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


class ReplayBlocked(SchemaError):
    """A device's file holds values a schema change it has not had does not admit (a NULL under a new NOT NULL,
    a value a narrowing does not fit): the change cannot be replayed there until its application corrects those
    rows. Its writes are uploaded under its old schema all the same; ``rows`` names the rows to correct."""

    code = "replay_blocked"

    def __init__(self, message: str, *, rows: list[str] | None = None, obj: str | None = None):
        super().__init__(message, obj=obj)
        self.rows = list(rows or [])


class MetadataVersionError(Terminal, SparksyncError):
    """The replication metadata in a database was written by a newer sparksync."""

    code = "metadata_version"


class NotInitialized(Terminal, SparksyncError):
    """An operation needs a publication, snapshot or subscription that has not been set up yet."""

    code = "not_initialized"


class SnapshotError(Terminal, SparksyncError):
    """A snapshot is missing, incomplete or does not match the publication."""

    code = "snapshot"


class TrackingNotFlushed(Terminal, SparksyncError):
    """Code read or wrote the tracking metadata without flushing the tracking log first: a bug, refused
    rather than acted on with changes missing."""

    code = "tracking_not_flushed"


class ReplicaDamaged(Terminal, SparksyncError):
    """A replica's replication machinery is not intact (a tracking trigger dropped, disabled or altered,
    metadata missing, a table changed behind sparksync's back, or another database at its address)."""

    code = "replica_damaged"


class ReplicaBehind(ReplicaDamaged):
    """A subscriber's database went back in time (restored from an older copy): it lacks changes the
    publisher recorded as delivered, or would reuse generation numbers the publisher already has."""

    code = "replica_behind"



class OtherFile(ReplicaDamaged):
    """A device file presented a web subscription that another file holds (a copy of the holder made before its
    later syncs, a second file synced with the same token), or a request of a sync that a newer sync of the
    subscription superseded: refused, nothing changed (``merge/session/remote/holders.py``). ``stray``: what the
    door records of the refused file."""

    code = "other_file"

    def __init__(self, message: str, *, obj: str | None = None):
        super().__init__(message, obj=obj)
        self.stray: tuple | None = None


class Diverged(ReplicaDamaged):
    """A replica's validation failed: it does not hold what the publisher holds of its partition (row counts
    or checksums differ) with nothing pending either way."""

    code = "diverged"


class Unauthorized(Terminal, SparksyncError):
    """A device's token is missing, wrong or revoked. Its message never says which (nor the token)."""

    code = "unauthorized"


class EnrollmentRefused(Unauthorized):
    """An enrollment secret a device may not enroll with now (unknown, wrong, used up, expired, revoked, locked):
    one message for every reason, which it never says."""

    code = "enrollment_refused"


class NoSuchPartition(Terminal, SparksyncError):
    """A device's verified claims name a partition the publisher does not have (refused, not made: a partition a
    device may name must be one the operator made, so a snapshot holds it)."""

    code = "no_partition"


class TlsError(Terminal, SparksyncError):
    """A device's connection to the sync server failed in a way retrying cannot mend: the server's TLS
    certificate could not be verified (a private CA not given with ``--ca-file``, another host's name), or
    the port does not speak what the URL says (``https://`` to plain HTTP, ``http://`` to TLS)."""

    code = "tls"


class ProtocolError(Terminal, SparksyncError):
    """A web synchronization message that is malformed, or that the other side may not send (a wrong
    schema, an unknown article, an upload that is not the device's own): refused, nothing changed."""

    code = "protocol"


class RequestTooSlow(ProtocolError):
    """A request body that arrived slower than the server's minimum rate (``[server] min_body_rate_kb``): cut
    (408), nothing changed."""

    code = "request_too_slow"


class RequestTooLarge(ProtocolError):
    """A request that is, or says it unpacks to, more than the server takes (``[server] max_request_mb``):
    refused before it is read or unpacked, nothing changed."""

    code = "request_too_large"


class UploadConflict(ProtocolError):
    """A remote subscriber's upload whose generations were applied before from another body, or that do not
    follow what the publisher has of them (``expected_lo``: where the publisher has them up to): refused,
    nothing applied."""

    code = "upload_conflict"

    def __init__(self, message: str, expected_lo: int | None = None, *, obj: str | None = None):
        super().__init__(message, obj=obj)
        self.expected_lo = expected_lo


class DeviceBusy(Transient, SparksyncError):
    """Another sync of the same device file is running (in this process or another): this one waited for it."""

    code = "device_busy"


class ServerBusy(Transient, SparksyncError):
    """The server works on as many requests as it takes at once: try again after ``retry_after`` seconds."""

    code = "server_busy"

    def __init__(self, message: str, retry_after: float = 1.0, *, obj: str | None = None):
        super().__init__(message, obj=obj)
        self.retry_after = retry_after


class CaptureBusy(Transient, SparksyncError):
    """A PostgreSQL replica's change capture slot stayed busy (other backends decoding it) for longer than a reader
    waits for it: nothing was done; try again (the web door answers 503, which a device retries)."""

    code = "capture_busy"
