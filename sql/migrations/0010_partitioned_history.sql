-- wfctl schema, version 10: the time-partitioned layout (optional) and what both layouts share
-- so that one statement text serves either.
--
-- Two layouts of the same tables:
--   unpartitioned  (the default) workflows, workflow_steps and workflow_attempts are plain tables;
--   partitioned    (`wfctl init --partitioned`, `wfctl db partition`, or
--                  `SELECT wfctl_partition_convert('1 day')`) they are RANGE-partitioned by the
--                  workflow's created_at, one partition per interval (1, 7 or 30 days) named
--                  <table>_pYYYYMMDD after the interval's first day (UTC), plus <table>_default,
--                  so that `wfctl prune` drops whole intervals instead of deleting rows.
-- wfctl_settings records which (no row: unpartitioned); wfctl_layout() reads it.
--
-- What changes for both layouts here:
--   workflow_steps.workflow_created_at, workflow_attempts.workflow_created_at: the created_at of
--       the row's workflow, the partition key of the partitioned layout. Written by the engine's
--       inserts from the workflows row they already join (NULL in rows written before this
--       version; the conversion fills them in).
--   ON CONFLICT: wfctl_submit and wfctl_insert_children insert with a target-less ON CONFLICT
--       DO NOTHING (in the unpartitioned layout the idempotency key's unique index is the only
--       one a new row can collide with besides its random uuid; in the partitioned layout no
--       unique index can hold the key alone, and a trigger skips a duplicate key instead), and
--       wfctl_step_done names its constraint (ON CONFLICT ON CONSTRAINT), whose columns gain
--       workflow_created_at in the partitioned layout under the same name.
--
-- Functions for the partitioned layout (inert in the unpartitioned one: they say it is not
-- partitioned): wfctl_partition_start, wfctl_partition_interval, wfctl_partitions,
-- wfctl_create_partition, wfctl_ensure_partitions, wfctl_prune_partition,
-- wfctl_partition_convert, wfctl_idempotency_guard (the trigger that keeps an idempotency key
-- unique across partitions). docs/explanation/partitions.md explains them.

ALTER TABLE workflow_steps ADD COLUMN workflow_created_at timestamptz;
ALTER TABLE workflow_attempts ADD COLUMN workflow_created_at timestamptz;

CREATE TABLE wfctl_settings (
    name        text PRIMARY KEY,
    value       text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION wfctl_layout() RETURNS text LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT value FROM wfctl_settings WHERE name = 'layout'), 'unpartitioned');
$$;

-- Submit from any language (0001), with a target-less ON CONFLICT.
CREATE OR REPLACE FUNCTION wfctl_submit(
    p_workflow_type text,
    p_input jsonb DEFAULT NULL,
    p_key text DEFAULT NULL,
    p_delay interval DEFAULT NULL,
    p_priority integer DEFAULT 0,
    p_max_retries integer DEFAULT NULL
) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    new_id uuid;
BEGIN
    LOOP
        INSERT INTO workflows (workflow_type, input_data, idempotency_key, run_at, priority,
                               max_retries)
        VALUES (p_workflow_type, p_input, p_key, now() + coalesce(p_delay, interval '0'),
                coalesce(p_priority, 0), p_max_retries)
        ON CONFLICT DO NOTHING
        RETURNING id INTO new_id;
        IF new_id IS NOT NULL THEN
            RETURN new_id;
        END IF;
        SELECT id INTO new_id FROM workflows WHERE idempotency_key = p_key;
        IF new_id IS NOT NULL THEN
            RETURN new_id;
        END IF;
        -- the conflicting row was deleted between the two statements: try again
    END LOOP;
END;
$$;

