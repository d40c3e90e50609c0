"""Business logic handlers (``sparksync.handlers``) at a merge's destinations: one topology per publisher kind (a
publisher, two SQLite subscribers) whose article ``Ticket`` has the handler ``tests.support.handlers:Tickets``;
every scenario written before one merge, then named checks. The SQLite publisher's merges run in the agent's process,
the PostgreSQL publisher's on Spark (``driver_round_changes`` 0): the handler runs where the apply runs."""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.errors import ConfigurationError
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.metadata import store
from sparksync.provision import setup
from sparksync.topology import parse_topology
from tests.support.databases import databases
from tests.support.publishing import rows_of

HANDLER = "tests.support.handlers:Tickets"
WHO = ("P", "S1", "S2")


def ddl(kind: str) -> str:
    integer = "INTEGER" if kind == "sqlite" else "integer"
    return (f'CREATE TABLE "Ticket" ("id" {integer} PRIMARY KEY, "code" text NOT NULL UNIQUE, "v" text, '
            f'"n" {integer}, "deleted" {integer} NOT NULL DEFAULT 0)')


class World:
    def __init__(self, spark, dbs, tmp, kind: str):
        self.kind, self.spark = kind, spark
        self.urls = {"P": dbs.url(kind, "blpub"), "S1": dbs.url("sqlite", "bls1"), "S2": dbs.url("sqlite", "bls2")}
        with connect(self.urls["P"]) as r:
            r.execute(ddl(kind))
            r.executemany(f'INSERT INTO "Ticket" ("id", "code", "v", "n") VALUES ({r.p}, {r.p}, {r.p}, 10)',
                          [(i, f"C{i}", f"v{i}") for i in range(1, 21)])
        self.data = {
            "spark": {"driver_round_changes": 0 if kind == "postgresql" else 5000},
            "publisher": {"name": "P", "database": self.urls["P"], "snapshot_dir": str(tmp / "snap")},
            "publications": [{"name": "Pub", "articles": [{"table": "Ticket", "business_logic": HANDLER}]}],
            "subscriptions": [{"name": s, "publication": "Pub", "database": self.urls[s], "subscriber_type": "global",
                               "priority": 75} for s in ("S1", "S2")]}
        self.topology = parse_topology(self.data, tmp)
        setup(self.topology, lambda: spark)
        self.agent = MergeAgent(self.topology, spark)

    def sql(self, who: str, *statements: str) -> None:
        with connect(self.urls[who]) as r:
            for s in statements:
                r.execute(s)

    def merge(self):
        return self.agent.run(MergeOptions())

    def row(self, who: str, id_: int) -> dict | None:
        with connect(self.urls[who]) as r:
            rows = r.query(f'SELECT "code", "v", "n", "deleted" FROM "Ticket" WHERE "id" = {r.p}', [id_])
        return dict(zip(("code", "v", "n", "deleted"), rows[0])) if rows else None

    def everywhere(self, id_: int) -> list:
        return [self.row(w, id_) for w in WHO]

    def failed(self, who: str = "P") -> dict[str, str]:
        """rowguid -> reason of the failed changes at ``who``."""
        with connect(self.urls[who]) as r:
            return {str(f["rowguid"]): f["reason"] for f in store.select_rows(r, "MSmerge_failed_changes")}

    def rowguid(self, who: str, id_: int) -> str:
        with connect(self.urls[who]) as r:
            return str(r.scalar(f'SELECT "rowguid" FROM {rows_of(r, "Ticket")} AS t WHERE "id" = {r.p}', [id_]))


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request, spark, tmp_path_factory):
    kind = request.param
    tmp = tmp_path_factory.mktemp(f"handlers-{kind}")
    with databases(tmp, lambda: request.getfixturevalue("pg_admin_url")) as dbs:
        w = World(spark, dbs, tmp, kind)
        w.sql("S1",
              """INSERT INTO "Ticket" ("id", "code", "v", "n", "deleted") VALUES (101, 'R101', 'reject', 1, 0)""",
              """INSERT INTO "Ticket" ("id", "code", "v", "n", "deleted") VALUES (102, 'L102', 'lower:ABC', 1, 0)""",
              'DELETE FROM "Ticket" WHERE "id" = 5',
              """UPDATE "Ticket" SET "n" = -5 WHERE "id" = 6""",
              """UPDATE "Ticket" SET "v" = 's7!sub' WHERE "id" = 7""",
              """UPDATE "Ticket" SET "v" = 's8!pub' WHERE "id" = 8""",
              """UPDATE "Ticket" SET "v" = 's9!custom' WHERE "id" = 9""",
              """UPDATE "Ticket" SET "v" = 's10!default' WHERE "id" = 10""",
              """UPDATE "Ticket" SET "v" = 's11!keep' WHERE "id" = 11""",
              'DELETE FROM "Ticket" WHERE "id" = 12',
              """UPDATE "Ticket" SET "v" = 's13!pub' WHERE "id" = 13""",
              """UPDATE "Ticket" SET "v" = 'raise' WHERE "id" = 14""",
              """UPDATE "Ticket" SET "v" = 'fine' WHERE "id" = 15""",
              """UPDATE "Ticket" SET "v" = 'badtype' WHERE "id" = 16""",
              """UPDATE "Ticket" SET "v" = 'toobig' WHERE "id" = 17""",
              """INSERT INTO "Ticket" ("id", "code", "v", "n", "deleted") VALUES (121, 'X1', 'first', 1, 0)""")
        w.sql("S2", """INSERT INTO "Ticket" ("id", "code", "v", "n", "deleted") VALUES (120, 'X1', 'second', 1, 0)""")
        w.sql("P", """UPDATE "Ticket" SET "v" = 'p7' WHERE "id" = 7""",
              """UPDATE "Ticket" SET "v" = 'p8' WHERE "id" = 8""",
              """UPDATE "Ticket" SET "v" = 'p9' WHERE "id" = 9""",
              """UPDATE "Ticket" SET "v" = 'p10' WHERE "id" = 10""",
              'DELETE FROM "Ticket" WHERE "id" = 11',
              """UPDATE "Ticket" SET "v" = 'p12!sub' WHERE "id" = 12""",
              'DELETE FROM "Ticket" WHERE "id" = 13')
        w.first = w.merge()
        w.second = w.merge()            # the versions the handler made reach the subscriber they came from
        w.third = w.merge()
        yield w


