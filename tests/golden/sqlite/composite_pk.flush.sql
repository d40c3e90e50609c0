UPDATE "Order Line" SET "row_guid" = lower(substr(printf('%012x', CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)), 1, 8) || '-' || substr(printf('%012x', CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)), 9, 4) || '-7' || substr(hex(randomblob(2)), 2, 3) || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) || substr(hex(randomblob(2)), 2, 3) || '-' || hex(randomblob(6)))
 WHERE rowid IN (SELECT rid FROM temp.sparksync_new_rows WHERE tablenick = 40)
-- statement
INSERT INTO "MSmerge_contents" (tablenick, rowguid, generation, lineage, colv)
SELECT 40, t."row_guid", __GEN__, '{"7":1}', json_object('OrderID', json_array(7, 1), 'Line No', json_array(7, 1), 'Qty', json_array(7, 1))
  FROM temp.sparksync_new_rows AS n JOIN "Order Line" AS t ON t.rowid = n.rid
 WHERE n.tablenick = 40
-- statement
INSERT INTO "MSmerge_contents" (tablenick, rowguid, generation, lineage, colv)
SELECT 40, p.rowguid, __GEN__, CASE WHEN coalesce(c.lineage, ts.lineage) IS NULL THEN '{"7":1}' ELSE json_set(coalesce(c.lineage, ts.lineage), '$."7"', coalesce((SELECT max(value) FROM json_each(coalesce(c.lineage, ts.lineage))), 0) + 1) END,       CASE WHEN p.ins = 1 THEN json_object('OrderID', json_array(7, CASE WHEN coalesce(c.lineage, ts.lineage) IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(coalesce(c.lineage, ts.lineage))), 0) + 1 END), 'Line No', json_array(7, CASE WHEN coalesce(c.lineage, ts.lineage) IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(coalesce(c.lineage, ts.lineage))), 0) + 1 END), 'Qty', json_array(7, CASE WHEN coalesce(c.lineage, ts.lineage) IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(coalesce(c.lineage, ts.lineage))), 0) + 1 END)) ELSE json_patch(coalesce(c.colv, '{}'), json_object('OrderID', CASE WHEN p.m1 = '1' THEN json_array(7, CASE WHEN coalesce(c.lineage, ts.lineage) IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(coalesce(c.lineage, ts.lineage))), 0) + 1 END) ELSE json(json_extract(coalesce(c.colv, '{}'), '$."OrderID"')) END, 'Line No', CASE WHEN p.m2 = '1' THEN json_array(7, CASE WHEN coalesce(c.lineage, ts.lineage) IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(coalesce(c.lineage, ts.lineage))), 0) + 1 END) ELSE json(json_extract(coalesce(c.colv, '{}'), '$."Line No"')) END, 'Qty', CASE WHEN p.m3 = '1' THEN json_array(7, CASE WHEN coalesce(c.lineage, ts.lineage) IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each(coalesce(c.lineage, ts.lineage))), 0) + 1 END) ELSE json(json_extract(coalesce(c.colv, '{}'), '$."Qty"')) END)) END
  FROM (SELECT rowguid, max(op = 1) AS ins, max(substr(cols, 1, 1)) AS m1, max(substr(cols, 2, 1)) AS m2, max(substr(cols, 3, 1)) AS m3
          FROM "claimed" WHERE tablenick = 40 AND op <> 3 AND rowguid IS NOT NULL GROUP BY rowguid) AS p
  JOIN "Order Line" AS t ON t."row_guid" = p.rowguid
  LEFT JOIN "MSmerge_contents" AS c ON c.tablenick = 40 AND c.rowguid = p.rowguid
  LEFT JOIN "MSmerge_tombstone" AS ts ON ts.tablenick = 40 AND ts.rowguid = p.rowguid
 WHERE true
ON CONFLICT (tablenick, rowguid) DO UPDATE SET
  generation = excluded.generation, lineage = excluded.lineage, colv = excluded.colv
-- statement
DELETE FROM "MSmerge_tombstone" WHERE tablenick = 40
   AND rowguid IN (SELECT rowguid FROM "claimed" WHERE tablenick = 40 AND op <> 3)
   AND EXISTS (SELECT 1 FROM "Order Line" AS t WHERE t."row_guid" = "MSmerge_tombstone".rowguid)
-- statement
INSERT INTO "MSmerge_tombstone" (tablenick, rowguid, type, lineage, generation)
SELECT 40, p.rowguid, 1, CASE WHEN coalesce(c.lineage, ts.lineage) IS NULL THEN '{"7":1}' ELSE json_set(coalesce(c.lineage, ts.lineage), '$."7"', coalesce((SELECT max(value) FROM json_each(coalesce(c.lineage, ts.lineage))), 0) + 1) END, __GEN__
  FROM (SELECT DISTINCT rowguid FROM "claimed" WHERE tablenick = 40 AND op = 3 AND rowguid IS NOT NULL) AS p
  LEFT JOIN "MSmerge_contents" AS c ON c.tablenick = 40 AND c.rowguid = p.rowguid
  LEFT JOIN "MSmerge_tombstone" AS ts ON ts.tablenick = 40 AND ts.rowguid = p.rowguid
 WHERE NOT EXISTS (SELECT 1 FROM "Order Line" AS t WHERE t."row_guid" = p.rowguid)
ON CONFLICT (tablenick, rowguid) DO UPDATE SET
  type = 1, lineage = excluded.lineage, generation = excluded.generation
-- statement
DELETE FROM "MSmerge_contents" WHERE tablenick = 40 AND rowguid IN (SELECT rowguid FROM "claimed" WHERE tablenick = 40 AND op = 3)
  AND NOT EXISTS (SELECT 1 FROM "Order Line" AS t WHERE t."row_guid" = "MSmerge_contents".rowguid)
