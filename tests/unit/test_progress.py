"""The progress side channel: events sent from a task reach the driver's listener."""

from __future__ import annotations

import time
from pathlib import Path

from sparksync.progress import ProgressListener, send_progress


def test_events_reach_the_listener_in_order():
    got = []
    with ProgressListener(got.append) as listener:
        for i in range(5):
            send_progress(listener.address, {"batch": i, "article": "Customer"})
        deadline = time.time() + 2
        while len(got) < 5 and time.time() < deadline:
            time.sleep(0.01)
    assert [e["batch"] for e in got] == [0, 1, 2, 3, 4]


def _wait_for(got: list, n: int) -> None:
    deadline = time.time() + 2
    while len(got) < n and time.time() < deadline:
        time.sleep(0.01)


def test_an_unserializable_value_arrives_as_text():
    got = []
    with ProgressListener(got.append) as listener:
        send_progress(listener.address, {"x": Path("/tmp/a b")})
        _wait_for(got, 1)
    assert got == [{"x": "/tmp/a b"}]


def test_no_listener_or_an_unreachable_one_loses_the_event_without_raising():
    got = []
    with ProgressListener(got.append) as listener:
        assert send_progress(None, {"n": 1}) is None                          # no listener: nothing to do
        assert send_progress(("no-such-host.invalid", 1), {"n": 2}) is None   # unreachable: silently lost
        send_progress(listener.address, {"n": 3})                            # and the next one still goes
        _wait_for(got, 1)
    assert got == [{"n": 3}]


def test_a_failing_callback_loses_one_event_not_the_listener():
    got = []

    def on_event(e):
        if e["n"] == 1:
            raise RuntimeError("boom")
        got.append(e["n"])

    with ProgressListener(on_event) as listener:
        for n in range(3):
            send_progress(listener.address, {"n": n})
        deadline = time.time() + 2
        while len(got) < 2 and time.time() < deadline:
            time.sleep(0.01)
    assert got == [0, 2]
