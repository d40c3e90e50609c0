"""Conflict vocabulary shared by detection, resolution and logging (seed: MSmerge_conflicts_info)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class ConflictType(IntEnum):
    UPDATE = 1                  # update-update, row-level tracking
    COLUMN_UPDATE = 2           # update-update on the same column, column-level tracking
    UPDATE_DELETE_WINS = 3      # update vs delete: the delete won
    UPDATE_WINS_DELETE = 4      # update vs delete: the update won (the row is re-sent to the deleter)
    UPLOAD_INSERT_FAILED = 5
    DOWNLOAD_INSERT_FAILED = 6
    UPLOAD_DELETE_FAILED = 7
    DOWNLOAD_DELETE_FAILED = 8
    UPLOAD_UPDATE_FAILED = 9
    DOWNLOAD_UPDATE_FAILED = 10

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", " ")


def failed_type(upload: bool, op: str) -> ConflictType:
    base = {"insert": 5, "delete": 7, "update": 9}[op]
    return ConflictType(base if upload else base + 1)


@dataclass
class ConflictRecord:
    """One conflict, as logged to MSmerge_conflicts_info (and the article's conflict table)."""

    conflict_type: ConflictType
    tablenick: int
    rowguid: str
    reason_code: int | str
    reason_text: str
    origin: str                  # the replica whose version lost (or whose change failed)
    winner: str                  # the replica whose version won ("" for failed changes)
    losing_row: dict[str, Any] | None = None
    columns: list[str] = field(default_factory=list)
