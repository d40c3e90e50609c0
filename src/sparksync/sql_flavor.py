"""What rendering SQL text needs to know of the database it runs on (a dialect's capability
``Capabilities.sql``), in a module of its own: a dialect declares it without loading the filter parser
(sqlglot), which only publishing, snapshots and partition evaluation use."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SqlFlavor"]


@dataclass(frozen=True)
class SqlFlavor:
    """What rendering a filter needs to know of the database it runs on: ``filters.py`` never asks which
    database it is."""

    sqlglot: str                    # sqlglot's name of the database's SQL ("postgres", "sqlite")
    typed_booleans: bool = False    # a boolean column has a boolean type: it compares with TRUE/FALSE, not 0/1
