{#- Lean merge change tracking for one article on SQLite (seed 000, "Change Tracking for Unfiltered Tables").
    A row trigger only appends which row changed to MSmerge_pending; the flush (merge_flush.sql) writes
    the metadata. A row inserted without a rowguid needs no entry at all: the flush gives it one (it is
    found through the rowguid index). The agent's own writes are skipped through MSmerge_replica.applying.
    cols (column tracking): one '0' or '1' per column, in the article's column order. -#}
{% set not_applying = "(SELECT applying FROM " ~ replica_state ~ ") = 0" %}
DROP TRIGGER IF EXISTS {{ ("MSmerge_ins_" ~ artid) | q }}
-- statement
DROP TRIGGER IF EXISTS {{ ("MSmerge_upd_" ~ artid) | q }}
-- statement
DROP TRIGGER IF EXISTS {{ ("MSmerge_del_" ~ artid) | q }}
-- statement
CREATE TRIGGER {{ ("MSmerge_ins_" ~ artid) | q }} AFTER INSERT ON {{ table }}
WHEN NEW.{{ rowguid }} IS NOT NULL AND {{ not_applying }}
BEGIN
  INSERT INTO {{ pending }} (tablenick, rowguid, op, cols) VALUES ({{ tablenick }}, NEW.{{ rowguid }}, 1, NULL);
END
-- statement
CREATE TRIGGER {{ ("MSmerge_upd_" ~ artid) | q }} AFTER UPDATE ON {{ table }}
WHEN OLD.{{ rowguid }} IS NOT NULL AND {{ not_applying }}
  AND ({% for c in columns %}OLD.{{ c.name | q }} IS NOT NEW.{{ c.name | q }}{{ " OR " if not loop.last }}{% endfor %})
BEGIN
  INSERT INTO {{ pending }} (tablenick, rowguid, op, cols) VALUES ({{ tablenick }}, NEW.{{ rowguid }}, 2,
  {%- if column_tracking %}
    {% for c in columns %}CASE WHEN OLD.{{ c.name | q }} IS NOT NEW.{{ c.name | q }} THEN '1' ELSE '0' END{{ " || " if not loop.last }}{% endfor %}
  {%- else %} NULL{% endif %});
END
-- statement
CREATE TRIGGER {{ ("MSmerge_del_" ~ artid) | q }} AFTER DELETE ON {{ table }}
WHEN OLD.{{ rowguid }} IS NOT NULL AND {{ not_applying }}
BEGIN
  INSERT INTO {{ pending }} (tablenick, rowguid, op, cols) VALUES ({{ tablenick }}, OLD.{{ rowguid }}, 3, NULL);
END