def test_the_merges_succeed_and_nothing_made_by_a_handler_comes_back(world):
    assert world.first.ok and world.second.ok and world.third.ok, [s.errors for s in world.first.subscriptions]
    assert not world.third.conflicts, world.third.conflicts
    moved = {(s.subscription, d): (t.inserts, t.updates, t.deletes) for s in world.third.subscriptions
             for d in ("upload", "download") if any(((t := s.total(d)).inserts, t.updates, t.deletes))}
    assert not moved, f"a merge after convergence still moved rows: {moved}"


def test_a_rejected_insert_never_reaches_the_publisher_and_is_listed_by_the_handlers_name(world):
    assert world.row("P", 101) is None and world.row("S2", 101) is None
    assert world.row("S1", 101) is not None                       # the source keeps it
    reason = world.failed().get(world.rowguid("S1", 101))
    assert reason and f"rejected by business logic handler {HANDLER}: tickets marked reject are not taken" in reason
    # what the handler logged is in the session's summary and history
    s1 = next(s for s in world.first.subscriptions if s.subscription == "S1")
    assert "refused ticket 101 from S1" in s1.notes
    with connect(world.urls["P"]) as r:
        history = [row["message"] or "" for row in store.select_rows(r, "MSmerge_sessions", {"subscription": "S1"})]
    assert any("refused ticket 101 from S1" in m for m in history), history


def test_a_custom_row_is_applied_and_replicates_to_the_other_subscriber_and_back(world):
    assert [r and r["v"] for r in world.everywhere(102)] == ["lower:abc"] * 3
    assert [r and r["n"] for r in world.everywhere(6)] == [0] * 3


