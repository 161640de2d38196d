-- wfctl schema, version 3.
--
-- wfctl's objects may live in a schema of their own (`wfctl init --schema NAME`, `[database]
-- schema` in wfctl.toml): migrations run with search_path set to that schema, so every name
-- here is unqualified and current_schema() is the schema being installed. This migration makes
-- the SQL functions work whatever search_path their caller has:
--
--   wfctl_submit()      finds its tables in this schema (SET search_path = <schema>, pg_temp:
--                       the caller's temporary tables cannot stand in for them either), so
--                       `SELECT wf.wfctl_submit('order')` works from a session whose search_path
--                       does not include wf;
--   wfctl_channel()     new: the NOTIFY channel of this schema's workers: wfctl_new for the
--                       schema public (as before), wfctl_new_<schema> otherwise (cut to 63
--                       bytes, PostgreSQL's limit), so two wfctl schemas in one database do not
--                       wake each other's workers;
--   wfctl_notify_new()  the submit trigger's function sends on that channel.
--
-- The schema's name is written into the functions when this runs: renaming the schema later
-- means running these statements again.

DO $migration$
DECLARE
    here text := current_schema();
    channel text := CASE WHEN current_schema() = 'public' THEN 'wfctl_new'
                         ELSE left('wfctl_new_' || current_schema(), 63) END;
BEGIN
    EXECUTE format(
        'CREATE FUNCTION %I.wfctl_channel() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
        here, format('SELECT %L::text', channel));
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION %I.wfctl_notify_new() RETURNS trigger LANGUAGE plpgsql AS %L',
        here, format('BEGIN PERFORM pg_notify(%L, %L); RETURN NULL; END;', channel, ''));
    EXECUTE format(
        'ALTER FUNCTION %I.wfctl_submit(text, jsonb, text, interval, integer, integer) '
        'SET search_path = %I, pg_temp',
        here, here);
END
$migration$;
