"""A fleet's backlogs read in bulk (``merge/session/backlogs.py``) are, for every subscription, what
``backlog.count_after`` and ``count_for_partition`` count one subscription at a time: random tracking metadata
(generations received from devices, changes in and out of partitions, rows left in the log unflushed) in a real
SQLite file and a real PostgreSQL database, random watermarks, the two compared."""

from __future__ import annotations

import json
import random
import types
import uuid

from sparksync.dialects import connect
from sparksync.merge.session.backlog import count_after, count_for_partition, lower
from sparksync.merge.session.backlogs import Backlogs
from sparksync.metadata import store
from sparksync.metadata.records import GenStatus

WHOLE, FILTERED = [1, 2], [3, 4]
PARTITIONS = [1, 2, 3, 4, 5]
DEVICES = [10, 11, 12, 13, 14, 15]        # replica nicknames


def _fill(r, rnd: random.Random) -> int:
    """Random tracking metadata; returns the open generation."""
    top = 60
    gens = []
    for g in range(1, top + 1):
        received = rnd.random() < 0.3
        gens.append((g, str(uuid.uuid4()), None, int(GenStatus.RECEIVED if received else GenStatus.OPEN
                                                     if g == top else GenStatus.CLOSED), 1, "[]", 1,
                     store.utcnow(), rnd.choice(DEVICES) if received else None))
    store.insert_rows(r, "MSmerge_genhistory", ("generation", "guidsrc", "pubid", "genstatus", "settled", "nicknames",
                                                "changecount", "coldate", "source_nickname"), gens)
    guids = [str(uuid.uuid4()) for _ in range(120)]
    rows = [(rnd.choice(WHOLE + FILTERED), g) for g in guids]
    contents, tombstones = [], []
    for nick, g in rows:
        (contents if rnd.random() < 0.8 else tombstones).append((nick, g, rnd.randint(1, top), json.dumps({"1": 1})))
    store.insert_rows(r, "MSmerge_contents", ("tablenick", "rowguid", "generation", "lineage"), contents)
    store.insert_rows(r, "MSmerge_tombstone", ("tablenick", "rowguid", "type", "lineage", "generation"),
                      [(n, g, 1, lineage, gen) for n, g, gen, lineage in tombstones])
    current, past = set(), set()
    for nick, g in rows:
        if nick not in FILTERED:
            continue
        for pid in rnd.sample(PARTITIONS, rnd.randint(0, 2)):
            current.add((nick, g, pid))
        for _ in range(rnd.randint(0, 3)):       # rows that left a partition, some more than once
            past.add((nick, g, rnd.choice(PARTITIONS), rnd.randint(1, top)))
    store.insert_rows(r, "MSmerge_current_partition_mappings", ("tablenick", "rowguid", "partition_id"), sorted(current))
    store.insert_rows(r, "MSmerge_past_partition_mappings", ("tablenick", "rowguid", "partition_id", "generation"),
                      sorted(past))
    logged = [(nick, g, rnd.choice((1, 2, 3))) for nick, g in rnd.sample(rows, 30)]
    logged += [(nick, str(uuid.uuid4()), 1) for nick in rnd.choices(WHOLE + FILTERED, k=5)]     # rows not in it yet
    logged += logged[:5]                                                  # a row changed twice since the flush
    store.insert_rows(r, "MSmerge_pending", ("tablenick", "rowguid", "op"), logged)
    return top


def _one_at_a_time(r, reg) -> tuple[int, int | None]:
    n, lowest = count_after(r, WHOLE, reg.sentgen, exclude_received_from=reg.replnickname)
    if reg.partition_id is not None:
        m, g = count_for_partition(r, FILTERED, reg.sentgen, reg.partition_id, reg.replnickname)
        n, lowest = n + m, lower(lowest, g)
    return n, lowest