def test_a_stores_delete_is_a_soft_delete_everywhere(world):
    assert world.everywhere(5) == [{"code": "C5", "v": "v5", "n": 10, "deleted": 1}] * 3


def test_update_conflicts_are_decided_by_the_handler(world):
    assert [r and r["v"] for r in world.everywhere(7)] == ["s7!sub"] * 3
    assert [r and r["v"] for r in world.everywhere(8)] == ["p8"] * 3
    assert [r and r["v"] for r in world.everywhere(9)] == ["p9+s9!custom"] * 3
    assert [r and r["v"] for r in world.everywhere(10)] == ["p10"] * 3          # Default: the publisher's priority
    with connect(world.urls["P"]) as r:
        reasons = {row["reason_text"] for row in store.select_rows(r, "MSmerge_conflicts_info")}
    for chose in ("the subscriber's version", "the publisher's version", "its own row"):
        assert f"business logic handler {HANDLER} chose {chose}" in reasons, reasons


def test_update_delete_conflicts_are_decided_by_the_handler(world):
    assert [r and r["v"] for r in world.everywhere(11)] == ["kept"] * 3       # Custom keeps the row
    assert world.everywhere(12) == [None] * 3                                  # the subscriber's delete
    assert world.everywhere(13) == [None] * 3                                  # the publisher's delete


def test_a_duplicate_key_is_rewritten_by_the_error_handler(world):
    codes = sorted((world.row("P", 120)["code"], world.row("P", 121)["code"]))
    assert codes in (["X1", "X1-120"], ["X1", "X1-121"]), codes
    for who in ("S1", "S2"):
        assert sorted((world.row(who, 120)["code"], world.row(who, 121)["code"])) == codes, who


def test_a_handler_that_raises_fails_that_row_only_naming_the_handler(world):
    assert world.row("P", 14)["v"] == "v14" and world.row("P", 15)["v"] == "fine"
    reason = world.failed().get(world.rowguid("S1", 14))
    assert reason and f"business logic handler {HANDLER}.update failed: ValueError: ticket 14 cannot be updated" \
        in reason


def test_a_custom_row_whose_value_does_not_fit_its_column_fails_that_row_naming_the_handler_and_column(world):
    for id_, why in ((16, "'many' is not an integer"), (17, "too large")):
        assert world.row("P", id_)["v"] == f"v{id_}" and world.row("P", id_)["n"] == 10
        reason = world.failed().get(world.rowguid("S1", id_)) or ""
        assert f"business logic handler {HANDLER}.update returned a row that does not fit" in reason, reason
        assert "column n" in reason and why in reason, reason


@pytest.mark.parametrize("path, why", [
    ("tests.support.handlers:NotAHandler", "is not a subclass of sparksync.handlers.BusinessLogicHandler"),
    ("tests.support.nowhere:Tickets", "cannot be imported: ModuleNotFoundError"),
])
def test_a_handler_that_cannot_be_used_is_refused_at_setup_by_name(tmp_path, path, why):
    url = f"sqlite:///{tmp_path / 'p.db'}"
    with connect(url) as r:
        r.execute(ddl("sqlite"))
    topology = parse_topology({
        "publisher": {"name": "P", "database": url, "snapshot_dir": str(tmp_path / "snap")},
        "publications": [{"name": "Pub", "articles": [{"table": "Ticket", "business_logic": path}]}],
        "subscriptions": [{"name": "S", "publication": "Pub", "database": f"sqlite:///{tmp_path / 's.db'}"}]},
        tmp_path)
    with pytest.raises(ConfigurationError) as e:
        setup(topology, lambda: pytest.fail("Spark must not start"))
    text = str(e.value)
    assert "articles (Ticket).business_logic" in text and path in text and why in text, text
    with connect(url) as r:
        assert store.metadata_version(r) is None


