DROP TRIGGER IF EXISTS "MSmerge_ins_0F9B2C1E12344ABC8DEF000000000001" ON "Sales"."Customer"
-- statement
DROP TRIGGER IF EXISTS "MSmerge_upd_0F9B2C1E12344ABC8DEF000000000001" ON "Sales"."Customer"
-- statement
DROP TRIGGER IF EXISTS "MSmerge_del_0F9B2C1E12344ABC8DEF000000000001" ON "Sales"."Customer"
-- statement
CREATE OR REPLACE FUNCTION "sparksync"."msmerge_ins_0F9B2C1E12344ABC8DEF000000000001"() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE g bigint;
BEGIN
  IF current_setting('sparksync.applying', true) = 'on' THEN RETURN NULL; END IF;
  g := "sparksync".writer_generation();
IF (SELECT count(*) FROM new_rows) > 64 THEN
    EXECUTE $s0F9B2C1E12344ABC8DEF000000000001$  INSERT INTO "sparksync"."msmerge_contents" AS c (tablenick, rowguid, generation, lineage, colv)
  SELECT 30, n."row_guid", $1, CASE WHEN ts.lineage IS NULL THEN '{"7": 1}'::jsonb ELSE ts.lineage || jsonb_build_object('7', coalesce((SELECT max(e.value::bigint) FROM jsonb_each_text(ts.lineage) AS e), 0) + 1) END,
"sparksync".colv_bump(NULL, '{"CustomerID": 1, "Full Name": 1, "Notes": 1}'::jsonb, 7, "sparksync".lineage_next(ts.lineage))
    FROM new_rows AS n
    LEFT JOIN "sparksync"."msmerge_tombstone" AS ts ON ts.tablenick = 30 AND ts.rowguid = n."row_guid"
   WHERE n."row_guid" IS NOT NULL
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    generation = EXCLUDED.generation,
    lineage = CASE WHEN c.lineage IS NULL THEN '{"7": 1}'::jsonb ELSE c.lineage || jsonb_build_object('7', coalesce((SELECT max(e.value::bigint) FROM jsonb_each_text(c.lineage) AS e), 0) + 1) END,
    colv = EXCLUDED.colv
$s0F9B2C1E12344ABC8DEF000000000001$ USING g;
  ELSE
  INSERT INTO "sparksync"."msmerge_contents" AS c (tablenick, rowguid, generation, lineage, colv)
  SELECT 30, n."row_guid", g, CASE WHEN ts.lineage IS NULL THEN '{"7": 1}'::jsonb ELSE ts.lineage || jsonb_build_object('7', coalesce((SELECT max(e.value::bigint) FROM jsonb_each_text(ts.lineage) AS e), 0) + 1) END,
"sparksync".colv_bump(NULL, '{"CustomerID": 1, "Full Name": 1, "Notes": 1}'::jsonb, 7, "sparksync".lineage_next(ts.lineage))
    FROM new_rows AS n
    LEFT JOIN "sparksync"."msmerge_tombstone" AS ts ON ts.tablenick = 30 AND ts.rowguid = n."row_guid"
   WHERE n."row_guid" IS NOT NULL
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    generation = EXCLUDED.generation,
    lineage = CASE WHEN c.lineage IS NULL THEN '{"7": 1}'::jsonb ELSE c.lineage || jsonb_build_object('7', coalesce((SELECT max(e.value::bigint) FROM jsonb_each_text(c.lineage) AS e), 0) + 1) END,
    colv = EXCLUDED.colv
;
  END IF;
IF (SELECT count(*) FROM new_rows) > 64 THEN
    EXECUTE $s0F9B2C1E12344ABC8DEF000000000001$  DELETE FROM "sparksync"."msmerge_tombstone" AS ts USING new_rows AS n
   WHERE ts.tablenick = 30 AND ts.rowguid = n."row_guid"
$s0F9B2C1E12344ABC8DEF000000000001$ USING g;
  ELSE
  DELETE FROM "sparksync"."msmerge_tombstone" AS ts USING new_rows AS n
   WHERE ts.tablenick = 30 AND ts.rowguid = n."row_guid"
;
  END IF;
  RETURN NULL;
END
$fn$
-- statement
CREATE OR REPLACE FUNCTION "sparksync"."msmerge_upd_0F9B2C1E12344ABC8DEF000000000001"() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE g bigint;
BEGIN
  IF current_setting('sparksync.applying', true) = 'on' THEN RETURN NULL; END IF;
  g := "sparksync".writer_generation();
IF (SELECT count(*) FROM new_rows) > 64 THEN
    EXECUTE $s0F9B2C1E12344ABC8DEF000000000001$  INSERT INTO "sparksync"."msmerge_contents" AS c (tablenick, rowguid, generation, lineage, colv)
  SELECT 30, n."row_guid", $1, '{"7": 1}'::jsonb,
