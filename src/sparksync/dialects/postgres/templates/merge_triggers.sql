{#- Lean merge change tracking for one article on PostgreSQL: statement-level triggers with transition
    tables that only append which rows changed to MSmerge_pending (no index: one append per row); the
    flush (merge_flush.sql) writes the metadata. The agent's own writes are skipped through the
    transaction-local setting sparksync.applying. An update compares old and new rows (a join of the
    transition tables): small statements run the function's cached plan, large ones go through EXECUTE
    and are planned for the rows at hand, so neither kind inherits the other's plan.
    cols (column tracking): one '0' or '1' per column, in the article's column order. -#}
{% set tag = "$s" ~ artid ~ "$" %}
{% set big = 64 %}
{% macro run(stmt, rows) -%}
  IF (SELECT count(*) FROM {{ rows }}) > {{ big }} THEN
    EXECUTE {{ tag }}{{ stmt }}{{ tag }};
  ELSE
{{ stmt }};
  END IF;
{%- endmacro %}
{% set fn = schema | q %}
{% macro changed_any(o, n) -%}
({% for c in columns %}{{ o }}.{{ c.name | q }}{{ c.cmp }} IS DISTINCT FROM {{ n }}.{{ c.name | q }}{{ c.cmp }}{{ " OR " if not loop.last }}{% endfor %})
{%- endmacro %}
{% macro changed_mask(o, n) -%}
{% for chunk in columns | batch(90) %}concat({% for c in chunk %}CASE WHEN {{ o }}.{{ c.name | q }}{{ c.cmp }} IS DISTINCT FROM {{ n }}.{{ c.name | q }}{{ c.cmp }} THEN '1' ELSE '0' END{{ ", " if not loop.last }}{% endfor %}){{ " || " if not loop.last }}{% endfor %}
{%- endmacro %}
DROP TRIGGER IF EXISTS {{ ("MSmerge_ins_" ~ artid) | q }} ON {{ table }}
-- statement
DROP TRIGGER IF EXISTS {{ ("MSmerge_upd_" ~ artid) | q }} ON {{ table }}
-- statement
DROP TRIGGER IF EXISTS {{ ("MSmerge_del_" ~ artid) | q }} ON {{ table }}
-- statement
CREATE OR REPLACE FUNCTION {{ fn }}.{{ ("msmerge_ins_" ~ artid) | q }}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF current_setting('sparksync.applying', true) = 'on' THEN RETURN NULL; END IF;
  INSERT INTO {{ pending }} (tablenick, rowguid, op) SELECT {{ tablenick }}, n.{{ rowguid }}, 1 FROM new_rows AS n
   WHERE n.{{ rowguid }} IS NOT NULL;
  RETURN NULL;
END
$fn$
-- statement
CREATE OR REPLACE FUNCTION {{ fn }}.{{ ("msmerge_upd_" ~ artid) | q }}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF current_setting('sparksync.applying', true) = 'on' THEN RETURN NULL; END IF;
{% set stmt %}
  INSERT INTO {{ pending }} (tablenick, rowguid, op, cols)
  SELECT {{ tablenick }}, n.{{ rowguid }}, 2, {% if column_tracking %}{{ changed_mask("o", "n") }}{% else %}NULL{% endif %}

    FROM new_rows AS n JOIN old_rows AS o ON o.{{ rowguid }} = n.{{ rowguid }}
   WHERE {{ changed_any("o", "n") }}
{% endset %}
{{ run(stmt, "new_rows") }}
  RETURN NULL;
END
$fn$
-- statement
CREATE OR REPLACE FUNCTION {{ fn }}.{{ ("msmerge_del_" ~ artid) | q }}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF current_setting('sparksync.applying', true) = 'on' THEN RETURN NULL; END IF;
  INSERT INTO {{ pending }} (tablenick, rowguid, op) SELECT {{ tablenick }}, o.{{ rowguid }}, 3 FROM old_rows AS o
   WHERE o.{{ rowguid }} IS NOT NULL;
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
