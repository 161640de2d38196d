-- wfctl schema, version 28: hourly rollups of finished runs, so that stats and metrics read a
-- long window without reading every row of it (docs/decisions/2026-12-07-report-rollups.md).
--
-- A bucket is one hour of workflows.created_at (date_bin from 2000-01-01 UTC). Its rollup holds
-- the runs of the hour that are finished (completed, failed, cancelled) when it is computed; the
-- unfinished ones (pending, running, waiting: these change with the clock) are always read from
-- the base tables. The workers compute the closed hours (wfctl_rollup_refresh, a duty); the
-- reports read every hour not rolled up, or no longer valid, from the base tables.
--
--   wfctl_rollup_buckets    one row per rolled-up hour: the partition (or table) its runs were
--                           in (a bucket whose partition was dropped is not used), and whether
--                           it is usable (skewed: its runs were in two partitions, or a step of
--                           it started more than an hour before the hour, which the reports'
--                           step bound may cut).
--   wfctl_rollup_counts     finished runs per bucket, type and status.
--   wfctl_rollup_durations  per bucket, kind ('r': a run's duration, the sum of its steps; 's':
--                           a completed step's), type, step name and duration bin
--                           (wfctl_duration_bin, 5 % wide): how many, their exact sum, their
--                           min and max. Counts, sums, averages and maxima read from it are
--                           exact; a percentile is placed within its bin (docs/reference).
--   wfctl_rollup_stale      hours whose finished runs changed after they may have been rolled
--                           up (one row per hour and marking session): written by the triggers
--                           below, cleared by the refresh that recomputes the hour; a report
--                           does not use a bucket marked stale.
--   wfctl_rollup_horizon    when a refresh ran (clock_timestamp() before its transaction id was
--                           assigned) and that id: an hour is closed once it ended
--                           ROLLUP_SETTLE (10 minutes) before such a moment whose transaction
--                           id is older than every running transaction.
--
-- The triggers workflows_rollup_insert, _update and _delete mark an hour stale when a row of it
-- is written ROLLUP_SETTLE or more after the hour ended (by the database's clock_timestamp(): a
-- fake wfctl_now() does not move it): an insert of an old created_at, a finished run that leaves
-- or enters its final status (retry, cancel, recovery, a late finish), a delete (prune; one
-- statement-level trigger per DELETE). A run finishing within the hour it was created in or the
-- next, the hot path, only evaluates the WHEN clause. A row written without a mark was written
-- less than ROLLUP_SETTLE after its hour ended, so before the moment of any refresh that may
-- roll the hour up, by a transaction whose id is older than that refresh's: the hour is not
-- closed until that transaction ended (committed late or not). Each session marks in rows of
-- its own (marked_by: its backend's pid), so concurrent writers never wait for one another's
-- mark. workflows_rollup_truncate empties the rollups.
--
-- Both layouts: the row triggers on the partitioned parent are cloned to every partition, the
-- statement triggers fire on the parent; a dropped partition is noticed by its oid
-- (wfctl_rollup_buckets.part_oid) being gone. The functions run as the schema's owner
-- (SECURITY DEFINER, search_path pinned), so a role that may update workflows may mark an hour.

CREATE FUNCTION wfctl_duration_bin(p_seconds float8) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
RETURN CASE WHEN p_seconds > 0 THEN floor(ln(p_seconds) * 20)::integer ELSE -2147483647 END;

CREATE FUNCTION wfctl_rollup_hour(p_at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
RETURN date_bin('1 hour', p_at, '2000-01-01 00:00:00+00');

CREATE TABLE wfctl_rollup_buckets (
    bucket_start timestamptz NOT NULL,
    span "char" NOT NULL CHECK (span IN ('h', 'd')),
    part_oid oid NOT NULL,
    skewed boolean NOT NULL,
    computed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (bucket_start, span)
);

CREATE TABLE wfctl_rollup_counts (
    bucket_start timestamptz NOT NULL,
    span "char" NOT NULL,
    workflow_type text NOT NULL,
    status text NOT NULL,
    workflows bigint NOT NULL,
    PRIMARY KEY (bucket_start, span, workflow_type, status),
    FOREIGN KEY (bucket_start, span) REFERENCES wfctl_rollup_buckets ON DELETE CASCADE
);

CREATE TABLE wfctl_rollup_durations (
    bucket_start timestamptz NOT NULL,
    span "char" NOT NULL,
    kind "char" NOT NULL,
    workflow_type text NOT NULL,
    step_name text,
    bin integer NOT NULL,
    n bigint NOT NULL,
    sum_seconds float8 NOT NULL,
    min_seconds float8 NOT NULL,
    max_seconds float8 NOT NULL,
    FOREIGN KEY (bucket_start, span) REFERENCES wfctl_rollup_buckets ON DELETE CASCADE
);
CREATE INDEX wfctl_rollup_durations_bucket_idx ON wfctl_rollup_durations (bucket_start, span);

CREATE TABLE wfctl_rollup_stale (
    bucket_start timestamptz NOT NULL,
    marked_by integer NOT NULL DEFAULT pg_backend_pid(),
    PRIMARY KEY (bucket_start, marked_by)
);

CREATE TABLE wfctl_rollup_horizon (
    xid xid8 PRIMARY KEY,
    observed_at timestamptz NOT NULL
);

CREATE FUNCTION wfctl_rollup_touch() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO wfctl_rollup_stale (bucket_start) VALUES (wfctl_rollup_hour(OLD.created_at)) ON CONFLICT DO NOTHING;
    END IF;
    INSERT INTO wfctl_rollup_stale (bucket_start) VALUES (wfctl_rollup_hour(NEW.created_at)) ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

CREATE FUNCTION wfctl_rollup_deleted() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO wfctl_rollup_stale (bucket_start)
    SELECT DISTINCT wfctl_rollup_hour(g.created_at)
    FROM gone g
    WHERE wfctl_rollup_hour(g.created_at) + interval '70 minutes' < clock_timestamp()  -- ROLLUP_SETTLE
      AND g.status IN ('completed', 'failed', 'cancelled')
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

CREATE FUNCTION wfctl_rollup_truncated() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    DELETE FROM wfctl_rollup_buckets;
    DELETE FROM wfctl_rollup_stale;
    RETURN NULL;
END $$;

CREATE TRIGGER workflows_rollup_insert AFTER INSERT ON workflows FOR EACH ROW
    WHEN (date_bin('1 hour', NEW.created_at, '2000-01-01 00:00:00+00') + interval '70 minutes'
          < clock_timestamp())  -- the hour's end plus ROLLUP_SETTLE
    EXECUTE FUNCTION wfctl_rollup_touch();
-- (only an UPDATE that sets one of the columns a rollup reads: a checkpoint's or a heartbeat's
-- does not even evaluate the WHEN, nor fetch the old row for it)
CREATE TRIGGER workflows_rollup_update
    AFTER UPDATE OF status, workflow_type, created_at, started_at, finished_at ON workflows FOR EACH ROW
    WHEN (date_bin('1 hour', OLD.created_at, '2000-01-01 00:00:00+00') + interval '70 minutes'
          < clock_timestamp()  -- the hour's end plus ROLLUP_SETTLE
          AND (OLD.status IN ('completed', 'failed', 'cancelled')
               OR NEW.status IN ('completed', 'failed', 'cancelled'))
          AND (OLD.status IS DISTINCT FROM NEW.status
               OR OLD.workflow_type IS DISTINCT FROM NEW.workflow_type
               OR OLD.created_at IS DISTINCT FROM NEW.created_at
               OR OLD.started_at IS DISTINCT FROM NEW.started_at
               OR OLD.finished_at IS DISTINCT FROM NEW.finished_at))
    EXECUTE FUNCTION wfctl_rollup_touch();
CREATE TRIGGER workflows_rollup_delete AFTER DELETE ON workflows
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
    EXECUTE FUNCTION wfctl_rollup_deleted();
CREATE TRIGGER workflows_rollup_truncate AFTER TRUNCATE ON workflows FOR EACH STATEMENT
    EXECUTE FUNCTION wfctl_rollup_truncated();

-- wfctl_rollup_refresh(p_hours): roll up at most p_hours closed hours that are not rolled up or
-- are marked stale, the latest first, then every day (UTC) whose 24 hours are rolled up, usable
-- and in one partition; returns how many hours it computed (0 also when another session is
-- refreshing now: one at a time, nobody waits). One transaction.
CREATE FUNCTION wfctl_rollup_refresh(p_hours integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    moment timestamptz := clock_timestamp();  -- before this transaction's id is assigned
    horizon timestamptz;
    first timestamptz;
    computed integer;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('wfctl_rollup_refresh'), hashtext(current_schema())) THEN
        RETURN 0;
    END IF;
    SELECT max(h.observed_at) INTO horizon
    FROM wfctl_rollup_horizon h
    WHERE h.xid < pg_snapshot_xmin(pg_current_snapshot());
    DELETE FROM wfctl_rollup_horizon h WHERE h.observed_at < horizon;
    INSERT INTO wfctl_rollup_horizon VALUES (pg_current_xact_id(), moment);
    IF horizon IS NULL THEN
        RETURN 0;
    END IF;
    -- buckets of a dropped partition, and those marked stale (a day with any of its hours):
    -- computed again
    DELETE FROM wfctl_rollup_buckets b
    WHERE NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = b.part_oid);
    WITH marked AS (DELETE FROM wfctl_rollup_stale RETURNING bucket_start)
    DELETE FROM wfctl_rollup_buckets b
    USING marked m
    WHERE (b.span = 'h' AND b.bucket_start = m.bucket_start)
       OR (b.span = 'd' AND b.bucket_start = date_bin('1 day', m.bucket_start, '2000-01-01 00:00:00+00'));
    SELECT wfctl_rollup_hour(min(created_at)) INTO first FROM workflows;
    IF first IS NULL THEN
        RETURN 0;
    END IF;
    CREATE TEMP TABLE wfctl_rollup_todo ON COMMIT DROP AS
    SELECT g.b AS bucket_start
    FROM generate_series(first, horizon - interval '10 minutes' - interval '1 hour', interval '1 hour') AS g(b)
    WHERE NOT EXISTS (SELECT FROM wfctl_rollup_buckets r WHERE r.bucket_start = g.b AND r.span = 'h')
    ORDER BY g.b DESC
    LIMIT greatest(p_hours, 0);
    SELECT count(*) INTO computed FROM wfctl_rollup_todo;
    IF computed > 0 THEN
        CREATE TEMP TABLE wfctl_rollup_runs ON COMMIT DROP AS
        SELECT t.bucket_start, w.id, w.tableoid AS part_oid, w.workflow_type, w.status,
               w.started_at IS NOT NULL AND w.finished_at IS NOT NULL AS timed
        FROM wfctl_rollup_todo t
        JOIN workflows w ON w.created_at >= t.bucket_start AND w.created_at < t.bucket_start + interval '1 hour'
        WHERE w.status IN ('completed', 'failed', 'cancelled');
        CREATE TEMP TABLE wfctl_rollup_steps ON COMMIT DROP AS
        SELECT r.bucket_start, r.id, r.workflow_type, r.timed, s.step_name, s.status, s.completed_at,
               s.started_at <= r.bucket_start - interval '1 hour' AS early,  -- STEP_CLOCK_SLACK
               date_part('epoch', s.completed_at - s.started_at) AS seconds
        FROM wfctl_rollup_runs r
        JOIN workflow_steps s ON s.workflow_id = r.id
        WHERE s.started_at IS NOT NULL;
        INSERT INTO wfctl_rollup_buckets (bucket_start, span, part_oid, skewed)
        SELECT t.bucket_start, 'h',
               coalesce((SELECT min(r.part_oid) FROM wfctl_rollup_runs r WHERE r.bucket_start = t.bucket_start),
                        'workflows'::regclass::oid),
               EXISTS (SELECT FROM wfctl_rollup_steps s WHERE s.bucket_start = t.bucket_start AND s.early)
               OR (SELECT count(DISTINCT r.part_oid) > 1 FROM wfctl_rollup_runs r WHERE r.bucket_start = t.bucket_start)
        FROM wfctl_rollup_todo t;
        INSERT INTO wfctl_rollup_counts
        SELECT bucket_start, 'h', workflow_type, status, count(*)
        FROM wfctl_rollup_runs
        GROUP BY 1, 3, 4;
        INSERT INTO wfctl_rollup_durations
        SELECT bucket_start, 'h', 'r', workflow_type, NULL, wfctl_duration_bin(seconds), count(*),
               sum(seconds), min(seconds), max(seconds)
        FROM (SELECT bucket_start, id, workflow_type, sum(seconds) AS seconds
              FROM wfctl_rollup_steps
              WHERE timed
              GROUP BY 1, 2, 3) AS runs
        WHERE seconds IS NOT NULL
        GROUP BY 1, 4, 6;
        INSERT INTO wfctl_rollup_durations
        SELECT bucket_start, 'h', 's', workflow_type, step_name, wfctl_duration_bin(seconds), count(*),
               sum(seconds), min(seconds), max(seconds)
        FROM wfctl_rollup_steps
        WHERE status = 'completed' AND completed_at IS NOT NULL
        GROUP BY 1, 4, 5, 6;
        DROP TABLE wfctl_rollup_runs, wfctl_rollup_steps;
    END IF;
    DROP TABLE wfctl_rollup_todo;
    -- the days: merged from their hours (exact: counts and sums add, minima and maxima compare)
    CREATE TEMP TABLE wfctl_rollup_days ON COMMIT DROP AS
    SELECT date_bin('1 day', b.bucket_start, '2000-01-01 00:00:00+00') AS bucket_start, min(b.part_oid) AS part_oid
    FROM wfctl_rollup_buckets b
    WHERE b.span = 'h' AND NOT b.skewed
      AND NOT EXISTS (SELECT FROM wfctl_rollup_buckets d
                      WHERE d.span = 'd' AND d.bucket_start = date_bin('1 day', b.bucket_start, '2000-01-01 00:00:00+00'))
    GROUP BY 1
    HAVING count(*) = 24 AND count(DISTINCT b.part_oid) = 1;
    INSERT INTO wfctl_rollup_buckets (bucket_start, span, part_oid, skewed)
    SELECT bucket_start, 'd', part_oid, false FROM wfctl_rollup_days;
    INSERT INTO wfctl_rollup_counts
    SELECT d.bucket_start, 'd', c.workflow_type, c.status, sum(c.workflows)
    FROM wfctl_rollup_days d
    JOIN wfctl_rollup_counts c ON c.span = 'h' AND c.bucket_start >= d.bucket_start
                              AND c.bucket_start < d.bucket_start + interval '1 day'
    GROUP BY 1, 3, 4;
    INSERT INTO wfctl_rollup_durations
    SELECT d.bucket_start, 'd', u.kind, u.workflow_type, u.step_name, u.bin, sum(u.n), sum(u.sum_seconds),
           min(u.min_seconds), max(u.max_seconds)
    FROM wfctl_rollup_days d
    JOIN wfctl_rollup_durations u ON u.span = 'h' AND u.bucket_start >= d.bucket_start
                                 AND u.bucket_start < d.bucket_start + interval '1 day'
    GROUP BY 1, 3, 4, 5, 6;
    DROP TABLE wfctl_rollup_days;
    RETURN computed;
END $$;

-- wfctl_rollup_due(): whether a refresh has work: an hour marked stale, or a closed hour (by
-- the clock; the refresh's own rule is stricter) that is not rolled up. A worker asks it on its
-- loop's connection before it opens one for the refresh (wfctl/worker/rollups.py).
CREATE FUNCTION wfctl_rollup_due() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT EXISTS (SELECT FROM wfctl_rollup_stale)
        OR EXISTS (
            SELECT
            FROM (SELECT wfctl_rollup_hour(min(created_at)) AS first FROM workflows) AS f,
                 generate_series(f.first, clock_timestamp() - interval '10 minutes' - interval '1 hour',
                                 interval '1 hour') AS g(b)
            WHERE NOT EXISTS (SELECT FROM wfctl_rollup_buckets r WHERE r.bucket_start = g.b AND r.span = 'h'))
$$;

-- wfctl_rollup_window(p_start): the buckets after p_start whose rollups a report may use: every
-- usable day, and every usable hour outside them.
CREATE FUNCTION wfctl_rollup_window(p_start timestamptz)
RETURNS TABLE (bucket_start timestamptz, span "char", bucket_end timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER ROWS 80 AS $$
    WITH usable AS (
        SELECT b.bucket_start, b.span,
               b.bucket_start + CASE b.span WHEN 'd' THEN interval '1 day' ELSE interval '1 hour' END AS bucket_end
        FROM wfctl_rollup_buckets b
        WHERE b.bucket_start > p_start
          AND NOT b.skewed
          AND EXISTS (SELECT FROM pg_class c WHERE c.oid = b.part_oid)
          AND NOT EXISTS (SELECT FROM wfctl_rollup_stale m
                          WHERE m.bucket_start >= b.bucket_start
                            AND m.bucket_start < b.bucket_start
                                + CASE b.span WHEN 'd' THEN interval '1 day' ELSE interval '1 hour' END)
    )
    SELECT u.bucket_start, u.span, u.bucket_end
    FROM usable u
    WHERE u.span = 'd'
       OR NOT EXISTS (SELECT FROM usable d
                      WHERE d.span = 'd' AND u.bucket_start >= d.bucket_start AND u.bucket_start < d.bucket_end)
$$;

-- wfctl_rollup_gaps(p_start): the ranges of created_at after p_start that the reports read
-- from the base tables (every status): [lo, hi), what wfctl_rollup_window does not cover.
CREATE FUNCTION wfctl_rollup_gaps(p_start timestamptz) RETURNS TABLE (lo timestamptz, hi timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER ROWS 4 AS $$
    WITH used AS (SELECT bucket_start AS s, bucket_end AS e FROM wfctl_rollup_window(p_start)),
    edges AS (SELECT coalesce(lag(e) OVER (ORDER BY s), p_start) AS lo, s AS hi FROM used
              UNION ALL
              SELECT coalesce(max(e), p_start), 'infinity' FROM used)
    SELECT lo, hi FROM edges WHERE lo < hi
$$;

DO $migration$
DECLARE
    fn text;
    r record;
BEGIN
    FOREACH fn IN ARRAY ARRAY['wfctl_rollup_touch()', 'wfctl_rollup_deleted()', 'wfctl_rollup_truncated()',
                              'wfctl_rollup_refresh(integer)', 'wfctl_rollup_due()', 'wfctl_rollup_window(timestamptz)',
                              'wfctl_rollup_gaps(timestamptz)'] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_temp', current_schema(), fn, current_schema());
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %I.%s FROM PUBLIC', current_schema(), fn);
    END LOOP;
    -- whoever may read workflows may read the rollups and use them; whoever may update
    -- workflows (a worker) may refresh them
    FOR r IN
        SELECT DISTINCT a.grantee, a.privilege_type
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = to_regclass(format('%I.workflows', current_schema()))
          AND a.privilege_type IN ('SELECT', 'UPDATE') AND a.grantee <> c.relowner
    LOOP
        IF r.privilege_type = 'SELECT' THEN
            EXECUTE format('GRANT SELECT ON %1$I.wfctl_rollup_buckets, %1$I.wfctl_rollup_counts, '
                           '%1$I.wfctl_rollup_durations, %1$I.wfctl_rollup_stale TO %2$s',
                           current_schema(), CASE WHEN r.grantee = 0 THEN 'PUBLIC'
                                                  ELSE quote_ident(pg_get_userbyid(r.grantee)) END);
            EXECUTE format('GRANT EXECUTE ON FUNCTION %1$I.wfctl_rollup_window(timestamptz), '
                           '%1$I.wfctl_rollup_gaps(timestamptz) TO %2$s',
                           current_schema(), CASE WHEN r.grantee = 0 THEN 'PUBLIC'
                                                  ELSE quote_ident(pg_get_userbyid(r.grantee)) END);
        ELSE
            EXECUTE format('GRANT EXECUTE ON FUNCTION %1$I.wfctl_rollup_refresh(integer), %1$I.wfctl_rollup_due() TO %2$s',
                           current_schema(), CASE WHEN r.grantee = 0 THEN 'PUBLIC'
                                                  ELSE quote_ident(pg_get_userbyid(r.grantee)) END);
        END IF;
    END LOOP;
END
$migration$;
