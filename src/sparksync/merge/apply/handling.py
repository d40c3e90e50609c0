"""Business logic handlers at a destination (``sparksync.handlers``): an article's handler loaded (and checked at
setup, as resolvers are), and called for the rows a batch applies of it: what it answers turned into the apply's own
terms (a change rejected, a custom row, a conflict's winner, an error's custom row), what it raises or returns amiss
into a failed change naming it (``HandlerFailed``), never a failed batch."""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from typing import Any

from sparksync.config import PublicationConfig, Topology
from sparksync.errors import ConfigurationError, SparksyncError
from sparksync.handlers import (
    Accept,
    AcceptPublisher,
    AcceptSubscriber,
    BusinessLogicHandler,
    Custom,
    Default,
    HandlerContext,
    Reject,
)
from sparksync.types import SqlType, ValueError_, rows_to_record_batch
from sparksync.user_code import import_named

ACCEPT = Accept()
DEFAULT_TIMEOUT_S = 2.0      # business_logic_timeout_s: how long one call of a handler may take


class HandlerFailed(SparksyncError):
    """A handler raised, or answered what its method may not: that row is a failed change (tried again at the next
    merge), the rest of the batch goes on."""

    code = "handler_failed"


@functools.cache
def load_handler(path: str, search: str | None = None) -> BusinessLogicHandler:
    """The handler ``module:Class`` (one instance per process), imported from ``search`` (the configuration's
    folder, first on the module path, in the driver and in Spark's workers alike) or the installed packages."""
    cls = import_named(path, search, "business logic handler")
    if not (isinstance(cls, type) and issubclass(cls, BusinessLogicHandler)):
        raise ConfigurationError(f"business logic handler {path!r} is not a subclass of "
                                 "sparksync.handlers.BusinessLogicHandler", obj=path)
    try:
        handler = cls()
    except Exception as e:  # noqa: BLE001 - the user's constructor
        raise ConfigurationError(f"business logic handler {path!r} cannot be made: {type(e).__name__}: {e}",
                                 obj=path) from None
    for method in BusinessLogicHandler.METHODS:
        if hasattr(handler, method) and not callable(getattr(handler, method)):
            raise ConfigurationError(f"business logic handler {path!r}: {method} is not a method", obj=path)
    return handler


def check_handlers(topology: Topology, pubcfg: PublicationConfig) -> None:
    """Every handler of the publication imports and is a ``BusinessLogicHandler``; one error lists every problem
    (setup, the merge agent and the web door check, before anything changes)."""
    problems = []
    for a in pubcfg.articles:
        if a.business_logic:
            try:
                load_handler(a.business_logic, str(topology.base_dir))
            except ConfigurationError as e:
                problems.append(f"publications ({pubcfg.name}).articles ({a.table}).business_logic: {e.message}")
    if problems:
        raise ConfigurationError(f"publication {pubcfg.name}: business logic handlers cannot be used", problems,
                                 obj=pubcfg.name)


_MISSING = object()


