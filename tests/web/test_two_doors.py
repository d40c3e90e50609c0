"""Two ``serve`` processes for one publisher behind a load-balancing proxy, sharing nothing but the publisher and
an object store (an S3-compatible server on this machine) where their partition feed lives: both serve devices
from one feed (one of them writes a round's segment, either serves it, byte for byte), exactly one runs the
scheduled agents and takes them over from the other when it dies, and a door killed in the middle of a device's
sync loses nothing. A SQLite publisher, a direct subscriber on the agents' schedule, devices in two partitions;
the checks run in order on one topology.
"""

from __future__ import annotations

import glob
import hashlib
import random
import re
import tomllib

import httpx
import pytest

from sparksync import failpoints as fp
from sparksync.dialects import connect
from sparksync.merge.session.remote import feed_index
from sparksync.metadata import store
from sparksync.storage import Folder
from tests.support.config import write_config
from tests.support.object_store import CREDENTIALS, object_store, s3_folder
from tests.support.proxy import BalancingProxy
from tests.support.service import wait_until
from tests.support.web import (
    Server,
    WebWorld,
    assert_zones_converged,
    create_drops,
    drop_rows,
    file_headers,
    free_port,
    sync_all,
    wire_frames,
)

pytestmark = pytest.mark.spark

DEVICES = {"Van1": "east", "Van2": "west", "Van3": "east", "Van4": "west"}
ROUND = re.compile(r"feed Routes: generations \((\d+), (\d+)\]")
AGENTS_ELSEWHERE = "the agents and alerts run in another serve"


class Doors(WebWorld):
    """The world's server is door A; door B is the same configuration on other ports; devices sync through the
    proxy unless told otherwise. ``aws``: the object store's credentials, in both doors' environment."""

    def __init__(self, folder, data, spark, aws: dict):
        super().__init__(folder, data, spark)
        self.aws = aws
        other = {**self.data, "server": {**self.data["server"], "listen": f"127.0.0.1:{free_port()}",
                                         "monitor": f"127.0.0.1:{free_port()}"}}
        port = int(other["server"]["listen"].rsplit(":", 1)[1])
        self.b = Server(write_config(folder, other, "door-b.toml"), port, folder / "door-b.log", env=aws)
        self.a = self.server
        self.a.env = aws
        self.proxy = BalancingProxy([self.a.port, self.b.port])
        self.expected: dict[int, tuple] = {}
        self.next_id = 5000

    def through(self, server: Server) -> None:
        self.server = server

    def logs(self) -> str:
        return "\n".join(p.read_text() for p in (self.a.log, self.b.log) if p.exists())


class _Proxy(Server):
    """The proxy as the server the devices are given."""

    def __init__(self, proxy: BalancingProxy):
        self.proxy = proxy

    @property
    def url(self) -> str:
        return self.proxy.url


@pytest.fixture(scope="module")
def store_server():
    """An S3-compatible object store with the bucket ``shared``; the credentials its clients use."""
    with object_store("shared") as options:
        yield options, dict(CREDENTIALS)


@pytest.fixture(scope="module")
def doors(spark, tmp_path_factory, store_server):
    options, aws = store_server
    tmp = tmp_path_factory.mktemp("doors")
    pub = f"sqlite:///{tmp / 'hq.db'}"
    create_drops(pub)
    data = {
        "publisher": {"name": "HQ", "database": pub, "snapshot_dir": f"s3://shared/snap?{options}"},
        "server": {"feed_dir": f"s3://shared/doors?{options}"},
        "publications": [{"name": "Routes", "agent_schedule": "every 1s",
                          "articles": [{"table": "Drop", "filter": "zone = HOST_NAME()"}]}],
        "subscriptions": [{"name": n, "publication": "Routes", "transport": "web", "host_name": z}
                          for n, z in DEVICES.items()]
        + [{"name": "Depot", "publication": "Routes", "database": f"sqlite:///{tmp / 'depot.db'}", "host_name": "east"}],
    }
    w = Doors(tmp, data, spark, aws)
    w.expected.update(drop_rows(pub))
    w.a.start()
    wait_until(lambda: "agents and alerts run in this process" in w.a.log.read_text(), "door A holding the agents")
    w.b.start()
    with w.proxy:
        w.server = _Proxy(w.proxy)
        sync_all(w, DEVICES)
        try:
            yield w
        finally:
            w.a.stop()
            w.b.stop()


