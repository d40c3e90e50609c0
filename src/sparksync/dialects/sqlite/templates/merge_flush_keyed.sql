{#- The flush of one keyed article's log ({{ log }}: merge_triggers_keyed.sql) into its metadata, set-based.
    What a row is now decides: a rowguid a delete took away gets a tombstone and loses its contents; a row
    with a rowguid that changed gets one lineage bump in MSmerge_contents (a row inserted over it, every
    column at the new version; else the columns its entries name); a row without one (inserted since the
    last flush, or inserted again under a key whose row was deleted) gets a new rowguid in {{ ids }} and the
    first version of every column. New rowguids ascend in the log's order (one random head and base per
    flush, plus the row's first place in the log): the identity and contents indexes take them as appends. __GEN__ is the generation the
    changes go to. lineage and colv: merge_flush_lineage.sql. -#}
{% from "sqlite/templates/merge_flush_lineage.sql" import first_lineage, bump_once, next_once, base, colv_all, colv_first, colv_changed with context %}
{% set knames %}{% for k in keys %}{{ k.k }}{{ ", " if not loop.last }}{% endfor %}{% endset %}
{% macro same_key(a, b) -%}
{% for k in keys %}{{ a }}.{{ k.name }} = {{ b }}.{{ k.k }}{{ " AND " if not loop.last }}{% endfor %}
{%- endmacro %}
{% set fresh = "temp.sparksync_fresh" %}
{% set changed = "temp.sparksync_changed" %}
{% set gone = "temp.sparksync_gone" %}
DROP TABLE IF EXISTS {{ gone }}
-- statement
{#- each rowguid a delete took away: its contents row's rowid (NULL: none) and the lineage it had, looked up once -#}
CREATE TEMP TABLE sparksync_gone AS
SELECT p.rowguid, c.rowid AS crow, {{ base }} AS base
  FROM (SELECT rowguid FROM {{ log }} WHERE op = 3 AND rowguid IS NOT NULL) AS p
  LEFT JOIN {{ contents }} AS c ON c.tablenick = {{ tablenick }} AND c.rowguid = p.rowguid
  LEFT JOIN {{ tombstone }} AS ts ON ts.tablenick = {{ tablenick }} AND ts.rowguid = p.rowguid
-- statement
INSERT INTO {{ tombstone }} (tablenick, rowguid, type, lineage, generation)
SELECT {{ tablenick }}, p.rowguid, 1, {{ bump_once("p.base") }}, __GEN__
  FROM {{ gone }} AS p
 WHERE true
ON CONFLICT (tablenick, rowguid) DO UPDATE SET
  type = 1, lineage = excluded.lineage, generation = excluded.generation
-- statement
DELETE FROM {{ contents }} WHERE rowid IN (SELECT crow FROM {{ gone }} WHERE crow IS NOT NULL)
-- statement
DROP TABLE {{ gone }}
-- statement
DROP TABLE IF EXISTS {{ changed }}
-- statement
{#- each row logged as inserted or updated, once: its rowguid (NULL: it has none yet), whether it was inserted,
    which columns changed, its first entry's place in the log (a new row's rowguid is counted from it), and its
    contents row's rowid (NULL: none) or else its tombstone's lineage, looked up here once -#}
CREATE TEMP TABLE sparksync_changed AS
SELECT {% for k in keys %}p.{{ k.k }}, {% endfor %}p.ins, p.n{% if column_tracking %}{% for c in columns %}, p.m{{ c.pos }}{% endfor %}{% endif %}, i.{{ rowguid }} AS rowguid,
       c.rowid AS crow, CASE WHEN c.rowid IS NULL AND i.{{ rowguid }} IS NOT NULL THEN (SELECT ts.lineage FROM {{ tombstone }} AS ts WHERE ts.tablenick = {{ tablenick }} AND ts.rowguid = i.{{ rowguid }}) END AS tlin
  FROM (SELECT {{ knames }}, max(op = 1) AS ins, min(rowid) AS n{% if column_tracking %}{% for c in columns %}, max(substr(cols, {{ c.pos }}, 1)) AS m{{ c.pos }}{% endfor %}{% endif %}

          FROM {{ log }} WHERE op <> 3 GROUP BY {{ knames }}) AS p
  LEFT JOIN {{ ids }} AS i ON {{ same_key("i", "p") }}
  LEFT JOIN {{ contents }} AS c ON c.tablenick = {{ tablenick }} AND c.rowguid = i.{{ rowguid }}
-- statement
{#- a row with contents: its contents row updated where it is (by rowid: one probe, no upsert) -#}
UPDATE {{ contents }} AS c SET generation = __GEN__, lineage = {{ bump_once("c.lineage") }}
{%- if column_tracking %},
       colv = CASE WHEN p.ins = 1 THEN {{ colv_all(next_once("c.lineage")) }} ELSE {{ colv_changed(next_once("c.lineage")) }} END
{%- endif %}

  FROM {{ changed }} AS p
 WHERE c.rowid = p.crow
-- statement
{#- a row with a rowguid and no contents (its first change since a snapshot, or back after a delete: from its
    tombstone's lineage) -#}
INSERT INTO {{ contents }} (tablenick, rowguid, generation, lineage, colv)
SELECT {{ tablenick }}, p.rowguid, __GEN__, {{ bump_once("p.tlin") }},
{%- if column_tracking %}
       CASE WHEN p.ins = 1 THEN {{ colv_all(next_once("p.tlin")) }} ELSE {{ colv_changed(next_once("p.tlin"), "NULL") }} END
{%- else %} NULL{% endif %}

  FROM {{ changed }} AS p
 WHERE p.rowguid IS NOT NULL AND p.crow IS NULL
-- statement
DROP TABLE IF EXISTS {{ fresh }}
-- statement
CREATE TEMP TABLE sparksync_fresh AS
WITH g AS MATERIALIZED (SELECT {{ guid_prefix }} AS pre, abs(random()) % 140737488355328 AS b)
SELECT {% for k in keys %}p.{{ k.k }}, {% endfor %}g.pre || printf('%012x', g.b + p.n) AS rowguid
  FROM {{ changed }} AS p, g
 WHERE p.rowguid IS NULL AND EXISTS (SELECT 1 FROM {{ table }} AS t WHERE {{ same_key("t", "p") }})
-- statement
INSERT INTO {{ ids }} ({% for k in keys %}{{ k.name }}, {% endfor %}{{ rowguid }}) SELECT {{ knames }}, rowguid FROM {{ fresh }} ORDER BY rowguid
{%- if inserts %}
-- statement
{#- a web device notes the rows its application inserted (its outbox tells an insert from an update) -#}
INSERT OR IGNORE INTO {{ inserts }} (tablenick, rowguid) SELECT {{ tablenick }}, rowguid FROM {{ fresh }}
{%- endif %}
-- statement
INSERT INTO {{ contents }} (tablenick, rowguid, generation, lineage, colv)
SELECT {{ tablenick }}, rowguid, __GEN__, {{ first_lineage }}, {% if column_tracking %}{{ colv_first() }}{% else %}NULL{% endif %}

  FROM {{ fresh }} ORDER BY rowguid
-- statement
DROP TABLE {{ fresh }}
-- statement
DROP TABLE {{ changed }}
-- statement
DELETE FROM {{ log }}
