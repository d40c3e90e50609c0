"""The apply task takes a destination's batches in order: rows of a batch that arrive after a later batch's
(an input out of order: a bug upstream) stop that destination with an error instead of being applied
out of order or taken for applied by the later batch's watermark."""

from __future__ import annotations

import pyarrow as pa

from sparksync.merge.conflicts.resolvers import Replicas
from sparksync.merge.session.changes import CHANGE_SCHEMA
from sparksync.merge.session.plan import ApplyContext, BatchInfo, DestinationInfo, Route
from sparksync.merge.session.stream import BatchResult, apply_stream
from sparksync.result_rows import result_arrow_schema


def rows(generation: int, keys: list[str]) -> pa.RecordBatch:
    schema = result_arrow_schema(CHANGE_SCHEMA)
    n = len(keys)
    cols = {"source": ["P"] * n, "source_nick": [1] * n, "tablenick": [5] * n, "rowguid": keys,
            "generation": [generation] * n, "op": ["upsert"] * n, "lineage": ['{"1":2}'] * n, "colv": [None] * n,
            "row": ["{}"] * n, "target": [None] * n, "partition_id": [0] * n}
    batch = pa.RecordBatch.from_pydict(cols, schema=schema)
    return batch.append_column("apply_group", pa.array([0] * n, pa.int32()))


def context() -> ApplyContext:
    batches = [BatchInfo("P", 1, 0, 0, 0, [1], ends_within=3), BatchInfo("P", 1, 1, 0, 3, [1])]
    dest = DestinationInfo("S1", "sqlite:///nowhere/never-opened.db", 2, False, {"pubid": "x"}, {"P": batches}, False)
    routes = {("P", 3): [Route("P", 3, "S1", 0, 0, None, (5, "m")), Route("P", 3, "S1", 0, 1, (5, "m"), None)]}
    return ApplyContext("x", False, "sess", "Pub", {}, Replicas(1, {}, frozenset(), {}), {"S1": dest},
                        routes=routes, groups={"S1": 0})


def test_rows_of_an_earlier_part_after_a_later_one_stop_the_destination():
    # the second Arrow batch brings a key of part 0 after part 1's keys: out of order
    out = [BatchResult.from_row(r) for r in apply_stream(context(), [rows(3, ["x", "y"]), rows(3, ["a"])])]
    assert [(r.batch_seq, r.status) for r in out][0] == (0, "error")
    assert "arrived after a later batch" in out[0].message
    assert all(r.status == "error" for r in out)        # the later part is not applied either


def test_key_ranges_split_a_generation_the_same_whatever_the_arrow_batches():
    """Each row of a generation cut by key falls in exactly the part whose (after, upto] holds its
    (tablenick, rowguid) by Python's comparison (the order of keyset_cut's keys), however its rows are
    cut into Arrow batches."""
    import random
    import uuid

    from sparksync.merge.session.stream import _in_key_range

    rng = random.Random(3)
    keys = sorted({(rng.choice([2, 5, 9]), str(uuid.UUID(int=rng.getrandbits(128)))) for _ in range(500)})
    cuts = sorted(rng.sample(keys, 4))
    bounds = [None, *cuts, None]
    parts = list(zip(bounds, bounds[1:]))
    for _ in range(20):
        at = sorted(rng.sample(range(1, len(keys)), 3))
        seen: dict[tuple, int] = {}
        for lo, hi in zip([0, *at], [*at, len(keys)]):
            batch = pa.table({"tablenick": [k[0] for k in keys[lo:hi]], "rowguid": [k[1] for k in keys[lo:hi]]})
            for p, (after, upto) in enumerate(parts):
                got = _in_key_range(batch, after, upto)
                for k in zip(*(got.column(c).to_pylist() for c in ("tablenick", "rowguid"))) if got else []:
                    assert k not in seen, k
                    seen[k] = p
        assert set(seen) == set(keys)
        assert all((a is None or k > a) and (u is None or k <= u) for k, p in seen.items() for a, u in [parts[p]])