"sparksync".colv_bump(NULL, coalesce((SELECT jsonb_object_agg(v.k, 1) FROM (VALUES ('CustomerID', o."CustomerID" IS DISTINCT FROM n."CustomerID"), ('Full Name', o."Full Name" IS DISTINCT FROM n."Full Name"), ('Notes', o."Notes"::text IS DISTINCT FROM n."Notes"::text)) AS v(k, ch) WHERE v.ch), '{}'::jsonb), 7, 1)
    FROM new_rows AS n JOIN old_rows AS o ON o."row_guid" = n."row_guid"
   WHERE (o."CustomerID" IS DISTINCT FROM n."CustomerID" OR o."Full Name" IS DISTINCT FROM n."Full Name" OR o."Notes"::text IS DISTINCT FROM n."Notes"::text)
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    generation = EXCLUDED.generation,
    lineage = CASE WHEN c.lineage IS NULL THEN '{"7": 1}'::jsonb ELSE c.lineage || jsonb_build_object('7', coalesce((SELECT max(e.value::bigint) FROM jsonb_each_text(c.lineage) AS e), 0) + 1) END,
    colv = "sparksync".colv_bump(c.colv, EXCLUDED.colv, 7, "sparksync".lineage_next(c.lineage))$s0F9B2C1E12344ABC8DEF000000000001$ USING g;
  ELSE
  INSERT INTO "sparksync"."msmerge_contents" AS c (tablenick, rowguid, generation, lineage, colv)
  SELECT 30, n."row_guid", g, '{"7": 1}'::jsonb,
"sparksync".colv_bump(NULL, coalesce((SELECT jsonb_object_agg(v.k, 1) FROM (VALUES ('CustomerID', o."CustomerID" IS DISTINCT FROM n."CustomerID"), ('Full Name', o."Full Name" IS DISTINCT FROM n."Full Name"), ('Notes', o."Notes"::text IS DISTINCT FROM n."Notes"::text)) AS v(k, ch) WHERE v.ch), '{}'::jsonb), 7, 1)
    FROM new_rows AS n JOIN old_rows AS o ON o."row_guid" = n."row_guid"
   WHERE (o."CustomerID" IS DISTINCT FROM n."CustomerID" OR o."Full Name" IS DISTINCT FROM n."Full Name" OR o."Notes"::text IS DISTINCT FROM n."Notes"::text)
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    generation = EXCLUDED.generation,
    lineage = CASE WHEN c.lineage IS NULL THEN '{"7": 1}'::jsonb ELSE c.lineage || jsonb_build_object('7', coalesce((SELECT max(e.value::bigint) FROM jsonb_each_text(c.lineage) AS e), 0) + 1) END,
    colv = "sparksync".colv_bump(c.colv, EXCLUDED.colv, 7, "sparksync".lineage_next(c.lineage));
  END IF;
  RETURN NULL;
END
$fn$
-- statement
CREATE OR REPLACE FUNCTION "sparksync"."msmerge_del_0F9B2C1E12344ABC8DEF000000000001"() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE g bigint;
BEGIN
  IF current_setting('sparksync.applying', true) = 'on' THEN RETURN NULL; END IF;
  g := "sparksync".writer_generation();
IF (SELECT count(*) FROM old_rows) > 64 THEN
    EXECUTE $s0F9B2C1E12344ABC8DEF000000000001$  WITH gone AS (
    DELETE FROM "sparksync"."msmerge_contents" AS c USING old_rows AS o
     WHERE c.tablenick = 30 AND c.rowguid = o."row_guid"
    RETURNING c.rowguid, c.lineage
  )
  INSERT INTO "sparksync"."msmerge_tombstone" AS t (tablenick, rowguid, type, lineage, generation)
  SELECT 30, o."row_guid", 1, CASE WHEN gone.lineage IS NULL THEN '{"7": 1}'::jsonb ELSE gone.lineage || jsonb_build_object('7', coalesce((SELECT max(e.value::bigint) FROM jsonb_each_text(gone.lineage) AS e), 0) + 1) END, $1
    FROM old_rows AS o LEFT JOIN gone ON gone.rowguid = o."row_guid"
   WHERE o."row_guid" IS NOT NULL
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    type = 1, lineage = EXCLUDED.lineage, generation = EXCLUDED.generation
$s0F9B2C1E12344ABC8DEF000000000001$ USING g;
  ELSE
  WITH gone AS (
    DELETE FROM "sparksync"."msmerge_contents" AS c USING old_rows AS o
     WHERE c.tablenick = 30 AND c.rowguid = o."row_guid"
    RETURNING c.rowguid, c.lineage
  )
  INSERT INTO "sparksync"."msmerge_tombstone" AS t (tablenick, rowguid, type, lineage, generation)
  SELECT 30, o."row_guid", 1, CASE WHEN gone.lineage IS NULL THEN '{"7": 1}'::jsonb ELSE gone.lineage || jsonb_build_object('7', coalesce((SELECT max(e.value::bigint) FROM jsonb_each_text(gone.lineage) AS e), 0) + 1) END, g
    FROM old_rows AS o LEFT JOIN gone ON gone.rowguid = o."row_guid"
   WHERE o."row_guid" IS NOT NULL
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    type = 1, lineage = EXCLUDED.lineage, generation = EXCLUDED.generation
;
  END IF;
  RETURN NULL;
END
$fn$
-- statement
CREATE TRIGGER "MSmerge_ins_0F9B2C1E12344ABC8DEF000000000001" AFTER INSERT ON "Sales"."Customer"
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION "sparksync"."msmerge_ins_0F9B2C1E12344ABC8DEF000000000001"()
-- statement
CREATE TRIGGER "MSmerge_upd_0F9B2C1E12344ABC8DEF000000000001" AFTER UPDATE ON "Sales"."Customer"
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION "sparksync"."msmerge_upd_0F9B2C1E12344ABC8DEF000000000001"()
-- statement
CREATE TRIGGER "MSmerge_del_0F9B2C1E12344ABC8DEF000000000001" AFTER DELETE ON "Sales"."Customer"
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION "sparksync"."msmerge_del_0F9B2C1E12344ABC8DEF000000000001"()
