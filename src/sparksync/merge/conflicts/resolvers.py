"""Conflict resolvers: pure, deterministic functions. Same conflict, same answer, on any node.

A conflict is always seen as the *publisher's* version against the *subscriber's* version (never
"local" against "incoming"), so a resolver decides the same way at the publisher during upload and at
the subscriber during download.

Built in (article option ``resolver``): ``default`` (SQL Server's priorities), ``subscriber_wins``,
``later_wins`` / ``earlier_wins`` (a datetime ``resolver_column``), ``maximum`` / ``minimum`` (a numeric
``resolver_column``), ``additive`` / ``averaging`` (column tracking only). Anything else is a dotted
path ``package.module:function`` (or ``package.module.function``) to a user callable::

    def resolve(publisher_row: dict | None, subscriber_row: dict | None, conflict_type: str) -> ...

returning ``"publisher"``, ``"subscriber"``, a merged row (dict), or ``None`` (the row is deleted).
"""

from __future__ import annotations

import decimal
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sparksync.config import PUBLISHER_PRIORITY, PublicationConfig, Topology
from sparksync.errors import ConfigurationError, SparksyncError
from sparksync.merge.tracking.lineage import Lineage, last_writer
from sparksync.user_code import import_named

BUILTIN = ("default", "subscriber_wins", "later_wins", "earlier_wins", "maximum", "minimum", "additive", "averaging")
NEEDS_COLUMN = ("later_wins", "earlier_wins", "maximum", "minimum", "additive", "averaging")
COLUMN_TRACKING_ONLY = ("additive", "averaging")


@dataclass(frozen=True)
class Replicas:
    """Who is who: the publisher's nickname and every subscription's priority and type."""

    publisher: int
    priority: Mapping[int, float]      # nickname -> priority (global subscriptions)
    local: frozenset[int]              # nicknames of local (client) subscriptions
    names: Mapping[int, str]

    def name(self, nickname: int | None) -> str:
        return self.names.get(nickname, f"replica {nickname}") if nickname is not None else "snapshot"

    def version_priority(self, lineage: Lineage, reached_publisher: bool) -> float:
        """The priority a row version carries: its last writer's. The publisher's is 100; a local
        subscription's change takes the publisher's priority when it reaches the publisher."""
        w = last_writer(lineage)
        if w is None or w == self.publisher:
            return PUBLISHER_PRIORITY
        if w in self.local:
            return PUBLISHER_PRIORITY if reached_publisher else 0.0
        return float(self.priority.get(w, 0.0))


@dataclass(frozen=True)
class Side:
    """One version in a conflict. ``values`` is None for a deleted row."""

    values: dict[str, Any] | None
    lineage: Lineage
    priority: float
    replica: str


@dataclass(frozen=True)
class Resolution:
    winner: str                         # "publisher" | "subscriber" | "merged"
    values: dict[str, Any] | None       # the winning (or merged) row; None = deleted
    reason: str


def _by_priority(pub: Side, sub: Side) -> Resolution:
    if sub.priority > pub.priority:
        return Resolution("subscriber", sub.values, f"priority {sub.priority:g} of {sub.replica} beats "
                                                    f"{pub.priority:g} of {pub.replica}")
    why = ("equal priority: the version that reached the publisher first wins" if sub.priority == pub.priority
           else f"priority {pub.priority:g} of {pub.replica} beats {sub.priority:g} of {sub.replica}")
    return Resolution("publisher", pub.values, why)


_WIDE = decimal.Context(prec=80)


def _comparable(v: Any) -> Any:
    if isinstance(v, (int, float, decimal.Decimal)) and not isinstance(v, bool):
        return decimal.Decimal(str(v))
    return v


def _is_null(v: Any) -> bool:
    """NULL, and a float NaN (which has no order), lose to any value."""
    return v is None or (isinstance(v, (float, decimal.Decimal)) and v != v)


def _by_column(pub: Side, sub: Side, column: str, prefer_larger: bool, label: str) -> Resolution:
    if pub.values is None or sub.values is None:
        return _by_priority(pub, sub)
    a, b = pub.values.get(column), sub.values.get(column)
    if _is_null(a) and _is_null(b) or a == b:
        return _by_priority(pub, sub)
    if _is_null(a):
        return Resolution("subscriber", sub.values, f"{label}: {column} is NULL at {pub.replica}")
    if _is_null(b):
        return Resolution("publisher", pub.values, f"{label}: {column} is NULL at {sub.replica}")
    sub_better = (_comparable(b) > _comparable(a)) == prefer_larger
    if sub_better:
        return Resolution("subscriber", sub.values, f"{label}: {column} {b} at {sub.replica} vs {a}")
    return Resolution("publisher", pub.values, f"{label}: {column} {a} at {pub.replica} vs {b}")


def _arith(pub: Side, sub: Side, column: str, average: bool) -> Resolution:
    base = _by_priority(pub, sub)
    if pub.values is None or sub.values is None:
        return base
    a, b = pub.values.get(column), sub.values.get(column)
    if a is None or b is None:
        value = a if b is None else b
    else:
        with decimal.localcontext(_WIDE):
            total = _comparable(a) + _comparable(b)
            value = total / 2 if average else total
        if isinstance(a, int) and isinstance(b, int):
            value = int(value)
        elif isinstance(a, float) or isinstance(b, float):
            value = float(value)
    merged = dict(base.values or {})
    merged[column] = value
    return Resolution("merged", merged, f"{'averaging' if average else 'additive'}: {column} = {value} "
                                        f"({a} at {pub.replica}, {b} at {sub.replica}); other columns: {base.reason}")


