"""The class both dialects extend: the shared defaults of every concern (``defaults.py``) composed.

What a dialect is (the protocols, :class:`Dialect`, :class:`Capabilities`) is ``protocols.py``; the
table model lives in ``model.py``, the connection in ``replica.py``.
"""

from __future__ import annotations

from sparksync.dialects.defaults import (
    DataMovementDefaults,
    DdlDefaults,
    DriverDefaults,
    FilesDefaults,
    MergeHooksDefaults,
    MergeStagingDefaults,
    NamingDefaults,
    TransactionalDefaults,
    ValueChecksDefaults,
)
from sparksync.dialects.protocols import Capabilities, Dialect
from sparksync.dialects.replica import Replica
from sparksync.errors import SchemaError
from sparksync.names import TableName

__all__ = ["Capabilities", "Dialect", "DialectBase", "table_not_found"]


class DialectBase(DriverDefaults, NamingDefaults, DdlDefaults, DataMovementDefaults,
                  MergeStagingDefaults, MergeHooksDefaults, TransactionalDefaults, FilesDefaults, ValueChecksDefaults):
    """The defaults of every concern; a dialect puts its own mixins, one per concern (its driver, catalog,
    types, staging SQL, triggers, locks: ``sqlite/``, ``postgres/``), before this class, and so adds the
    rest of :class:`Dialect`. One instance per kind of database; stateless."""

    capabilities: Capabilities


def table_not_found(replica: Replica, name: TableName, publication: str) -> SchemaError:
    """The error for an article whose table does not exist, with the names it may have meant."""
    cands = replica.dialect.similar_tables(replica, replica.dialect.resolve_name(name))
    hint = f" (did you mean {', '.join(cands)}?)" if cands else ""
    return SchemaError(f"publication {publication}: table {name} does not exist in {replica.label}{hint}",
                       obj=str(name))
