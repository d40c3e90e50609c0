"""A device's download on its way in, without a server: frames read back as the door wrote them (each row's
rowguid put back where its values had it), the rows of several frames taken at their last appearance, the
batch's rowguids by article for its notices, and the SQLite staging table loaded many rows per statement."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sparksync.dialects import connect
from sparksync.dialects.sqlite import merge_staging
from sparksync.errors import ProtocolError
from sparksync.merge.session.changes import RETRY_GENERATION
from sparksync.merge.session.remote import frames
from sparksync.merge.session.remote.frames import change_schema, read_frames, wire_schema, write_changes
from sparksync.merge.session.remote.notices import batch_guids
from sparksync.merge.session.remote.spooled import Download
from sparksync.merge.session.remote.subscriber import _batch_of_rows, _by_batch

G1, G2, G3 = "0190a5b1-0000-7000-8000-000000000001", "0190a5b1-0000-7000-8000-000000000002", \
    "0190a5b1-0000-7000-8000-000000000003"


def _changes(*rows: tuple[int, str, int, str, str | None]) -> pa.Table:
    """Change rows of (tablenick, rowguid, generation, op, row JSON)."""
    return pa.Table.from_pylist([
        {"source": "HQ", "source_nick": 1, "tablenick": n, "rowguid": g, "generation": gen, "op": op,
         "lineage": f'{{"1":{gen}}}', "colv": None, "row": row, "target": None, "partition_id": 0}
        for n, g, gen, op, row in rows], schema=change_schema())


def test_a_frame_reads_back_the_rows_it_was_written_from():
    sent = _changes(
        (10, G1, 2, "upsert", f'{{"id":1,"rowguid":"{G1}","note":"{G1}"}}'),    # its rowguid twice: the first goes
        (10, G2, 2, "upsert", '{"id":2,"rowguid":null}'),                          # no rowguid in its values
        (10, G3, 2, "delete", None),
        (20, G3, 3, "remove", None),
        (20, G2, 3, "upsert", '{"id":2,"rowguid":"\\u0001"}'))                    # the mark's own text, kept
    [(got, meta)] = read_frames(write_changes(sent, {"source": "HQ", "source_nick": 1, "x": 1}), "download")
    assert meta["x"] == 1
    for column in ("tablenick", "rowguid", "generation", "op", "lineage", "colv", "row", "source", "source_nick"):
        assert got.column(column).to_pylist() == sent.column(column).to_pylist(), column
    assert got.column("partition_id").to_pylist() == [0] * 5 and got.column("target").null_count == 5


def test_an_empty_frame_reads_back_empty():
    [(got, meta)] = read_frames(write_changes(None, {"frames": 1}), "download")
    assert got.num_rows == 0 and got.schema == change_schema() and meta == {"frames": 1}


def _wire(rows: list[tuple[str | None, str | None, bool | None, int | None]]) -> pa.Table:
    """Wire rows of (rowguid, row JSON, guid_in_row, op code)."""
    n = len(rows)
    return pa.table([pa.array([10] * n, pa.int32()), pa.array([g for g, _, _, _ in rows], pa.string()),
                     pa.array([2] * n, pa.int64()), pa.array([o for _, _, _, o in rows], pa.int8()),
                     pa.array(['{"1":2}'] * n), pa.nulls(n, pa.string()), pa.array([t for _, t, _, _ in rows]),
                     pa.array([i for _, _, i, _ in rows], pa.bool_())], schema=wire_schema())


@pytest.mark.parametrize("row", [(G1, '{"id":1}', True, 0), (G1, None, True, 0), (None, '{"g":"\\u0001"}', True, 0)])
def test_a_row_that_says_its_rowguid_is_in_its_values_and_has_no_place_for_it_is_refused(row):
    with pytest.raises(ProtocolError, match="says its rowguid is in its values"):
        frames.from_wire(_wire([(G2, '{"g":"\\u0001"}', True, 0), row]), {}, "download")


def test_an_unknown_operation_is_named_after_the_rows_are_checked():
    with pytest.raises(ProtocolError, match="unknown operation 9"):
        frames.from_wire(_wire([(G1, None, None, 1), (G2, None, False, 9), (G3, None, False, None)]), {}, "download")
    with pytest.raises(ProtocolError, match="unknown operation None"):
        frames.from_wire(_wire([(G1, None, None, None)]), {}, "download")
    with pytest.raises(ProtocolError, match="says its rowguid"):
        frames.from_wire(_wire([(G1, None, None, 9), (G2, '{"id":1}', True, 0)]), {}, "download")


def _download(*tables: pa.Table, where: dict[int, int]) -> Download:
    """A download of a frame of each of ``tables``, its generations in the batches ``where`` says (as the door
    writes it: the first frame's metadata counts the frames)."""
    meta = {"frames": len(tables), "where": {str(g): k for g, k in where.items()}}
    return Download.of_bytes(b"".join(write_changes(t, meta if i == 0 else {}) for i, t in enumerate(tables)))


def _batches(download: Download, order: list[int]) -> dict[int, list[tuple[str, int]]]:
    seqs = _batch_of_rows(download, download.metadata)
    return {seq: list(zip(t.column("rowguid").to_pylist(), t.column("generation").to_pylist()))
            for seq, t in _by_batch(download, seqs, order)}


def test_rows_in_several_frames_are_applied_at_their_last_appearance_and_sent_again_ones_all():
    device = _changes((10, G3, RETRY_GENERATION, "upsert", '{"id":3}'))
    first = _changes((10, G1, 2, "upsert", '{"id":1}'), (10, G2, 2, "upsert", '{"id":2}'))
    second = _changes((10, G2, 3, "upsert", '{"id":20}'), (10, G3, 3, "upsert", '{"id":30}'))
    got = _batches(_download(device, first, second, where={RETRY_GENERATION: 0, 2: 0, 3: 1}), [0, 1])
    assert got == {0: [(G3, RETRY_GENERATION), (G1, 2)], 1: [(G2, 3), (G3, 3)]}


def test_rows_that_each_appear_once_are_the_frames_rows_as_they_are():
    empty, segment = _changes(), _changes((10, G2, 2, "upsert", "{}"), (20, G1, 2, "delete", None))
    assert _batches(_download(empty, segment, where={2: 0}), [0]) == {0: [(G2, 2), (G1, 2)]}
    same_guid = _changes((10, G1, 2, "upsert", "{}"), (20, G1, 2, "upsert", "{}"))     # two articles' rows
    assert _batches(_download(empty, same_guid, where={2: 0}), [0]) == {0: [(G1, 2), (G1, 2)]}
    assert _batches(_download(empty, where={}), [0]) == {0: []}     # a batch of no rows still comes (its watermark)


def test_a_batch_is_given_as_soon_as_its_last_row_is_read_not_after_the_whole_download(monkeypatch):
    monkeypatch.setattr(frames, "FRAME_ROWS", 10)
    rows = _changes(*[(10, f"0190a5b1-0000-7000-8000-{i:012d}", 2 + i // 25, "upsert", f'{{"id":{i}}}')
                      for i in range(100)])                 # generations 2..5, 25 rows each; record batches of 10
    download = _download(rows, where={2: 0, 3: 1, 4: 2, 5: 3})
    read = []
    reading = download.read
    monkeypatch.setattr(download, "read", lambda columns=None: ((i, read.append(t.num_rows) or t)
                                                                for i, t in reading(columns)))
    seqs = _batch_of_rows(download, download.metadata)
    read.clear()
    given = [(seq, t.num_rows, sum(read)) for seq, t in _by_batch(download, seqs, [0, 1, 2, 3])]
    assert given == [(0, 25, 30), (1, 25, 50), (2, 25, 80), (3, 25, 100)]


def test_a_frame_that_unpacks_to_more_than_it_says_or_is_cut_is_refused():
    body = write_changes(_changes((10, G1, 2, "upsert", '{"id":1}')), {"frames": 1})
    size, packed = frames.HEADER.unpack(body[len(frames.MAGIC):len(frames.MAGIC) + frames.HEADER.size])
    said_less = frames.MAGIC + frames.HEADER.pack(size - 40, packed) + body[len(frames.MAGIC) + frames.HEADER.size:]
    with pytest.raises(ProtocolError, match="unpacks to more than its header says"):
        list(Download.of_bytes(said_less).read())
    with pytest.raises(ProtocolError, match="truncated"):
        Download.of_bytes(body[:-5])
    with pytest.raises(ProtocolError, match="does not start"):
        Download.of_bytes(b"not frames at all")


@pytest.mark.parametrize("guids", [[G1.upper(), G2, G3.upper()], ["Ä-ROW", G2, "İ"], [G1, None, G3]],
                         ids=["ascii", "not ascii", "null"])
def test_a_batchs_rowguids_are_listed_by_article_lowercased_as_python_does(guids):
    rows = pa.table({"tablenick": pa.array([10, 20, 10], pa.int32()), "rowguid": pa.array(guids, pa.string())})
    assert batch_guids(rows) == {10: [str(guids[0]).lower(), str(guids[2]).lower()], 20: [str(guids[1]).lower()]}
    assert batch_guids(rows.slice(0, 0)) == {} and batch_guids(None) == {}


@pytest.mark.parametrize("limit", [None, 7], ids=["the driver's limit", "a few parameters a statement"])
def test_the_sqlite_staging_table_is_loaded_many_rows_per_statement(tmp_path, monkeypatch, limit):
    if limit is not None:
        monkeypatch.setattr(merge_staging, "_parameters", lambda replica: limit)
    rows = [(i, f"row {i}", None if i % 7 else i * 0.5) for i in range(2 * merge_staging.ROWS_PER_INSERT + 13)]
    with connect(f"sqlite:///{tmp_path / 'device.db'}") as r:
        r.execute("CREATE TEMP TABLE staged (a INTEGER, b TEXT, c REAL)")
        statements = []
        execute, executemany = r.execute, r.executemany
        monkeypatch.setattr(r, "execute", lambda sql, params=(): statements.append(len(params)) or execute(sql, params))
        monkeypatch.setattr(r, "executemany", lambda sql, rows_: statements.extend(len(p) for p in rows_)
                            or executemany(sql, rows_))
        r.dialect.load_staging(r, "staged", ["a", "b", "c"], [list(column) for column in zip(*rows)])
        monkeypatch.undo()
        assert r.query("SELECT a, b, c FROM staged ORDER BY rowid") == rows
    per = merge_staging.ROWS_PER_INSERT if limit is None else limit // 3
    assert max(statements) == 3 * per and len(statements) == -(-len(rows) // per)


def test_a_frame_written_in_an_order_reads_back_in_it_through_either_reader(monkeypatch):
    monkeypatch.setattr(frames, "FRAME_ROWS", 4)                   # several record batches
    rows = _changes(*[(10, f"0190a5b1-0000-7000-8000-{i:012d}", 2 + i % 3, "upsert", f'{{"id":{i}}}')
                      for i in range(10)])
    order = pa.array([9, 0, 5, 3, 8, 1, 7, 2, 6, 4], pa.int64())
    body = write_changes(rows, {"frames": 1}, order)
    expected = rows.take(order).column("rowguid").to_pylist()
    [(whole, meta)] = read_frames(body, "download")
    assert meta == {"frames": 1} and whole.column("rowguid").to_pylist() == expected
    read = [t for _, t in Download.of_bytes(body).read()]
    assert [t.num_rows for t in read] == [4, 4, 2]
    assert [g for t in read for g in t.column("rowguid").to_pylist()] == expected
