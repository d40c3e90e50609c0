{#- The lineage and column-version expressions both flushes (merge_flush.sql, merge_flush_keyed.sql) write,
    imported with their context (replnick, columns).
    lineage: JSON object {"<replica nickname>": version}; colv: {"<column>": [nickname, version]}. -#}
{% set first_lineage = "'{\"" ~ replnick ~ "\":1}'" %}
{% macro bump_once(x) -%}
CASE WHEN {{ x }} IS NULL THEN {{ first_lineage }} ELSE json_set({{ x }}, '$."{{ replnick }}"', coalesce((SELECT max(value) FROM json_each({{ x }})), 0) + 1) END
{%- endmacro %}
{% macro next_once(x) -%}
CASE WHEN {{ x }} IS NULL THEN 1 ELSE coalesce((SELECT max(value) FROM json_each({{ x }})), 0) + 1 END
{%- endmacro %}
{% set base = "coalesce(c.lineage, ts.lineage)" %}
{#- the lineage a row with contents has (``c``, the contents row), and one without (its tombstone's, if any) -#}
{% set version = next_once(base) %}
{% macro colv_all(v=version) -%}
{% for chunk in columns | batch(50) %}{{ "json_patch(" if not loop.first }}{% endfor %}{% for chunk in columns | batch(50) %}{{ ", " if not loop.first }}json_object({% for c in chunk %}{{ c.name | lit }}, json_array({{ replnick }}, {{ v }}){{ ", " if not loop.last }}{% endfor %}){{ ")" if not loop.first }}{% endfor %}
{%- endmacro %}
{% macro colv_first() -%}
{% for chunk in columns | batch(50) %}{{ "json_patch(" if not loop.first }}{% endfor %}{% for chunk in columns | batch(50) %}{{ ", " if not loop.first }}json_object({% for c in chunk %}{{ c.name | lit }}, json_array({{ replnick }}, 1){{ ", " if not loop.last }}{% endfor %}){{ ")" if not loop.first }}{% endfor %}
{%- endmacro %}
{% macro colv_changed(v=version, colv="c.colv") -%}
{% for chunk in columns | batch(50) %}json_patch({% endfor %}coalesce({{ colv }}, '{}'){% for chunk in columns | batch(50) %}, json_object({% for c in chunk %}{{ c.name | lit }}, CASE WHEN p.m{{ c.pos }} = '1' THEN json_array({{ replnick }}, {{ v }}) ELSE json(json_extract(coalesce({{ colv }}, '{}'), '$."{{ c.name }}"')) END{{ ", " if not loop.last }}{% endfor %})){% endfor %}
{%- endmacro %}
