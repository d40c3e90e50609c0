"""A device's sync, encrypted at rest (SQLCipher) against plain: what encryption costs the device.

A SQLite publisher (``Product``, R rows) with two web subscriptions served by ``serve``'s door in this process
(``Publisher.serving``); two device files, one plain and one encrypted, synced through the public API
(``sparksync.Device``). Measured in one run, the two devices taking turns (A/B pairs, medians):

* the first sync: the partition's snapshot downloaded (kept sealed for the encrypted device) and loaded;
* a sync with changes: the device's application updates C rows and HQ updates C others, then one sync uploads
  and downloads them (each device its own rows, so that neither conflicts with the other).

Printed: seconds for each, and the encrypted / plain ratio. ``--plain-only`` times the plain device alone, to
compare two releases (``PYTHONPATH=<other checkout>/src``).

Usage: .venv/bin/python bench/device_sync.py [--rows 20000] [--changes 1000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from results import Result
from served import free_port

import sparksync
from sparksync.dialects import connect
from sparksync.spark.session import spark_session

PASSPHRASE = "bench passphrase"


def publisher(folder: Path, rows: int) -> str:
    url = f"sqlite:///{folder / 'hq.db'}"
    with connect(url) as r:
        r.execute('CREATE TABLE "Product" ("id" integer PRIMARY KEY, "name" varchar(60) NOT NULL, "price" real, '
                  '"qty" integer)')
        with r.transaction():
            r.executemany('INSERT INTO "Product" VALUES (?, ?, ?, ?)',
                          [(i, f"product number {i}", i * 0.5, i % 97) for i in range(1, rows + 1)])
    return url


def changes(device: sparksync.Device, pub: str, lo: int, n: int, round_: int) -> float:
    """The device's application updates rows [lo, lo + n), HQ the n after them; one sync: its seconds."""
    with (device.connect() if getattr(device, "key", None) is not None else sqlite3.connect(device.database)) as db:
        db.executemany("UPDATE Product SET qty = ? WHERE id = ?", [(round_, i) for i in range(lo, lo + n)])
    with connect(pub) as r, r.transaction():
        r.executemany('UPDATE "Product" SET "price" = ? WHERE "id" = ?',
                      [(float(round_), i) for i in range(lo + n, lo + 2 * n)])
    t0 = time.perf_counter()
    summary = device.sync()
    assert summary.ok, summary
    return time.perf_counter() - t0


def run(rows: int, n: int, repeats: int, kinds: tuple[str, ...]) -> dict:
    spark = spark_session(app_name="bench-device-sync")
    times: dict[str, dict[str, list[float]]] = {k: {"first": [], "changes": []} for k in kinds}
    for rep in range(repeats):
        with TemporaryDirectory(prefix="bench-device-") as tmp:
            folder = Path(tmp)
            pub = publisher(folder, rows)
            hq = sparksync.Publisher({
                "publisher": {"name": "HQ", "database": pub, "snapshot_dir": str(folder / "snap")},
                "server": {"listen": f"127.0.0.1:{free_port()}", "feed_dir": str(folder / "feed")},
                "publications": [{"name": "Shop", "articles": [{"table": "Product"}]}],
                "subscriptions": [{"name": n, "publication": "Shop", "transport": "web"} for n in ("Plain", "Sealed")]},
                spark=spark)
            hq.setup()
            with hq.serving() as url:
                devices = {"plain": sparksync.Device(str(folder / "plain.db"), url, "Plain", hq.token("Plain"))}
                if "encrypted" in kinds:
                    devices["encrypted"] = sparksync.Device(str(folder / "sealed.db"), url, "Sealed",
                                                            hq.token("Sealed"), key=PASSPHRASE)
                order = list(kinds) if rep % 2 == 0 else list(reversed(kinds))
                for kind in order:
                    t0 = time.perf_counter()
                    assert devices[kind].sync().ok
                    times[kind]["first"].append(time.perf_counter() - t0)
                for k, kind in enumerate(order * 2):
                    lo = 1 + (0 if kind == "plain" else rows // 2) + (k // 2) * 2 * n
                    times[kind]["changes"].append(changes(devices[kind], pub, lo, n, rep * 10 + k))
    return {kind: {phase: statistics.median(v) for phase, v in d.items()} for kind, d in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--changes", type=int, default=1_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--plain-only", action="store_true",
                    help="the plain device alone, seconds printed and nothing saved (to compare two releases)")
    args = ap.parse_args()
    if args.plain_only:
        print(run(args.rows, args.changes, args.repeats, ("plain",)))
        return
    m = run(args.rows, args.changes, args.repeats, ("plain", "encrypted"))
    result = Result("device_sync", "A device's sync, encrypted at rest against plain", "bench/device_sync.py")
    result.table(["sync", "plain (s)", "encrypted (s)", "encrypted / plain"],
                 [[f"first: snapshot of {args.rows} rows", m["plain"]["first"], m["encrypted"]["first"],
                   m["encrypted"]["first"] / m["plain"]["first"]],
                  [f"{args.changes} changes up, {args.changes} down", m["plain"]["changes"],
                   m["encrypted"]["changes"], m["encrypted"]["changes"] / m["plain"]["changes"]]],
                 f"Medians of {args.repeats} A/B pairs (the two devices take turns, in one run)")
    result.save()


if __name__ == "__main__":
    main()
