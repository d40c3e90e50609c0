"""The progress side channel: events sent from a task reach the driver's listener."""

from __future__ import annotations

import time

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


def test_sending_never_raises():
    send_progress(None, {"x": 1})                             # no listener: nothing to do
    send_progress(("127.0.0.1", 9), {"x": object()})          # unserializable values become text
    send_progress(("no-such-host.invalid", 1), {"x": 1})      # unreachable: silently lost


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
