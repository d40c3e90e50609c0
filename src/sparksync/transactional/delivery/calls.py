"""Call syntax: how each replicated command reaches a subscriber (seed 001).

Every article has one command per operation (``ins_cmd``, ``upd_cmd``, ``del_cmd``):

* ``CALL proc`` / ``SCALL proc`` / ``MCALL proc`` / ``XCALL proc``: call a stored procedure with the
  parameter layout of that syntax. When ``proc`` is the default name (``sp_MSins_<schema><table>``,
  ...) sparksync generates the procedure at the subscriber; any other name is a custom procedure the
  user created there, called with the same layout.
* ``SQL``: a plain INSERT / UPDATE / DELETE (the only choice on a subscriber without procedures).
* ``NONE``: the operation is not replicated.

Layouts (seed 001): INSERT CALL passes every column; UPDATE CALL every column then the original
primary key; UPDATE SCALL only the changed columns (others NULL), the original primary key, and a
bitmap of the changed columns; UPDATE MCALL every column, the original primary key and the bitmap;
UPDATE XCALL the before image then the after image; DELETE CALL the original primary key; DELETE
XCALL the before image. An update that sets a column to the value it had is not a change.

Everything here is pure: values in, parameters out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparksync.errors import InvalidNameError
from sparksync.names import MAX_IDENTIFIER_LENGTH, TableName

OP_WORDS = {"ins": "insert", "upd": "update", "del": "delete"}
PROCEDURE_SYNTAXES = ("CALL", "SCALL", "MCALL", "XCALL")
ALLOWED = {
    "ins": ("CALL", "SQL", "NONE"),
    "upd": ("CALL", "SCALL", "MCALL", "XCALL", "SQL", "NONE"),
    "del": ("CALL", "XCALL", "SQL", "NONE"),
}
DEFAULT_SYNTAX = {"ins": "CALL", "upd": "SCALL", "del": "CALL"}
PROC_PREFIX = {"ins": "sp_MSins_", "upd": "sp_MSupd_", "del": "sp_MSdel_"}


class CommandSyntaxError(ValueError):
    """An ins_cmd / upd_cmd / del_cmd that cannot be used (the message says why)."""


@dataclass(frozen=True)
class CallSpec:
    """One operation's propagation method for one article at one subscriber."""

    op: str                          # "ins" | "upd" | "del"
    syntax: str                      # CALL | SCALL | MCALL | XCALL | SQL | NONE
    procedure: TableName | None = None
    generated: bool = False          # sparksync creates the procedure (the default name)

    @property
    def uses_procedure(self) -> bool:
        return self.syntax in PROCEDURE_SYNTAXES

    @property
    def replicated(self) -> bool:
        return self.syntax != "NONE"

    def __str__(self) -> str:
        return f"{self.syntax} {self.procedure}" if self.procedure is not None else self.syntax


def default_procedure(op: str, table: TableName) -> str:
    """``sp_MSins_PurchasingVendor`` for ``Purchasing.Vendor`` (seed 001), kept under 64 bytes."""
    name = PROC_PREFIX[op] + (table.schema or "") + table.name
    if len(name.encode("utf-8")) <= MAX_IDENTIFIER_LENGTH:
        return name
    digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:8]
    cut = name.encode("utf-8")[:MAX_IDENTIFIER_LENGTH - 9].decode("utf-8", "ignore")
    return f"{cut}_{digest}"


