DROP TRIGGER IF EXISTS "MSmerge_ins_0F9B2C1E12344ABC8DEF000000000001"
-- statement
DROP TRIGGER IF EXISTS "MSmerge_upd_0F9B2C1E12344ABC8DEF000000000001"
-- statement
DROP TRIGGER IF EXISTS "MSmerge_del_0F9B2C1E12344ABC8DEF000000000001"
-- statement
CREATE TRIGGER "MSmerge_ins_0F9B2C1E12344ABC8DEF000000000001" AFTER INSERT ON "Customer"
WHEN NEW."row_guid" IS NOT NULL AND (SELECT applying FROM "MSmerge_replica") = 0
BEGIN
  INSERT INTO "MSmerge_pending" (tablenick, rowguid, op, cols) VALUES (30, NEW."row_guid", 1, NULL);
END
-- statement
CREATE TRIGGER "MSmerge_upd_0F9B2C1E12344ABC8DEF000000000001" AFTER UPDATE ON "Customer"
WHEN OLD."row_guid" IS NOT NULL AND (SELECT applying FROM "MSmerge_replica") = 0
  AND (OLD."CustomerID" IS NOT NEW."CustomerID" OR OLD."Full Name" IS NOT NEW."Full Name" OR OLD."Notes" IS NOT NEW."Notes")
BEGIN
  INSERT INTO "MSmerge_pending" (tablenick, rowguid, op, cols) VALUES (30, NEW."row_guid", 2,CASE WHEN OLD."CustomerID" IS NOT NEW."CustomerID" THEN '1' ELSE '0' END || CASE WHEN OLD."Full Name" IS NOT NEW."Full Name" THEN '1' ELSE '0' END || CASE WHEN OLD."Notes" IS NOT NEW."Notes" THEN '1' ELSE '0' END);
END
-- statement
CREATE TRIGGER "MSmerge_del_0F9B2C1E12344ABC8DEF000000000001" AFTER DELETE ON "Customer"
WHEN OLD."row_guid" IS NOT NULL AND (SELECT applying FROM "MSmerge_replica") = 0
BEGIN
  INSERT INTO "MSmerge_pending" (tablenick, rowguid, op, cols) VALUES (30, OLD."row_guid", 3, NULL);
END
