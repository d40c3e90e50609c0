DROP TABLE IF EXISTS temp.sparksync_gone
-- statement
CREATE TEMP TABLE sparksync_gone AS
SELECT p.rowguid, c.rowid AS crow, coalesce(c.lineage, ts.lineage) AS base
  FROM (SELECT rowguid FROM "MSmerge_log_0F9B2C1E12344ABC8DEF000000000001" WHERE op = 3 AND rowguid IS NOT NULL) AS p
  LEFT JOIN "MSmerge_contents" AS c ON c.tablenick = 30 AND c.rowguid = p.rowguid
  LEFT JOIN "MSmerge_tombstone" AS ts ON ts.tablenick = 30 AND ts.rowguid = p.rowguid
-- statement
INSERT INTO "MSmerge_tombstone" (tablenick, rowguid, type, lineage, generation)
SELECT 30, p.rowguid, 1, CASE WHEN p.base IS NULL THEN '{"7":1}' ELSE json_set(p.base, '$."7"', coalesce((SELECT max(value) FROM json_each(p.base)), 0) + 1) END, __GEN__
  FROM temp.sparksync_gone AS p
 WHERE true
ON CONFLICT (tablenick, rowguid) DO UPDATE SET
  type = 1, lineage = excluded.lineage, generation = excluded.generation
-- statement
DELETE FROM "MSmerge_contents" WHERE rowid IN (SELECT crow FROM temp.sparksync_gone WHERE crow IS NOT NULL)
-- statement
DROP TABLE temp.sparksync_gone
-- statement
DROP TABLE IF EXISTS temp.sparksync_changed
-- statement
CREATE TEMP TABLE sparksync_changed AS
SELECT p.k0, p.ins, p.n, p.m1, p.m2, p.m3, i."row_guid" AS rowguid,
       c.rowid AS crow, CASE WHEN c.rowid IS NULL AND i."row_guid" IS NOT NULL THEN (SELECT ts.lineage FROM "MSmerge_tombstone" AS ts WHERE ts.tablenick = 30 AND ts.rowguid = i."row_guid") END AS tlin
  FROM (SELECT k0, max(op = 1) AS ins, min(rowid) AS n, max(substr(cols, 1, 1)) AS m1, max(substr(cols, 2, 1)) AS m2, max(substr(cols, 3, 1)) AS m3
          FROM "MSmerge_log_0F9B2C1E12344ABC8DEF000000000001" WHERE op <> 3 GROUP BY k0) AS p
  LEFT JOIN "MSmerge_ids_0F9B2C1E12344ABC8DEF000000000001" AS i ON i."CustomerID" = p.k0
  LEFT JOIN "MSmerge_contents" AS c ON c.tablenick = 30 AND c.rowguid = i."row_guid"
-- statement
UPDATE "MSmerge_contents" AS c SET generation = __GEN__, lineage = CASE WHEN c.lineage IS NULL THEN '{"7":1}' ELSE json_set(c.lineage, '$."7"', coalesce((SELECT max(value) FROM json_each(c.lineage)), 0) + 1) END,
       colv = CASE WHEN p.ins = 1 THEN json_object('CustomerID', json_array(7, CASE WHEN c.lineage IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(c.lineage)), 0) + 1 END), 'Full Name', json_array(7, CASE WHEN c.lineage IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(c.lineage)), 0) + 1 END), 'Notes', json_array(7, CASE WHEN c.lineage IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(c.lineage)), 0) + 1 END)) ELSE json_patch(coalesce(c.colv, '{}'), json_object('CustomerID', CASE WHEN p.m1 = '1' THEN json_array(7, CASE WHEN c.lineage IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(c.lineage)), 0) + 1 END) ELSE json(json_extract(coalesce(c.colv, '{}'), '$."CustomerID"')) END, 'Full Name', CASE WHEN p.m2 = '1' THEN json_array(7, CASE WHEN c.lineage IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(c.lineage)), 0) + 1 END) ELSE json(json_extract(coalesce(c.colv, '{}'), '$."Full Name"')) END, 'Notes', CASE WHEN p.m3 = '1' THEN json_array(7, CASE WHEN c.lineage IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(c.lineage)), 0) + 1 END) ELSE json(json_extract(coalesce(c.colv, '{}'), '$."Notes"')) END)) END
  FROM temp.sparksync_changed AS p
 WHERE c.rowid = p.crow
-- statement
INSERT INTO "MSmerge_contents" (tablenick, rowguid, generation, lineage, colv)
SELECT 30, p.rowguid, __GEN__, CASE WHEN p.tlin IS NULL THEN '{"7":1}' ELSE json_set(p.tlin, '$."7"', coalesce((SELECT max(value) FROM json_each(p.tlin)), 0) + 1) END,       CASE WHEN p.ins = 1 THEN json_object('CustomerID', json_array(7, CASE WHEN p.tlin IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(p.tlin)), 0) + 1 END), 'Full Name', json_array(7, CASE WHEN p.tlin IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(p.tlin)), 0) + 1 END), 'Notes', json_array(7, CASE WHEN p.tlin IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(p.tlin)), 0) + 1 END)) ELSE json_patch(coalesce(NULL, '{}'), json_object('CustomerID', CASE WHEN p.m1 = '1' THEN json_array(7, CASE WHEN p.tlin IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(p.tlin)), 0) + 1 END) ELSE json(json_extract(coalesce(NULL, '{}'), '$."CustomerID"')) END, 'Full Name', CASE WHEN p.m2 = '1' THEN json_array(7, CASE WHEN p.tlin IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(p.tlin)), 0) + 1 END) ELSE json(json_extract(coalesce(NULL, '{}'), '$."Full Name"')) END, 'Notes', CASE WHEN p.m3 = '1' THEN json_array(7, CASE WHEN p.tlin IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(p.tlin)), 0) + 1 END) ELSE json(json_extract(coalesce(NULL, '{}'), '$."Notes"')) END)) END
  FROM temp.sparksync_changed AS p
 WHERE p.rowguid IS NOT NULL AND p.crow IS NULL
-- statement
DROP TABLE IF EXISTS temp.sparksync_fresh
-- statement
CREATE TEMP TABLE sparksync_fresh AS
WITH g AS MATERIALIZED (SELECT lower(substr(printf('%012x', CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)), 1, 8) || '-' || substr(printf('%012x', CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)), 9, 4) || '-7' || substr(hex(randomblob(2)), 2, 3) || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) || substr(hex(randomblob(2)), 2, 3) || '-') AS pre, abs(random()) % 140737488355328 AS b)
SELECT p.k0, g.pre || printf('%012x', g.b + p.n) AS rowguid
  FROM temp.sparksync_changed AS p, g
 WHERE p.rowguid IS NULL AND EXISTS (SELECT 1 FROM "Customer" AS t WHERE t."CustomerID" = p.k0)
-- statement
INSERT INTO "MSmerge_ids_0F9B2C1E12344ABC8DEF000000000001" ("CustomerID", "row_guid") SELECT k0, rowguid FROM temp.sparksync_fresh ORDER BY rowguid
-- statement
INSERT INTO "MSmerge_contents" (tablenick, rowguid, generation, lineage, colv)
SELECT 30, rowguid, __GEN__, '{"7":1}', json_object('CustomerID', json_array(7, 1), 'Full Name', json_array(7, 1), 'Notes', json_array(7, 1))
  FROM temp.sparksync_fresh ORDER BY rowguid
-- statement
DROP TABLE temp.sparksync_fresh
-- statement
DROP TABLE temp.sparksync_changed
-- statement
DELETE FROM "MSmerge_log_0F9B2C1E12344ABC8DEF000000000001"
