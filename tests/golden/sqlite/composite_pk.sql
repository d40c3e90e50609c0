DROP TRIGGER IF EXISTS "MSmerge_ins_0F9B2C1E12344ABC8DEF000000000001"
-- statement
DROP TRIGGER IF EXISTS "MSmerge_upd_0F9B2C1E12344ABC8DEF000000000001"
-- statement
DROP TRIGGER IF EXISTS "MSmerge_del_0F9B2C1E12344ABC8DEF000000000001"
-- statement
CREATE TRIGGER "MSmerge_ins_0F9B2C1E12344ABC8DEF000000000001" AFTER INSERT ON "Order Line"
WHEN (SELECT applying FROM "MSmerge_replica") = 0
BEGIN
  UPDATE "Order Line" SET "row_guid" = lower(substr(printf('%012x', CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)), 1, 8) || '-' || substr(printf('%012x', CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)), 9, 4) || '-7' || substr(hex(randomblob(2)), 2, 3) || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) || substr(hex(randomblob(2)), 2, 3) || '-' || hex(randomblob(6)))
   WHERE "row_guid" IS NULL AND "OrderID" IS NEW."OrderID" AND "Line No" IS NEW."Line No";
  INSERT INTO "MSmerge_contents" (tablenick, rowguid, generation, lineage, colv)
  SELECT 40,
         coalesce(NEW."row_guid", (SELECT "row_guid" FROM "Order Line" WHERE "OrderID" IS NEW."OrderID" AND "Line No" IS NEW."Line No")),
         (SELECT generation FROM "MSmerge_genhistory" WHERE genstatus = 0), CASE WHEN ts.l IS NULL THEN '{"7":1}' ELSE json_set(ts.l, '$."7"', coalesce((SELECT max(value) FROM json_each(ts.l)), 0) + 1) END, json_object('OrderID', json_array(7, CASE WHEN ts.l IS NULL THEN 1 ELSE (coalesce((SELECT max(value) FROM json_each(ts.l)), 0) + 1) END), 'Line No', json_array(7, CASE WHEN ts.l IS NULL THEN 1 ELSE (coalesce((SELECT max(value) FROM json_each(ts.l)), 0) + 1) END), 'Qty', json_array(7, CASE WHEN ts.l IS NULL THEN 1 ELSE (coalesce((SELECT max(value) FROM json_each(ts.l)), 0) + 1) END))
    FROM (SELECT (SELECT t.lineage FROM "MSmerge_tombstone" t WHERE t.tablenick = 40 AND t.rowguid = NEW."row_guid") AS l) AS ts
   WHERE true
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    generation = excluded.generation,
    lineage = json_set(lineage, '$."7"', coalesce((SELECT max(value) FROM json_each(lineage)), 0) + 1),
    colv = json_object('OrderID', json_array(7, (coalesce((SELECT max(value) FROM json_each(lineage)), 0) + 1)), 'Line No', json_array(7, (coalesce((SELECT max(value) FROM json_each(lineage)), 0) + 1)), 'Qty', json_array(7, (coalesce((SELECT max(value) FROM json_each(lineage)), 0) + 1)));
  DELETE FROM "MSmerge_tombstone" WHERE tablenick = 40 AND rowguid = NEW."row_guid";
END
-- statement
CREATE TRIGGER "MSmerge_upd_0F9B2C1E12344ABC8DEF000000000001" AFTER UPDATE ON "Order Line"
WHEN (SELECT applying FROM "MSmerge_replica") = 0 AND OLD."row_guid" IS NOT NULL
  AND (OLD."OrderID" IS NOT NEW."OrderID" OR OLD."Line No" IS NOT NEW."Line No" OR OLD."Qty" IS NOT NEW."Qty")
BEGIN
  INSERT INTO "MSmerge_contents" (tablenick, rowguid, generation, lineage, colv)
  VALUES (40, NEW."row_guid", (SELECT generation FROM "MSmerge_genhistory" WHERE genstatus = 0), '{"7":1}', json_patch('{}', json_object('OrderID', CASE WHEN OLD."OrderID" IS NOT NEW."OrderID" THEN json_array(7, 1) ELSE json(json_extract('{}', '$."OrderID"')) END, 'Line No', CASE WHEN OLD."Line No" IS NOT NEW."Line No" THEN json_array(7, 1) ELSE json(json_extract('{}', '$."Line No"')) END, 'Qty', CASE WHEN OLD."Qty" IS NOT NEW."Qty" THEN json_array(7, 1) ELSE json(json_extract('{}', '$."Qty"')) END)))
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    generation = excluded.generation,
    lineage = json_set(lineage, '$."7"', coalesce((SELECT max(value) FROM json_each(lineage)), 0) + 1),
    colv = json_patch(coalesce(colv, '{}'), json_object('OrderID', CASE WHEN OLD."OrderID" IS NOT NEW."OrderID" THEN json_array(7, (coalesce((SELECT max(value) FROM json_each(lineage)), 0) + 1)) ELSE json(json_extract(coalesce(colv, '{}'), '$."OrderID"')) END, 'Line No', CASE WHEN OLD."Line No" IS NOT NEW."Line No" THEN json_array(7, (coalesce((SELECT max(value) FROM json_each(lineage)), 0) + 1)) ELSE json(json_extract(coalesce(colv, '{}'), '$."Line No"')) END, 'Qty', CASE WHEN OLD."Qty" IS NOT NEW."Qty" THEN json_array(7, (coalesce((SELECT max(value) FROM json_each(lineage)), 0) + 1)) ELSE json(json_extract(coalesce(colv, '{}'), '$."Qty"')) END));
END
-- statement
CREATE TRIGGER "MSmerge_del_0F9B2C1E12344ABC8DEF000000000001" AFTER DELETE ON "Order Line"
WHEN (SELECT applying FROM "MSmerge_replica") = 0 AND OLD."row_guid" IS NOT NULL
BEGIN
  INSERT INTO "MSmerge_tombstone" (tablenick, rowguid, type, lineage, generation)
  SELECT 40, OLD."row_guid", 1, CASE WHEN cur.l IS NULL THEN '{"7":1}' ELSE json_set(cur.l, '$."7"', coalesce((SELECT max(value) FROM json_each(cur.l)), 0) + 1) END, (SELECT generation FROM "MSmerge_genhistory" WHERE genstatus = 0)
    FROM (SELECT (SELECT c.lineage FROM "MSmerge_contents" c WHERE c.tablenick = 40 AND c.rowguid = OLD."row_guid") AS l) AS cur
   WHERE true
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    type = 1, lineage = excluded.lineage, generation = excluded.generation;
  DELETE FROM "MSmerge_contents" WHERE tablenick = 40 AND rowguid = OLD."row_guid";
END
