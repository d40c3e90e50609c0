DROP TRIGGER IF EXISTS "MSmerge_ins_0F9B2C1E12344ABC8DEF000000000001" ON "public"."Order Line"
-- statement
DROP TRIGGER IF EXISTS "MSmerge_upd_0F9B2C1E12344ABC8DEF000000000001" ON "public"."Order Line"
-- statement
DROP TRIGGER IF EXISTS "MSmerge_del_0F9B2C1E12344ABC8DEF000000000001" ON "public"."Order Line"
-- statement
CREATE OR REPLACE FUNCTION "sparksync"."msmerge_ins_0F9B2C1E12344ABC8DEF000000000001"() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF current_setting('sparksync.applying', true) = 'on' THEN RETURN NULL; END IF;
  INSERT INTO "sparksync"."msmerge_pending" (tablenick, rowguid, op) SELECT 40, n."row_guid", 1 FROM new_rows AS n
   WHERE n."row_guid" IS NOT NULL;
  RETURN NULL;
END
$fn$
-- statement
CREATE OR REPLACE FUNCTION "sparksync"."msmerge_upd_0F9B2C1E12344ABC8DEF000000000001"() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF current_setting('sparksync.applying', true) = 'on' THEN RETURN NULL; END IF;
IF (SELECT count(*) FROM new_rows) > 64 THEN
    EXECUTE $s0F9B2C1E12344ABC8DEF000000000001$  INSERT INTO "sparksync"."msmerge_pending" (tablenick, rowguid, op, cols)
  SELECT 40, n."row_guid", 2, concat(CASE WHEN o."OrderID" IS DISTINCT FROM n."OrderID" THEN '1' ELSE '0' END, CASE WHEN o."Line No" IS DISTINCT FROM n."Line No" THEN '1' ELSE '0' END, CASE WHEN o."Qty" IS DISTINCT FROM n."Qty" THEN '1' ELSE '0' END)
    FROM new_rows AS n JOIN old_rows AS o ON o."row_guid" = n."row_guid"
   WHERE (o."OrderID" IS DISTINCT FROM n."OrderID" OR o."Line No" IS DISTINCT FROM n."Line No" OR o."Qty" IS DISTINCT FROM n."Qty")
$s0F9B2C1E12344ABC8DEF000000000001$;
  ELSE
  INSERT INTO "sparksync"."msmerge_pending" (tablenick, rowguid, op, cols)
  SELECT 40, n."row_guid", 2, concat(CASE WHEN o."OrderID" IS DISTINCT FROM n."OrderID" THEN '1' ELSE '0' END, CASE WHEN o."Line No" IS DISTINCT FROM n."Line No" THEN '1' ELSE '0' END, CASE WHEN o."Qty" IS DISTINCT FROM n."Qty" THEN '1' ELSE '0' END)
    FROM new_rows AS n JOIN old_rows AS o ON o."row_guid" = n."row_guid"
   WHERE (o."OrderID" IS DISTINCT FROM n."OrderID" OR o."Line No" IS DISTINCT FROM n."Line No" OR o."Qty" IS DISTINCT FROM n."Qty")
;
  END IF;
  RETURN NULL;
END
$fn$
-- statement
CREATE OR REPLACE FUNCTION "sparksync"."msmerge_del_0F9B2C1E12344ABC8DEF000000000001"() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF current_setting('sparksync.applying', true) = 'on' THEN RETURN NULL; END IF;
  INSERT INTO "sparksync"."msmerge_pending" (tablenick, rowguid, op) SELECT 40, o."row_guid", 3 FROM old_rows AS o
   WHERE o."row_guid" IS NOT NULL;
  RETURN NULL;
END
$fn$
-- statement
CREATE TRIGGER "MSmerge_ins_0F9B2C1E12344ABC8DEF000000000001" AFTER INSERT ON "public"."Order Line"
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION "sparksync"."msmerge_ins_0F9B2C1E12344ABC8DEF000000000001"()
-- statement
CREATE TRIGGER "MSmerge_upd_0F9B2C1E12344ABC8DEF000000000001" AFTER UPDATE ON "public"."Order Line"
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION "sparksync"."msmerge_upd_0F9B2C1E12344ABC8DEF000000000001"()
-- statement
CREATE TRIGGER "MSmerge_del_0F9B2C1E12344ABC8DEF000000000001" AFTER DELETE ON "public"."Order Line"
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION "sparksync"."msmerge_del_0F9B2C1E12344ABC8DEF000000000001"()
