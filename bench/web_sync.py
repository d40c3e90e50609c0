"""Web synchronization at the door: what ``sparksync serve`` spends per device sync.

A PostgreSQL publisher (``Item`` unfiltered, ``Store`` filtered by ``region = HOST_NAME()``) with N web
subscriptions in P partitions (default 1,000 in 50), set up with ``setup``; ``serve`` runs in its own
process and its CPU time is read from /proc before and after each phase. The devices are simulated at
the protocol level (httpx, 16 at a time): each is marked initialized through the door, then syncs as a
device does (``hello``, the download request, the ack when something came, ``done``). Measured in one run:

* the floor: ``GET /healthz`` (the HTTP stack alone): server CPU per request;
* an idle sync (nothing to download): syncs per second and server CPU per sync, and its ratio to the floor;
* a sync with changes (HQ changed every store, 20 per partition, and 10 items every device receives):
  server CPU per sync, bytes on the wire per changed row (the response bodies as they crossed the
  network) and their ratio to the rows' raw size (their values as text, as a CSV line holds them);
* a sync with a validation (every device's validation due: it sends its digests, the door computes its own of
  the partition and compares): server CPU per sync;
* the fan-out: one partition with 1, 5, 10 and 20 devices; HQ changes its 200 stores, every device syncs
  (three times each): server CPU per device. It falls when the changes are evaluated, read and written once
  per partition (the partition feed) and each device is sent those bytes.

* two doors: a second ``serve`` of the publisher (the same feed folder) and half the devices sent to it: idle
  syncs per second and CPU per idle sync of both processes, and a sync with changes (one round, both serve it).

* enrolled devices (``--enrolled``): the fleet is a device group instead of configured subscriptions; one
  enrollment secret per partition (made, then one snapshot), every device enrolls at the door (``POST
  /v1/enroll``, 16 at a time): enrollments per second and door CPU per enrollment; then the figures above with
  enrolled devices, and the monitor's page and ``/api/devices`` (its first page) timed with them all; then a
  burst: as many new devices enroll at once (96 requests in flight) while the fleet keeps syncing.

Targets (issue 22): an idle sync <= 20 ms of server CPU; >= 50 syncs/s with 1,000 devices; <= 3x the raw
row size on the wire; CPU per device falling as devices per partition grow. Issue 38, with 10,000 devices
(``--devices 10000 --partitions 500``): setup <= 60 s, an idle sync <= 10 ms of server CPU, >= 150 idle syncs/s
with two doors. Issue 49, with 10,000 enrolled devices: the same idle figures (>= 150 idle syncs/s with two doors),
the monitor's page in under a second.

Usage: .venv/bin/python bench/web_sync.py [--devices 1000] [--partitions 50] [--one-door] [--no-validation]
       [--enrolled]
"""

from __future__ import annotations

import argparse
import os
import ssl
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from tempfile import TemporaryDirectory

import httpx
from results import Result
from served import free_port, serving

from sparksync.dialects import connect
from sparksync.merge.session.remote.frames import read_changes
from sparksync.provision import setup
from sparksync.spark.session import spark_session
from sparksync.topology import load_config
from sparksync.web import tokens
from sparksync.web.protocol import PROTOCOL

