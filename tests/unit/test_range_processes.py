"""A big batch's COPY lines made by forked processes (``transactional/delivery/bulk_text._ranges_at_once``): whatever a
child does (succeeds, fails, hangs) the caller gets every range made, or the error the range raises
when made here, and no child or descriptor is left behind."""

from __future__ import annotations

import os
import time

import pytest

from sparksync.transactional.delivery import bulk_text
from sparksync.transactional.delivery.bulk_text import _ranges_at_once, _Staged

BIG = 1 << 20        # more than a pipe holds: a child blocks on its write until it is read


def staged(aid, lines, counts, waves):
    s = _Staged(None)
    s.lines, s.counts, s.waves = [lines], counts, waves
    return s


def made(tag: str) -> dict[int, _Staged]:
    s = _Staged(None)
    s.lines, s.counts, s.waves = [tag.encode() * (BIG // len(tag))], {("upd", 1): len(tag)}, 1
    return {7: s}


def fds() -> set[int]:
    return {int(x) for x in os.listdir("/proc/self/fd")}


def forked(monkeypatch) -> list[int]:
    pids: list[int] = []
    real = bulk_text._fork

    def fork(*a):
        child = real(*a)
        pids.append(child[0] if child else None)
        return child
    monkeypatch.setattr(bulk_text, "_fork", fork)
    return pids


def gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_every_range_comes_back_in_order(monkeypatch):
    pids = forked(monkeypatch)
    before = fds()
    out = _ranges_at_once(made, staged, ["a", "b", "c", "d"])
    assert [b"".join(r[7].lines)[:1] for r in out] == [b"a", b"b", b"c", b"d"]
    assert all(len(b"".join(r[7].lines)) == BIG for r in out) and out[2][7].counts == {("upd", 1): 1}
    assert len(pids) == 3 and all(gone(p) for p in pids) and fds() == before


def test_a_range_that_fails_raises_here_and_no_child_is_left_behind(monkeypatch):
    """Range 1 fails in its child, is made here again and raises: the children of ranges 2 and 3, blocked
    on their full pipes, are collected all the same."""
    pids = forked(monkeypatch)
    before = fds()

    def make(tag):
        if tag == "bad":
            raise ValueError("a damaged message")
        return made(tag)
    with pytest.raises(ValueError, match="damaged"):
        _ranges_at_once(make, staged, ["ok", "bad", "ok", "ok"])
    assert len(pids) == 3 and all(gone(p) for p in pids) and fds() == before


@pytest.mark.timeout(120)
def test_a_child_that_hangs_is_killed_and_its_range_made_here(monkeypatch):
    pids = forked(monkeypatch)
    parent = os.getpid()
    monkeypatch.setattr(bulk_text, "CHILD_SECONDS", 2)

    def make(tag):
        while tag == "hang" and os.getpid() != parent:
            time.sleep(1)            # forever: only the kill ends it
        return made(tag)
    out = _ranges_at_once(make, staged, ["a", "hang"])
    assert b"".join(out[1][7].lines)[:1] == b"h" and all(gone(p) for p in pids)


def test_a_child_keeps_no_descriptor_of_the_parent(tmp_path):
    with open(tmp_path / "held", "w") as held:          # stands for a connection's socket
        def make(tag):
            s = _Staged(None)
            s.lines, s.counts, s.waves = [" ".join(map(str, sorted(fds()))).encode()], {}, 1
            return {1: s}
        out = _ranges_at_once(make, staged, ["here", "child"])
        in_child = {int(x) for x in b"".join(out[1][1].lines).split()}
        assert held.fileno() in fds() and held.fileno() not in in_child
        assert len(in_child - {0, 1, 2}) <= 2      # past the standard streams: its pipe, and the listing's own
