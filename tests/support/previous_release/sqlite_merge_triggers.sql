{#- Merge change tracking for one article on SQLite (seed 000, "Change Tracking for Unfiltered Tables").
    Row-level triggers; the agent's own writes are skipped through MSmerge_replica.applying.
    lineage: JSON object {"<replica nickname>": version}; colv: {"<column>": [nickname, version]}. -#}
{% macro bump(x) -%}
json_set({{ x }}, '$."{{ replnick }}"', coalesce((SELECT max(value) FROM json_each({{ x }})), 0) + 1)
{%- endmacro %}
{% macro next_version(x) -%}
(coalesce((SELECT max(value) FROM json_each({{ x }})), 0) + 1)
{%- endmacro %}
{% macro colv_update(base, version) -%}
{% if column_tracking %}
{% for chunk in columns | batch(50) %}json_patch({% endfor %}{{ base }}{% for chunk in columns | batch(50) %}, json_object({% for c in chunk %}{{ c.name | lit }}, CASE WHEN OLD.{{ c.name | q }} IS NOT NEW.{{ c.name | q }} THEN json_array({{ replnick }}, {{ version }}) ELSE json(json_extract({{ base }}, '$."{{ c.name }}"')) END{{ ", " if not loop.last }}{% endfor %})){% endfor %}
{% else %}
NULL
{%- endif %}
{%- endmacro %}
{% macro colv_all(version) -%}
{% if column_tracking %}
{% for chunk in columns | batch(50) %}{{ "json_patch(" if not loop.first }}{% endfor %}{% for chunk in columns | batch(50) %}{{ ", " if not loop.first }}json_object({% for c in chunk %}{{ c.name | lit }}, json_array({{ replnick }}, {{ version }}){{ ", " if not loop.last }}{% endfor %}){{ ")" if not loop.first }}{% endfor %}
{% else %}
NULL
{%- endif %}
{%- endmacro %}
{% set open_gen = "(SELECT generation FROM " ~ genhistory ~ " WHERE genstatus = 0)" %}
{% set first_lineage = "'{\"" ~ replnick ~ "\":1}'" %}
{#- A lineage read once per row (a sub-select in FROM: trigger bodies cannot have a WITH clause), and
    the first version of a row that has none written as a constant. -#}
{% macro bump_once(x) -%}
CASE WHEN {{ x }} IS NULL THEN {{ first_lineage }} ELSE {{ bump(x) }} END
{%- endmacro %}
{% macro next_once(x) -%}
CASE WHEN {{ x }} IS NULL THEN 1 ELSE {{ next_version(x) }} END
{%- endmacro %}
{% set not_applying = "(SELECT applying FROM " ~ replica_state ~ ") = 0" %}
DROP TRIGGER IF EXISTS {{ ("MSmerge_ins_" ~ artid) | q }}
-- statement
DROP TRIGGER IF EXISTS {{ ("MSmerge_upd_" ~ artid) | q }}
-- statement
DROP TRIGGER IF EXISTS {{ ("MSmerge_del_" ~ artid) | q }}
-- statement
CREATE TRIGGER {{ ("MSmerge_ins_" ~ artid) | q }} AFTER INSERT ON {{ table }}
WHEN {{ not_applying }}
BEGIN
  UPDATE {{ table }} SET {{ rowguid }} = {{ new_guid }}
   WHERE {{ rowguid }} IS NULL AND {% for c in pk %}{{ c | q }} IS NEW.{{ c | q }}{{ " AND " if not loop.last }}{% endfor %};
  INSERT INTO {{ contents }} (tablenick, rowguid, generation, lineage, colv)
  SELECT {{ tablenick }},
         coalesce(NEW.{{ rowguid }}, (SELECT {{ rowguid }} FROM {{ table }} WHERE {% for c in pk %}{{ c | q }} IS NEW.{{ c | q }}{{ " AND " if not loop.last }}{% endfor %})),
         {{ open_gen }}, {{ bump_once("ts.l") }}, {{ colv_all(next_once("ts.l")) }}
    FROM (SELECT (SELECT t.lineage FROM {{ tombstone }} t WHERE t.tablenick = {{ tablenick }} AND t.rowguid = NEW.{{ rowguid }}) AS l) AS ts
   WHERE true
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    generation = excluded.generation,
    lineage = {{ bump("lineage") }},
    colv = {{ colv_all(next_version("lineage")) }};
  DELETE FROM {{ tombstone }} WHERE tablenick = {{ tablenick }} AND rowguid = NEW.{{ rowguid }};
END
-- statement
CREATE TRIGGER {{ ("MSmerge_upd_" ~ artid) | q }} AFTER UPDATE ON {{ table }}
WHEN {{ not_applying }} AND OLD.{{ rowguid }} IS NOT NULL
  AND ({% for c in columns %}OLD.{{ c.name | q }} IS NOT NEW.{{ c.name | q }}{{ " OR " if not loop.last }}{% endfor %})
BEGIN
  INSERT INTO {{ contents }} (tablenick, rowguid, generation, lineage, colv)
  VALUES ({{ tablenick }}, NEW.{{ rowguid }}, {{ open_gen }}, {{ first_lineage }}, {{ colv_update("'{}'", "1") }})
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    generation = excluded.generation,
    lineage = {{ bump("lineage") }},
    colv = {{ colv_update("coalesce(colv, '{}')", next_version("lineage")) }};
END
-- statement
CREATE TRIGGER {{ ("MSmerge_del_" ~ artid) | q }} AFTER DELETE ON {{ table }}
WHEN {{ not_applying }} AND OLD.{{ rowguid }} IS NOT NULL
BEGIN
  INSERT INTO {{ tombstone }} (tablenick, rowguid, type, lineage, generation)
  SELECT {{ tablenick }}, OLD.{{ rowguid }}, 1, {{ bump_once("cur.l") }}, {{ open_gen }}
    FROM (SELECT (SELECT c.lineage FROM {{ contents }} c WHERE c.tablenick = {{ tablenick }} AND c.rowguid = OLD.{{ rowguid }}) AS l) AS cur
   WHERE true
  ON CONFLICT (tablenick, rowguid) DO UPDATE SET
    type = 1, lineage = excluded.lineage, generation = excluded.generation;
  DELETE FROM {{ contents }} WHERE tablenick = {{ tablenick }} AND rowguid = OLD.{{ rowguid }};
END
