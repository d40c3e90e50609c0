DROP TRIGGER IF EXISTS "MSmerge_ins_0F9B2C1E12344ABC8DEF000000000001"
-- statement
DROP TRIGGER IF EXISTS "MSmerge_upd_0F9B2C1E12344ABC8DEF000000000001"
-- statement
DROP TRIGGER IF EXISTS "MSmerge_del_0F9B2C1E12344ABC8DEF000000000001"
-- statement
CREATE TRIGGER "MSmerge_ins_0F9B2C1E12344ABC8DEF000000000001" AFTER INSERT ON "Customer"
WHEN (SELECT applying FROM "MSmerge_replica") = 0
BEGIN
  UPDATE "Customer" SET "row_guid" = lower(substr(printf('%012x', CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)), 1, 8) || '-' || substr(printf('%012x', CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)), 9, 4) || '-7' || substr(hex(randomblob(2)), 2, 3) || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) || substr(hex(randomblob(2)), 2, 3) || '-' || hex(randomblob(6)))
   WHERE "row_guid" IS NULL AND "CustomerID" IS NEW."CustomerID";
  INSERT INTO "MSmerge_contents" (tablenick, rowguid, generation, lineage, colv)
  SELECT 30,
         coalesce(NEW."row_guid", (SELECT "row_guid" FROM "Customer" WHERE "CustomerID" IS NEW."CustomerID")),
         (SELECT generation FROM "MSmerge_genhistory" WHERE genstatus = 0), CASE WHEN ts.l IS NULL THEN '{"7":1}' ELSE json_set(ts.l, '$."7"', coalesce((SELECT max(value) FROM json_each(ts.l)), 0) + 1) END, json_object('CustomerID', json_array(7, CASE WHEN ts.l IS NULL THEN 1 ELSE (coalesce((SELECT max(value) FROM json_each(ts.l)), 0) + 1) END), 'Full Name', json_array(7, CASE WHEN ts.l IS NULL THEN 1 ELSE (coalesce((SELECT max(value) FROM json_each(ts.l)), 0) + 1) END), 'Notes', json_array(7, CASE WHEN ts.l IS NULL THEN 1 ELSE (coalesce((SELECT max(value) FROM json_each(ts.l)), 0) + 1) END))
    FROM (SELECT (SELECT t.lineage FROM "MSmerge_tombstone" t WHERE t.tablenick = 30 AND t.rowguid = NEW."row_guid") AS l) AS ts
   WHERE true
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    generation = excluded.generation,
    lineage = json_set(lineage, '$."7"', coalesce((SELECT max(value) FROM json_each(lineage)), 0) + 1),
    colv = json_object('CustomerID', json_array(7, (coalesce((SELECT max(value) FROM json_each(lineage)), 0) + 1)), 'Full Name', json_array(7, (coalesce((SELECT max(value) FROM json_each(lineage)), 0) + 1)), 'Notes', json_array(7, (coalesce((SELECT max(value) FROM json_each(lineage)), 0) + 1)));
  DELETE FROM "MSmerge_tombstone" WHERE tablenick = 30 AND rowguid = NEW."row_guid";
END
-- statement
CREATE TRIGGER "MSmerge_upd_0F9B2C1E12344ABC8DEF000000000001" AFTER UPDATE ON "Customer"
WHEN (SELECT applying FROM "MSmerge_replica") = 0 AND OLD."row_guid" IS NOT NULL
  AND (OLD."CustomerID" IS NOT NEW."CustomerID" OR OLD."Full Name" IS NOT NEW."Full Name" OR OLD."Notes" IS NOT NEW."Notes")
BEGIN
  INSERT INTO "MSmerge_contents" (tablenick, rowguid, generation, lineage, colv)
  VALUES (30, NEW."row_guid", (SELECT generation FROM "MSmerge_genhistory" WHERE genstatus = 0), '{"7":1}', json_patch('{}', json_object('CustomerID', CASE WHEN OLD."CustomerID" IS NOT NEW."CustomerID" THEN json_array(7, 1) ELSE json(json_extract('{}', '$."CustomerID"')) END, 'Full Name', CASE WHEN OLD."Full Name" IS NOT NEW."Full Name" THEN json_array(7, 1) ELSE json(json_extract('{}', '$."Full Name"')) END, 'Notes', CASE WHEN OLD."Notes" IS NOT NEW."Notes" THEN json_array(7, 1) ELSE json(json_extract('{}', '$."Notes"')) END)))
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    generation = excluded.generation,
    lineage = json_set(lineage, '$."7"', coalesce((SELECT max(value) FROM json_each(lineage)), 0) + 1),
    colv = json_patch(coalesce(colv, '{}'), json_object('CustomerID', CASE WHEN OLD."CustomerID" IS NOT NEW."CustomerID" THEN json_array(7, (coalesce((SELECT max(value) FROM json_each(lineage)), 0) + 1)) ELSE json(json_extract(coalesce(colv, '{}'), '$."CustomerID"')) END, 'Full Name', CASE WHEN OLD."Full Name" IS NOT NEW."Full Name" THEN json_array(7, (coalesce((SELECT max(value) FROM json_each(lineage)), 0) + 1)) ELSE json(json_extract(coalesce(colv, '{}'), '$."Full Name"')) END, 'Notes', CASE WHEN OLD."Notes" IS NOT NEW."Notes" THEN json_array(7, (coalesce((SELECT max(value) FROM json_each(lineage)), 0) + 1)) ELSE json(json_extract(coalesce(colv, '{}'), '$."Notes"')) END));
END
-- statement
CREATE TRIGGER "MSmerge_del_0F9B2C1E12344ABC8DEF000000000001" AFTER DELETE ON "Customer"
WHEN (SELECT applying FROM "MSmerge_replica") = 0 AND OLD."row_guid" IS NOT NULL
BEGIN
  INSERT INTO "MSmerge_tombstone" (tablenick, rowguid, type, lineage, generation)
  SELECT 30, OLD."row_guid", 1, CASE WHEN cur.l IS NULL THEN '{"7":1}' ELSE json_set(cur.l, '$."7"', coalesce((SELECT max(value) FROM json_each(cur.l)), 0) + 1) END, (SELECT generation FROM "MSmerge_genhistory" WHERE genstatus = 0)
    FROM (SELECT (SELECT c.lineage FROM "MSmerge_contents" c WHERE c.tablenick = 30 AND c.rowguid = OLD."row_guid") AS l) AS cur
   WHERE true
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    type = 1, lineage = excluded.lineage, generation = excluded.generation;
  DELETE FROM "MSmerge_contents" WHERE tablenick = 30 AND rowguid = OLD."row_guid";
END