def load_callable(path: str, search: str | None = None) -> Callable:
    """The user resolver ``package.module:function``. Modules are imported from ``search`` (the folder
    of the configuration file, put first on the module path, in the driver and in the Spark workers
    alike) and from the installed packages; not from the current directory by design of the config."""
    fn = import_named(path, search, "resolver")
    if not callable(fn):
        raise ConfigurationError(f"resolver {path!r} is not callable", obj=path)
    return fn


def check_user_resolver(path: str, search: str | None = None) -> str | None:
    """Why the user resolver ``path`` cannot be used (import, callable, signature), or None."""
    try:
        fn = load_callable(path, search)
    except ConfigurationError as e:
        return e.message
    try:
        inspect.signature(fn).bind(None, None, "update")
    except TypeError:
        return f"resolver {path!r} must take (publisher_row, subscriber_row, conflict_type)"
    except ValueError:
        pass    # no signature to inspect (a builtin): taken as is
    return None


class ResolverFailed(SparksyncError):
    """A user resolver raised or returned something that is not a resolution: that change fails
    (a failed change, tried again at the next merge), the rest of the batch goes on."""

    code = "resolver_failed"


def _user(path: str, pub: Side, sub: Side, conflict_type: str, search: str | None = None) -> Resolution:
    try:
        fn = load_callable(path, search)
        out = fn(None if pub.values is None else dict(pub.values),
                 None if sub.values is None else dict(sub.values), conflict_type)
    except ConfigurationError as e:
        raise ResolverFailed(e.message, obj=path) from None
    except Exception as e:  # noqa: BLE001 - the user's code: any failure is this change's
        raise ResolverFailed(f"resolver {path} failed: {type(e).__name__}: {e}", obj=path) from None
    if out == "publisher":
        return Resolution("publisher", pub.values, f"{path} chose the publisher's version")
    if out == "subscriber":
        return Resolution("subscriber", sub.values, f"{path} chose the subscriber's version")
    if out is None:
        return Resolution("merged", None, f"{path} deleted the row")
    if isinstance(out, Mapping):
        columns = set((pub.values or sub.values or {}).keys())
        unknown = sorted(set(out) - columns) if columns else []
        if unknown:
            raise ResolverFailed(f"resolver {path} returned a row with unknown column(s) {', '.join(map(str, unknown))}",
                                 obj=path)
        return Resolution("merged", dict(out), f"{path} merged the row")
    raise ResolverFailed(f"resolver {path} returned {out!r:.60}; expected 'publisher', 'subscriber', a dict or None",
                         obj=path)


def resolve(resolver: str, column: str | None, pub: Side, sub: Side, conflict_type: str,
            search: str | None = None) -> Resolution:
    """Pick the winner of a conflict between the publisher's and the subscriber's version of a row."""
    if resolver in ("default", "", None):
        return _by_priority(pub, sub)
    if resolver == "subscriber_wins":
        return Resolution("subscriber", sub.values, "subscriber always wins")
    if resolver not in BUILTIN:
        return _user(resolver, pub, sub, conflict_type, search)
    if column is None:                      # setup checks resolver_column: a damaged publication row
        raise ResolverFailed(f"resolver {resolver!r} has no resolver_column", obj=resolver)
    if resolver in ("later_wins", "earlier_wins"):
        return _by_column(pub, sub, column, resolver == "later_wins", resolver.replace("_", " "))
    if resolver in ("maximum", "minimum"):
        return _by_column(pub, sub, column, resolver == "maximum", resolver)
    if resolver in ("additive", "averaging"):
        if conflict_type not in ("update", "column update"):
            return _by_priority(pub, sub)
        return _arith(pub, sub, column, resolver == "averaging")
    raise AssertionError(f"built-in resolver {resolver!r} without a rule")


def check_resolver(resolver: str, column: str | None, column_tracking: bool, columns: list[str]) -> list[str]:
    """Configuration problems of an article's resolver settings (empty when fine)."""
    problems = []
    if resolver in NEEDS_COLUMN and not column:
        problems.append(f"resolver {resolver} needs resolver_column")
    if column and columns and column not in columns:
        problems.append(f"resolver_column {column!r} is not a column of the table")
    if resolver in COLUMN_TRACKING_ONLY and not column_tracking:
        problems.append(f"resolver {resolver} works with column_tracking = true only")
    return problems


def check_resolvers(topology: Topology, pubcfg: PublicationConfig) -> None:
    """Every user resolver of the publication imports, is callable and takes the three arguments; one
    error lists every problem (setup and the merge agent both check, before anything changes)."""
    search = str(topology.base_dir)
    problems = [f"publications ({pubcfg.name}).articles ({a.table}).resolver: {why}" for a in pubcfg.articles
                if a.resolver not in BUILTIN and (why := check_user_resolver(a.resolver, search))]
    if problems:
        raise ConfigurationError(f"publication {pubcfg.name}: resolvers cannot be used", problems, obj=pubcfg.name)