def parse_command(text: str | None, op: str, table: TableName) -> CallSpec | None:
    """Parse an ``ins_cmd``/``upd_cmd``/``del_cmd`` value (None: not configured; the default then
    depends on the subscriber, see :func:`effective_command`). Raises CommandSyntaxError."""
    if text is None:
        return None
    words = text.split()
    what = f"{op}_cmd {text!r}"
    if not words:
        raise CommandSyntaxError(f"{what}: empty")
    syntax = words[0].upper()
    if syntax not in ALLOWED["upd"] + ("VCALL",):
        raise CommandSyntaxError(f"{what}: unknown call syntax {words[0]!r}; use one of "
                                 f"{', '.join(ALLOWED[op])} (with a procedure name where it calls one)")
    if syntax not in ALLOWED[op]:
        raise CommandSyntaxError(f"{what}: {syntax} cannot be used for {OP_WORDS[op]}s; use one of "
                                 f"{', '.join(ALLOWED[op])}")
    if syntax in ("SQL", "NONE"):
        if len(words) != 1:
            raise CommandSyntaxError(f"{what}: {syntax} takes no procedure name")
        return CallSpec(op, syntax)
    if len(words) != 2:
        raise CommandSyntaxError(f"{what}: use '{syntax} procedure_name'")
    try:
        proc = TableName.parse(words[1])
    except InvalidNameError as e:
        raise CommandSyntaxError(f"{what}: {e.message}") from None
    generated = proc.name == default_procedure(op, table) and proc.schema in (None, table.schema)
    return CallSpec(op, syntax, proc, generated)


def effective_command(text: str | None, op: str, table: TableName, procedures: bool, fold=None) -> CallSpec:
    """The command used at one subscriber. Not configured: CALL/SCALL/CALL of the generated
    procedures where the subscriber has procedures, else SQL (seed 001: the default for
    subscribers that are not SQL Server). A procedure where there are none is refused.

    ``fold``: the subscriber's rule for unquoted identifiers (PostgreSQL: lower case). A procedure name
    is written as in SQL: ``sp_MSupd_PurchasingVendor`` for table ``purchasing.vendor`` is the
    generated procedure's name; any other name is a custom procedure, folded the same way."""
    spec = parse_command(text, op, table)
    if spec is not None and spec.procedure is not None and spec.uses_procedure and fold is not None and procedures:
        name, default = spec.procedure, default_procedure(op, table)
        same_schema = name.schema is None or fold(name.schema) == fold(table.schema or name.schema)
        if fold(name.name) == fold(default) and same_schema:
            spec = CallSpec(op, spec.syntax, TableName(None, default), True)
        else:
            spec = CallSpec(op, spec.syntax, TableName(fold(name.schema) if name.schema else None, fold(name.name)),
                            False)
    if spec is None:
        if not procedures:
            return CallSpec(op, "SQL")
        return CallSpec(op, DEFAULT_SYNTAX[op], TableName(None, default_procedure(op, table)), True)
    if spec.uses_procedure and not procedures:
        raise CommandSyntaxError(f"{op}_cmd {str(spec)!r}: this subscriber has no stored procedures; use \"SQL\" "
                                 "(or \"NONE\")")
    return spec


# -- parameter layouts ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Parameter:
    name: str          # c1.., pkc1.., old_c1.., bitmap
    column: str | None  # the article column it carries (None: the bitmap)


def bitmap_length(columns: int) -> int:
    """Bytes of the changed-columns bitmap (seed 001's Vendor, 8 columns: binary(2))."""
    return columns // 8 + 1


def bit_of(k: int) -> tuple[int, int]:
    """Column k (1-based) -> (byte index, bit value): c1 = byte 0 & 1, ..., c8 = & 128, c9 = byte 1 & 1."""
    return (k - 1) // 8, 1 << ((k - 1) % 8)


def parameters(spec: CallSpec, columns: Sequence[str], key: Sequence[str]) -> list[Parameter]:
    """The procedure's parameters, in order, for ``spec`` over the article's published columns."""
    cs = [Parameter(f"c{i}", c) for i, c in enumerate(columns, 1)]
    pks = [Parameter(f"pkc{i}", c) for i, c in enumerate(key, 1)]
    old = [Parameter(f"old_c{i}", c) for i, c in enumerate(columns, 1)]
    bitmap = [Parameter("bitmap", None)]
    layouts = {
        ("ins", "CALL"): cs,
        ("upd", "CALL"): cs + pks,
        ("upd", "SCALL"): cs + pks + bitmap,
        ("upd", "MCALL"): cs + pks + bitmap,
        ("upd", "XCALL"): old + cs,
        ("del", "CALL"): pks,
        ("del", "XCALL"): old,
    }
    try:
        return layouts[(spec.op, spec.syntax)]
    except KeyError:
        raise CommandSyntaxError(f"{spec.syntax} has no parameter layout for {OP_WORDS[spec.op]}s") from None


