"""``serve``'s rounds ahead of the devices while the publisher is unreachable: the failure said once with why (no
password), the rounds tried again every interval, the recovery said once, and the loop never dies."""

from __future__ import annotations

import threading

from sparksync.errors import ConnectionFailed
from sparksync.web.server.ahead import RoundsAhead


class _Door:
    """A door whose publisher is unreachable for its first ``failures`` rounds."""

    def __init__(self, failures: int, then: int):
        self.failures, self.then, self.rounds = failures, then, 0
        self.done = threading.Event()

    def served_publications(self) -> list[str]:
        return ["Shop"]

    def round(self, publication: str) -> None:
        self.rounds += 1
        if self.rounds >= self.failures + self.then:
            self.done.set()
        if self.rounds <= self.failures:
            raise ConnectionFailed("HQ: connection to postgresql://app:s3cret@hq/db refused", obj="HQ")


def _run(door: _Door) -> list[str]:
    """What the rounds ahead said until ``door`` had all its rounds."""
    said: list[str] = []
    ahead = RoundsAhead(door, said.append, every=0.001)       # type: ignore[arg-type]
    ahead.start()
    try:
        assert door.done.wait(10), f"the rounds stopped after {door.rounds}"
    finally:
        ahead.stop()
    return said


def test_an_unreachable_publisher_is_said_once_tried_again_and_its_return_said_once():
    said = _run(_Door(failures=5, then=3))
    assert len(said) == 2, said
    assert "a round ahead of the devices failed" in said[0] and "refused" in said[0] and "s3cret" not in said[0]
    assert said[1] == "serve: rounds ahead of the devices run again"


def test_a_round_that_raises_what_no_one_expected_does_not_end_the_rounds():
    door = _Door(failures=0, then=4)
    calls = {"n": 0}
    real = door.round

    def odd(publication: str) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyError("a bug")
        real(publication)

    door.round = odd                                           # type: ignore[method-assign]
    said = _run(door)
    assert "KeyError" in said[0] and said[1] == "serve: rounds ahead of the devices run again"
