"""The set-based apply of a batch of a PostgreSQL publisher's changes at a PostgreSQL subscriber: the
values go into a typed staging table in the text form the publisher's log holds them in, unparsed.

The changes are stored as the server's messages (``decoding.py``), whose column values are
PostgreSQL's text form, which is exactly what ``COPY ... FROM STDIN`` reads. So a batch is staged
without a value ever becoming a Python object or JSON: each article's commands become lines of a
text COPY into a temporary table typed like the subscriber's table (``k<i>``: the row's key before
the change, ``c<i>``: each column after it; ``chg``: which columns an update changed, for SCALL and
MCALL), and the same statements as the JSON staging (``bulk.py``) run as plain joins of typed
columns. Waves (the commands of one row, in order) and a moved primary key are found while the
lines are written, by the key's text.

Making the lines is the Python half of the work (about 4 µs a change). A batch of at least twice
``RANGE_COMMANDS`` commands is cut into consecutive ranges, at most one per core this process may run
on and at most the delivery's share of the cores (``processes``: the round's other deliveries run at
the same time), whose lines are made at once: the first here, each other by a process forked for it
(it inherits the commands, so nothing is sent to it but its result back; it keeps no descriptor of
this process but its pipe). The ranges are applied one after the other, each with its own waves, in
the batch's one transaction: a row's commands stay in order.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import re
import select
import signal
import time
import zlib
from collections.abc import Sequence
from typing import Any

from sparksync.dialects.postgres import pgoutput as po
from sparksync.dialects.replica import Replica
from sparksync.errors import RowNotFound
from sparksync.ordering import dri_order
from sparksync.transactional.delivery.decoding import Shape
from sparksync.transactional.delivery.subscriber import ArticleTarget, Command

_SPECIAL = re.compile(rb"[\\\n\r\t]")
_ESCAPES = {b"\\": b"\\\\", b"\n": b"\\n", b"\r": b"\\r", b"\t": b"\\t"}
NULL = b"\\N"
_OPS = {"ins": b"ins", "upd": b"upd", "del": b"del"}


def _escape(v: bytes) -> bytes:
    """One value as a field of COPY's text format."""
    if _SPECIAL.search(v) is None:
        return v
    return _SPECIAL.sub(lambda m: _ESCAPES[m.group()], v)


_UNCHANGED = b"\x00unchanged"     # a TOASTed value an update kept (no COPY field is ever this: text has no NUL)


def _fields(data: bytes) -> tuple[list[bytes] | None, list[bytes] | None]:
    """An Insert / Update / Delete message -> (old tuple, new tuple) as COPY fields."""
    # escaped one by one only when the message holds such a byte (a length may hold one too)
    escape = _escape if _SPECIAL.search(data) is not None else None
    kind, _, old, _, new = po.read_change(data, NULL, _UNCHANGED, escape)
    if old is None and kind != "I":
        raise po.ProtocolError("an update or delete without its before image")
    return old, new


class _Staged:
    """One article's commands of the batch, as COPY lines: how many per (operation, wave)."""

    def __init__(self, t: ArticleTarget):
        self.t = t
        self.table = ""
        self.lines: list[bytes] = []
        self.counts: dict[tuple[str, int], int] = {}
        self.waves = 1


class TextBatch:
    """A batch made into COPY lines (:meth:`TextStaging.prepare`: Python only, no statement), ready to be
    loaded and applied on a connection (:meth:`TextStaging.execute`): per range of the batch's commands,
    in order, each article's lines. ``moved``: an update moves a primary key, so the batch goes command
    by command."""

    def __init__(self) -> None:
        self.ranges: list[dict[int, _Staged]] = []
        self.moved = False