def changed_columns(columns: Sequence[str], before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[bool]:
    """Which columns an update changed (no before image: every column counts as changed)."""
    if before is None:
        return [True] * len(columns)
    return [_differs(before.get(c), after.get(c)) for c in columns]


def _differs(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:   # NaN stays NaN
        return False
    return a != b


def bitmap(changed: Sequence[bool]) -> bytes:
    out = bytearray(bitmap_length(len(changed)))
    for k, flag in enumerate(changed, 1):
        if flag:
            byte, bit = bit_of(k)
            out[byte] |= bit
    return bytes(out)


def arguments(spec: CallSpec, columns: Sequence[str], key: Sequence[str], before: Mapping[str, Any] | None,
              after: Mapping[str, Any] | None) -> list[Any]:
    """The values to pass for one command (``before``/``after``: {column: value})."""
    after = after or {}
    # (the bitmap and SCALL's unchanged columns: only SCALL and MCALL read which columns changed)
    changed = changed_columns(columns, before, after) if spec.syntax in ("SCALL", "MCALL") else []
    original = before if before is not None else after
    out: list[Any] = []
    for p in parameters(spec, columns, key):
        if p.column is None:
            out.append(bitmap(changed))
        elif p.name.startswith("old_c"):
            out.append((before or {}).get(p.column))
        elif p.name.startswith("pkc"):
            out.append(original.get(p.column))
        elif spec.syntax == "SCALL" and not changed[int(p.name[1:]) - 1]:
            out.append(None)
        else:
            out.append(after.get(p.column))
    return out


@dataclass(frozen=True)
class ProcedureShape:
    """A generated procedure, database-neutral: what a dialect needs to write it (seed 001's layouts)."""

    procedure: TableName               # schema None: the table's schema
    table: TableName
    op: str                            # "ins" | "upd" | "del"
    syntax: str                        # CALL | SCALL | MCALL | XCALL
    params: tuple[tuple[str, str | None], ...]    # (parameter name, its column; None: the bitmap)
    defaults: bool                     # parameters default to NULL (SCALL passes only the changed columns)
    key: tuple[tuple[str, int], ...]   # (key column, number of the parameter holding its original value)
    columns: tuple[tuple[str, int, int], ...]     # (column, byte, bit) in the changed-columns bitmap


def procedure_shape(spec: CallSpec, table: TableName, columns: Sequence[str], key: Sequence[str]) -> ProcedureShape:
    """The shape of the generated procedure of ``spec`` for a table with ``columns`` and primary ``key``."""
    assert spec.procedure is not None
    index = {c: i for i, c in enumerate(columns, 1)}
    return ProcedureShape(
        procedure=spec.procedure, table=table, op=spec.op, syntax=spec.syntax,
        params=tuple((p.name, p.column) for p in parameters(spec, columns, key)),
        defaults=spec.syntax == "SCALL",
        key=tuple((k, index[k] if spec.syntax == "XCALL" else j) for j, k in enumerate(key, 1)),
        columns=tuple((c, *bit_of(i)) for i, c in enumerate(columns, 1)))


def procedure_statements(dialect, spec: CallSpec, table: TableName, columns: Sequence[tuple[str, Any]],
                         key: Sequence[str]) -> list[str]:
    """The statements creating ``spec``'s generated procedure at a subscriber of ``dialect``
    (``columns``: (name, SqlType))."""
    shape = procedure_shape(spec, table, [c for c, _ in columns], key)
    return dialect.render_procedure(shape, dict(columns))
