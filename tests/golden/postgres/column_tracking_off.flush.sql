INSERT INTO "sparksync"."msmerge_contents" AS c0 (tablenick, rowguid, generation, lineage, colv)
SELECT 30, p.rowguid, __GEN__, CASE WHEN coalesce(c.lineage, ts.lineage) IS NULL THEN '{"7": 1}'::jsonb ELSE coalesce(c.lineage, ts.lineage) || jsonb_build_object('7', coalesce((SELECT max(e.value::bigint) FROM jsonb_each_text(coalesce(c.lineage, ts.lineage)) AS e), 0) + 1) END, NULL::jsonb
  FROM (SELECT rowguid, bool_or(op = 1) AS ins
          FROM "claimed" WHERE tablenick = 30 AND op <> 3 AND rowguid IS NOT NULL GROUP BY rowguid) AS p
  JOIN "Sales"."Customer" AS t ON t."row_guid" = p.rowguid
  LEFT JOIN "sparksync"."msmerge_contents" AS c ON c.tablenick = 30 AND c.rowguid = p.rowguid
  LEFT JOIN "sparksync"."msmerge_tombstone" AS ts ON ts.tablenick = 30 AND ts.rowguid = p.rowguid
ON CONFLICT (tablenick, rowguid) DO UPDATE SET
  generation = EXCLUDED.generation, lineage = EXCLUDED.lineage, colv = EXCLUDED.colv
-- statement
DELETE FROM "sparksync"."msmerge_tombstone" AS ts USING (SELECT DISTINCT rowguid FROM "claimed" WHERE tablenick = 30 AND op <> 3) AS live
 WHERE ts.tablenick = 30 AND ts.rowguid = live.rowguid
   AND EXISTS (SELECT 1 FROM "Sales"."Customer" AS t WHERE t."row_guid" = ts.rowguid)
-- statement
INSERT INTO "sparksync"."msmerge_tombstone" AS t0 (tablenick, rowguid, type, lineage, generation)
SELECT 30, p.rowguid, 1, CASE WHEN coalesce(c.lineage, ts.lineage) IS NULL THEN '{"7": 1}'::jsonb ELSE coalesce(c.lineage, ts.lineage) || jsonb_build_object('7', coalesce((SELECT max(e.value::bigint) FROM jsonb_each_text(coalesce(c.lineage, ts.lineage)) AS e), 0) + 1) END, __GEN__
  FROM (SELECT DISTINCT rowguid FROM "claimed" WHERE tablenick = 30 AND op = 3 AND rowguid IS NOT NULL) AS p
  LEFT JOIN "sparksync"."msmerge_contents" AS c ON c.tablenick = 30 AND c.rowguid = p.rowguid
  LEFT JOIN "sparksync"."msmerge_tombstone" AS ts ON ts.tablenick = 30 AND ts.rowguid = p.rowguid
 WHERE NOT EXISTS (SELECT 1 FROM "Sales"."Customer" AS t WHERE t."row_guid" = p.rowguid)
ON CONFLICT (tablenick, rowguid) DO UPDATE SET
  type = 1, lineage = EXCLUDED.lineage, generation = EXCLUDED.generation
-- statement
DELETE FROM "sparksync"."msmerge_contents" AS c USING (SELECT DISTINCT rowguid FROM "claimed" WHERE tablenick = 30 AND op = 3) AS gone
 WHERE c.tablenick = 30 AND c.rowguid = gone.rowguid
   AND NOT EXISTS (SELECT 1 FROM "Sales"."Customer" AS t WHERE t."row_guid" = c.rowguid)