-- Checkpoint step p_step (0006), the step row carrying its workflow's created_at.
CREATE OR REPLACE FUNCTION wfctl_step_done(p_id uuid, p_epoch bigint, p_attempt integer, p_step integer,
                                           p_name text, p_output jsonb, p_started timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    created timestamptz;
BEGIN
    UPDATE workflows
    SET current_step = p_step, updated_at = now(), wait_step = NULL, wait_deadline = NULL,
        wait_kind = NULL, wait_topic = NULL, wait_ids = NULL, wait_remaining = NULL
    WHERE id = p_id
    RETURNING created_at INTO created;
    INSERT INTO workflow_steps AS ws (workflow_id, step_number, step_name, status, output_data,
                                      started_at, completed_at, attempt, lease_epoch,
                                      workflow_created_at)
    VALUES (p_id, p_step, p_name, 'completed', p_output, p_started, now(), p_attempt, p_epoch, created)
    ON CONFLICT ON CONSTRAINT workflow_steps_workflow_id_step_number_key DO UPDATE
    SET step_name = excluded.step_name, status = excluded.status,
        output_data = excluded.output_data, started_at = excluded.started_at,
        completed_at = excluded.completed_at, error_message = NULL,
        attempt = excluded.attempt, lease_epoch = excluded.lease_epoch;
END;
$$;

-- Insert children of wf (0006), with a target-less ON CONFLICT.
CREATE OR REPLACE FUNCTION wfctl_insert_children(wf workflows, p_type text, p_inputs jsonb[], p_keys text[],
                                                 p_priority integer, p_timeout float8, p_timeout_error text)
RETURNS uuid[] LANGUAGE plpgsql AS $$
DECLARE
    own_deadline timestamptz;
    deadline timestamptz;
    deadline_message text;
    new_ids uuid[];
BEGIN
    own_deadline := CASE WHEN p_timeout IS NULL THEN NULL
                         ELSE now() + make_interval(secs => p_timeout) END;
    IF wf.deadline_at IS NOT NULL AND (own_deadline IS NULL OR wf.deadline_at < own_deadline) THEN
        deadline := wf.deadline_at;
        deadline_message := 'timed out: its parent''s deadline passed ('
                            || coalesce(wf.deadline_error, 'timed out') || ')';
    ELSE
        deadline := own_deadline;
        deadline_message := p_timeout_error;
    END IF;
    new_ids := ARRAY(SELECT gen_random_uuid() FROM generate_series(1, cardinality(p_inputs)));
    INSERT INTO workflows (id, workflow_type, input_data, idempotency_key, priority, max_retries,
                           parent_id, deadline_at, deadline_error)
    SELECT new_ids[i.ord], p_type, i.input, p_keys[i.ord], coalesce(p_priority, wf.priority),
           NULL, wf.id, deadline, deadline_message
    FROM unnest(p_inputs) WITH ORDINALITY AS i(input, ord)
    ORDER BY i.ord
    ON CONFLICT DO NOTHING;
    -- a new statement: it sees what this one inserted and a keyed workflow committed meanwhile
    RETURN ARRAY(
        SELECT coalesce(mine.id, keyed.id)
        FROM generate_subscripts(new_ids, 1) AS n(ord)
        LEFT JOIN workflows mine ON mine.id = new_ids[n.ord]
        LEFT JOIN workflows keyed ON keyed.idempotency_key = p_keys[n.ord] AND mine.id IS NULL
        ORDER BY n.ord);
END;
$$;

-- The first instant of the interval p_at falls in: intervals are counted from Monday
-- 2000-01-03 00:00 UTC, so days start at midnight UTC and weeks on Mondays.
CREATE FUNCTION wfctl_partition_start(p_at timestamptz, p_interval interval)
RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_timestamp(946857600 + floor((extract(epoch FROM p_at) - 946857600)
                                          / extract(epoch FROM p_interval))
                                    * extract(epoch FROM p_interval));
$$;

-- The partition interval of this database (NULL: unpartitioned).
CREATE FUNCTION wfctl_partition_interval() RETURNS interval LANGUAGE sql STABLE AS $$
    SELECT value::interval FROM wfctl_settings WHERE name = 'partition_interval';
$$;

-- Every partition of the three partitioned tables, with its range (both NULL: the default
-- partition), read from the catalog: partitions made by pg_partman or by hand count too.
CREATE FUNCTION wfctl_partitions()
RETURNS TABLE (parent text, partition text, range_start timestamptz, range_end timestamptz,
               is_default boolean)
LANGUAGE sql STABLE AS $$
    SELECT p.relname::text, c.relname::text,
           (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']*)''\)'))[1]::timestamptz,
           (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']*)''\)'))[1]::timestamptz,
           pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'
    FROM pg_inherits i
    JOIN pg_class p ON p.oid = i.inhparent
    JOIN pg_class c ON c.oid = i.inhrelid
    WHERE p.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
      AND p.relname IN ('workflows', 'workflow_steps', 'workflow_attempts')
      AND p.relkind = 'p';