PG = os.environ.get("SPARKSYNC_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
TICK = os.sysconf("SC_CLK_TCK")
_TLS = ssl.create_default_context()     # one for every simulated device (each client would load the CA file again)
FAN_ROWS = 200               # the fan-out partition's stores: every one changes before each sync


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK       # utime + stime


def database(name: str) -> str:
    import psycopg

    with psycopg.connect(PG, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{name}"')
    return PG.rsplit("/", 1)[0] + f"/{name}"


def toml(folder: Path, pub: str, port: int, devices: dict[str, str], name: str = "sparksync.toml",
         group: bool = False, monitor: int | None = None) -> Path:
    """The configuration of one door (its own ports; the publisher, the snapshot and the feed folder shared);
    ``group``: a device group the fleet enrolls into (``devices`` then lists the configured ones only)."""
    subs = "\n".join(f'[[subscriptions]]\nname = "{n}"\npublication = "Shop"\ntransport = "web"\nhost_name = "{r}"\n'
                     for n, r in devices.items())
    fleet = '[[device_groups]]\nname = "Fleet"\npublication = "Shop"\n\n' if group else ""
    cfg = folder / name
    cfg.write_text(f'[publisher]\nname = "HQ"\ndatabase = "{pub}"\nsnapshot_dir = "snap"\n\n[server]\n'
                   f'listen = "127.0.0.1:{port}"\nmonitor = "127.0.0.1:{monitor or free_port()}"\n'
                   'enrollments_per_minute = 1000000\n\n[[publications]]\nname = "Shop"\n'
                   '  [[publications.articles]]\n  table = "Item"\n'
                   '  [[publications.articles]]\n  table = "Store"\n  filter = "region = HOST_NAME()"\n\n' + fleet + subs)
    return cfg


def monitor_url(cfg: Path) -> str:
    line = next(x for x in cfg.read_text().splitlines() if x.startswith("monitor = "))
    return "http://" + line.split('"')[1]


class Device:
    """A device as the door sees it: its token, its watermark, what it downloaded."""

    def __init__(self, url: str, name: str, token: str):
        self.name = name
        self.http = httpx.Client(base_url=url, timeout=60, verify=_TLS, headers={
            "Authorization": f"Bearer {token}", "Sparksync-Protocol": str(PROTOCOL),
            "Sparksync-File": str(uuid.uuid4())})        # the file's identity (docs/web-sync.md)
        self.recgen = 0
        self.bytes = 0

    def rebase(self, url: str) -> None:
        """The device sent to another door from now on."""
        old = self.http
        self.http = httpx.Client(base_url=url, timeout=60, verify=_TLS, headers=dict(old.headers))
        old.close()

    def call(self, method: str, path: str, **kw) -> httpx.Response:
        """A request, again when a kept-alive connection was closed by the server meanwhile (as the device's
        own client does)."""
        for attempt in range(3):
            try:
                r = self.http.request(method, path, **kw)
                r.raise_for_status()
                return r
            except httpx.TransportError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _epoch(self, epoch: str) -> None:
        """The file's epoch, as every request of a sync says it."""
        self.http.headers["Sparksync-Epoch"] = epoch

    def initialize(self) -> None:
        self.call("POST", "/v1/sync/initialize")           # the file starts holding its subscription
        manifest = self.call("GET", "/v1/sync/snapshot").json()
        proposed = str(uuid.uuid4())
        r = self.call("POST", "/v1/sync/initialized", json={"snapshot_id": manifest["snapshot_id"], "baseline": 1,
                                                         "snapshot_generation": manifest["snapshot_generation"]},
                      headers={"Sparksync-Next-Epoch": proposed})
        r.raise_for_status()
        self._epoch(proposed)
        self.recgen = manifest["snapshot_generation"]

    def sync(self, digests: dict | None = None) -> int:
        """One sync without local changes: hello, download, ack, done (with ``digests``, what the device holds,
        when the server asks for them). Returns the changes received."""
        proposed = str(uuid.uuid4())                       # each sync's epoch, proposed with its hello
        hello = self.call("GET", "/v1/sync/hello", headers={"Sparksync-Next-Epoch": proposed}).json()
        if hello.get("file") == "holder":
            self._epoch(proposed)
        r = self.call("POST", "/v1/sync/download", json={"after": self.recgen, "batch": 100})
        self.bytes += r.num_bytes_downloaded
        table, meta = read_changes(r.content, "download")
        batches = meta.get("batches", [])
        if batches:
            hi = batches[-1]["hi"]
            self.call("POST", "/v1/sync/download/ack", json={"hi": hi})
            self.recgen = hi
        said = {"seconds": 0.01}
        if hello.get("validate") and digests is not None:
            said["validation"] = {"pending": False, "articles": digests}
        self.verdict = (self.call("POST", "/v1/sync/done", json=said).json().get("validation") or {}).get("result")
        return table.num_rows


def _partition_digests(pub: str, partitions: int) -> dict | None:
    """Each partition's digests of the publisher's rows (None: a release without digests)."""
    try:
        from sparksync.merge.maintenance.digest import partition_digests
    except ImportError:
        return None
    from sparksync.merge.partitions.evaluation import partitions as partitions_of
    from sparksync.merge.tracking import pending
    from sparksync.metadata import store

    with connect(pub) as r:
        pending.flush(r)
        pubid = store.select_rows(r, "sysmergepublications")[0]["pubid"]
        return {p.params["host_name"]: {a: d.to_list() for a, d in partition_digests(r, pub, str(pubid), p.params).items()}
                for p in partitions_of(r, str(pubid))}


def _due(pub: str) -> None:
    """Every device's validation comes due (as its validate_schedule's time passing makes it)."""
    with connect(pub) as r:
        r.execute("DELETE FROM sparksync.msmerge_validations")


def enroll(url: str, secret: str) -> tuple[str, str]:
    """One device's enrollment at the door: (its subscription, its token)."""
    with httpx.Client(base_url=url, timeout=60, verify=_TLS) as c:
        r = c.post("/v1/enroll", json={"secret": secret, "file_id": uuid.uuid4().hex})
        r.raise_for_status()
        body = r.json()
        return body["subscription"], body["token"]


def _secrets(topology, partitions: int) -> dict[str, str]:
    """One enrollment secret of the group per partition, then one snapshot that holds them all."""
    from sparksync.fleet.enroll import make_secret
    from sparksync.provision import snapshot

    secrets = {f"r{p}": make_secret(topology, "Fleet", host_name=f"r{p}", snapshot=False)[0] for p in range(partitions)}
    snapshot(topology, spark_session("local[2]"))
    return secrets


def run(devices: int, partitions: int, two_doors: bool = True, validations: bool = True,
        enrolled: bool = False) -> dict:
    out: dict = {}
    with TemporaryDirectory() as tmp:
        folder = Path(tmp)
        pub = database("sparksync_bench_web")
        with connect(pub) as r:
            r.execute('CREATE TABLE "Item" ("id" integer PRIMARY KEY, "name" text, "price" numeric(10,2))')
            r.execute('CREATE TABLE "Store" ("id" integer PRIMARY KEY, "region" text, "name" text, "city" text)')
            r.executemany('INSERT INTO "Item" VALUES (%s, %s, %s)', [(i, f"item {i}", i * 1.5) for i in range(1, 201)])
            r.executemany('INSERT INTO "Store" VALUES (%s, %s, %s, %s)',
                          [(i, f"r{i % partitions}", f"store {i}", f"city {i % 97}") for i in range(1, partitions * 20 + 1)])
        fan = {f"Fan{k:02d}": "fan" for k in range(20)}           # the fan-out partition: 20 devices
        names = {f"D{i:04d}": f"r{i % partitions}" for i in range(devices)} | fan
        port = free_port()
        cfg = toml(folder, pub, port, fan if enrolled else names, group=enrolled)
        topology = load_config(cfg)
        t0 = time.perf_counter()
        setup(topology, lambda: spark_session("local[2]"))
        out["setup s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        with connect(pub) as r:
            secrets = {n: tokens.create(r, n) for n in (fan if enrolled else names)}
        url = f"http://127.0.0.1:{port}"
        with serving(cfg, url) as server:
            if enrolled:        # every device of the fleet enrolls itself with its partition's secret
                t1 = time.perf_counter()
                per_partition = _secrets(topology, partitions)
                out["secrets s"] = time.perf_counter() - t1
                wanted = [n for n in names if n not in fan]
                c0, t1 = cpu_seconds(server.pid), time.perf_counter()
                with ThreadPoolExecutor(16) as pool:
                    got = list(pool.map(lambda n: enroll(url, per_partition[names[n]]), wanted))
                seconds = time.perf_counter() - t1
                out["enrollments/s"] = len(wanted) / seconds
                out["enroll ms"] = (cpu_seconds(server.pid) - c0) / len(wanted) * 1000
                names = {sub: names[n] for n, (sub, _) in zip(wanted, got)} | fan
                secrets |= {sub: token for sub, token in got}
            clients = {n: Device(url, n, secrets[n]) for n in names}
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda d: d.initialize(), clients.values()))
                out["initialized s"] = time.perf_counter() - t0        # tokens, then every device's first sync
                fleet = [clients[n] for n in names if n not in fan]

                # the floor: the HTTP stack alone
                c0 = cpu_seconds(server.pid)
                probes = 1000
                list(pool.map(lambda i: fleet[i % len(fleet)].call("GET", "/healthz"), range(probes)))
                out["floor ms"] = (cpu_seconds(server.pid) - c0) / probes * 1000

                list(pool.map(lambda d: d.sync(), fleet))          # first syncs: the snapshot's leftovers
                c0, t0 = cpu_seconds(server.pid), time.perf_counter()
                got = list(pool.map(lambda d: d.sync(), fleet))
                seconds = time.perf_counter() - t0
                out["idle syncs/s"] = len(fleet) / seconds
                out["idle ms"] = (cpu_seconds(server.pid) - c0) / len(fleet) * 1000
                assert not any(got), "an idle sync received changes"

                with connect(pub) as r:          # every store of every partition changes, and 10 items
                    r.execute('UPDATE "Item" SET "price" = "price" + 1 WHERE "id" <= 10')
                    r.execute('UPDATE "Store" SET "city" = "city" || \'+\'')
                    raw = sum(len(",".join(str(v) for v in row)) for row in r.query(
                        'SELECT "id", "region", "name", "city" FROM "Store" WHERE "region" <> \'fan\''))
                    raw_item = sum(len(",".join(str(v) for v in row)) for row in r.query(
                        'SELECT "id", "name", "price" FROM "Item" WHERE "id" <= 10'))
                for d in fleet:
                    d.bytes = 0
                c0 = cpu_seconds(server.pid)
                got = list(pool.map(lambda d: d.sync(), fleet))
                out["changed ms"] = (cpu_seconds(server.pid) - c0) / len(fleet) * 1000
                rows = sum(got)
                wire = sum(d.bytes for d in fleet)
                raw_total = len(fleet) * raw_item + len(fleet) * raw / partitions
                out["changed rows"] = rows
                out["bytes / row"] = wire / max(rows, 1)
                out["wire / raw"] = wire / raw_total

                # a validation at each device's sync: the device's digests (made here from the publisher's rows of
                # its partition, as an intact device's would be) against the door's own
                digests = _partition_digests(pub, partitions) if validations else None
                if digests is not None:
                    _due(pub)
                    c0 = cpu_seconds(server.pid)
                    list(pool.map(lambda d: d.sync(digests[names[d.name]]), fleet))
                    out["validated ms"] = (cpu_seconds(server.pid) - c0) / len(fleet) * 1000
                    out["validated"] = sum(d.verdict == "passed" for d in fleet)

                fan_devices = [clients[n] for n in fan]
                with connect(pub) as r:
                    r.executemany('INSERT INTO "Store" VALUES (%s, \'fan\', %s, \'fan city\')',
                                  [(100_000 + i, f"fan {i}") for i in range(FAN_ROWS)])
                for d in fan_devices:
                    d.sync()
                out["fan"] = {}
                for k in (1, 5, 10, 20):
                    group, spent, moved = fan_devices[:k], 0.0, 0
                    for _ in range(3):
                        with connect(pub) as r:
                            r.execute('UPDATE "Store" SET "city" = "city" || \'+\' WHERE "region" = \'fan\'')
                        c0 = cpu_seconds(server.pid)
                        moved += sum(pool.map(lambda d: d.sync(), group))
                        spent += cpu_seconds(server.pid) - c0
                        for d in fan_devices[k:]:
                            d.sync()                               # the others catch up outside the measurement
                    assert moved == 3 * k * FAN_ROWS, f"{moved} rows moved to {k} device(s) in 3 rounds"
                    out["fan"][k] = spent / (3 * k) * 1000
                if enrolled:
                    out["monitor"] = _monitor(monitor_url(cfg))
                    out["burst"] = _burst(url, per_partition, fleet, server.pid)
                if two_doors:
                    out["two doors"] = _second_door(folder, pub, fan if enrolled else names, fleet, pool, server,
                                                    enrolled)
    return out


def rss_mb(pid: int) -> float:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def _burst(url: str, secrets: dict[str, str], fleet: list[Device], pid: int, at_once: int = 96) -> dict:
    """As many new devices as the fleet enroll at once (``at_once`` requests in flight: more than the door works on
    and queues, so some are told 429 and try again) while the enrolled fleet keeps syncing (4 at a time): the
    fleet's idle syncs/s and failures during the burst, the door's resident memory before and at its end."""
    keys = list(secrets.values())
    rss0, stop, seen = rss_mb(pid), threading.Event(), {"synced": 0, "failed": 0}

    def syncing(devices: list[Device]) -> None:
        i = 0
        while not stop.is_set():
            try:
                devices[i % len(devices)].sync()
                seen["synced"] += 1
            except Exception:  # noqa: BLE001 - counted: what the burst must not cause
                seen["failed"] += 1
            i += 1

    def one(k: int) -> tuple[int, int]:
        """(enrolled: 1, refused with 429 first: how many times)"""
        turned_away = 0
        with httpx.Client(base_url=url, timeout=120, verify=_TLS) as c:
            while True:
                r = c.post("/v1/enroll", json={"secret": keys[k % len(keys)], "file_id": uuid.uuid4().hex})
                if r.status_code != 429:
                    r.raise_for_status()
                    return 1, turned_away
                turned_away += 1
                time.sleep(float(r.headers.get("retry-after", "1")))

    syncers = [threading.Thread(target=syncing, args=(fleet[i::4],)) for i in range(4)]
    t0 = time.perf_counter()
    for t in syncers:
        t.start()
    try:
        with ThreadPoolExecutor(at_once) as pool:
            got = list(pool.map(one, range(len(fleet))))
    finally:
        stop.set()
        for t in syncers:
            t.join()
    seconds = time.perf_counter() - t0
    return {"enrollments": sum(n for n, _ in got), "turned away": sum(t for _, t in got),
            "enrollments/s": sum(n for n, _ in got) / seconds, "syncs/s": seen["synced"] / seconds,
            "failed syncs": seen["failed"], "rss before MB": rss0, "rss after MB": rss_mb(pid)}


def _monitor(url: str) -> dict:
    """The monitor's page and the first page of ``/api/devices``, timed (median of three, after one to warm)."""
    out = {}
    with httpx.Client(base_url=url, timeout=600) as c:
        for what, path in (("page s", "/"), ("devices s", "/api/devices")):
            c.get(path).raise_for_status()
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                c.get(path).raise_for_status()
                times.append(time.perf_counter() - t0)
            out[what] = sorted(times)[1]
    return out


def _second_door(folder: Path, pub: str, names: dict[str, str], fleet: list[Device], pool: ThreadPoolExecutor,
                 first: subprocess.Popen, enrolled: bool = False) -> dict:
    """A second ``serve`` of the same publisher (same feed folder), half the devices sent to each door: idle syncs
    per second and server CPU per idle sync (both processes), then a sync with changes (one round, served by both)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out: dict = {}
    with serving(toml(folder, pub, port, names, "door-b.toml", group=enrolled), url) as second:
        for d in fleet[1::2]:
            d.rebase(url)
        doors = (first.pid, second.pid)
        list(pool.map(lambda d: d.sync(), fleet))           # each door's connections opened
        c0, t0 = sum(map(cpu_seconds, doors)), time.perf_counter()
        got = list(pool.map(lambda d: d.sync(), fleet))
        seconds = time.perf_counter() - t0
        out["idle syncs/s"] = len(fleet) / seconds
        out["idle ms"] = (sum(map(cpu_seconds, doors)) - c0) / len(fleet) * 1000
        assert not any(got), "an idle sync received changes"
        with connect(pub) as r:
            r.execute('UPDATE "Store" SET "city" = "city" || \'+\'')
        c0 = sum(map(cpu_seconds, doors))
        out["changed rows"] = sum(pool.map(lambda d: d.sync(), fleet))
        out["changed ms"] = (sum(map(cpu_seconds, doors)) - c0) / len(fleet) * 1000
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--one-door", action="store_true", help="leave out the run with a second door process")
    ap.add_argument("--no-validation", action="store_true", help="leave out the syncs with a validation")
    ap.add_argument("--enrolled", action="store_true", help="the fleet enrolls into a device group (issue 49)")
    args = ap.parse_args()
    r = run(args.devices, args.partitions, not args.one_door, not args.no_validation, args.enrolled)
    result = Result("web_sync_enrolled" if args.enrolled else "web_sync",
                    "Web synchronization: server CPU per device sync" + (", enrolled devices" if args.enrolled else ""),
                    "bench/web_sync.py" + (" --enrolled" if args.enrolled else ""))
    if args.enrolled:
        result.table(["devices", "partitions", "secrets made + one snapshot s", "enrollments/s",
                      "door ms CPU per enrollment", "monitor page s", "/api/devices s"],
                     [[args.devices, args.partitions, r["secrets s"], r["enrollments/s"], r["enroll ms"],
                       r["monitor"]["page s"], r["monitor"]["devices s"]]],
                     "Enrollment: one secret per partition, every device enrolls at the door (16 at a time); the "
                     "monitor with every device enrolled (target: the page in under a second)")
        b = r["burst"]
        result.table(["new devices", "enrollments/s", "told 429 first", "enrolled fleet idle syncs/s during it",
                      "failed syncs", "door RSS before MB", "door RSS after MB"],
                     [[b["enrollments"], b["enrollments/s"], b["turned away"], b["syncs/s"], b["failed syncs"],
                       b["rss before MB"], b["rss after MB"]]],
                     "A burst: as many new devices as the fleet enroll at once (96 requests in flight, more than the "
                     "door works on and queues: the rest are told 429 and try again) while the enrolled fleet keeps "
                     "syncing (target: no failed sync, memory bounded)")
    result.table(["devices", "partitions", "floor (healthz) ms CPU", "idle sync ms CPU", "idle / floor",
                  "idle syncs/s", "sync with changes ms CPU", "changed rows", "bytes on the wire / row",
                  "wire / raw"],
                 [[args.devices, args.partitions, r["floor ms"], r["idle ms"], r["idle ms"] / r["floor ms"],
                   r["idle syncs/s"], r["changed ms"], r["changed rows"], r["bytes / row"], r["wire / raw"]]],
                 "Targets: idle sync <= 20 ms CPU; >= 50 syncs/s; wire <= 3x raw")
    if "validated ms" in r:
        result.table(["devices", "sync with a validation ms CPU", "vs an idle sync", "validations passed"],
                     [[args.devices, r["validated ms"], r["validated ms"] / r["idle ms"], r["validated"]]],
                     "A validation at each device's sync (the door's digests of the partition, 20 stores and 200 "
                     "items, against the device's)")
    result.table(["devices in the partition", "server ms CPU per device", "vs 1 device"],
                 [[k, v, v / r["fan"][1]] for k, v in r["fan"].items()],
                 f"Fan-out: HQ changes the {FAN_ROWS} stores of one partition, every device of it syncs (three rounds; "
                 "target: falls as devices grow)")
    if "two doors" in r:
        two = r["two doors"]
        result.table(["door processes", "devices", "idle syncs/s", "idle sync ms CPU", "sync with changes ms CPU",
                      "changed rows"],
                     [[1, args.devices, r["idle syncs/s"], r["idle ms"], r["changed ms"], r["changed rows"]],
                      [2, args.devices, two["idle syncs/s"], two["idle ms"], two["changed ms"], two["changed rows"]]],
                     "One and two door processes (`serve` twice, one feed folder; the devices split between them; CPU "
                     "of both). Targets (issue 38, 10,000 devices): idle sync <= 10 ms CPU; >= 150 idle syncs/s with "
                     "two doors")
    result.notes.append(f"setup of {args.devices + 20} web subscriptions: {r['setup s']:.1f}s (target for 10,000: "
                        f"<= 60 s); tokens and every device initialized at the door: {r['initialized s']:.1f}s")
    result.save()


if __name__ == "__main__":
    main()