class Handling:
    """One article's handler, for the rows of one batch at one destination (``ctx``: where they come from;
    ``columns``: the article's columns and their types, what a custom row is checked against).

    Its time is bounded: a call that runs past ``timeout_s`` fails its change, and every call of the batch not
    answered yet fails at once (tried again at the next merge or sync), so one slow handler holds nothing for
    long. Where the destination has one writer for the whole database (SQLite), the batch is rehearsed first
    (``rehearsal.py``): its handler calls are made before the write lock is taken, each answer kept
    (``remember``: a handler is a function of the rows it is given), and the apply then finds them."""

    def __init__(self, path: str, search: str | None, ctx: HandlerContext, columns: Mapping[str, SqlType],
                 timeout_s: float = DEFAULT_TIMEOUT_S):
        self.path, self.ctx, self.columns = path, ctx, dict(columns)
        self.handler = load_handler(path, search)
        self.timeout_s = timeout_s
        self.answers: dict[Any, Any] | None = None      # (method, rows) -> answer, once remembering
        self.overdue: str | None = None                 # why every call not answered yet fails at once
        self.calling: tuple[str, float] | None = None   # the call in progress: (method, when it started)

    def remember(self) -> None:
        """Keep every answer from now on, by the call's method and rows (a rehearsal's, found by the apply)."""
        if self.answers is None:
            self.answers = {}

    def overran(self) -> bool:
        """Whether the call in progress has run past the bound (a rehearsal's watchdog asks): if so, from now on
        every call not answered yet fails at once."""
        calling = self.calling
        if calling is None or time.monotonic() - calling[1] <= self.timeout_s:
            return False
        self.overdue = self._late(calling[0], f"did not answer within {self.timeout_s:g} s")
        return True

    def _late(self, method: str, what: str) -> str:
        return (f"business logic handler {self.path}.{method} {what} (business_logic_timeout_s = {self.timeout_s:g}): "
                "its change, and the batch's others it had not answered, fail and are tried again")

    def has(self, method: str) -> bool:
        return callable(getattr(self.handler, method, None))

    def handles_changes(self) -> bool:
        """Whether it looks at plain changes (else they are applied set-based, untouched)."""
        return any(self.has(m) for m in ("insert", "update", "delete"))

    def _call(self, method: str, *args: Any) -> Any:
        """The handler's ``method`` (None when it does not define it: the caller's default); its answer found
        when it was given these rows before (``remember``)."""
        fn = getattr(self.handler, method, None)
        if fn is None:
            return None
        answers, out = self.answers, _MISSING
        key: Any = None
        if answers is not None:      # the call's method and rows (their items; their text where a value cannot be hashed)
            key = (method, tuple(tuple(a.items()) if isinstance(a, dict) else a for a in args))
            try:
                out = answers.get(key, _MISSING)
            except TypeError:
                key = repr((method, args))
                out = answers.get(key, _MISSING)
        if out is _MISSING:
            out = self._answer(fn, method, args)
            if answers is not None:
                answers[key] = out
        if isinstance(out, HandlerFailed):
            raise out
        return out

    def _answer(self, fn: Any, method: str, args: tuple) -> Any:
        """One call, timed: what it returned, or the ``HandlerFailed`` its change gets (it raised, it ran past the
        bound, or an earlier call did)."""
        if self.overdue is not None:
            return HandlerFailed(self.overdue, obj=self.path)
        start = time.monotonic()
        self.calling = (method, start)
        try:
            out = fn(self.ctx, *args)
        except Exception as e:  # noqa: BLE001 - the user's code: any failure is this row's
            out = HandlerFailed(f"business logic handler {self.path}.{method} failed: {type(e).__name__}: {e}",
                                obj=self.path)
        finally:
            self.calling = None
        took = time.monotonic() - start
        if took > self.timeout_s:
            self.overdue = self.overdue or self._late(method, f"took {took:.1f} s")
            return HandlerFailed(self.overdue, obj=self.path)
        return out

    def _wrong(self, method: str, out: Any, expected: str) -> HandlerFailed:
        return HandlerFailed(f"business logic handler {self.path}.{method} returned {out!r:.80}; expected {expected}",
                             obj=self.path)

    def _row(self, method: str, out: Custom) -> dict[str, Any]:
        """A custom row's values, each checked against its column's type (a value that does not fit, or a column
        the article does not have, is the handler's failure, named, not the database's)."""
        import pyarrow as pa

        if not isinstance(out.row, Mapping):
            raise self._wrong(method, out, "Custom(row) with a dict of column -> value")
        columns = self.columns
        unknown = sorted(set(out.row) - set(columns))
        if unknown:
            raise HandlerFailed(f"business logic handler {self.path}.{method} returned a row with unknown column(s) "
                                f"{', '.join(map(str, unknown))}", obj=self.path)
        typed = [(str(n), columns[n]) for n in out.row]
        try:
            rows_to_record_batch([tuple(out.row.values())], typed, pa.schema([(n, t.to_arrow()) for n, t in typed]),
                                 f"business logic handler {self.path}.{method} returned a row that does not fit")
        except ValueError_ as e:
            raise HandlerFailed(str(e), obj=self.path) from None
        return dict(out.row)

    def change(self, method: str, row: dict[str, Any]) -> Accept | Reject | Custom:
        """``insert``, ``update`` or ``delete`` of a change that meets no conflict (Accept when not defined); a
        custom row holds every column (the ones it leaves out keep ``row``'s values). ``row`` is the handler's
        (made for it, not kept by the caller): called for every plain row, this path copies nothing."""
        out = self._call(method, row)
        if out is None or type(out) is Accept:
            return ACCEPT
        if isinstance(out, Reject):
            return out
        if isinstance(out, Custom):
            return Custom({**row, **self._row(method, out)})
        raise self._wrong(method, out, "Accept(), Reject() or Custom(row)")

    def conflict(self, method: str, args: tuple, base: dict[str, Any]):
        """``update_conflict`` or ``update_delete_conflict`` (Default when not defined); a custom row holds every
        column (the ones it leaves out keep ``base``'s values)."""
        out = self._call(method, *args)
        if out is None:
            return Default()
        if isinstance(out, Default | AcceptPublisher | AcceptSubscriber):
            return out
        if isinstance(out, Custom):
            return Custom({**base, **self._row(method, out)})
        raise self._wrong(method, out, "Default(), AcceptPublisher(), AcceptSubscriber() or Custom(row)")

    def error(self, row: dict[str, Any], message: str) -> Default | Custom:
        """``error``: a change the database refused (Default when not defined)."""
        out = self._call("error", dict(row), message)
        if out is None or isinstance(out, Default):
            return Default()
        if isinstance(out, Custom):
            return Custom({**row, **self._row("error", out)})
        raise self._wrong("error", out, "Default() or Custom(row)")
