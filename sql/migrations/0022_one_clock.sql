-- wfctl schema, version 22: one clock, wfctl_now(), that a test can set.
--
-- Every time the protocol decides by (a sleep's wake-up, a deadline, a schedule's tick, the
-- prune window, a heartbeat's staleness, the claim's "run_at is due") and every time it
-- writes (created_at, run_at, updated_at, heartbeat_at, started_at, finished_at, ...) is
-- wfctl_now(): now(), the start of the transaction, unless the schema's fake clock is set.
--
--   wfctl_now()       now(), as a plain SQL function (`RETURN pg_catalog.now()`, STABLE) that
--                     the planner inlines: a default or a query that reads it costs what now()
--                     costs. While the fake clock is set, its body is `RETURN wfctl_fake_now()`.
--   wfctl_fake_now()  the row ('fake_now', value) of wfctl_settings as a timestamptz, else
--                     now(); runs as the schema's owner (SECURITY DEFINER: no role needs a
--                     privilege on wfctl_settings), search_path pinned.
--   the triggers wfctl_settings_clock_*  when the row 'fake_now' is written or deleted, they
--                     re-create wfctl_now() with the body that fits (wfctl_settings_clock()),
--                     so the production clock never reads a table.
--
-- The fake clock is for tests, never for production: the row stands still until it is
-- changed (a test moves it forward: UPDATE wfctl_settings SET value = ...), and every session
-- of the schema reads it at its next statement (the worker, the CLI, the test's own
-- connection: one clock for all). Only the owner writes wfctl_settings (no `--grant-*` job
-- may), so no other role can move the clock, in its own session or any other: a custom GUC
-- read by current_setting() was not used, as any role may SET one in its own session, and a
-- submit role could then push its own deadline back through the SECURITY DEFINER functions.
-- The constraint wfctl_settings_fake_now_check refuses a value that is not a timestamptz.
--
-- The functions of the earlier migrations that called now() are re-created with wfctl_now()
-- in its place, each as pg_get_functiondef() prints it (its settings, pinned search_path and
-- SECURITY DEFINER kept; CREATE OR REPLACE keeps its owner and privileges). The columns that
-- defaulted to now() default to wfctl_now(), but for the install's and the settings' own
-- bookkeeping (wfctl_schema_migrations.applied_at, wfctl_settings.updated_at). Ids
-- (wfctl_new_id: clock_timestamp()) keep the real clock: they order rows, they decide nothing.
-- sql/schema.sql shows the functions as they are after this migration.
--
-- Both layouts: the partitioned layout's tables take the defaults from their parents.

ALTER TABLE wfctl_settings ADD CONSTRAINT wfctl_settings_fake_now_check
    CHECK (name <> 'fake_now' OR value::timestamptz IS NOT NULL);

CREATE FUNCTION wfctl_now() RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
RETURN pg_catalog.now();

CREATE FUNCTION wfctl_fake_now() RETURNS timestamptz LANGUAGE plpgsql STABLE PARALLEL SAFE
SECURITY DEFINER AS $$
DECLARE
    fake text;
BEGIN
    SELECT s.value INTO fake FROM wfctl_settings s WHERE s.name = 'fake_now';
    RETURN coalesce(fake::timestamptz, now());
END
$$;

-- wfctl_now() reads the fake clock only while its row is there. Only the owner writes
-- wfctl_settings' row 'fake_now' (and may replace the function: the trigger runs as the writer).
CREATE FUNCTION wfctl_settings_clock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT FROM wfctl_settings WHERE name = 'fake_now') THEN
        EXECUTE format('CREATE OR REPLACE FUNCTION %I.wfctl_now() RETURNS timestamptz LANGUAGE sql'
                       ' STABLE PARALLEL SAFE RETURN %I.wfctl_fake_now()', TG_TABLE_SCHEMA, TG_TABLE_SCHEMA);
    ELSE
        EXECUTE format('CREATE OR REPLACE FUNCTION %I.wfctl_now() RETURNS timestamptz LANGUAGE sql'
                       ' STABLE PARALLEL SAFE RETURN pg_catalog.now()', TG_TABLE_SCHEMA);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER wfctl_settings_clock_set AFTER INSERT OR UPDATE ON wfctl_settings
    FOR EACH ROW WHEN (NEW.name = 'fake_now') EXECUTE FUNCTION wfctl_settings_clock();
CREATE TRIGGER wfctl_settings_clock_unset AFTER DELETE ON wfctl_settings
    FOR EACH ROW WHEN (OLD.name = 'fake_now') EXECUTE FUNCTION wfctl_settings_clock();

DO $migration$
DECLARE
    here text := current_schema();
    r record;
BEGIN
    EXECUTE format('ALTER FUNCTION %I.wfctl_fake_now() SET search_path = %I, pg_temp', here, here);
    EXECUTE format('ALTER FUNCTION %I.wfctl_settings_clock() SET search_path = %I, pg_temp', here, here);
    FOR r IN
        SELECT p.oid
        FROM pg_proc p
        WHERE p.pronamespace = here::regnamespace AND p.proname LIKE 'wfctl\_%' AND p.proname NOT IN ('wfctl_now', 'wfctl_fake_now', 'wfctl_settings_clock')
          AND p.prosrc ~ '\mnow\(\)'
        ORDER BY p.proname
    LOOP
        EXECUTE regexp_replace(pg_get_functiondef(r.oid), '\mnow\(\)', 'wfctl_now()', 'g');
    END LOOP;
    FOR r IN
        SELECT c.relname, a.attname
        FROM pg_attrdef d
        JOIN pg_class c ON c.oid = d.adrelid
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE c.relnamespace = here::regnamespace
          AND c.relname NOT IN ('wfctl_schema_migrations', 'wfctl_settings')
          AND c.relkind IN ('r', 'p')
          AND NOT c.relispartition
          AND pg_get_expr(d.adbin, d.adrelid) = 'now()'
        ORDER BY 1, 2
    LOOP
        EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET DEFAULT wfctl_now()', r.relname, r.attname);
    END LOOP;
END
$migration$;
