{#- Merge change tracking for one keyed article on SQLite (its rowguids kept beside the table, in {{ ids }},
    keyed by its primary key: merge/tracking/identity.py). A row trigger appends which row changed to the
    article's own log ({{ log }}), by key; the flush (merge_flush_keyed.sql) writes the metadata and gives
    an inserted row its rowguid. The identity table follows what an application does to a row that has one:
    a delete takes its rowguid away into the log (the flush makes its tombstone; a row inserted again under
    the same key is a new row), a changed key takes it along. The agent's own writes are skipped through
    MSmerge_replica.applying (the agent keeps the identity table itself).
    cols (column tracking): one '0' or '1' per column, in the article's column order (a changed key: all). -#}
{% set not_applying = "(SELECT applying FROM " ~ replica_state ~ ") = 0" %}
{% set key_changed %}{% for k in keys %}OLD.{{ k.name }} IS NOT NEW.{{ k.name }}{{ " OR " if not loop.last }}{% endfor %}{% endset %}
{% set of_old %}{% for k in keys %}{{ k.name }} = OLD.{{ k.name }}{{ " AND " if not loop.last }}{% endfor %}{% endset %}
{% set knames %}{% for k in keys %}{{ k.k }}{{ ", " if not loop.last }}{% endfor %}{% endset %}
{#- the log: op (1 insert, 2 update, 3 delete), the row's key (k0, k1, ...: declared as the table's), the
    rowguid a delete took away, an update's changed columns; no index, so a write pays one append -#}
CREATE TABLE IF NOT EXISTS {{ log }} (op INTEGER NOT NULL, {% for k in keys %}{{ k.k }} {{ k.type }}, {% endfor %}rowguid UUID, cols TEXT)
-- statement
DROP TRIGGER IF EXISTS {{ ("MSmerge_ins_" ~ artid) | q }}
-- statement
DROP TRIGGER IF EXISTS {{ ("MSmerge_upd_" ~ artid) | q }}
-- statement
DROP TRIGGER IF EXISTS {{ ("MSmerge_del_" ~ artid) | q }}
-- statement
DROP TRIGGER IF EXISTS {{ ("MSmerge_key_" ~ artid) | q }}
-- statement
CREATE TRIGGER {{ ("MSmerge_ins_" ~ artid) | q }} AFTER INSERT ON {{ table }}
WHEN {{ not_applying }}
BEGIN
  INSERT INTO {{ log }} (op, {{ knames }}) VALUES (1, {% for k in keys %}NEW.{{ k.name }}{{ ", " if not loop.last }}{% endfor %});
END
-- statement
CREATE TRIGGER {{ ("MSmerge_upd_" ~ artid) | q }} AFTER UPDATE ON {{ table }}
WHEN {{ not_applying }}
  AND ({% for c in columns %}OLD.{{ c.name | q }} IS NOT NEW.{{ c.name | q }}{{ " OR " if not loop.last }}{% endfor %})
BEGIN
  INSERT INTO {{ log }} (op, {{ knames }}, cols) VALUES (2, {% for k in keys %}NEW.{{ k.name }}, {% endfor %}
  {%- if column_tracking %}
    CASE WHEN {{ key_changed }} THEN '{{ "1" * (columns | length) }}' ELSE
    {% for c in columns %}CASE WHEN OLD.{{ c.name | q }} IS NOT NEW.{{ c.name | q }} THEN '1' ELSE '0' END{{ " || " if not loop.last }}{% endfor %} END
  {%- else %} NULL{% endif %});
END
-- statement
CREATE TRIGGER {{ ("MSmerge_key_" ~ artid) | q }} AFTER UPDATE OF {% for k in keys %}{{ k.name }}{{ ", " if not loop.last }}{% endfor %} ON {{ table }}
WHEN {{ not_applying }} AND ({{ key_changed }})
BEGIN
  UPDATE {{ ids }} SET {% for k in keys %}{{ k.name }} = NEW.{{ k.name }}{{ ", " if not loop.last }}{% endfor %} WHERE {{ of_old }};
END
-- statement
CREATE TRIGGER {{ ("MSmerge_del_" ~ artid) | q }} AFTER DELETE ON {{ table }}
WHEN {{ not_applying }}
BEGIN
  INSERT INTO {{ log }} (op, {{ knames }}, rowguid) SELECT 3, {% for k in keys %}OLD.{{ k.name }}, {% endfor %}{{ rowguid }} FROM {{ ids }} WHERE {{ of_old }};
  DELETE FROM {{ ids }} WHERE {{ of_old }};
END
