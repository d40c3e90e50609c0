"""Web synchronization over a bad network and through crashes: a SQLite publisher, ``serve`` and devices as
separate processes; connections cut at random byte counts by a proxy, devices and the server killed with
SIGKILL at the worst moments. Every device ends holding exactly its partition and every write of every
writer is accounted for: nothing lost, nothing applied twice (no conflict and no failed change appears,
though each row is written by one writer only). One topology; the checks run in order on it.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from sparksync.dialects import connect
from tests.support.clients import shell
from tests.support.databases import databases
from tests.support.proxy import CuttingProxy
from tests.support.web import WebWorld, assert_zones_converged, create_drops, drop_rows, sync_all

pytestmark = pytest.mark.spark

DEVICES = {"Van1": "east", "Van2": "west", "Van3": "east"}


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory, pg_admin_url):
    tmp = tmp_path_factory.mktemp("webfaults")
    with databases(tmp, pg_admin_url) as dbs:
        pub = dbs.url("sqlite", "hq")
        create_drops(pub)
        data = {
            "publisher": {"name": "HQ", "database": pub, "snapshot_dir": str(tmp / "snap")},
            "publications": [{"name": "Routes", "articles": [{"table": "Drop", "filter": "zone = HOST_NAME()"}]}],
            "subscriptions": [{"name": n, "publication": "Routes", "transport": "web", "host_name": z}
                              for n, z in DEVICES.items()]
            + [{"name": "Depot", "publication": "Routes", "database": dbs.url("postgresql", "depot"), "host_name": "east"}],
        }
        w = WebWorld(tmp, data, spark)
        w.server.start()
        w.expected = drop_rows(pub)          # type: ignore[attr-defined]  # every write of every writer
        sync_all(w, DEVICES)
        try:
            yield w
        finally:
            w.server.stop()


def _converged(w: WebWorld) -> None:
    """Every device synced (without the proxy) holds its partition; the publisher holds every write. A device
    syncs again when another of its zone synced after it (it may have uploaded what this one lacks)."""
    again = [n for i, n in enumerate(DEVICES) if any(DEVICES[m] == DEVICES[n] for m in list(DEVICES)[i + 1:])]
    assert_zones_converged(w, DEVICES, w.expected, [*DEVICES, *again])


def _write(w: WebWorld, who: str, rng: random.Random, next_id: list[int]) -> None:
    """A few writes by ``who`` (a device or "hq"), each to rows only ``who`` writes: no conflicts."""
    zone = DEVICES.get(who) or rng.choice(["east", "west"])
    mine = [k for k, v in w.expected.items() if v[1] == who and (who == "hq" or v[0] == zone)]
    url = w.pub_url if who == "hq" else w.device_url(who)
    script = []
    for _ in range(rng.randint(1, 4)):
        if mine and rng.random() < 0.5:
            k = rng.choice(mine)
            n = w.expected[k][2] + 1
            script.append(f'UPDATE "Drop" SET "n" = {n} WHERE "id" = {k};')
            w.expected[k] = (w.expected[k][0], who, n)
        else:
            k = next_id[0]
            next_id[0] += 1
            script.append(f'INSERT INTO "Drop" ("id", "zone", "who", "n") VALUES ({k}, \'{zone}\', \'{who}\', 0);')
            w.expected[k] = (zone, who, 0)
            mine.append(k)
    shell(url, "\n".join(script) + "\n")


def test_connections_cut_at_random_lose_nothing_and_apply_nothing_twice(world):
    rng = random.Random(22)
    next_id = [1000]
    with CuttingProxy(world.server.port, p=0.35, seed=7) as proxy:
        for _ in range(4):
            for who in [*DEVICES, "hq"]:
                _write(world, who, rng, next_id)
            for name in DEVICES:
                p = world.sync(name, "--server", proxy.url, "--generations-per-batch", "1")
                assert "Traceback" not in p.stderr, p.stderr
    assert proxy.cuts > 0, "the proxy cut nothing: the test checks nothing"
    _converged(world)


def test_a_device_killed_after_the_publisher_applied_its_upload_sends_nothing_twice(world, tmp_path):
    rng = random.Random(5)
    _write(world, "Van1", rng, [2000])
    fp = tmp_path / "fp"
    fp.write_text("device.after_upload Van1 !kill\n")
    p = world.sync("Van1", env={"SPARKSYNC_FAILPOINTS": str(fp)})
    assert p.returncode == -9, (p.returncode, p.stderr)
    _converged(world)


def test_a_device_killed_between_download_batches_resumes(world, tmp_path):
    rng = random.Random(6)
    for _ in range(5):
        _write(world, "hq", rng, [3000 + 10 * _])
        with connect(world.pub_url) as pub:
            from sparksync.merge.tracking.generations import make_generation
            make_generation(pub, 1)
    fp = tmp_path / "fp"
    fp.write_text("device.after_download_batch Van3 !kill\n")
    p = world.sync("Van3", "--generations-per-batch", "1", env={"SPARKSYNC_FAILPOINTS": str(fp)})
    assert p.returncode == -9, (p.returncode, p.stderr)
    _converged(world)


def test_the_server_killed_after_committing_an_upload_loses_nothing(world, tmp_path):
    rng = random.Random(8)
    _write(world, "Van2", rng, [4000])
    fp = tmp_path / "fp"
    fp.write_text("door.after_upload_commit Van2 !kill\n")
    world.server.stop()
    world.server.env = {"SPARKSYNC_FAILPOINTS": str(fp)}
    world.server.start()
    assert world.sync("Van1").returncode == 0           # its download starts the server's partition feed
    p = world.sync("Van2")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert world.server.proc.poll() == -9, "the server was not killed at the failpoint"
    killed = _feeds(world)
    assert killed, "the killed server had written no feed"
    world.server.env = None
    world.server.start()
    _converged(world)
    assert killed == {k: e for k, e in _feeds(world).items() if k in killed}, "the next start did not go on with the feed"


def _feeds(world) -> dict[str, str]:
    """Each publication's feed (its index's folder) -> its epoch: a feed outlives the server that wrote it."""
    root = Path(world.topology.feed_root)
    return {f.parent.name: json.loads(f.read_text())["epoch"] for f in root.glob("pub-*/index.json")}


def test_a_device_that_lost_its_file_starts_again_and_nothing_of_it_is_skipped(world):
    rng = random.Random(9)
    for f in world.folder.glob("van1.db*"):
        f.unlink()
    p = world.sync("Van1")                        # a new file: refused, the subscription stays as it was
    assert p.returncode == 1 and "a new file" in p.stderr, p.stderr
    p = world.sync("Van1", "--reinitialize")      # on purpose: initialized again from the snapshot
    assert p.returncode == 0, p.stderr
    _write(world, "Van1", rng, [5000])            # its generations are numbered from the start again
    _converged(world)


def test_the_old_file_of_a_device_that_started_again_is_refused(world, tmp_path):
    old = tmp_path / "old-van2.db"
    shutil.copy(world.device("Van2"), old)
    for f in world.folder.glob("van2.db*"):
        f.unlink()
    assert world.sync("Van2", "--reinitialize").returncode == 0         # a new file, a fresh identity
    p = world.sync("Van2", database=old)
    assert p.returncode != 0 and "does not hold the subscription" in p.stderr, p.stderr
    _converged(world)
