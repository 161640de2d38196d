-- wfctl schema, version 12: the group commit's plan no longer depends on the statistics, and in
-- the partitioned layout (0010) the claim leaves the partitions of older history alone.
--
-- 1. The group commit. wfctl_flush_runs makes the flush's writes of workflows and attempts.
--
-- wfctl_flush_runs does what the flush statement's UPDATE of workflows and UPDATE of
-- workflow_attempts did (sql/queries/worker.sql, "flush"), finding each row by its key as they
-- did, and says which rows an earlier send of the same request had applied already. It runs
-- with hash and merge joins, sequential and bitmap scans and materialization off (its own
-- settings, for its own statements only), so that each row is found by a probe of the primary
-- key whatever the statistics say when its plan is built: on a table not yet analyzed, the
-- UPDATE in the statement was a hash join over a sequential scan of all of workflows.
--
-- It does not find rows by created_at, though in the partitioned layout that would let the
-- executor skip the partitions that cannot hold them. Tried and measured on statistics taken
-- when the tables were empty, 10,000 runs then submitted in one statement (so sharing one
-- created_at): with the join on created_at (and created_at >= the batch's oldest), the planner
-- read the rows by workflows_created_idx instead of the key, all 10,000 entries per flush (a
-- 32-row flush took 40-120 ms instead of 2-5), in both layouts; the planner does not count the
-- partitions run-time pruning skips, so the probe of each of 41 partitions looks dearer than a
-- scan of all of them. The cost of probing every partition is smaller and does not grow.

CREATE FUNCTION wfctl_flush_runs(
    p_ids uuid[], p_epochs bigint[], p_require text[], p_expects int[],
    p_statuses text[], p_current int[], p_do_output boolean[], p_results jsonb[],
    p_do_error boolean[], p_errors text[], p_tracebacks text[], p_attempt_inc int[],
    p_attempts int[], p_run_at timestamptz[], p_delays float8[], p_finish boolean[],
    p_outcomes text[])
RETURNS TABLE (id uuid, lease_epoch bigint, current_step integer, created_at timestamptz,
               written boolean)
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off
SET enable_bitmapscan = off SET enable_material = off
AS $$
#variable_conflict use_column
DECLARE
    w_ids uuid[];
    w_epochs bigint[];
    w_steps integer[];
    w_created timestamptz[];
BEGIN
    -- The partitioned layout plans with the server's settings again (the header): there the
    -- settings above made things worse (restricted to this call, as the SET clauses are).
    IF wfctl_layout() = 'partitioned' THEN
        PERFORM set_config('enable_hashjoin', 'on', true), set_config('enable_mergejoin', 'on', true),
                set_config('enable_seqscan', 'on', true), set_config('enable_bitmapscan', 'on', true),
                set_config('enable_material', 'on', true);
    END IF;
    -- Every write is keyed by (id, epoch) and requires the status the writer holds the run in
    -- (require_status): a row whose epoch moved on, or whose run is no longer in that status,
    -- changes nothing. expect (when not NULL) requires current_step to equal it.
    WITH r AS (
        SELECT *
        FROM unnest(p_ids, p_epochs, p_require, p_expects, p_statuses, p_current,
                    p_do_output, p_results, p_do_error, p_errors, p_tracebacks,
                    p_attempt_inc, p_run_at, p_delays, p_finish, p_outcomes)
             AS t(id, epoch, require_status, expect, set_status, set_step,
                  do_output, set_output, do_error, set_error, set_traceback, attempt_inc,
                  run_at, run_delay, finish, outcome)
    ),
    w AS (
        UPDATE workflows wf
        SET status = coalesce(r.set_status, wf.status),
            current_step = coalesce(r.set_step, wf.current_step),
            output_data = CASE WHEN r.do_output THEN r.set_output ELSE wf.output_data END,
            error_message = CASE WHEN r.do_error THEN r.set_error ELSE wf.error_message END,
            error_traceback = CASE WHEN r.do_error THEN r.set_traceback ELSE wf.error_traceback END,
            attempt = wf.attempt + r.attempt_inc,
            run_at = CASE WHEN r.run_delay IS NOT NULL
                          THEN now() + make_interval(secs => r.run_delay)
                          ELSE coalesce(r.run_at, wf.run_at) END,
            finished_at = CASE WHEN r.finish THEN now() ELSE wf.finished_at END,
            wait_kind = CASE WHEN r.outcome = 'parked' THEN 'sleep' ELSE wf.wait_kind END,
            updated_at = now()
        FROM r
        WHERE wf.id = r.id
          AND wf.lease_epoch = r.epoch
          -- status compared with r's own column, so no status index looks selective
          AND wf.status = r.require_status
          AND (r.expect IS NULL OR wf.current_step = r.expect)
        RETURNING wf.id, wf.lease_epoch, wf.current_step, wf.created_at
    ),
    a AS (
        -- the execution ends (outcome set): close its row in the attempt history
        UPDATE workflow_attempts wa
        SET ended_at = now(), outcome = r.outcome, last_step = w.current_step,
            error = r.set_error, traceback = r.set_traceback
        FROM r
        JOIN w ON w.id = r.id AND w.lease_epoch = r.epoch
        WHERE r.outcome IS NOT NULL
          AND wa.workflow_id = r.id AND wa.lease_epoch = r.epoch
          AND wa.ended_at IS NULL
    )
    SELECT coalesce(array_agg(w.id), '{}'), coalesce(array_agg(w.lease_epoch), '{}'),
           coalesce(array_agg(w.current_step), '{}'), coalesce(array_agg(w.created_at), '{}')
    INTO w_ids, w_epochs, w_steps, w_created
    FROM w;

    RETURN QUERY
        SELECT x.id, x.lease_epoch, x.current_step, x.created_at, true
        FROM unnest(w_ids, w_epochs, w_steps, w_created) AS x(id, lease_epoch, current_step, created_at);
    IF cardinality(w_ids) = cardinality(p_ids) THEN
        RETURN;
    END IF;
    -- Not written now: already applied by an earlier send of the same request (its commit not
    -- acknowledged)? A write that leaves the required status is, when the run shows its effect
    -- under the same epoch (status, attempt and, if set, run_at). Only this epoch's lease holder
    -- writes under it, so what is seen now was that send.
    RETURN QUERY
        SELECT r.id, r.epoch, NULL::integer, NULL::timestamptz, false
        FROM unnest(p_ids, p_epochs, p_require, p_statuses, p_attempts, p_attempt_inc, p_run_at)
             AS r(id, epoch, require_status, set_status, attempt, attempt_inc, run_at)
        WHERE r.set_status IS DISTINCT FROM r.require_status
          AND NOT (r.id, r.epoch) IN (SELECT x.id, x.epoch FROM unnest(w_ids, w_epochs) AS x(id, epoch))
          AND EXISTS (
              SELECT 1 FROM workflows cur
              WHERE cur.id = r.id
                AND cur.lease_epoch = r.epoch
                AND cur.status = r.set_status
                AND cur.attempt = r.attempt + r.attempt_inc
                AND (r.run_at IS NULL OR cur.run_at = r.run_at));
END;
$$;

-- 2. The claim. wfctl_claim_ready takes a floor (p_floor) and returns each run's created_at
--    with its id.
--    - The floor: a worker in the partitioned layout passes, between its scans from the head
--      of the runnable index (at least one a second, docs/architecture.md, "The claim's
--      frontier"), the oldest created_at its last such scan took; the pick then reads only the
--      runs created from the floor to an hour from now. Both bounds are known when each of its
--      statements starts, so the partitions outside them are pruned before they are opened:
--      every pending run may sit in any partition, and without a bound each probe of the pick
--      opened the runnable index of every partition (41 for a month of daily history), for
--      about 1.4 ms of a 3 ms claim. A run outside the bounds (an old run retried or handed
--      back) is taken by the next scan from the head, which then lowers the floor to it: it
--      waits at most that second, as a run behind the frontier's key does. NULL (the
--      unpartitioned layout, and every scan from the head): no bound.
--    - created_at: the claim's UPDATE adds created_at >= the oldest picked run's, a value
--      known once the pick is done, so the partitions older than it are not read (they are
--      still initialized, as a generic plan's are). A lower bound only: with both bounds the
--      planner, given unknown values, estimates the range as selective as the primary key and
--      may read it by the created_at index instead, every run of a bulk submit at once. A pick
--      that includes a limited type's runs (wfctl_claim_limited returns ids only) has none.
DROP FUNCTION wfctl_claim_ready(text[], integer, integer, timestamptz, uuid);
CREATE FUNCTION wfctl_claim_ready(p_types text[], p_limit integer,
                                  p_after_priority integer DEFAULT NULL,
                                  p_after_run_at timestamptz DEFAULT NULL,
                                  p_after_id uuid DEFAULT NULL,
                                  p_floor timestamptz DEFAULT NULL)
RETURNS TABLE (id uuid, created_at timestamptz) LANGUAGE plpgsql
SET enable_bitmapscan = off SET enable_sort = off SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    want integer := p_limit;
    got integer;
    prio integer;
    -- the key is used only whole
    keyed boolean := p_after_priority IS NOT NULL AND p_after_run_at IS NOT NULL
                     AND p_after_id IS NOT NULL;
    -- the runs read: created from p_floor to an hour from now (NULL: all); the bounds are
    -- known when each statement starts, so the other partitions are never opened
    lo timestamptz := coalesce(p_floor, '-infinity');
    hi timestamptz := CASE WHEN p_floor IS NULL THEN 'infinity' ELSE now() + interval '1 hour' END;
BEGIN
    IF want <= 0 OR cardinality(p_types) = 0 THEN
        RETURN;
    END IF;
    -- The highest priority present. With a key, only the priorities above the key's are probed
    -- (the probe reads the index from its head, where the claimed rows' entries are, and stops
    -- at the key's priority); the key's own priority is then taken as present.
    IF keyed THEN
        SELECT w.priority INTO prio FROM workflows w
        WHERE w.status = 'pending' AND w.created_at >= lo AND w.created_at < hi
          AND w.priority > p_after_priority
        ORDER BY w.priority DESC
        LIMIT 1;
        prio := coalesce(prio, p_after_priority);
    ELSE
        SELECT w.priority INTO prio FROM workflows w
        WHERE w.status = 'pending' AND w.created_at >= lo AND w.created_at < hi
        ORDER BY w.priority DESC
        LIMIT 1;
    END IF;
    WHILE prio IS NOT NULL LOOP
        IF keyed AND prio = p_after_priority THEN
            RETURN QUERY
                SELECT w.id, w.created_at FROM workflows w
                WHERE w.status = 'pending' AND w.created_at >= lo AND w.created_at < hi
                  AND w.priority = prio AND w.run_at <= now()
                  AND (w.run_at, w.id) > (p_after_run_at, p_after_id)
                  AND w.workflow_type = ANY (p_types)
                ORDER BY w.run_at, w.id
                LIMIT want
                FOR UPDATE SKIP LOCKED;
        ELSE
            RETURN QUERY
                SELECT w.id, w.created_at FROM workflows w
                WHERE w.status = 'pending' AND w.created_at >= lo AND w.created_at < hi
                  AND w.priority = prio AND w.run_at <= now()
                  AND w.workflow_type = ANY (p_types)
                ORDER BY w.run_at, w.id
                LIMIT want
                FOR UPDATE SKIP LOCKED;
        END IF;
        GET DIAGNOSTICS got = ROW_COUNT;
        want := want - got;
        EXIT WHEN want <= 0;
        IF keyed AND prio > p_after_priority THEN
            SELECT w.priority INTO prio FROM workflows w
            WHERE w.status = 'pending' AND w.created_at >= lo AND w.created_at < hi
              AND w.priority < prio AND w.priority > p_after_priority
            ORDER BY w.priority DESC
            LIMIT 1;
            prio := coalesce(prio, p_after_priority);
        ELSE
            SELECT w.priority INTO prio FROM workflows w
            WHERE w.status = 'pending' AND w.created_at >= lo AND w.created_at < hi
              AND w.priority < prio
            ORDER BY w.priority DESC
            LIMIT 1;
        END IF;
    END LOOP;
END;
$$;

-- Pin the functions to this schema, as migrations 0003, 0006, 0007 and 0011 do.
DO $migration$
BEGIN
    EXECUTE format('ALTER FUNCTION %I.wfctl_claim_ready(text[], integer, integer, timestamptz, uuid, '
                   'timestamptz) '
                   'SET search_path = %I, pg_temp', current_schema(), current_schema());
    EXECUTE format('ALTER FUNCTION %I.wfctl_flush_runs(uuid[], bigint[], text[], '
                   'int[], text[], int[], boolean[], jsonb[], boolean[], text[], text[], int[], '
                   'int[], timestamptz[], float8[], boolean[], text[]) '
                   'SET search_path = %I, pg_temp', current_schema(), current_schema());
END
$migration$;