def test_backlogs_in_bulk_equal_one_at_a_time(kind, dbs):
    url = dbs.url(kind, "pub")
    for seed in range(3):
        rnd = random.Random(seed)
        with connect(url) as r:
            store.install_metadata(r)
            r.tracking_flushed = True           # the test writes the metadata the log would have been flushed into
            with r.transaction():
                for t in ("MSmerge_genhistory", "MSmerge_contents", "MSmerge_tombstone", "MSmerge_pending",
                          "MSmerge_current_partition_mappings", "MSmerge_past_partition_mappings"):
                    r.execute(f"DELETE FROM {r.dialect.metadata_table_sql(t)}")
                _fill(r, rnd)
            regs = [types.SimpleNamespace(sentgen=rnd.choice([None, 0, *range(1, 61)]),
                                          replnickname=rnd.choice([None, *DEVICES]),
                                          partition_id=rnd.choice([None, *PARTITIONS])) for _ in range(40)]
            bulk = Backlogs.read(r, WHOLE, FILTERED, regs)
            for reg in regs:
                expected = _one_at_a_time(r, reg)
                assert bulk.of(reg) == expected, (seed, reg)
            assert any(_one_at_a_time(r, reg)[0] for reg in regs)            # the metadata had something pending


def _registered(r, pubid: str, names: list[str]) -> None:
    from sparksync.metadata.records import SubscriptionRow, SubscriptionStatus

    for i, name in enumerate(names):
        store.insert(r, SubscriptionRow.for_subscriber(
            subid=str(uuid.uuid4()), pubid=pubid, name=name, replica_id=str(uuid.uuid4()), replnickname=100 + i,
            database_label="web:test", subscriber_type=2, priority=0.0, host_name=None, login=None, partition_id=None,
            status=SubscriptionStatus.ACTIVE, created_at=store.utcnow()))


def test_last_runs_and_validations_in_bulk_equal_one_at_a_time(kind, dbs):
    """``history.session_states`` and ``validations.latest`` (a fleet's last runs and newest validations, one query
    each) are ``agent_state`` and ``validations.last`` of each subscription: runs that failed since a success,
    runs that never succeeded, runs that started at the same time, subscriptions with no run."""
    import datetime as dt

    from sparksync.merge.maintenance import validations
    from sparksync.metadata.history import agent_state, session_states

    rnd = random.Random(7)
    url = dbs.url(kind, "pub")
    pubid, other = str(uuid.uuid4()), str(uuid.uuid4())
    names = [f"dev-{i}" for i in range(30)]
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with connect(url) as r:
        store.install_metadata(r)
        _registered(r, pubid, names)
        runs, checks = [], []
        for name in names:
            for i in range(rnd.randint(0, 8)):
                start = t0 + dt.timedelta(minutes=rnd.randint(0, 6) * 10)       # some start at the same time
                runs.append((str(uuid.uuid4()), name, rnd.choice([pubid, pubid, other]), start,
                             start + dt.timedelta(seconds=rnd.randint(1, 50)), rnd.choice(["succeeded", "failed"]),
                             *[0] * 11, f"run {i}"))
            for i in range(rnd.randint(0, 4)):
                checks.append((name, rnd.choice([pubid, other]), t0 + dt.timedelta(minutes=i * 7 + rnd.randint(0, 5)),
                               rnd.choice([validations.PASSED, validations.FAILED, validations.INCONCLUSIVE]),
                               "sync", json.dumps({"t": [1, 1, True]}), f"check {i}", 0.5))
        cols = ("session_id", "subscription", "pubid", "start_time", "end_time", "status", "upload_inserts",
                "upload_updates", "upload_deletes", "upload_conflicts", "download_inserts", "download_updates",
                "download_deletes", "download_conflicts", "retries", "failed", "duration", "message")
        store.insert_rows(r, "MSmerge_sessions", cols, [(*x[:6], *x[6:16], 1.0, x[17]) for x in runs])
        store.insert_rows(r, "MSmerge_validations", ("subscription", "pubid", "validated_at", "result", "how", "articles",
                                                     "message", "seconds"), {c[:3]: c for c in checks}.values())
        states, newest = session_states(r, pubid), validations.latest(r, pubid)
        for name in names:
            one = agent_state(r, "MSmerge_sessions", f"pubid = {r.dialect.uuid_param()} AND subscription = {r.p}",
                              [pubid, name], ("succeeded",))
            assert states.get(name, {}) == one, name
            assert newest.get(name) == validations.last(r, pubid, name), name
        assert any("stopped_since" in s for s in states.values()) and any(len(s) == 2 for s in states.values())
        assert len(newest) > 5