$$;

-- Create the three partitions of the interval starting at p_start (unless they exist): a table
-- like its parent with the default partition's storage settings, the rows of its range that
-- went to the default partition meanwhile moved into it, then attached (SHARE UPDATE
-- EXCLUSIVE on the parent: inserts and updates go on; the default partition is locked ACCESS
-- EXCLUSIVE while it is checked, which is quick when it is empty). One transaction: all or
-- nothing. Returns the rows moved, NULL when the partitions existed.
CREATE FUNCTION wfctl_create_partition(p_start timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    iv interval := wfctl_partition_interval();
    stop timestamptz;
    suffix text := to_char(p_start AT TIME ZONE 'UTC', 'YYYYMMDD');
    parent text;
    keycol text;
    part text;
    dflt text;
    opts text;
    cols text;
    n bigint;
    moved bigint;
BEGIN
    IF iv IS NULL THEN
        RAISE EXCEPTION 'this database is not partitioned' USING ERRCODE = '55000';
    END IF;
    IF p_start <> wfctl_partition_start(p_start, iv) THEN
        RAISE EXCEPTION 'a partition starts at the start of an interval, not at %', p_start
            USING ERRCODE = '22023';
    END IF;
    stop := p_start + iv;
    FOREACH parent IN ARRAY ARRAY['workflows', 'workflow_steps', 'workflow_attempts'] LOOP
        part := parent || '_p' || suffix;
        CONTINUE WHEN to_regclass(format('%I.%I', current_schema(), part)) IS NOT NULL;
        moved := coalesce(moved, 0);
        keycol := CASE parent WHEN 'workflows' THEN 'created_at' ELSE 'workflow_created_at' END;
        dflt := parent || '_default';
        SELECT coalesce(' WITH (' || array_to_string(c.reloptions, ', ') || ')', '') INTO opts
        FROM pg_class c WHERE c.oid = to_regclass(format('%I.%I', current_schema(), dflt));
        EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', dflt);
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS '
                       'INCLUDING STORAGE INCLUDING COMPRESSION)%s', part, parent, coalesce(opts, ''));
        SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO cols
        FROM pg_attribute a
        WHERE a.attrelid = format('%I.%I', current_schema(), parent)::regclass
          AND a.attnum > 0 AND NOT a.attisdropped;
        EXECUTE format('WITH moved AS (DELETE FROM %I WHERE %I >= $1 AND %I < $2 RETURNING %s) '
                       'INSERT INTO %I (%s) SELECT %s FROM moved',
                       dflt, keycol, keycol, cols, part, cols, cols)
            USING p_start, stop;
        GET DIAGNOSTICS n = ROW_COUNT;
        moved := moved + n;
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       parent, part, p_start, stop);
    END LOOP;
    RETURN moved;
END;
$$;

-- Partitions from the current interval to p_ahead intervals ahead (NULL: the setting
-- partition_ahead, default 7; -1 there: wfctl creates none, pg_partman or a DBA does). Cheap
-- when they exist (a catalog lookup per interval); otherwise under an advisory lock that a
-- second caller does not wait for (busy). Run by `wfctl init`, `wfctl prune` and a worker duty.
CREATE FUNCTION wfctl_ensure_partitions(p_ahead integer DEFAULT NULL,
                                        OUT created integer, OUT moved bigint, OUT busy boolean)
LANGUAGE plpgsql AS $$
DECLARE
    iv interval := wfctl_partition_interval();
    ahead integer;
    first timestamptz;
    k integer;
    n bigint;