def test_status_failed_changes_and_validate_agree_on_the_rows_a_handler_kept_apart(world):
    """A rejected row and rows the handler failed on leave S1 unlike the publisher: status counts S1's failed
    uploads, the failed changes list them, validate fails S1 alone (S2 holds what the publisher holds), and status
    then names S1 as needing care."""
    from sparksync import api

    def subscription(name: str) -> dict:
        return next(e for e in api.status(world.topology)["subscriptions"] if e["name"] == name)

    assert subscription("S1")["failed_upload"] >= 4 and subscription("S2")["failed_upload"] == 0
    assert world.rowguid("S1", 101) in {str(f["rowguid"]) for f in api.failed_changes(world.topology)}
    report = api.validate(world.topology, "Pub", checksum=True, spark=world.spark)
    assert {r.subscription: r.ok for r in report.subscriptions} == {"S1": False, "S2": True}, report.to_dict()
    status = api.status(world.topology)
    assert not status["ok"] and any("S1" in p and "validation" in p for p in status["problems"]), status["problems"]
    assert not any("S2" in p for p in status["problems"]), status["problems"]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_the_agents_compensating_delete_is_not_given_to_the_handler(kind, spark, tmp_path, request):
    """compensate_for_errors: a store's insert the publisher refuses (a code taken there) is undone at the store by
    the agent's compensating delete. The article's handler turns every delete into a soft delete, but the
    compensating delete is the agent's own write: the store's row goes (given to the handler it would stay, flagged,
    and come back as an update the publisher refuses again, merge after merge)."""
    with databases(tmp_path, lambda: request.getfixturevalue("pg_admin_url")) as dbs:
        urls = {"P": dbs.url(kind, "cpub"), "S1": dbs.url("sqlite", "cs1")}
        with connect(urls["P"]) as r:
            r.execute(ddl(kind))
            r.executemany(f'INSERT INTO "Ticket" ("id", "code", "v", "n") VALUES ({r.p}, {r.p}, {r.p}, 10)',
                          [(i, f"C{i}", f"v{i}") for i in range(1, 6)])
        data = {"spark": {"driver_round_changes": 0 if kind == "postgresql" else 5000},
                "publisher": {"name": "P", "database": urls["P"], "snapshot_dir": str(tmp_path / "snap")},
                "publications": [{"name": "Pub", "articles": [{
                    "table": "Ticket", "business_logic": "tests.support.handlers:SoftDeletes",
                    "compensate_for_errors": True}]}],
                "subscriptions": [{"name": "S1", "publication": "Pub", "database": urls["S1"]}]}
        topology = parse_topology(data, tmp_path)
        setup(topology, lambda: spark)
        agent = MergeAgent(topology, spark)
        with connect(urls["P"]) as r:
            r.execute("""INSERT INTO "Ticket" ("id", "code", "v", "n") VALUES (501, 'DUP', 'hq', 1)""")
        with connect(urls["S1"]) as r:
            r.execute("""INSERT INTO "Ticket" ("id", "code", "v", "n", "deleted") VALUES (500, 'DUP', 'store', 1, 0)""")
            r.execute('DELETE FROM "Ticket" WHERE "id" = 2')          # a delete of its own: the handler's
        first = agent.run(MergeOptions())
        second = agent.run(MergeOptions())
        third = agent.run(MergeOptions())
        assert first.ok and second.ok and third.ok, [s.errors for s in first.subscriptions]
        for who in ("P", "S1"):
            with connect(urls[who]) as r:
                rows = {i: (c, d) for i, c, d in r.query('SELECT "id", "code", "deleted" FROM "Ticket"')}
            assert 500 not in rows, (who, rows)                        # compensated: gone, not soft-deleted
            assert rows[501] == ("DUP", 0) and rows[2] == ("C2", 1), (who, rows)     # the store's delete: soft
        moved = [(s.subscription, d) for s in third.subscriptions for d in ("upload", "download")
                 if any((s.total(d).inserts, s.total(d).updates, s.total(d).deletes))]
        assert not moved, moved
