"""Seed 001's procedures at a real PostgreSQL subscriber: the generated Vendor procedures match the
golden file (the seed's parameters and bitmask logic) and behave as the seed says."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from sparksync.dialects import connect
from sparksync.errors import RowNotFound
from sparksync.names import TableName
from sparksync.rows import RowCodec
from sparksync.transactional.delivery.calls import effective_command, parse_command, procedure_statements
from sparksync.transactional.delivery.subscriber import Applier, ArticleTarget, Command, error_number
from sparksync.types import Kind, SqlType
from tests.support.transactional import VENDOR_DDL

GOLDEN = Path(__file__).parent.parent / "golden" / "postgres" / "vendor_procedures.sql"
VENDOR = TableName("Purchasing", "Vendor")
COLS = [("VendorID", SqlType(Kind.INTEGER)), ("AccountNumber", SqlType(Kind.TEXT, length=15)),
        ("Name", SqlType(Kind.TEXT, length=50)), ("CreditRating", SqlType(Kind.SMALLINT)),
        ("PreferredVendorStatus", SqlType(Kind.BOOLEAN)), ("ActiveFlag", SqlType(Kind.BOOLEAN)),
        ("PurchasingWebServiceURL", SqlType(Kind.TEXT, length=1024)), ("ModifiedDate", SqlType(Kind.TIMESTAMP))]
NAMES = [c for c, _ in COLS]
CODEC = RowCodec(COLS)
T0 = dt.datetime(2024, 5, 1, 10, 0)


def render(op: str, text: str | None = None) -> list[str]:
    from sparksync.dialects.postgres.dialect import PostgresDialect

    return procedure_statements(PostgresDialect(), effective_command(text, op, VENDOR, True), VENDOR, COLS, ["VendorID"])


def test_generated_vendor_procedures_match_the_golden_file():
    text = "\n-- statement\n".join(render("ins") + render("upd") + render("del"))
    assert text.strip() == GOLDEN.read_text().strip()
    upd = render("upd")[1]        # after the DROP of an older parameter list
    # the seed's SCALL parameters (c1..c8 = null, pkc1, bitmap) and bitmask tests, byte by byte
    assert ("(c1 integer = NULL, c2 varchar(15) = NULL, c3 varchar(50) = NULL, c4 smallint = NULL, c5 boolean = NULL, "
            "c6 boolean = NULL, c7 varchar(1024) = NULL, c8 timestamp = NULL, pkc1 integer = NULL, "
            "bitmap bytea = NULL)") in upd
    for k, col in enumerate(NAMES[1:], 2):
        bit = 1 << (k - 1)
        assert f'"{col}" = CASE get_byte(bitmap, 0) & {bit} WHEN {bit} THEN c{k} ELSE t."{col}" END' in upd
    assert 'WHERE t."VendorID" = pkc1' in upd and "USING ERRCODE = 'SS598'" in upd


def _target(ins=None, upd=None, dele=None) -> ArticleTarget:
    specs = [effective_command(x, op, VENDOR, True) for x, op in ((ins, "ins"), (upd, "upd"), (dele, "del"))]
    return ArticleTarget(1, "Purchasing.Vendor", VENDOR, tuple((c, t.to_dict()) for c, t in COLS), ("VendorID",),
                         *specs)


def _row(**kw) -> dict:
    base = dict(zip(NAMES, [1, "AW1", "Vendor 1", 1, True, True, None, T0]))
    base.update(kw)
    return base


def _cmd(op: str, before: dict | None, after: dict | None, n: int = 1) -> Command:
    enc = lambda r: None if r is None else CODEC.encode([r[c] for c in NAMES])  # noqa: E731
    return Command(n, n, 1, op, None, enc(after), enc(before))


@pytest.fixture
def vendor_db(dbs, pg_admin_url):
    url = dbs.url("postgresql", "procs")
    with connect(url) as r:
        for stmt in VENDOR_DDL["postgresql"]:
            r.execute(stmt)
    return url


@pytest.mark.parametrize("upd", ["SCALL sp_MSupd_PurchasingVendor", "MCALL sp_MSupd_PurchasingVendor",
                                 "CALL sp_MSupd_PurchasingVendor", "XCALL sp_MSupd_PurchasingVendor"])
def test_the_procedures_apply_as_the_seed_says(vendor_db, upd):
    t = _target(upd=upd, dele="XCALL sp_MSdel_PurchasingVendor" if upd.startswith("XCALL") else None)
    with connect(vendor_db) as r:
        _install(r, t)
        a = Applier(r, {1: t})
        with r.transaction():
            a.apply([_cmd("ins", None, _row())])
        # the subscriber's copy differs in CreditRating (someone edited it there)
        r.execute('UPDATE "Purchasing"."Vendor" SET "CreditRating" = 4 WHERE "VendorID" = 1')
        before, after = _row(), _row(Name="Renamed")
        with r.transaction():
            a.apply([_cmd("upd", before, after)])
        name, rating = r.query_one('SELECT "Name", "CreditRating" FROM "Purchasing"."Vendor"')
        assert name == "Renamed"
        # SCALL and MCALL set only the columns the bitmap marks; CALL and XCALL set every column
        assert rating == (4 if upd.split()[0] in ("SCALL", "MCALL") else 1)
        with pytest.raises(RowNotFound) as ei:        # an update that finds no row: error 20598
            with r.transaction():
                a.apply([_cmd("upd", _row(VendorID=9), _row(VendorID=9, Name="x"))])
        assert error_number(ei.value) == "20598"
        with r.transaction():
            a.apply([_cmd("del", after, None)])
        assert r.scalar('SELECT count(*) FROM "Purchasing"."Vendor"') == 0
        with pytest.raises(RowNotFound):
            with r.transaction():
                a.apply([_cmd("del", after, None)])


def _install(r, t: ArticleTarget) -> None:
    for op in ("ins", "upd", "del"):
        if t.spec(op).uses_procedure:
            for stmt in procedure_statements(r.dialect, t.spec(op), VENDOR, COLS, ["VendorID"]):
                r.execute(stmt)


def test_a_primary_key_update_moves_the_row(vendor_db):
    t = _target()
    with connect(vendor_db) as r:
        _install(r, t)
        a = Applier(r, {1: t})
        with r.transaction():
            a.apply([_cmd("ins", None, _row()), _cmd("upd", _row(), _row(VendorID=2), 2),
                     _cmd("upd", _row(VendorID=2), _row(VendorID=3), 3)])
        assert r.query('SELECT "VendorID" FROM "Purchasing"."Vendor"') == [(3,)]


def test_plain_sql_counts_rows_for_20598(vendor_db):
    t = _target("SQL", "SQL", "SQL")
    with connect(vendor_db) as r:
        a = Applier(r, {1: t})
        with r.transaction():
            a.apply([_cmd("ins", None, _row()), _cmd("upd", _row(), _row(CreditRating=5), 2)])
        assert r.scalar('SELECT "CreditRating" FROM "Purchasing"."Vendor"') == 5
        with pytest.raises(RowNotFound, match="1 of 2 upds"):
            with r.transaction():
                a.apply([_cmd("upd", _row(), _row(Name="a"), 3), _cmd("upd", _row(VendorID=7), _row(VendorID=7), 4)])


def test_none_replicates_nothing(vendor_db):
    t = _target(upd="NONE", dele="NONE")
    assert parse_command("NONE", "upd", VENDOR).replicated is False
    with connect(vendor_db) as r:
        _install(r, t)
        a = Applier(r, {1: t})
        with r.transaction():
            a.apply([_cmd("ins", None, _row()), _cmd("upd", _row(), _row(Name="x"), 2), _cmd("del", _row(), None, 3)])
        assert r.query('SELECT "Name" FROM "Purchasing"."Vendor"') == [("Vendor 1",)]
