"""The floor of a leaner change-tracking design, measured: what the same DML costs when its trigger
only appends (table, row, operation) to an unindexed log table, against the same DML untracked. The
logged table has what publishing gives a table, a rowguid column and its unique index (which every
insert, delete and non-HOT update maintains), so the floor is that of the design, not of a table
without them.

sparksync's tracking triggers (``bench/tracking_overhead.py``) write each changed row's metadata in
the write path (rowguid, contents with a lineage bump, tombstones). The "lean trigger" design of
issue 13 records only which row changed and moves the metadata work to a set-based flush before a
merge reads or applies; this script runs tracking_overhead's workload against that write path, so the
design's gain is known before it is built (docs/benchmarks.md keeps the latest run).

    .venv/bin/python bench/tracking_floor.py [--rows 50000]
"""

from __future__ import annotations

from tracking_overhead import DDL, main_with, workload

from sparksync.dialects import connect

LEAN = {   # the table's rowguid and its unique index (as publishing adds them), the log, and per operation
           # the trigger that appends to it
    "sqlite": ['ALTER TABLE "lean" ADD COLUMN row_guid TEXT', 'CREATE UNIQUE INDEX lean_guid ON "lean" (row_guid)',
               "CREATE TABLE log (tablenick integer, rid integer, op integer)"] + [
        f'CREATE TRIGGER "lean_{op.lower()}" AFTER {op} ON "lean" BEGIN '
        f"INSERT INTO log VALUES (30, {row}.rowid, {k}); END"
        for op, row, k in (("INSERT", "NEW", 1), ("UPDATE", "NEW", 2), ("DELETE", "OLD", 3))],
    "postgresql": ['ALTER TABLE "lean" ADD COLUMN row_guid uuid NOT NULL DEFAULT gen_random_uuid()',
                   'CREATE UNIQUE INDEX lean_guid ON "lean" (row_guid)',
                   "CREATE TABLE log (tablenick integer, rowguid uuid, op smallint)"] + [
        s for op, ref, rows, k in (("INSERT", "NEW TABLE AS new_rows", "new_rows", 1),
                                   ("UPDATE", "NEW TABLE AS new_rows", "new_rows", 2),
                                   ("DELETE", "OLD TABLE AS old_rows", "old_rows", 3))
        for s in (f"CREATE FUNCTION lean_{op.lower()}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                  "IF current_setting('sparksync.applying', true) = 'on' THEN RETURN NULL; END IF; "
                  f"INSERT INTO log SELECT 30, row_guid, {k} FROM {rows}; RETURN NULL; END $$",
                  f'CREATE TRIGGER lean_{op.lower()} AFTER {op} ON "lean" REFERENCING {ref} '
                  f"FOR EACH STATEMENT EXECUTE FUNCTION lean_{op.lower()}()")],
}


def run(kind: str, url: str, n: int) -> dict[str, tuple[float, float]]:
    with connect(url) as r:
        for t in ("plain", "lean"):
            r.execute(DDL[kind].format(t=t))
        for statement in LEAN[kind]:
            r.execute(statement)
        plain = workload(r, "plain", n)
        lean = workload(r, "lean", n)
    return {op: (plain[op], lean[op]) for op in plain}


def main() -> None:
    main_with(run, "tracking_floor", "The floor of lean change tracking (a trigger that only logs the changed row)",
              "lean-logged", "lean / plain",
              "tracking_overhead's DML on an untracked table and on one with a rowguid column and its unique index "
              "(as publishing adds them) whose trigger only appends (table, row, operation) to an unindexed log "
              "(SQLite: a row trigger; PostgreSQL: a statement trigger over the transition table). Compare with "
              "tracked / plain in 'What change tracking costs'",
              "Lean change tracking: DML rate vs untracked")


if __name__ == "__main__":
    main()
