DROP TRIGGER IF EXISTS "MSmerge_ins_0F9B2C1E12344ABC8DEF000000000001"
-- statement
DROP TRIGGER IF EXISTS "MSmerge_upd_0F9B2C1E12344ABC8DEF000000000001"
-- statement
DROP TRIGGER IF EXISTS "MSmerge_del_0F9B2C1E12344ABC8DEF000000000001"
-- statement
CREATE TRIGGER "MSmerge_ins_0F9B2C1E12344ABC8DEF000000000001" AFTER INSERT ON "Order Line"
WHEN NEW."row_guid" IS NOT NULL AND (SELECT applying FROM "MSmerge_replica") = 0
BEGIN
  INSERT INTO "MSmerge_pending" (tablenick, rowguid, op, cols) VALUES (40, NEW."row_guid", 1, NULL);
END
-- statement
CREATE TRIGGER "MSmerge_upd_0F9B2C1E12344ABC8DEF000000000001" AFTER UPDATE ON "Order Line"
WHEN OLD."row_guid" IS NOT NULL AND (SELECT applying FROM "MSmerge_replica") = 0
  AND (OLD."OrderID" IS NOT NEW."OrderID" OR OLD."Line No" IS NOT NEW."Line No" OR OLD."Qty" IS NOT NEW."Qty")
BEGIN
  INSERT INTO "MSmerge_pending" (tablenick, rowguid, op, cols) VALUES (40, NEW."row_guid", 2,CASE WHEN OLD."OrderID" IS NOT NEW."OrderID" THEN '1' ELSE '0' END || CASE WHEN OLD."Line No" IS NOT NEW."Line No" THEN '1' ELSE '0' END || CASE WHEN OLD."Qty" IS NOT NEW."Qty" THEN '1' ELSE '0' END);
END
-- statement
CREATE TRIGGER "MSmerge_del_0F9B2C1E12344ABC8DEF000000000001" AFTER DELETE ON "Order Line"
WHEN OLD."row_guid" IS NOT NULL AND (SELECT applying FROM "MSmerge_replica") = 0
BEGIN
  INSERT INTO "MSmerge_pending" (tablenick, rowguid, op, cols) VALUES (40, OLD."row_guid", 3, NULL);
END
