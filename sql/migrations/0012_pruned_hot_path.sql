-- wfctl schema, version 12: in the partitioned layout (0010) the claim leaves the partitions of
-- older history alone.
--
-- wfctl_claim_ready takes a floor (p_floor) and returns each run's created_at with its id.
--
-- - The floor: a worker in the partitioned layout passes, between its scans from the head of
--   the runnable index (at least one a second, docs/explanation/claim.md, "The frontier"),
--   the oldest created_at its last such scan took; the pick then reads only the runs created
--   from the floor to an hour from now. Both bounds are known when each of its statements
--   starts, so the partitions outside them are pruned before they are opened: every pending
--   run may sit in any partition, and without a bound each probe of the pick opened the
--   runnable index of every partition (41 for a month of daily history), for about 1.4 ms of
--   a 3 ms claim. A run outside the bounds (an old run retried or handed back) is taken by the
--   next scan from the head, which then lowers the floor to it: it waits at most that second,
--   as a run behind the frontier's key does. NULL (the unpartitioned layout, and every scan
--   from the head): no bound.
-- - created_at: in the partitioned layout the claim's UPDATE adds created_at >= the oldest
--   picked run's (sql/queries/worker.sql, claim_pruned), a value known once the pick is done,
--   so the partitions older than it are not read. A lower bound only: with both bounds the
--   planner, given unknown values, estimates the range as selective as the primary key and
--   may read it by the created_at index instead, every run of a bulk submit at once. A pick
--   that includes a limited type's runs (wfctl_claim_limited returns ids only) has none.
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

-- Pin the function to this schema, as migrations 0003, 0006, 0007 and 0011 do.
DO $migration$
BEGIN
    EXECUTE format('ALTER FUNCTION %I.wfctl_claim_ready(text[], integer, integer, timestamptz, uuid, '
                   'timestamptz) '
                   'SET search_path = %I, pg_temp', current_schema(), current_schema());
END
$migration$;
