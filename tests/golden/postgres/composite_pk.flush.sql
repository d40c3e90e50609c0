INSERT INTO "sparksync"."msmerge_contents" AS c0 (tablenick, rowguid, generation, lineage, colv)
SELECT 40, p.rowguid, __GEN__, CASE WHEN coalesce(c.lineage, ts.lineage) IS NULL THEN '{"7": 1}'::jsonb ELSE coalesce(c.lineage, ts.lineage) || jsonb_build_object('7', coalesce((SELECT max(e.value::bigint) FROM jsonb_each_text(coalesce(c.lineage, ts.lineage)) AS e), 0) + 1) END,       CASE WHEN p.ins
            THEN "sparksync".colv_bump(NULL, '{"OrderID": 1, "Line No": 1, "Qty": 1}'::jsonb, 7, "sparksync".lineage_next(coalesce(c.lineage, ts.lineage)))
            ELSE "sparksync".colv_bump(c.colv, (jsonb_strip_nulls(jsonb_build_object('OrderID', CASE WHEN p.m1 = '1' THEN 1 END, 'Line No', CASE WHEN p.m2 = '1' THEN 1 END, 'Qty', CASE WHEN p.m3 = '1' THEN 1 END))), 7, "sparksync".lineage_next(coalesce(c.lineage, ts.lineage))) END
  FROM (SELECT rowguid, bool_or(op = 1) AS ins, max(substr(cols, 1, 1)) AS m1, max(substr(cols, 2, 1)) AS m2, max(substr(cols, 3, 1)) AS m3
          FROM "claimed" WHERE tablenick = 40 AND op <> 3 AND rowguid IS NOT NULL GROUP BY rowguid) AS p
  JOIN "public"."Order Line" AS t ON t."row_guid" = p.rowguid
  LEFT JOIN "sparksync"."msmerge_contents" AS c ON c.tablenick = 40 AND c.rowguid = p.rowguid
  LEFT JOIN "sparksync"."msmerge_tombstone" AS ts ON ts.tablenick = 40 AND ts.rowguid = p.rowguid
ON CONFLICT (tablenick, rowguid) DO UPDATE SET
  generation = EXCLUDED.generation, lineage = EXCLUDED.lineage, colv = EXCLUDED.colv
-- statement
DELETE FROM "sparksync"."msmerge_tombstone" AS ts USING (SELECT DISTINCT rowguid FROM "claimed" WHERE tablenick = 40 AND op <> 3) AS live
 WHERE ts.tablenick = 40 AND ts.rowguid = live.rowguid
   AND EXISTS (SELECT 1 FROM "public"."Order Line" AS t WHERE t."row_guid" = ts.rowguid)
-- statement
INSERT INTO "sparksync"."msmerge_tombstone" AS t0 (tablenick, rowguid, type, lineage, generation)
SELECT 40, p.rowguid, 1, CASE WHEN coalesce(c.lineage, ts.lineage) IS NULL THEN '{"7": 1}'::jsonb ELSE coalesce(c.lineage, ts.lineage) || jsonb_build_object('7', coalesce((SELECT max(e.value::bigint) FROM jsonb_each_text(coalesce(c.lineage, ts.lineage)) AS e), 0) + 1) END, __GEN__
  FROM (SELECT DISTINCT rowguid FROM "claimed" WHERE tablenick = 40 AND op = 3 AND rowguid IS NOT NULL) AS p
  LEFT JOIN "sparksync"."msmerge_contents" AS c ON c.tablenick = 40 AND c.rowguid = p.rowguid
  LEFT JOIN "sparksync"."msmerge_tombstone" AS ts ON ts.tablenick = 40 AND ts.rowguid = p.rowguid
 WHERE NOT EXISTS (SELECT 1 FROM "public"."Order Line" AS t WHERE t."row_guid" = p.rowguid)
ON CONFLICT (tablenick, rowguid) DO UPDATE SET
  type = 1, lineage = EXCLUDED.lineage, generation = EXCLUDED.generation
-- statement
DELETE FROM "sparksync"."msmerge_contents" AS c USING (SELECT DISTINCT rowguid FROM "claimed" WHERE tablenick = 40 AND op = 3) AS gone
 WHERE c.tablenick = 40 AND c.rowguid = gone.rowguid
   AND NOT EXISTS (SELECT 1 FROM "public"."Order Line" AS t WHERE t."row_guid" = c.rowguid)
