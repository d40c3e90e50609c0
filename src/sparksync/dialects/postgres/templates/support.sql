{#- Functions and the open-generation sequence that PostgreSQL's tracking triggers use. -#}
CREATE SCHEMA IF NOT EXISTS {{ schema | q }}
-- statement
CREATE SEQUENCE IF NOT EXISTS {{ schema | q }}.open_generation MINVALUE 1 START 1
-- statement
-- A time-ordered GUID (UUIDv7 layout): 48 bits of Unix milliseconds, then random bits.
CREATE OR REPLACE FUNCTION {{ schema | q }}.uuid7() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE AS $fn$
  SELECT encode(
    set_bit(set_bit(
      overlay(uuid_send(gen_random_uuid())
              PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
              FROM 1 FOR 6),
      52, 1), 53, 1), 'hex')::uuid
$fn$
-- statement
-- The lineage after one more local change: this replica's entry becomes max(version) + 1.
CREATE OR REPLACE FUNCTION {{ schema | q }}.lineage_bump(lineage jsonb, nick integer) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
  SELECT coalesce(lineage, '{}'::jsonb) || jsonb_build_object(nick::text,
           coalesce((SELECT max(value::bigint) FROM jsonb_each_text(coalesce(lineage, '{}'::jsonb))), 0) + 1)
$fn$
-- statement
CREATE OR REPLACE FUNCTION {{ schema | q }}.lineage_next(lineage jsonb) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
  SELECT coalesce((SELECT max(value::bigint) FROM jsonb_each_text(coalesce(lineage, '{}'::jsonb))), 0) + 1
$fn$
-- statement
-- Column versions after a local change of the columns named (as keys) in "changed".
CREATE OR REPLACE FUNCTION {{ schema | q }}.colv_bump(colv jsonb, changed jsonb, nick integer, version bigint)
RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
  SELECT coalesce(colv, '{}'::jsonb) || coalesce(
    (SELECT jsonb_object_agg(k, jsonb_build_array(nick, version)) FROM jsonb_object_keys(coalesce(changed, '{}'::jsonb)) AS k),
    '{}'::jsonb)
$fn$
-- statement
-- The open generation for a writing transaction, held with a shared advisory lock until it ends.
-- make_generation moves the sequence first and then takes the lock exclusively, so a generation is
-- never enumerated while a transaction that wrote into it is still running (commit safety).
CREATE OR REPLACE FUNCTION {{ schema | q }}.writer_generation() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  g bigint;
  g2 bigint;
BEGIN
  LOOP
    SELECT last_value INTO g FROM {{ schema | q }}.open_generation;
    PERFORM pg_advisory_xact_lock_shared({{ lock_class }}, (g % 2147483647)::integer);
    SELECT last_value INTO g2 FROM {{ schema | q }}.open_generation;
    EXIT WHEN g = g2;
  END LOOP;
  RETURN g;
END
$fn$
