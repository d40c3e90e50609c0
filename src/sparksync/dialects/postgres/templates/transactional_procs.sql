{#- The stored procedure of one operation of a transactional article at a PostgreSQL subscriber
    (seed 001: sp_MSins_/sp_MSupd_/sp_MSdel_<table>), in the parameter layout of its call syntax.
    Columns are qualified with the table's alias so a column named like a parameter (c1) is never
    taken for it; an update or delete that finds no row raises 20598 (SQLSTATE {{ not_found }}), so
    the distribution agent can retry a batch over one connection. -#}
{% macro row_not_found() %}
  IF NOT FOUND THEN
    RAISE EXCEPTION '20598: The row was not found at the Subscriber when applying the replicated command.'
      USING ERRCODE = '{{ not_found }}';
  END IF;
{%- endmacro %}
{% macro key_match(prefix) -%}
{% for k in key %}t.{{ k.column | q }} = {{ prefix }}{{ k.index }}{{ " AND " if not loop.last }}{% endfor %}
{%- endmacro %}
CREATE OR REPLACE PROCEDURE {{ procedure }}({% for p in params %}{{ p.name }} {{ p.type }}{{ " = NULL" if defaults }}{{ ", " if not loop.last }}{% endfor %})
LANGUAGE plpgsql AS $sparksync$
#variable_conflict use_variable
BEGIN
{% if op == "ins" %}
  INSERT INTO {{ table }} ({% for c in columns %}{{ c.name | q }}{{ ", " if not loop.last }}{% endfor %})
  VALUES ({% for c in columns %}c{{ loop.index }}{{ ", " if not loop.last }}{% endfor %});
{% elif op == "upd" %}
  UPDATE {{ table }} AS t SET
{% for c in columns %}
{% if syntax in ("SCALL", "MCALL") %}
    {{ c.name | q }} = CASE get_byte(bitmap, {{ c.byte }}) & {{ c.bit }} WHEN {{ c.bit }} THEN c{{ loop.index }} ELSE t.{{ c.name | q }} END{{ "," if not loop.last }}
{% else %}
    {{ c.name | q }} = c{{ loop.index }}{{ "," if not loop.last }}
{% endif %}
{% endfor %}
  WHERE {{ key_match("old_c" if syntax == "XCALL" else "pkc") }};
{{ row_not_found() }}
{% else %}
  DELETE FROM {{ table }} AS t
  WHERE {{ key_match("old_c" if syntax == "XCALL" else "pkc") }};
{{ row_not_found() }}
{% endif %}
END
$sparksync$