class TextStaging:
    """Stages and applies batches of undecoded changes on one PostgreSQL connection (inside the
    caller's transaction)."""

    def __init__(self, replica: Replica, targets: dict[int, ArticleTarget], processes: int = 1):
        self.replica, self.targets, self.d = replica, targets, replica.dialect
        self.processes = processes          # how many processes may make a big batch's lines at once
        self._positions: dict[tuple[int, int], tuple[list[int | None], list[int | None]]] = {}

    def _where(self, t: ArticleTarget, shape: Shape) -> tuple[list[int | None], list[int | None]]:
        """Where the subscriber's columns and key are in this shape's tuples (None: not there)."""
        k = (id(shape), t.article_id)
        p = self._positions.get(k)
        if p is None:
            at = {c.name: i for i, c in enumerate(shape.cols)}
            p = self._positions[k] = ([at.get(c) for c, _ in t.columns], [at.get(c) for c in t.key])
        return p

    def apply(self, commands: Sequence[Command], replicated: set[tuple[int, str]]) -> bool:
        """Apply ``commands`` (every one of them a stored message; checked by the caller). Returns False,
        having changed no user table, when an update moves a primary key (the caller goes command by
        command); raises on any failure (the caller rolls back)."""
        return self.execute(self.prepare(commands, replicated))

    def prepare(self, commands: Sequence[Command], replicated: set[tuple[int, str]]) -> TextBatch:
        """The batch's COPY lines, article by article: the Python half of :meth:`apply`, which a caller may
        run while other connections execute theirs (subscription streams). A big batch is cut into
        consecutive ranges of its commands whose lines are made at once, up to ``processes`` processes
        (:func:`_ranges_at_once`); the ranges are applied one after the other, in order."""
        batch = TextBatch()
        todo = [c for c in commands if (c.article_id, c.type) in replicated]
        n = _ranges_for(len(todo), self.processes)
        cut = [todo[len(todo) * k // n:len(todo) * (k + 1) // n] for k in range(n)]
        made = _ranges_at_once(self._range, self._staged, cut) if n > 1 else [self._range(todo)]
        batch.moved = any(r is None for r in made)
        batch.ranges = [r for r in made if r]
        return batch

    def _range(self, commands: Sequence[Command]) -> dict[int, _Staged] | None:
        """One range of a batch's commands as each article's COPY lines (None: an update moves a key)."""
        per: dict[int, list[Command]] = {}
        for c in commands:
            per.setdefault(c.article_id, []).append(c)
        out: dict[int, _Staged] = {}
        for aid, cs in per.items():
            t = self.targets[aid]
            staged = out[aid] = _Staged(t)
            lines = self._lines(t, cs, staged, t.upd.syntax in ("SCALL", "MCALL"))
            if lines is None:
                return None
            staged.lines = lines
        return out

    def _staged(self, aid: int, lines: bytes, counts: dict[tuple[str, int], int], waves: int) -> _Staged:
        """An article's part of a range made by another process (its lines as one bytes object)."""
        out = _Staged(self.targets[aid])
        out.lines, out.counts, out.waves = [lines], counts, waves
        return out

    def execute(self, batch: TextBatch) -> bool:
        """Load a prepared batch into the staging tables and apply it, range after range and wave by wave
        (inside the caller's transaction). False, having changed nothing: the batch must go command by
        command."""
        if batch.moved:
            return False
        if not batch.ranges:
            return True
        self.replica.execute("SET LOCAL jit = off")      # no statistics on the staging: costs would pass its threshold
        for staged in batch.ranges:
            for s in staged.values():
                self._load(s)
            articles = list(staged)
            order = dri_order(articles, {aid: self.targets[aid].parents for aid in articles})
            for wave in range(1, max(s.waves for s in staged.values()) + 1):
                for aid in reversed(order):
                    self._run(staged[aid], "del", wave)
                for aid in order:
                    self._run(staged[aid], "upd", wave)
                    self._run(staged[aid], "ins", wave)
        return True

    # -- staging -----------------------------------------------------------------------------------
    def _load(self, s: _Staged) -> None:
        d, r, t = self.d, self.replica, s.t
        # one table per article and shape of it, kept by the connection (emptied at every commit)
        shape = zlib.crc32(repr((t.table, t.key, t.columns)).encode())
        s.table = name = d.quote(f"sparksync_tx_text_{int(t.article_id)}_{shape:08x}")
        q = d.quote
        keys = ", ".join(f"t.{q(k)} AS k{i}" for i, k in enumerate(t.key))
        cols = ", ".join(f"t.{q(c)} AS c{i}" for i, (c, _) in enumerate(t.columns))
        r.execute(f"CREATE TEMP TABLE IF NOT EXISTS {name} ON COMMIT DELETE ROWS AS SELECT 0::integer AS ord, "
                  f"''::text AS op, 0::integer AS wave, ''::text AS chg, {keys}, {cols} FROM {d.table_sql(t.table)} t "
                  "WITH NO DATA")
        r.execute(f"DELETE FROM {name}")
        columns = ["ord", "op", "wave", "chg"] + [f"k{i}" for i in range(len(t.key))] + \
            [f"c{i}" for i in range(len(t.columns))]
        d.copy_text_lines(r, name, columns, s.lines)

    def _lines(self, t: ArticleTarget, commands: list[Command], out: _Staged, bitmap: bool) -> list[bytes] | None:
        """The COPY lines of one article's commands (None: an update moves a primary key). The hot loop
        of a big batch: per command one pass over its message's tuples, one line."""
        seen: dict[Any, int] = {}
        ops: list[tuple[str, int]] = []
        lines = []
        empty = b"\t".join([NULL] * len(t.columns))
        not_key = [name not in t.key for name, _ in t.columns]
        shape = cpos = kpos = direct = None
        old: Any
        new: Any
        for n, c in enumerate(commands):
            change: Any = c.change
            if change.shape is not shape:
                shape = change.shape
                cpos, kpos = self._where(t, shape)
                if None in kpos:
                    return None                          # a key column the message lacks: command by command
                direct = cpos == list(range(len(shape.cols)))   # the tuple is the table's row, in order
            assert cpos is not None and kpos is not None
            old, new = _fields(change.data)
            op = c.type
            image = new if op == "ins" else old
            assert image is not None
            if len(kpos) == 1:
                key = image[kpos[0]]
                keys = key
                if op == "upd" and new[kpos[0]] != key:
                    return None                          # a primary key moved: command by command
            else:
                key = tuple(image[p] for p in kpos)
                keys = b"\t".join(key)
                if op == "upd" and any(new[p] != old[p] for p in kpos):
                    return None
            wave = seen.get(key, 0) + 1
            seen[key] = wave
            ops.append((op, wave))
            chg = b""
            if op == "del":
                values = empty
            else:
                if old is not None and _UNCHANGED in new:   # a TOASTed value the update kept: the before image's
                    new = [o if v is _UNCHANGED else v for o, v in zip(old, new)]
                values = b"\t".join(new if direct else [NULL if p is None else new[p] for p in cpos])
                if op == "upd" and bitmap:
                    chg = b"".join(b"1" if p is not None and nk and old[p] != new[p] else b"0"
                                   for p, nk in zip(cpos, not_key))
            lines.append(b"%d\t%b\t%d\t%b\t%b\t%b\n" % (n, _OPS[op], wave, chg, keys, values))
        for op_wave in ops:
            out.counts[op_wave] = out.counts.get(op_wave, 0) + 1
        out.waves = max(seen.values())
        return lines

    # -- statements --------------------------------------------------------------------------------
    def _run(self, s: _Staged, op: str, wave: int) -> None:
        n = s.counts.get((op, wave))
        if not n:
            return
        t, d, q = s.t, self.d, self.d.quote
        table = d.table_sql(t.table)
        mine = f"s.op = '{op}'" + (f" AND s.wave = {int(wave)}" if s.waves > 1 else "")
        match = " AND ".join(f"x.{q(k)} = s.k{i}" for i, k in enumerate(t.key))
        if op == "del":
            done = self.replica.execute(f"DELETE FROM {table} x USING {s.table} s WHERE {mine} AND {match}").rowcount
            self._check(t, "delete", n, done)
        elif op == "ins":
            names = ", ".join(q(c) for c, _ in t.columns)
            values = ", ".join(f"s.c{i}" for i in range(len(t.columns)))
            self.replica.execute(f"INSERT INTO {table} ({names}) SELECT {values} FROM {s.table} s WHERE {mine} "
                                 "ORDER BY s.ord")
        else:
            bitmap = t.upd.syntax in ("SCALL", "MCALL")
            sets = [f"{q(c)} = " + (f"CASE WHEN substr(s.chg, {i + 1}, 1) = '1' THEN s.c{i} ELSE x.{q(c)} END"
                                    if bitmap else f"s.c{i}")
                    for i, (c, _) in enumerate(t.columns) if c not in t.key]
            if not sets:       # every column is in the key: the row only has to exist
                found = self.replica.scalar(f"SELECT count(*) FROM {table} x JOIN {s.table} s ON {match} WHERE {mine}")
                self._check(t, "update", n, int(found or 0))
                return
            done = self.replica.execute(
                f"UPDATE {table} x SET {', '.join(sets)} FROM {s.table} s WHERE {mine} AND {match}").rowcount
            self._check(t, "update", n, done)

    def _check(self, t: ArticleTarget, what: str, expected: int, done: int | None) -> None:
        if done is not None and 0 <= done < expected:
            raise RowNotFound(f"{self.replica.label}: {expected - done} of {expected} {what}s of {t.name} found no "
                              "row (20598)")


# -- a big batch's lines, made by one process per core ----------------------------------------------------

RANGE_COMMANDS = 50_000      # a batch is cut into ranges of at least this many commands, at most one per core


def _ranges_for(commands: int, processes: int) -> int:
    """Into how many ranges a batch of ``commands`` is cut: at most ``processes`` and one per core this
    process may run on, each of at least ``RANGE_COMMANDS`` (1: the batch is made here, in one go)."""
    if commands < 2 * RANGE_COMMANDS or processes < 2 or not hasattr(os, "fork"):
        return 1
    return max(1, min(processes, _cores(), commands // RANGE_COMMANDS))


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


CHILD_SECONDS = 600          # a child that has not sent its range by then is killed, its range made here


def _ranges_at_once(make, staged, ranges: list) -> list:
    """``make(range)`` of every range, the first here and each other in a process forked for it (which
    inherits the commands: nothing is sent to it), its result sent back through a pipe as one bytes
    object per article. A child that fails, dies or hangs has its range made here again, so an error
    is raised as if it had been made here; whatever happens, every child is waited for before this
    returns or raises. The collector is frozen across the forks: a child never finalizes an object of
    this process (a connection it would close under the parent's feet)."""
    children: list[tuple[int, int] | None] = []
    try:
        gc.freeze()
        try:
            for k in range(1, len(ranges)):
                children.append(_fork(make, ranges[k]))
        finally:
            gc.unfreeze()
        results = [make(ranges[0])]
        for k in range(1, len(ranges)):
            got = _collect(children[k - 1], staged)
            children[k - 1] = None
            results.append(got if got is not _FAILED else make(ranges[k]))   # (an error is raised here)
        return results
    finally:
        for child in children:           # on an error: the children left are collected (their result dropped)
            if child is not None:
                _collect(child, staged)


_FAILED = object()


def _fork(make, commands) -> tuple[int, int] | None:
    """A child that makes ``commands``' lines and writes them (pickled) to a pipe: (pid, read end), or
    None when no process could be made (the range is then made here)."""
    try:
        r, w = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if pid:
        os.close(w)
        return pid, r
    code = 1
    try:                                 # the child: nothing here may return to the caller's code
        # only its pipe: not the parent's connections, nor the read ends of its siblings' pipes
        os.closerange(3, w)
        os.closerange(w + 1, _max_fd())
        made = make(commands)
        out = None if made is None else {aid: (b"".join(s.lines), s.counts, s.waves) for aid, s in made.items()}
        with os.fdopen(w, "wb") as f:
            pickle.dump(("ok", out), f, protocol=pickle.HIGHEST_PROTOCOL)
        code = 0
    finally:
        os._exit(code)


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (ValueError, OSError):
        return 65536


def _collect(child: tuple[int, int] | None, staged):
    """A child's range (as ``make`` returns it; ``staged`` makes each article's part), or ``_FAILED``."""
    if child is None:
        return _FAILED
    pid, r = child
    data, deadline = [], time.monotonic() + CHILD_SECONDS
    try:
        while True:
            ready, _, _ = select.select([r], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:                # hung: killed, and its range made here
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                return _FAILED
            chunk = os.read(r, 1 << 20)
            if not chunk:
                break
            data.append(chunk)
    finally:
        os.close(r)
        with contextlib.suppress(ChildProcessError):    # reaped already (SIGCHLD ignored): its pipe tells
            os.waitpid(pid, 0)
    try:
        tag, out = pickle.loads(b"".join(data))    # all of it, or the child died on the way
    except Exception:  # noqa: BLE001 - an incomplete result: the range is made again by the caller
        return _FAILED
    if tag != "ok":
        return _FAILED
    if out is None:
        return None
    return {aid: staged(aid, lines, counts, waves) for aid, (lines, counts, waves) in out.items()}