BEGIN
    created := 0;
    moved := 0;
    busy := false;
    IF iv IS NULL THEN
        RETURN;
    END IF;
    ahead := coalesce(p_ahead, (SELECT value::integer FROM wfctl_settings WHERE name = 'partition_ahead'), 7);
    first := wfctl_partition_start(now(), iv);
    IF NOT EXISTS (
        SELECT 1 FROM generate_series(0, ahead) AS g(k)
        WHERE to_regclass(format('%I.%I', current_schema(),
                                 'workflow_attempts_p' || to_char((first + g.k * iv) AT TIME ZONE 'UTC', 'YYYYMMDD')))
              IS NULL
    ) THEN
        RETURN;
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext('wfctl.partitions.' || current_schema())) THEN
        busy := true;
        RETURN;
    END IF;
    FOR k IN 0..ahead LOOP
        n := wfctl_create_partition(first + k * iv);
        IF n IS NOT NULL THEN
            created := created + 1;
            moved := moved + n;
        END IF;
    END LOOP;
END;
$$;

-- Prune one interval [p_start, p_end) by dropping its partitions: when every workflow in it has
-- a status in p_statuses and finished (or, without finished_at, was last updated) before
-- p_cutoff. state: 'kept' (some workflow is not prunable), 'prunable' (p_dry: nothing done),
-- 'dropped'. First, without blocking anyone: the check (indexes: the status index and the
-- BRIN index on finished_at), the counts, and the run's messages and events deleted (a finished
-- workflow takes no new ones). Then, under lock_timeout p_lock_timeout: the three parents locked
-- ACCESS EXCLUSIVE (a DROP of a partition needs it), the check again (a retry may have moved a
-- run meanwhile), and the three partitions dropped. A lock not had in time raises 55P03 and
-- rolls everything back: the caller tries again later.
CREATE FUNCTION wfctl_prune_partition(p_start timestamptz, p_end timestamptz, p_statuses text[],
                                      p_cutoff timestamptz, p_dry boolean, p_lock_timeout text,
                                      OUT state text, OUT workflows bigint, OUT steps bigint)
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    others text[] := ARRAY(SELECT s FROM unnest(ARRAY['pending', 'running', 'completed', 'failed',
                                                      'cancelled']) AS s
                           WHERE s <> ALL (p_statuses));
    wp text;
    sp text;
    ap text;
    check_sql text;
    blocked boolean;
BEGIN
    SELECT max(p.partition) FILTER (WHERE p.parent = 'workflows'),
           max(p.partition) FILTER (WHERE p.parent = 'workflow_steps'),
           max(p.partition) FILTER (WHERE p.parent = 'workflow_attempts')
    INTO wp, sp, ap
    FROM wfctl_partitions() p
    WHERE p.range_start = p_start AND p.range_end = p_end;
    IF wp IS NULL OR p_end > p_cutoff THEN
        state := 'kept';
        RETURN;
    END IF;
    check_sql := format('SELECT EXISTS (SELECT 1 FROM %1$I WHERE status = ANY ($1)) '
                        'OR EXISTS (SELECT 1 FROM %1$I WHERE finished_at >= $2 '
                        '           OR (finished_at IS NULL AND updated_at >= $2))', wp);
    EXECUTE check_sql USING others, p_cutoff INTO blocked;
    IF blocked THEN
        state := 'kept';
        RETURN;
    END IF;
    EXECUTE format('SELECT count(*) FROM %I', wp) INTO workflows;
    steps := 0;
    IF sp IS NOT NULL THEN
        EXECUTE format('SELECT count(*) FROM %I', sp) INTO steps;
    END IF;
    IF p_dry THEN
        state := 'prunable';
        RETURN;
    END IF;
    EXECUTE format('DELETE FROM workflow_messages m USING %I w WHERE m.workflow_id = w.id', wp);
    EXECUTE format('DELETE FROM workflow_events e USING %I w WHERE e.workflow_id = w.id', wp);
    PERFORM set_config('lock_timeout', p_lock_timeout, true);
    LOCK TABLE workflows, workflow_steps, workflow_attempts IN ACCESS EXCLUSIVE MODE;
    EXECUTE check_sql USING others, p_cutoff INTO blocked;
    IF blocked THEN
        state := 'kept';
        RETURN;
    END IF;
    IF sp IS NOT NULL THEN
        EXECUTE format('DROP TABLE %I', sp);
    END IF;
    IF ap IS NOT NULL THEN
        EXECUTE format('DROP TABLE %I', ap);
    END IF;
    EXECUTE format('DROP TABLE %I', wp);
    state := 'dropped';