def _write(w: Doors, who: str, rng: random.Random, count: int = 3) -> None:
    """New rows and updates by ``who`` (a device or "hq") to rows only it writes: no conflicts."""
    url = w.pub_url if who == "hq" else w.device_url(who)
    zone = DEVICES.get(who) or rng.choice(["east", "west"])
    with connect(url) as r, r.transaction():
        for _ in range(count):
            w.next_id += 1
            r.execute('INSERT INTO "Drop" ("id", "zone", "who", "n") VALUES (?, ?, ?, ?)', [w.next_id, zone, who, 0])
            w.expected[w.next_id] = (zone, who, 0)
        mine = [i for i, (_, by, _) in w.expected.items() if by == who and (who == "hq" or w.expected[i][0] == zone)]
        for i in rng.sample(mine, min(2, len(mine))):
            z, by, n = w.expected[i]
            r.execute('UPDATE "Drop" SET "n" = ? WHERE "id" = ?', [n + 1, i])
            w.expected[i] = (z, by, n + 1)


def _converged(w: Doors) -> None:
    # twice: a device of a zone gets what another uploaded after it
    assert_zones_converged(w, DEVICES, w.expected, [*DEVICES, *DEVICES])


def server_config(server: Server) -> dict:
    """The ``[server]`` table of a door's configuration."""
    return tomllib.loads(server.config.read_text())["server"]


def _download(server: Server, w: Doors, name: str, after: int) -> bytes:
    r = httpx.post(f"{server.url}/v1/sync/download", json={"after": after, "batch": 100},
                   headers={"Authorization": f"Bearer {w.tokens[name]}", **file_headers(w, name)}, timeout=30)
    assert r.status_code == 200, r.text
    return r.content


def test_both_doors_serve_devices_and_one_runs_the_agents(doors):
    assert all(n > 0 for n in doors.proxy.served.values()), f"a door was given no connection: {doors.proxy.served}"
    assert AGENTS_ELSEWHERE not in doors.a.log.read_text()
    assert AGENTS_ELSEWHERE in doors.b.log.read_text()
    rounds = len(ROUND.findall(doors.logs()))
    _write(doors, "hq", random.Random(1))
    # serve's rounds run ahead of the devices: HQ's change reaches the feed before any device asks
    wait_until(lambda: len(ROUND.findall(doors.logs())) > rounds, "a round run ahead of the devices")
    wait_until(lambda: drop_rows(f"sqlite:///{doors.folder / 'depot.db'}") ==
               {k: v for k, v in doors.expected.items() if v[0] == "east"}, "the change at Depot")
    assert "Depot" not in doors.b.log.read_text(), "door B ran an agent"
    # each door's monitor page says which serve runs the agents
    page_a, page_b = (httpx.get(f"http://{server_config(d)['monitor']}/", timeout=30).text for d in (doors.a, doors.b))
    assert "data-elsewhere" not in page_a and "agents' loop: alive" in page_a
    assert f'data-elsewhere="pid {doors.a.proc.pid} on ' in page_b and "agents' loop: in another serve (pid" in page_b
    _converged(doors)


def test_a_round_is_written_by_one_door_and_either_serves_it_byte_for_byte(doors):
    with connect(doors.pub_url) as pub:
        sentgen = {n: int(r["sentgen"]) for n in ("Van1", "Van3")
                   for r in store.select_rows(pub, "sysmergesubscriptions", {"name": n})}
    assert sentgen["Van1"] == sentgen["Van3"], sentgen
    rounds_before = ROUND.findall(doors.logs())
    _write(doors, "hq", random.Random(2), count=6)
    # the rounds run ahead of the devices (either door's), and the downloads' own rounds: each written once
    wait_until(lambda: len(ROUND.findall(doors.logs())) > len(rounds_before), "a round run ahead of the devices")
    via_a = wire_frames(_download(doors.a, doors, "Van1", sentgen["Van1"]))
    via_b = wire_frames(_download(doors.b, doors, "Van3", sentgen["Van3"]))
    index = feed_index.load(Folder(doors.topology.feed_root), "Routes")
    assert index is not None
    # the index's head is a round some door logged (its line follows the index written)
    wait_until(lambda: index.head in {int(hi) for _, hi in ROUND.findall(doors.logs())}, "the index's round logged")
    rounds = ROUND.findall(doors.logs())[len(rounds_before):]
    assert len(set(rounds)) == len(rounds), f"a round was written more than once: {rounds}"
    assert len(via_a) >= 2 and via_a[1:] == via_b[1:], "the partition's segments differ between the doors"
    assert not (doors.folder / "feed").exists(), "a door wrote its feed on the local disk"
    assert wire_frames(_download(doors.b, doors, "Van1", sentgen["Van1"])) == via_a, \
        "the same device's download differs between the doors"
    _converged(doors)


