{#- Merge change tracking for one article on PostgreSQL: statement-level triggers with transition
    tables, so a bulk statement costs one set-based write per metadata table, not one per row.
    The agent's own writes are skipped through the transaction-local setting sparksync.applying.
    Small statements run the function's cached plans (cheap for one-row transactions); large ones go
    through EXECUTE and are planned for the rows at hand, so neither kind inherits the other's plan. -#}
{% set tag = "$s" ~ artid ~ "$" %}
{% set big = 64 %}
{% macro run(stmt, rows) -%}
  IF (SELECT count(*) FROM {{ rows }}) > {{ big }} THEN
    EXECUTE {{ tag }}{{ stmt | replace("__GEN__", "$1") }}{{ tag }} USING g;
  ELSE
{{ stmt | replace("__GEN__", "g") }};
  END IF;
{%- endmacro %}
{% set fn = schema | q %}
{#- The lineage after one more local change, written inline: a call of a SQL function with a sub-select
    is never inlined by the planner and costs an executor start per row. -#}
{% set first_version = "'{\"" ~ replnick ~ "\": 1}'::jsonb" %}
{% macro bump(x) -%}
CASE WHEN {{ x }} IS NULL THEN {{ first_version }} ELSE {{ x }} || jsonb_build_object('{{ replnick }}', coalesce((SELECT max(e.value::bigint) FROM jsonb_each_text({{ x }}) AS e), 0) + 1) END
{%- endmacro %}
{% macro changed_any(o, n) -%}
({% for c in columns %}{{ o }}.{{ c.name | q }}{{ c.cmp }} IS DISTINCT FROM {{ n }}.{{ c.name | q }}{{ c.cmp }}{{ " OR " if not loop.last }}{% endfor %})
{%- endmacro %}
{% macro changed_cols(o, n) -%}
{% if column_tracking %}
coalesce((SELECT jsonb_object_agg(v.k, 1) FROM (VALUES {% for c in columns %}({{ c.name | lit }}, {{ o }}.{{ c.name | q }}{{ c.cmp }} IS DISTINCT FROM {{ n }}.{{ c.name | q }}{{ c.cmp }}){{ ", " if not loop.last }}{% endfor %}) AS v(k, ch) WHERE v.ch), '{}'::jsonb)
{%- else %}
NULL::jsonb
{%- endif %}
{%- endmacro %}
DROP TRIGGER IF EXISTS {{ ("MSmerge_ins_" ~ artid) | q }} ON {{ table }}
-- statement
DROP TRIGGER IF EXISTS {{ ("MSmerge_upd_" ~ artid) | q }} ON {{ table }}
-- statement
DROP TRIGGER IF EXISTS {{ ("MSmerge_del_" ~ artid) | q }} ON {{ table }}
-- statement
CREATE OR REPLACE FUNCTION {{ fn }}.{{ ("msmerge_ins_" ~ artid) | q }}() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE g bigint;
BEGIN
  IF current_setting('sparksync.applying', true) = 'on' THEN RETURN NULL; END IF;
  g := {{ fn }}.writer_generation();
{% set stmt1 %}
  INSERT INTO {{ contents }} AS c (tablenick, rowguid, generation, lineage, colv)
  SELECT {{ tablenick }}, n.{{ rowguid }}, __GEN__, {{ bump("ts.lineage") }},
         {% if column_tracking %}{{ fn }}.colv_bump(NULL, '{{ all_columns_json }}'::jsonb, {{ replnick }}, {{ fn }}.lineage_next(ts.lineage)){% else %}NULL{% endif %}

    FROM new_rows AS n
    LEFT JOIN {{ tombstone }} AS ts ON ts.tablenick = {{ tablenick }} AND ts.rowguid = n.{{ rowguid }}
   WHERE n.{{ rowguid }} IS NOT NULL
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    generation = EXCLUDED.generation,
    lineage = {{ bump("c.lineage") }},
    colv = EXCLUDED.colv
{% endset %}
{{ run(stmt1, "new_rows") }}
{% set stmt2 %}
  DELETE FROM {{ tombstone }} AS ts USING new_rows AS n
   WHERE ts.tablenick = {{ tablenick }} AND ts.rowguid = n.{{ rowguid }}
{% endset %}
{{ run(stmt2, "new_rows") }}
  RETURN NULL;
END
$fn$
-- statement
CREATE OR REPLACE FUNCTION {{ fn }}.{{ ("msmerge_upd_" ~ artid) | q }}() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE g bigint;
BEGIN
  IF current_setting('sparksync.applying', true) = 'on' THEN RETURN NULL; END IF;
  g := {{ fn }}.writer_generation();
{% set stmt3 %}
  INSERT INTO {{ contents }} AS c (tablenick, rowguid, generation, lineage, colv)
  SELECT {{ tablenick }}, n.{{ rowguid }}, __GEN__, {{ first_version }},
         {% if column_tracking %}{{ fn }}.colv_bump(NULL, {{ changed_cols("o", "n") }}, {{ replnick }}, 1){% else %}NULL{% endif %}

    FROM new_rows AS n JOIN old_rows AS o ON o.{{ rowguid }} = n.{{ rowguid }}
   WHERE {{ changed_any("o", "n") }}
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    generation = EXCLUDED.generation,
    lineage = {{ bump("c.lineage") }},
    colv = {% if column_tracking %}{{ fn }}.colv_bump(c.colv, EXCLUDED.colv, {{ replnick }}, {{ fn }}.lineage_next(c.lineage)){% else %}NULL{% endif %}
{% endset %}
{{ run(stmt3, "new_rows") }}
  RETURN NULL;
END
$fn$
-- statement
CREATE OR REPLACE FUNCTION {{ fn }}.{{ ("msmerge_del_" ~ artid) | q }}() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE g bigint;
BEGIN
  IF current_setting('sparksync.applying', true) = 'on' THEN RETURN NULL; END IF;
  g := {{ fn }}.writer_generation();
{% set stmt4 %}
  WITH gone AS (
    DELETE FROM {{ contents }} AS c USING old_rows AS o
     WHERE c.tablenick = {{ tablenick }} AND c.rowguid = o.{{ rowguid }}
    RETURNING c.rowguid, c.lineage
  )
  INSERT INTO {{ tombstone }} AS t (tablenick, rowguid, type, lineage, generation)
  SELECT {{ tablenick }}, o.{{ rowguid }}, 1, {{ bump("gone.lineage") }}, __GEN__
    FROM old_rows AS o LEFT JOIN gone ON gone.rowguid = o.{{ rowguid }}
   WHERE o.{{ rowguid }} IS NOT NULL
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    type = 1, lineage = EXCLUDED.lineage, generation = EXCLUDED.generation
{% endset %}
{{ run(stmt4, "old_rows") }}
  RETURN NULL;
END
$fn$
-- statement
CREATE TRIGGER {{ ("MSmerge_ins_" ~ artid) | q }} AFTER INSERT ON {{ table }}
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {{ fn }}.{{ ("msmerge_ins_" ~ artid) | q }}()
-- statement
CREATE TRIGGER {{ ("MSmerge_upd_" ~ artid) | q }} AFTER UPDATE ON {{ table }}
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {{ fn }}.{{ ("msmerge_upd_" ~ artid) | q }}()
-- statement
CREATE TRIGGER {{ ("MSmerge_del_" ~ artid) | q }} AFTER DELETE ON {{ table }}
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {{ fn }}.{{ ("msmerge_del_" ~ artid) | q }}()