END;
$$;

-- In the partitioned layout no unique index can hold the idempotency key alone (each must
-- include the partition key), so this BEFORE INSERT trigger keeps it unique: it takes an
-- advisory lock on the key (held to the commit: a second insert of the key waits for the
-- first one's transaction), looks for the key (an index per partition, in a fresh snapshot
-- under READ COMMITTED, so a committed insert is seen) and skips the row when it exists, as
-- ON CONFLICT DO NOTHING would. A plain INSERT of a used key is skipped too (no error).
CREATE FUNCTION wfctl_idempotency_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('wfctl.idempotency.' || current_schema()),
                                  hashtext(NEW.idempotency_key));
    IF EXISTS (SELECT 1 FROM workflows WHERE idempotency_key = NEW.idempotency_key) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END;
$$;

-- Convert this database to the partitioned layout, in the caller's transaction (workers must be
-- stopped: the tables are locked ACCESS EXCLUSIVE throughout). The three tables move aside into
-- a schema of their own; new partitioned tables take their names, columns, defaults, checks and
-- storage settings (partitions get them), their unique constraints under the same names with the
-- partition key added, and every other index and trigger as the catalog defines them (so
-- indexes and triggers added by later migrations are carried over); partitions cover every
-- interval from the oldest workflow to p_ahead intervals ahead; the rows are copied (steps and
-- attempts with their workflow's created_at); grants are given again; the functions that take a
-- row of these tables are made again; the foreign keys to workflows(id) are dropped; the old
-- tables are dropped. Returns the rows copied and the partitions made (per table).
CREATE FUNCTION wfctl_partition_convert(p_interval interval, p_ahead integer DEFAULT 7,
                                        OUT workflows bigint, OUT steps bigint, OUT attempts bigint,
                                        OUT partitions integer)
LANGUAGE plpgsql AS $$
DECLARE
    here text := current_schema();
    aside text := left('wfctl_unpartitioned_' || current_schema(), 63);
    tables text[] := ARRAY['workflows', 'workflow_steps', 'workflow_attempts'];
    t text;
    keycol text;
    saved text[] := '{}';
    functions text[] := '{}';
    grants text[] := '{}';
    opts text[];
    statement text;
    r record;
    cols text;
    oldest timestamptz;
    first timestamptz;
    k integer;
BEGIN
    IF wfctl_layout() = 'partitioned' THEN
        RAISE EXCEPTION 'this database is partitioned already' USING ERRCODE = '55000';
    END IF;
    IF p_interval IS NULL OR p_interval NOT IN (interval '1 day', interval '7 days', interval '30 days') THEN
        RAISE EXCEPTION 'the partition interval is 1 day, 7 days or 30 days, not %', p_interval
            USING ERRCODE = '22023';
    END IF;
    IF p_ahead IS NULL OR p_ahead NOT BETWEEN 0 AND 1000 THEN
        RAISE EXCEPTION 'partitions ahead: 0 to 1000, not %', p_ahead USING ERRCODE = '22023';
    END IF;
    LOCK TABLE workflows, workflow_steps, workflow_attempts, workflow_messages, workflow_events
        IN ACCESS EXCLUSIVE MODE;

    -- what the catalog says about the tables, before they move
    FOR r IN
        SELECT pg_get_indexdef(i.indexrelid) AS def
        FROM pg_index i
        WHERE i.indrelid = ANY (ARRAY['workflows'::regclass, 'workflow_steps'::regclass,
                                      'workflow_attempts'::regclass])
          AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
        ORDER BY i.indexrelid
    LOOP
        saved := saved || r.def;
    END LOOP;
    FOR r IN
        SELECT pg_get_triggerdef(g.oid) AS def
        FROM pg_trigger g
        WHERE g.tgrelid = ANY (ARRAY['workflows'::regclass, 'workflow_steps'::regclass,
                                     'workflow_attempts'::regclass])
          AND NOT g.tgisinternal
        ORDER BY g.oid
    LOOP
        saved := saved || r.def;
    END LOOP;
    FOR r IN
        SELECT DISTINCT p.oid, pg_get_functiondef(p.oid) AS def
        FROM pg_depend d
        JOIN pg_proc p ON p.oid = d.objid
        WHERE d.classid = 'pg_proc'::regclass AND d.refclassid = 'pg_type'::regclass
          AND d.refobjid IN (SELECT c.reltype FROM pg_class c
                             WHERE c.oid = ANY (ARRAY['workflows'::regclass, 'workflow_steps'::regclass,
                                                      'workflow_attempts'::regclass]))
    LOOP
        functions := functions || r.def;
        EXECUTE format('DROP FUNCTION %s', r.oid::regprocedure);
    END LOOP;
    FOR r IN
        SELECT c.relname, a.privilege_type, a.grantee
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = ANY (ARRAY['workflows'::regclass, 'workflow_steps'::regclass,
                                 'workflow_attempts'::regclass, 'workflow_steps_id_seq'::regclass])
          AND a.grantee <> c.relowner
    LOOP
        grants := grants || format('GRANT %s ON %s %I TO %s', r.privilege_type,
                                   CASE WHEN r.relname LIKE '%_seq' THEN 'SEQUENCE' ELSE 'TABLE' END,
                                   r.relname,
                                   CASE WHEN r.grantee = 0 THEN 'PUBLIC'
                                        ELSE quote_ident(pg_get_userbyid(r.grantee)) END);
    END LOOP;
    -- foreign keys to workflows(id): a partitioned workflows has no unique key on id alone
    FOR r IN
        SELECT c.conrelid::regclass AS tab, c.conname
        FROM pg_constraint c
        WHERE c.contype = 'f' AND c.confrelid = 'workflows'::regclass
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.tab, r.conname);
    END LOOP;

    EXECUTE format('CREATE SCHEMA %I', aside);
    FOREACH t IN ARRAY tables LOOP
        EXECUTE format('ALTER TABLE %I SET SCHEMA %I', t, aside);
    END LOOP;
    EXECUTE format('UPDATE %I.workflows SET created_at = coalesce(updated_at, now()) '
                   'WHERE created_at IS NULL', aside);

    INSERT INTO wfctl_settings (name, value) VALUES
        ('layout', 'partitioned'), ('partition_interval', p_interval::text),
        ('partition_ahead', p_ahead::text);

    FOREACH t IN ARRAY tables LOOP
        keycol := CASE t WHEN 'workflows' THEN 'created_at' ELSE 'workflow_created_at' END;
        EXECUTE format('CREATE TABLE %I (LIKE %I.%I INCLUDING ALL EXCLUDING INDEXES) '
                       'PARTITION BY RANGE (%I)', t, aside, t, keycol);
        EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET NOT NULL', t, keycol);
        SELECT c.reloptions INTO opts FROM pg_class c WHERE c.oid = format('%I.%I', aside, t)::regclass;
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT%s', t || '_default', t,
                       coalesce(' WITH (' || array_to_string(opts, ', ') || ')', ''));
    END LOOP;

    EXECUTE format('SELECT min(created_at) FROM %I.workflows', aside) INTO oldest;
    first := wfctl_partition_start(least(coalesce(oldest, now()), now()), p_interval);
    partitions := 0;
    LOOP
        EXIT WHEN first > wfctl_partition_start(now(), p_interval) + p_ahead * p_interval;
        PERFORM wfctl_create_partition(first);
        partitions := partitions + 1;
        first := first + p_interval;
    END LOOP;

    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO cols
    FROM pg_attribute a WHERE a.attrelid = 'workflows'::regclass AND a.attnum > 0 AND NOT a.attisdropped;
    EXECUTE format('INSERT INTO workflows (%s) SELECT %s FROM %I.workflows', cols, cols, aside);
    GET DIAGNOSTICS workflows = ROW_COUNT;
    FOREACH t IN ARRAY tables[2:3] LOOP
        SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO cols
        FROM pg_attribute a
        WHERE a.attrelid = t::regclass AND a.attnum > 0 AND NOT a.attisdropped
          AND a.attname <> 'workflow_created_at';
        EXECUTE format('INSERT INTO %1$I (%2$s, workflow_created_at) '
                       'SELECT %3$s, coalesce(w.created_at, x.workflow_created_at, now()) '
                       'FROM %4$I.%1$I x LEFT JOIN %4$I.workflows w ON w.id = x.workflow_id',
                       t, cols, (SELECT string_agg('x.' || c, ', ') FROM unnest(string_to_array(cols, ', ')) c),
                       aside);
        IF t = 'workflow_steps' THEN
            GET DIAGNOSTICS steps = ROW_COUNT;
        ELSE
            GET DIAGNOSTICS attempts = ROW_COUNT;
        END IF;
    END LOOP;
    PERFORM setval(pg_get_serial_sequence('workflow_steps', 'id'), max(id)) FROM workflow_steps
    HAVING max(id) IS NOT NULL;

    -- unique constraints under their names, with the partition key; the idempotency key's
    -- uniqueness becomes an index and a trigger
    FOR r IN
        SELECT c.conname, c.contype, cl.relname,
               (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord)
                FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
                JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum) AS cols
        FROM pg_constraint c JOIN pg_class cl ON cl.oid = c.conrelid
        WHERE c.contype IN ('p', 'u') AND cl.relnamespace = aside::regnamespace
        ORDER BY c.oid
    LOOP
        keycol := CASE r.relname WHEN 'workflows' THEN 'created_at' ELSE 'workflow_created_at' END;
        IF r.relname = 'workflows' AND r.cols = 'idempotency_key' THEN
            CONTINUE;
        END IF;
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I %s (%s, %I)', r.relname, r.conname,
                       CASE r.contype WHEN 'p' THEN 'PRIMARY KEY' ELSE 'UNIQUE' END, r.cols, keycol);
    END LOOP;
    CREATE INDEX workflows_idempotency_idx ON workflows (idempotency_key)
        WHERE idempotency_key IS NOT NULL;
    -- prune's check that an old partition holds nothing finished after the cutoff: a few pages
    -- of ranges instead of a scan of the partition
    CREATE INDEX workflows_finished_brin ON workflows USING brin (finished_at);
    FOREACH statement IN ARRAY saved LOOP
        EXECUTE statement;
    END LOOP;
    CREATE TRIGGER workflows_idempotency BEFORE INSERT ON workflows
        FOR EACH ROW WHEN (NEW.idempotency_key IS NOT NULL) EXECUTE FUNCTION wfctl_idempotency_guard();
    FOREACH statement IN ARRAY functions LOOP
        EXECUTE statement;
    END LOOP;
    FOREACH statement IN ARRAY grants LOOP
        EXECUTE statement;
    END LOOP;
    EXECUTE format('DROP SCHEMA %I CASCADE', aside);
    partitions := partitions;
END;
$$;

-- Pin the functions to this schema, as migrations 0003, 0006 and 0007 do.
DO $migration$
DECLARE
    here text := current_schema();
    fn text;
BEGIN
    FOREACH fn IN ARRAY ARRAY[
        'wfctl_layout()',
        'wfctl_submit(text, jsonb, text, interval, integer, integer)',
        'wfctl_step_done(uuid, bigint, integer, integer, text, jsonb, timestamptz)',
        'wfctl_insert_children(workflows, text, jsonb[], text[], integer, float8, text)',
        'wfctl_partition_interval()',
        'wfctl_partitions()',
        'wfctl_create_partition(timestamptz)',
        'wfctl_ensure_partitions(integer)',
        'wfctl_prune_partition(timestamptz, timestamptz, text[], timestamptz, boolean, text)',
        'wfctl_idempotency_guard()',
        'wfctl_partition_convert(interval, integer)'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_temp', here, fn, here);
    END LOOP;
END
$migration$;
