{#- The flush of one article's claimed entries of the tracking log ({{ source }}: the connection's
    temporary table, filled by claim_pending) into its metadata, set-based. What a row is now decides:
    a row that exists gets one lineage bump in MSmerge_contents (an inserted one gets every column at the
    new version, an updated one the columns its entries name) and
    loses its tombstone; a row logged as deleted that no longer exists gets a tombstone and loses its
    contents. __GEN__ is the generation the changes go to. -#}
{% set fn = schema | q %}
{% set first_version = "'{\"" ~ replnick ~ "\": 1}'::jsonb" %}
{% macro bump(x) -%}
CASE WHEN {{ x }} IS NULL THEN {{ first_version }} ELSE {{ x }} || jsonb_build_object('{{ replnick }}', coalesce((SELECT max(e.value::bigint) FROM jsonb_each_text({{ x }}) AS e), 0) + 1) END
{%- endmacro %}
{% set base = "coalesce(c.lineage, ts.lineage)" %}
{% set mine = "tablenick = " ~ tablenick %}
{% macro changed() -%}
({% for chunk in columns | batch(45) %}jsonb_strip_nulls(jsonb_build_object({% for c in chunk %}{{ c.name | lit }}, CASE WHEN p.m{{ c.pos }} = '1' THEN 1 END{{ ", " if not loop.last }}{% endfor %})){{ " || " if not loop.last }}{% endfor %})
{%- endmacro %}
INSERT INTO {{ contents }} AS c0 (tablenick, rowguid, generation, lineage, colv)
SELECT {{ tablenick }}, p.rowguid, __GEN__, {{ bump(base) }},
{%- if column_tracking %}
       CASE WHEN p.ins
            THEN {{ fn }}.colv_bump(NULL, '{{ all_columns_json }}'::jsonb, {{ replnick }}, {{ fn }}.lineage_next({{ base }}))
            ELSE {{ fn }}.colv_bump(c.colv, {{ changed() }}, {{ replnick }}, {{ fn }}.lineage_next({{ base }})) END
{%- else %} NULL::jsonb{% endif %}

  FROM (SELECT rowguid, bool_or(op = 1) AS ins{% if column_tracking %}{% for c in columns %}, max(substr(cols, {{ c.pos }}, 1)) AS m{{ c.pos }}{% endfor %}{% endif %}

          FROM {{ source }} WHERE {{ mine }} AND op <> 3 AND rowguid IS NOT NULL GROUP BY rowguid) AS p
  JOIN {{ table }} AS t ON t.{{ rowguid }} = p.rowguid
  LEFT JOIN {{ contents }} AS c ON c.tablenick = {{ tablenick }} AND c.rowguid = p.rowguid
  LEFT JOIN {{ tombstone }} AS ts ON ts.tablenick = {{ tablenick }} AND ts.rowguid = p.rowguid
ON CONFLICT (tablenick, rowguid) DO UPDATE SET
  generation = EXCLUDED.generation, lineage = EXCLUDED.lineage, colv = EXCLUDED.colv
-- statement
DELETE FROM {{ tombstone }} AS ts USING (SELECT DISTINCT rowguid FROM {{ source }} WHERE {{ mine }} AND op <> 3) AS live
 WHERE ts.{{ mine }} AND ts.rowguid = live.rowguid
   AND EXISTS (SELECT 1 FROM {{ table }} AS t WHERE t.{{ rowguid }} = ts.rowguid)
-- statement
INSERT INTO {{ tombstone }} AS t0 (tablenick, rowguid, type, lineage, generation)
SELECT {{ tablenick }}, p.rowguid, 1, {{ bump(base) }}, __GEN__
  FROM (SELECT DISTINCT rowguid FROM {{ source }} WHERE {{ mine }} AND op = 3 AND rowguid IS NOT NULL) AS p
  LEFT JOIN {{ contents }} AS c ON c.tablenick = {{ tablenick }} AND c.rowguid = p.rowguid
  LEFT JOIN {{ tombstone }} AS ts ON ts.tablenick = {{ tablenick }} AND ts.rowguid = p.rowguid
 WHERE NOT EXISTS (SELECT 1 FROM {{ table }} AS t WHERE t.{{ rowguid }} = p.rowguid)
ON CONFLICT (tablenick, rowguid) DO UPDATE SET
  type = 1, lineage = EXCLUDED.lineage, generation = EXCLUDED.generation
-- statement
DELETE FROM {{ contents }} AS c USING (SELECT DISTINCT rowguid FROM {{ source }} WHERE {{ mine }} AND op = 3) AS gone
 WHERE c.{{ mine }} AND c.rowguid = gone.rowguid
   AND NOT EXISTS (SELECT 1 FROM {{ table }} AS t WHERE t.{{ rowguid }} = c.rowguid)
{%- if inserts %}
-- statement
{#- a web device notes the rows its application inserted (its outbox tells an insert from an update) -#}
INSERT INTO {{ inserts }} (tablenick, rowguid)
SELECT DISTINCT {{ tablenick }}, rowguid FROM {{ source }} WHERE {{ mine }} AND op = 1 AND rowguid IS NOT NULL
ON CONFLICT DO NOTHING
{%- endif %}
