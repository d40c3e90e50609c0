{#- The flush of one article's entries of the tracking log ({{ source }}) into its metadata, set-based.
    Whatever a row went through since the last flush, what it is now decides: a row that exists gets one
    lineage bump in MSmerge_contents (an inserted one gets every column at the new version, an updated
    one the columns its entries name) and loses its tombstone; a row
    logged as deleted that no longer exists gets a tombstone and loses its contents. __GEN__ is the
    generation the changes go to.
    lineage and colv: merge_flush_lineage.sql. -#}
{% from "sqlite/templates/merge_flush_lineage.sql" import first_lineage, bump_once, base, colv_all, colv_first, colv_changed with context %}
{% set mine = "tablenick = " ~ tablenick %}
{#- rows inserted without a rowguid (claim_pending noted them in {{ new_rows }}): a rowguid, and the
    first version of every column -#}
UPDATE {{ table }} SET {{ rowguid }} = {{ new_guid }}
 WHERE rowid IN (SELECT rid FROM {{ new_rows }} WHERE {{ mine }})
{%- if inserts %}
-- statement
{#- a web device notes the rows its application inserted (its outbox tells an insert from an update) -#}
INSERT OR IGNORE INTO {{ inserts }} (tablenick, rowguid)
SELECT {{ tablenick }}, t.{{ rowguid }} FROM {{ new_rows }} AS n JOIN {{ table }} AS t ON t.rowid = n.rid WHERE n.{{ mine }}
 UNION SELECT {{ tablenick }}, rowguid FROM {{ source }} WHERE {{ mine }} AND op = 1 AND rowguid IS NOT NULL
{%- endif %}
-- statement
INSERT INTO {{ contents }} (tablenick, rowguid, generation, lineage, colv)
SELECT {{ tablenick }}, t.{{ rowguid }}, __GEN__, {{ first_lineage }}, {% if column_tracking %}{{ colv_first() }}{% else %}NULL{% endif %}

  FROM {{ new_rows }} AS n JOIN {{ table }} AS t ON t.rowid = n.rid
 WHERE n.{{ mine }}
-- statement
INSERT INTO {{ contents }} (tablenick, rowguid, generation, lineage, colv)
SELECT {{ tablenick }}, p.rowguid, __GEN__, {{ bump_once(base) }},
{%- if column_tracking %}
       CASE WHEN p.ins = 1 THEN {{ colv_all() }} ELSE {{ colv_changed() }} END
{%- else %} NULL{% endif %}

  FROM (SELECT rowguid, max(op = 1) AS ins{% if column_tracking %}{% for c in columns %}, max(substr(cols, {{ c.pos }}, 1)) AS m{{ c.pos }}{% endfor %}{% endif %}

          FROM {{ source }} WHERE {{ mine }} AND op <> 3 AND rowguid IS NOT NULL GROUP BY rowguid) AS p
  JOIN {{ table }} AS t ON t.{{ rowguid }} = p.rowguid
  LEFT JOIN {{ contents }} AS c ON c.tablenick = {{ tablenick }} AND c.rowguid = p.rowguid
  LEFT JOIN {{ tombstone }} AS ts ON ts.tablenick = {{ tablenick }} AND ts.rowguid = p.rowguid
 WHERE true
ON CONFLICT (tablenick, rowguid) DO UPDATE SET
  generation = excluded.generation, lineage = excluded.lineage, colv = excluded.colv
-- statement
DELETE FROM {{ tombstone }} WHERE {{ mine }}
   AND rowguid IN (SELECT rowguid FROM {{ source }} WHERE {{ mine }} AND op <> 3)
   AND EXISTS (SELECT 1 FROM {{ table }} AS t WHERE t.{{ rowguid }} = {{ tombstone }}.rowguid)
-- statement
INSERT INTO {{ tombstone }} (tablenick, rowguid, type, lineage, generation)
SELECT {{ tablenick }}, p.rowguid, 1, {{ bump_once(base) }}, __GEN__
  FROM (SELECT DISTINCT rowguid FROM {{ source }} WHERE {{ mine }} AND op = 3 AND rowguid IS NOT NULL) AS p
  LEFT JOIN {{ contents }} AS c ON c.tablenick = {{ tablenick }} AND c.rowguid = p.rowguid
  LEFT JOIN {{ tombstone }} AS ts ON ts.tablenick = {{ tablenick }} AND ts.rowguid = p.rowguid
 WHERE NOT EXISTS (SELECT 1 FROM {{ table }} AS t WHERE t.{{ rowguid }} = p.rowguid)
ON CONFLICT (tablenick, rowguid) DO UPDATE SET
  type = 1, lineage = excluded.lineage, generation = excluded.generation
-- statement
DELETE FROM {{ contents }} WHERE {{ mine }} AND rowguid IN (SELECT rowguid FROM {{ source }} WHERE {{ mine }} AND op = 3)
  AND NOT EXISTS (SELECT 1 FROM {{ table }} AS t WHERE t.{{ rowguid }} = {{ contents }}.rowguid)
