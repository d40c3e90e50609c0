"""A device's notices of a download batch against real SQLite files and a real PostgreSQL server, without a server
of sparksync: a batch made by hand (``apply_download``'s frames) with every kind of row a batch may hold, applied
by the apply's own code. The notices (the sync's ``changed`` and what the callbacks get) name exactly the rows the
batch changed, once each, in order of article and rowguid, whether the set-based apply wrote its rows or fell back
to rows one at a time."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pytest

from sparksync.dialects import connect
from sparksync.errors import ValueRejected
from sparksync.merge.apply.staging import Staging
from sparksync.merge.session.changes import OP_REMOVE, REMOVE_GENERATION
from sparksync.merge.session.remote.frames import change_schema, write_changes
from sparksync.merge.session.remote.spooled import Download
from sparksync.merge.session.remote.subscriber import RemotePublisher, apply_download
from sparksync.merge.session.summary import SubscriptionSession
from sparksync.merge.tracking import pending
from sparksync.merge.tracking.articles import agent_writes, published_articles, write_row_with_lineage
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.rows import RowCodec
from tests.support.publishing import publish, rows_of

HQ = 2                           # the download's source; the device is replica 1 (its own changes: entries of 1)


def _row(codec: RowCodec, g: str, op: str, lineage: dict, generation: int = 2, values=None) -> dict:
    return {"source": "HQ", "source_nick": HQ, "tablenick": 0, "rowguid": g, "generation": generation, "op": op,
            "lineage": json.dumps({str(k): v for k, v in lineage.items()}), "colv": None,
            "row": codec.encode([*values, g]) if values is not None else None, "target": None, "partition_id": 0}


@pytest.mark.parametrize("falls_back", [False, True], ids=["set-based", "one row at a time"])
def test_a_batchs_notices_name_exactly_the_rows_it_changed(kind, dbs, monkeypatch, falls_back):
    url = dbs.url(kind, "notices")
    with connect(url) as r:
        r.execute('CREATE TABLE "T" ("id" integer PRIMARY KEY, "name" text)')
    res = publish(url, [{"table": "T"}])
    g = {name: str(uuid.UUID(int=i + 1)) for i, name in enumerate(
        ["updated", "inserted", "deleted", "not here", "older", "twice", "removed", "conflict", "moved"])}
    with connect(url) as r:
        [art_row] = published_articles(r, res["pubid"])
        art, nick = tracked_article(art_row), int(art_row.nickname)
        codec = RowCodec([(c.name, c.type) for c in art.info.columns])
        pending.flush(r)
        with r.transaction(), agent_writes(r):     # the rows here before the batch, each the publisher's version 1
            for i, name in enumerate(["updated", "deleted", "older", "twice", "removed", "conflict", "moved"], 1):
                local = {HQ: 1, 1: 2} if name == "conflict" else {HQ: 1}       # changed here since: a conflict
                write_row_with_lineage(r, art, {"id": i, "name": "here", "rowguid": g[name]}, local, 1)
        rows = [_row(codec, g["updated"], "upsert", {HQ: 2}, values=[1, "new"]),
                _row(codec, g["inserted"], "upsert", {HQ: 2}, values=[20, "new"]),
                _row(codec, g["deleted"], "delete", {HQ: 2}),
                _row(codec, g["not here"], "delete", {HQ: 2}),
                _row(codec, g["older"], "upsert", {HQ: 1}, values=[3, "the same version"]),
                _row(codec, g["twice"], "upsert", {HQ: 2}, values=[4, "first"]),
                _row(codec, g["removed"], OP_REMOVE, {}, generation=REMOVE_GENERATION),
                _row(codec, g["conflict"], "upsert", {HQ: 2}, values=[6, "theirs"]),
                _row(codec, g["moved"], "upsert", {HQ: 2}, values=[70, "key moved"]),
                _row(codec, g["twice"], "upsert", {HQ: 3}, values=[4, "second"])]
        table = pa.Table.from_pylist([{**x, "tablenick": nick} for x in rows], schema=change_schema())
        meta = {"frames": 1, "start": 1, "bound": 2, "where": {"2": 0, str(REMOVE_GENERATION): 0}, "ranges": [],
                "batches": [{"seq": 0, "lo": 1, "hi": 2, "nicknames": [HQ], "retry": False, "ends_within": 0}]}
        refusals: list[str] = []
        if falls_back:                        # a constraint refuses the set-based apply: rows one at a time
            def refused(self, art, op, *args, **kwargs):
                refusals.append(op)
                raise ValueRejected("refused here")
            monkeypatch.setattr(Staging, "apply", refused)
        publisher = RemotePublisher(
            subscription="Dev", publication="Pub", pubid=res["pubid"], publisher="HQ", publisher_nickname=HQ,
            status="active", subid=str(uuid.uuid4()), replica_id=str(uuid.uuid4()), nickname=1, priority=None,
            subscriber_type=2, host_name=None, login=None, partition_id=None, recgen=1, sentgen=1, schema_version=0,
            schema_changes=(), failed=())
        session, told = SubscriptionSession("Dev", "Pub"), []
        done = apply_download(r, url, publisher, Download.of_bytes(write_changes(table, meta)), str(uuid.uuid4()),
                              session, lambda _: None,
                              told.append)
        assert done == 2 and refusals == (["delete", "upsert"] if falls_back else [])
        keys = {k: i for k, i in r.query(f'SELECT "rowguid", "id" FROM {rows_of(r, "T")} AS t')}
    expected = sorted([["updated", 1], ["inserted", 20], ["deleted", 2], ["twice", 4], ["removed", 5],
                       ["moved", 70]], key=lambda x: g[x[0]])
    operations = {"inserted": "inserted", "deleted": "deleted", "removed": "deleted"}
    assert session.changed == [[art_row.name, operations.get(name, "updated"), g[name], {"id": i}]
                               for name, i in expected]
    assert [[c.article, c.operation, c.rowguid, c.key] for b in told for c in b.changes] == session.changed
    assert {str(k): i for k, i in keys.items()} == {g["updated"]: 1, g["inserted"]: 20, g["older"]: 3,
                                                    g["twice"]: 4, g["conflict"]: 6, g["moved"]: 70}
