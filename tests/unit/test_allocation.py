"""``allocation.fewer_collections``: the collector's first threshold raised while a bulk apply runs, and the
thresholds in force before it restored however the block ends, with blocks of several threads nesting."""

from __future__ import annotations

import gc
import threading

import pytest

from sparksync.allocation import FIRST, fewer_collections


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_raised_inside_and_restored_after_even_when_the_block_fails(thresholds):
    with fewer_collections():
        assert gc.get_threshold() == (FIRST, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("the apply failed")
    assert gc.get_threshold() == (700, 10, 10)


def test_blocks_of_several_threads_nest_and_the_last_one_out_restores(thresholds):
    inside, leave = threading.Barrier(3), threading.Event()

    def apply() -> None:
        with fewer_collections():
            inside.wait(10)
            assert leave.wait(10)

    threads = [threading.Thread(target=apply) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait(10)
    with fewer_collections():
        pass                      # a third block ending while the others run restores nothing
    assert gc.get_threshold() == (FIRST, 10, 10)
    leave.set()
    for t in threads:
        t.join(10)
    assert gc.get_threshold() == (700, 10, 10)


def test_an_application_that_disabled_collection_or_set_a_higher_threshold_is_left_as_it_is(thresholds):
    gc.set_threshold(0)
    with fewer_collections():
        assert gc.get_threshold()[0] == 0
    gc.set_threshold(FIRST * 2, 10, 10)
    with fewer_collections():
        assert gc.get_threshold() == (FIRST * 2, 10, 10)
    assert gc.get_threshold() == (FIRST * 2, 10, 10)