def test_the_snapshot_is_in_the_object_store_and_either_door_serves_a_file_from_where_a_download_stopped(
        doors, store_server):
    assert not (doors.folder / "snap").exists(), "a snapshot was written on the local disk"
    auth = {"Authorization": f"Bearer {doors.tokens['Van1']}", **file_headers(doors, "Van1")}
    manifest = httpx.get(f"{doors.a.url}/v1/sync/snapshot", headers=auth, timeout=30).json()
    snap = s3_folder(store_server[0], "shared", f"snap/Routes/{manifest['snapshot_id']}")
    partitions = snap.listing("devices")[1]
    assert len(partitions) == 2 and all(snap.exists(f"devices/{p}/manifest.json") for p in partitions), \
        f"each zone's device manifest is not in the store: {partitions}"
    article = manifest["articles"][0]
    listed = article["files"][0]
    stored = snap.read(f"{article['path']}/{listed['name']}")
    assert (len(stored), hashlib.sha256(stored).hexdigest()) == (listed["bytes"], listed["sha256"])
    half = len(stored) // 2
    for server in (doors.a, doors.b):
        url = f"{server.url}/v1/sync/snapshot/{manifest['snapshot_id']}/{article['path']}/{listed['name']}"
        whole = httpx.get(url, headers=auth, timeout=30)
        assert (whole.status_code, whole.content) == (200, stored)
        rest = httpx.get(url, headers={**auth, "Range": f"bytes={half}-"}, timeout=30)
        assert (rest.status_code, rest.content) == (206, stored[half:])
        assert rest.headers["content-range"] == f"bytes {half}-{len(stored) - 1}/{len(stored)}"
        assert httpx.get(url, headers={**auth, "Range": f"bytes={len(stored)}-"}, timeout=30).status_code == 416


def test_a_door_killed_in_a_sync_loses_nothing_and_the_other_takes_the_agents_over(doors, tmp_path):
    rng = random.Random(3)
    for who in ("hq", "Van2", "Van4"):
        _write(doors, who, rng)
    points = tmp_path / "fp"
    fp.arm(str(points), "door.after_upload_commit Van2 !kill")
    doors.a.stop()
    wait_until(lambda: "from now on" in doors.b.log.read_text(), "door B taking the agents over from stopped A")
    doors.a.env = doors.aws | {"SPARKSYNC_FAILPOINTS": str(points)}
    doors.a.start()
    doors.proxy.ports = [doors.a.port]               # Van2's sync meets door A, killed after its upload commits
    p = doors.sync("Van2")
    assert doors.a.proc.poll() == -9, "door A was not killed at the failpoint"
    assert "Traceback" not in p.stderr
    doors.proxy.ports = [doors.a.port, doors.b.port]    # A is dead: the proxy gives every connection to B
    _write(doors, "hq", rng)
    wait_until(lambda: drop_rows(f"sqlite:///{doors.folder / 'depot.db'}") ==
               {k: v for k, v in doors.expected.items() if v[0] == "east"}, "the change at Depot, from door B")
    _converged(doors)
    doors.a.env = doors.aws
    doors.a.start()
    wait_until(lambda: AGENTS_ELSEWHERE in doors.a.log.read_text().rsplit("device endpoint", 1)[-1],
               "door A, started again, standing by while B runs the agents")


def test_a_sync_whose_requests_two_doors_share_is_recorded_as_it_happened(doors, tmp_path):
    """Finding 10 of reliability round 5: a sync balanced over two doors was recorded by the door that saw its end
    as "counts not known: serve restarted during the sync", with that door's own fraction of its duration. Van1's
    hello and upload go to door A; the sync pauses after its upload; its next requests go to door B (the
    connection to A cut, as a balancer moves a client). The history's row has the upload's counts as applied,
    begins at the hello (before the pause), and invents no restart."""
    import concurrent.futures
    import datetime as dt

    rng = random.Random(4)
    _write(doors, "Van1", rng, count=3)
    points = str(tmp_path / "fp")
    fp.arm(points, "device.after_upload Van1 !pause")
    doors.proxy.ports = [doors.a.port]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        sync = pool.submit(doors.sync, "Van1", env={"SPARKSYNC_FAILPOINTS": points})
        wait_until(lambda: glob.glob(points + ".paused.*") or sync.done(), "Van1's sync paused after its upload")
        paused = dt.datetime.now(dt.UTC)
        doors.proxy.ports = [doors.b.port]
        doors.proxy.cut_open()
        fp.resume(points, "device.after_upload", "Van1")
        p = sync.result()
    doors.proxy.ports = [doors.a.port, doors.b.port]
    assert p.returncode == 0, p.stderr
    with connect(doors.pub_url) as pub:
        row = max(store.select_rows(pub, "MSmerge_sessions", {"subscription": "Van1"}), key=lambda r: r["end_time"])
    message = row["message"] or ""
    assert "restart" not in message and "not known" not in message, message
    assert row["upload_inserts"] == 3, row                 # the rows it wrote (its updates were of these rows)
    start = row["start_time"]
    start = dt.datetime.fromisoformat(start) if isinstance(start, str) else start
    start = start if start.tzinfo else start.replace(tzinfo=dt.UTC)
    assert start < paused, (start, paused)                 # measured from the hello at door A, not from B's requests
    _converged(doors)
