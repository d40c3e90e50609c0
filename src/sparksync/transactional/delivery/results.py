"""What a distribution agent's task reports for each subscription it delivered: one result row
(``RESULT_SCHEMA``) with the commands that failed (:class:`CommandError`), the tracer tokens it
committed (:class:`TokenDelivered`) and the error that stopped it, as Spark structs; read back on the
driver by :meth:`DeliveryResult.from_row`."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypedDict, cast, get_type_hints

from sparksync.errors import ErrorInfo
from sparksync.redaction import redact
from sparksync.result_rows import ERROR_TYPE, result_columns, spark_struct


class CommandError(TypedDict):
    """A command that failed at the subscriber (``MSrepl_errors``): skipped, or what stopped the delivery."""

    xact_seqno: int
    command_id: int
    article_id: int | None
    error_code: str                   # SQL Server's error number, else the database's own code
    native_code: str | None
    message: str
    skipped: bool


class TokenDelivered(TypedDict):
    """A tracer token delivered to the subscriber, and when (ISO 8601)."""

    tracer_id: str
    subscriber_commit: str


RESULT_SCHEMA = ("subscription STRING, status STRING, transactions BIGINT, commands BIGINT, batches BIGINT, "
                 "parallel BIGINT, fallbacks BIGINT, skipped BIGINT, first_seqno BIGINT, last_seqno BIGINT, "
                 f"errors ARRAY<{spark_struct(get_type_hints(CommandError))}>, "
                 f"tokens ARRAY<{spark_struct(get_type_hints(TokenDelivered))}>, message STRING, seconds DOUBLE, "
                 f"error {ERROR_TYPE}")
RESULT_COLUMNS = result_columns(RESULT_SCHEMA)


@dataclass
class DeliveryResult:
    subscription: str
    status: str = "ok"                       # ok | error
    transactions: int = 0
    commands: int = 0
    batches: int = 0
    parallel: int = 0                        # batches applied over the subscription streams
    fallbacks: int = 0                       # batches that failed on the streams, applied over one connection
    skipped: int = 0
    first_seqno: int | None = None
    last_seqno: int | None = None
    errors: list[CommandError] = field(default_factory=list)
    tokens: list[TokenDelivered] = field(default_factory=list)
    message: str = ""
    seconds: float = 0.0
    error: ErrorInfo | None = None           # what stopped the delivery (status "error")

    def fail(self, e: BaseException, message: str | None = None) -> None:
        info = ErrorInfo.of(e)
        self.status, self.message = "error", redact(message if message is not None else info.message)
        self.error = ErrorInfo(info.code, self.message, info.obj, info.transient)

    def row(self) -> dict[str, Any]:
        """The task's result row (``RESULT_SCHEMA``): errors and tokens as lists of structs, the error a struct."""
        out = {k: getattr(self, k) for k in RESULT_COLUMNS}
        out["error"] = self.error.to_dict() if self.error else None
        return out

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> DeliveryResult:
        """A result row (``row()``; its structs as dicts, e.g. ``Row.asDict(recursive=True)``), on the driver."""
        values = {k: row[k] for k in RESULT_COLUMNS}
        values["errors"] = cast("list[CommandError]", list(row["errors"] or ()))       # typed by RESULT_SCHEMA
        values["tokens"] = cast("list[TokenDelivered]", list(row["tokens"] or ()))
        values["error"] = ErrorInfo.from_dict(row["error"]) if row["error"] else None
        return cls(**values)

    def take(self, result: DeliveryResult) -> None:
        """Take what a task reported (its fields that are set) into this one."""
        for f in fields(DeliveryResult):
            value = getattr(result, f.name)
            if value is not None:
                setattr(self, f.name, value)
