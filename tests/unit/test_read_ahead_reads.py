"""The door's read ahead of a device's partition (``web/server/read_ahead.py``) as its requests use it, without a
server: a read of a large partition still under way when the same sync says ``hello`` again is kept (not cancelled
and queued behind by another), and a ``done`` sent again while the first waits gets the same read."""

from __future__ import annotations

import threading

import pytest

from sparksync.web.server import read_ahead
from sparksync.web.server.read_ahead import ReadAhead

PARTITION = ("pub", 7)


class SlowRead:
    """A read that ends when told to, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.started = threading.Event()
        self.finish = threading.Event()

    def __call__(self) -> dict:
        self.calls += 1
        self.started.set()
        assert self.finish.wait(30), "the test never let the read end"
        return {"Item": self.calls}


@pytest.fixture
def ahead():
    a = ReadAhead()
    yield a
    a.close()


def test_a_read_under_way_is_kept_when_the_same_device_says_hello_again(ahead, monkeypatch):
    monkeypatch.setattr(read_ahead, "SAME_SYNC", 0.0)      # its file took longer to load than SAME_SYNC
    read = SlowRead()
    ahead.start("till", PARTITION, read)
    assert read.started.wait(30)
    ahead.start("till", PARTITION, read)            # its file initialized: hello again
    read.finish.set()
    assert ahead.take("till", PARTITION) == {"Item": 1}
    assert read.calls == 1, "a second read was queued behind the first"


def test_a_read_that_ended_long_ago_is_made_again_at_hello(ahead, monkeypatch):
    read = SlowRead()
    read.finish.set()
    ahead.start("till", PARTITION, read)
    assert ahead._reads["till"].future.result(30) == {"Item": 1}
    monkeypatch.setattr(read_ahead, "SAME_SYNC", 0.0)
    read.started.clear()
    ahead.start("till", PARTITION, read)
    assert read.started.wait(30)            # (a read not started yet when done comes is dropped, and done reads)
    assert ahead.take("till", PARTITION) == {"Item": 2}


def test_a_done_sent_again_while_the_first_waits_gets_the_same_read(ahead):
    read = SlowRead()
    ahead.start("till", PARTITION, read)
    assert read.started.wait(30)
    got: list = []
    waiting = [threading.Thread(target=lambda: got.append(ahead.take("till", PARTITION))) for _ in range(2)]
    for t in waiting:
        t.start()
    read.finish.set()
    for t in waiting:
        t.join(30)
    assert got == [{"Item": 1}, {"Item": 1}] and read.calls == 1
    assert ahead.take("till", PARTITION) is None, "a read taken stays kept after it ended"


def test_an_upload_drops_the_read_and_another_partitions_read_is_not_taken(ahead):
    read = SlowRead()
    read.finish.set()
    ahead.start("till", PARTITION, read)
    assert ahead.take("till", ("pub", 8)) is None
    ahead.start("till", PARTITION, read)
    ahead.drop("till")
    assert ahead.take("till", PARTITION) is None
