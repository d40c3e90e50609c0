{#- Transactional capture for one article of one publication on SQLite, which has no log a reader can
    decode: row triggers write every change, in commit order, to MSrepl_log (the log reader moves it
    to the distribution database). Only published columns are logged, bytes as hex. With a row filter
    an update that moves a row into the filter is logged as an insert, out of it as a delete (as a
    PostgreSQL publication's row filter does). -#}
{% macro row(r) -%}
json_object({% for c in columns %}{{ c.name | lit }}, {% if c.bytes %}hex({{ r }}.{{ c.name | q }}){% else %}{{ r }}.{{ c.name | q }}{% endif %}{{ ", " if not loop.last }}{% endfor %})
{%- endmacro %}
{% set now = "strftime('%Y-%m-%d %H:%M:%f', 'now')" %}
{% set ins_name = ("MSrepl_ins_" ~ tag) | q %}
{% set upd_name = ("MSrepl_upd_" ~ tag) | q %}
{% set del_name = ("MSrepl_del_" ~ tag) | q %}
DROP TRIGGER IF EXISTS {{ ins_name }}
-- statement
DROP TRIGGER IF EXISTS {{ upd_name }}
-- statement
DROP TRIGGER IF EXISTS {{ del_name }}
-- statement
CREATE TRIGGER {{ ins_name }} AFTER INSERT ON {{ table }}
{% if filter_new %}
WHEN coalesce(({{ filter_new }}), 0)
{% endif %}
BEGIN
  INSERT INTO {{ log }} (publication, article_id, op, after, before, time)
  VALUES ({{ publication | lit }}, {{ article_id }}, 'ins', {{ row("NEW") }}, NULL, {{ now }});
END
-- statement
CREATE TRIGGER {{ upd_name }} AFTER UPDATE ON {{ table }}
BEGIN
{% if filter_new %}
  INSERT INTO {{ log }} (publication, article_id, op, after, before, time)
  SELECT {{ publication | lit }}, {{ article_id }},
         CASE WHEN f.o AND f.n THEN 'upd' WHEN f.o THEN 'del' ELSE 'ins' END,
         CASE WHEN f.n THEN {{ row("NEW") }} END, CASE WHEN f.o THEN {{ row("OLD") }} END, {{ now }}
  FROM (SELECT coalesce(({{ filter_old }}), 0) AS o, coalesce(({{ filter_new }}), 0) AS n) AS f
  WHERE f.o OR f.n;
{% else %}
  INSERT INTO {{ log }} (publication, article_id, op, after, before, time)
  VALUES ({{ publication | lit }}, {{ article_id }}, 'upd', {{ row("NEW") }}, {{ row("OLD") }}, {{ now }});
{% endif %}
END
-- statement
CREATE TRIGGER {{ del_name }} AFTER DELETE ON {{ table }}
{% if filter_old %}
WHEN coalesce(({{ filter_old }}), 0)
{% endif %}
BEGIN
  INSERT INTO {{ log }} (publication, article_id, op, after, before, time)
  VALUES ({{ publication | lit }}, {{ article_id }}, 'del', NULL, {{ row("OLD") }}, {{ now }});
END
