-- wfctl schema, version 17: a claim takes runs by priority, then run_at, then id, across limited
-- and unlimited types alike; limits only hold runs back.
--
-- Before, worker.claim gave the limited types' pick (wfctl_claim_limited) the whole batch first
-- and the unlimited types only what it left, and the limited types shared the batch in the
-- order of their names: a type under a limit it never reached was claimed before every
-- unlimited type whatever the priorities (300 runs of such a type and one unlimited run at
-- priority 100: the urgent run completed after 12.7 s, 0.8 s without the limit; under a steady
-- inflow of the limited type it starved).
--
-- Now the claim merges (worker.claim, picked):
--   1. wfctl_claim_allowed(types, n): for each limited type (rows locked in name order, counted
--      as in 0007), the runs its limits allow, up to n each (not n shared in name order), in
--      the type's order: priority, run_at, id; with a per-key limit, the key rotation's picks.
--      Each pick comes with its created_at, priority and run_at (and, per key, the key and its
--      turn in the walk, from which the claim keeps the rotation's cursor). Like
--      wfctl_claim_limited it writes nothing.
--   2. wfctl_claim_ready(unlimited types, n, frontier, floor, before): up to n runs of the other
--      types, now with their priority and run_at, and, when step 1 picked n or more, only runs
--      that sort before the n-th of its picks (p_before_*: no run after it can be in the batch),
--      so the unlimited scan stops there instead of stepping over a limited backlog ahead of
--      the unlimited runs.
--   3. The batch is the first n of both by (priority DESC, run_at, id). The picks left out stay
--      pending (locked until the claim commits: others skip them for that long); the unlimited
--      ones left out sort after the frontier's new key (the last unlimited run taken), so the
--      next claim from the frontier finds them.
-- wfctl_claim_ready gains two output columns and three parameters with defaults: the calls of
-- earlier workers (six arguments, `AS f(id, created_at)`) still resolve. wfctl_claim_limited is
-- left as it was, for earlier workers: it locks the same rows and counts the same way, so the
-- limits hold across workers of both versions.

DROP FUNCTION wfctl_claim_ready(text[], integer, integer, timestamptz, uuid, timestamptz);
CREATE FUNCTION wfctl_claim_ready(p_types text[], p_limit integer,
                                  p_after_priority integer DEFAULT NULL,
                                  p_after_run_at timestamptz DEFAULT NULL,
                                  p_after_id uuid DEFAULT NULL,
                                  p_floor timestamptz DEFAULT NULL,
                                  p_before_priority integer DEFAULT NULL,
                                  p_before_run_at timestamptz DEFAULT NULL,
                                  p_before_id uuid DEFAULT NULL)
RETURNS TABLE (id uuid, created_at timestamptz, priority integer, run_at timestamptz)
LANGUAGE plpgsql
SET enable_bitmapscan = off SET enable_sort = off SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    want integer := p_limit;
    got integer;
    prio integer;
    -- each key is used only whole
    keyed boolean := p_after_priority IS NOT NULL AND p_after_run_at IS NOT NULL
                     AND p_after_id IS NOT NULL;
    bounded boolean := p_before_priority IS NOT NULL AND p_before_run_at IS NOT NULL
                       AND p_before_id IS NOT NULL;
    -- the runs read: created from p_floor to an hour from now (NULL: all); the bounds are
    -- known when each statement starts, so the other partitions are never opened
    lo timestamptz := coalesce(p_floor, '-infinity');
    hi timestamptz := CASE WHEN p_floor IS NULL THEN 'infinity' ELSE now() + interval '1 hour' END;
    -- at one priority, the range of (run_at, id) scanned: after the frontier's key at its
    -- priority (elsewhere a bound no run has), and up to now() or, at the stop's priority,
    -- before the stop. One upper bound, not run_at <= now() beside a row comparison: btree
    -- cannot tell which of two upper bounds on run_at ends the scan, so with both it read
    -- every due entry of the priority past the stop.
    from_at timestamptz;
    from_id uuid;
    to_at timestamptz;
    to_id uuid;
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
        EXIT WHEN bounded AND prio < p_before_priority;  -- all of it sorts after the stop
        IF keyed AND prio = p_after_priority THEN
            from_at := p_after_run_at;
            from_id := p_after_id;
        ELSE
            from_at := '-infinity';
            from_id := '00000000-0000-0000-0000-000000000000';
        END IF;
        IF bounded AND prio = p_before_priority AND p_before_run_at <= now() THEN
            to_at := p_before_run_at;
            to_id := p_before_id;
        ELSE
            -- run_at <= now(): the greatest uuid is no id wfctl_new_id or gen_random_uuid makes
            to_at := now();
            to_id := 'ffffffff-ffff-ffff-ffff-ffffffffffff';
        END IF;
        RETURN QUERY
            SELECT w.id, w.created_at, w.priority, w.run_at FROM workflows w
            WHERE w.status = 'pending' AND w.created_at >= lo AND w.created_at < hi
              AND w.priority = prio
              AND (w.run_at, w.id) > (from_at, from_id)
              AND (w.run_at, w.id) < (to_at, to_id)
              AND w.workflow_type = ANY (p_types)
            ORDER BY w.run_at, w.id
            LIMIT want
            FOR UPDATE SKIP LOCKED;
        GET DIAGNOSTICS got = ROW_COUNT;
        want := want - got;
        EXIT WHEN want <= 0;
        EXIT WHEN bounded AND prio = p_before_priority;  -- the lower ones sort after the stop
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

-- What the limits allow of the limited types among p_types, up to p_want runs per type, locked
-- FOR UPDATE SKIP LOCKED (the caller, worker.claim, takes the first p_want of these and of the
-- unlimited types' pick by priority, run_at and id). The counting, the rate and the key walk are
-- wfctl_claim_limited's (0007), with two differences: every type picks up to p_want (the batch is
-- not handed out in the types' name order), and every pick comes with what the merge and the
-- partitioned layout's pruning need. Rows:
--   a pick:   id, created_at, priority, run_at, workflow_type; with a per-key limit also turn
--             (the walk's visit it was picked at, from 1) and concurrency_key (NULL: the runs
--             without a key, which take one turn as a group)
--   the rate: id NULL, retry_in (at most one row): when a rate held back runnable work
--   a cursor: id NULL, workflow_type, key_cursor: where the walk stopped, per type whose walk
--             moved; the claim keeps it only when every pick of the type was claimed (else it
--             stops at the last key whose run was claimed before the first one left out)
CREATE FUNCTION wfctl_claim_allowed(p_types text[], p_want integer)
RETURNS TABLE (id uuid, created_at timestamptz, priority integer, run_at timestamptz, turn integer,
               concurrency_key text, retry_in float8, workflow_type text, key_cursor text)
LANGUAGE plpgsql
SET enable_bitmapscan = off SET enable_sort = off SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    lim record;
    avail integer;
    took integer;
    got integer;
    interval_s float8;
    base timestamptz;
    tokens integer;
    rate_bound boolean;
    next_start float8;
    hint float8;
    key_now text;
    key_next text;
    key_start text;
    wrapped boolean;
    visits integer;
    key_running integer;
    unkeyed_done boolean;
    cursor_types text[] := '{}';
    cursor_keys text[] := '{}';
BEGIN
    IF p_want <= 0 THEN
        RETURN;
    END IF;
    FOR lim IN
        SELECT l.workflow_type,
               coalesce(l.concurrency, l.code_concurrency) AS concurrency,
               coalesce(l.key_concurrency, l.code_key_concurrency) AS key_concurrency,
               CASE WHEN l.rate_count IS NOT NULL THEN l.rate_count ELSE l.code_rate_count END AS rate_count,
               CASE WHEN l.rate_count IS NOT NULL THEN l.rate_seconds ELSE l.code_rate_seconds END AS rate_seconds,
               l.rate_tat, l.key_cursor
        FROM workflow_limits l
        WHERE l.workflow_type = ANY (p_types)
        ORDER BY l.workflow_type
        FOR UPDATE
    LOOP
        CONTINUE WHEN lim.concurrency IS NULL AND lim.key_concurrency IS NULL AND lim.rate_count IS NULL;
        -- What holds a lease now, counted in this statement's own snapshot, taken after the lock:
        -- every claim committed before it counts.
        avail := p_want;
        IF lim.concurrency IS NOT NULL THEN
            avail := least(avail, greatest(0, lim.concurrency - (
                SELECT count(*) FROM workflows w
                WHERE w.workflow_type = lim.workflow_type AND w.status = 'running')::integer));
        END IF;
        -- The rate (GCRA), as in 0007.
        rate_bound := false;
        IF lim.rate_count IS NOT NULL AND avail > 0 THEN
            interval_s := lim.rate_seconds / lim.rate_count;
            base := greatest(coalesce(lim.rate_tat, now()), now());
            tokens := floor(wfctl_rate_burst(lim.rate_count, lim.rate_seconds)
                            - extract(epoch FROM base - now()) / interval_s + 1e-9)::integer;
            IF tokens < avail THEN
                avail := greatest(tokens, 0);
                rate_bound := true;
            END IF;
        END IF;
        IF avail <= 0 THEN
            IF rate_bound AND EXISTS (
                SELECT 1 FROM workflows w
                WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending' AND w.run_at <= now()
            ) THEN
                next_start := extract(epoch FROM base - now())
                              - (wfctl_rate_burst(lim.rate_count, lim.rate_seconds) - 1) * interval_s;
                hint := least(coalesce(hint, next_start), next_start);
            END IF;
            CONTINUE;
        END IF;

        took := 0;
        IF lim.key_concurrency IS NULL THEN
            RETURN QUERY
                SELECT w.id, w.created_at, w.priority, w.run_at, NULL::integer, NULL::text,
                       NULL::float8, lim.workflow_type::text, NULL::text
                FROM workflows w
                WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending' AND w.run_at <= now()
                ORDER BY w.priority DESC, w.run_at, w.id
                LIMIT avail
                FOR UPDATE SKIP LOCKED;
            GET DIAGNOSTICS took = ROW_COUNT;
        ELSE
            -- The key walk of 0007: round robin over the keys with runnable runs, from after the
            -- key the last claim stopped at; each key gets what its own limit leaves; the runs
            -- without a key take one turn as a group (at the wrap).
            key_start := lim.key_cursor;
            key_now := lim.key_cursor;
            wrapped := false;
            unkeyed_done := false;
            visits := 0;
            LOOP
                EXIT WHEN took >= avail OR visits >= greatest(64, 4 * avail);
                visits := visits + 1;
                key_next := NULL;
                IF key_now IS NULL THEN
                    SELECT w.concurrency_key INTO key_next FROM workflows w
                    WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending'
                      AND w.concurrency_key IS NOT NULL AND w.run_at <= now()
                    ORDER BY w.concurrency_key
                    LIMIT 1;
                ELSE
                    SELECT w.concurrency_key INTO key_next FROM workflows w
                    WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending'
                      AND w.concurrency_key > key_now AND w.run_at <= now()
                    ORDER BY w.concurrency_key
                    LIMIT 1;
                END IF;
                EXIT WHEN wrapped AND (key_next IS NULL OR key_next > key_start);  -- all had a turn
                IF key_next IS NULL THEN
                    IF NOT unkeyed_done THEN
                        unkeyed_done := true;
                        RETURN QUERY
                            SELECT w.id, w.created_at, w.priority, w.run_at, visits, NULL::text,
                                   NULL::float8, lim.workflow_type::text, NULL::text
                            FROM workflows w
                            WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending'
                              AND w.run_at <= now() AND w.concurrency_key IS NULL
                            ORDER BY w.priority DESC, w.run_at, w.id
                            LIMIT avail - took
                            FOR UPDATE SKIP LOCKED;
                        GET DIAGNOSTICS got = ROW_COUNT;
                        took := took + got;
                    END IF;
                    key_now := NULL;
                    EXIT WHEN key_start IS NULL;  -- started from the first key: all had a turn
                    wrapped := true;
                    CONTINUE;
                END IF;
                key_now := key_next;
                SELECT count(*) INTO key_running FROM workflows w
                WHERE w.workflow_type = lim.workflow_type AND w.status = 'running'
                  AND w.concurrency_key = key_now;
                IF key_running < lim.key_concurrency THEN
                    RETURN QUERY
                        SELECT w.id, w.created_at, w.priority, w.run_at, visits, key_now,
                               NULL::float8, lim.workflow_type::text, NULL::text
                        FROM workflows w
                        WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending'
                          AND w.concurrency_key = key_now AND w.run_at <= now()
                        ORDER BY w.priority DESC, w.run_at
                        LIMIT least(lim.key_concurrency - key_running, avail - took)
                        FOR UPDATE SKIP LOCKED;
                    GET DIAGNOSTICS got = ROW_COUNT;
                    took := took + got;
                END IF;
            END LOOP;
            IF key_now IS DISTINCT FROM lim.key_cursor THEN
                cursor_types := cursor_types || lim.workflow_type::text;
                cursor_keys := cursor_keys || key_now;
            END IF;
        END IF;

        IF lim.rate_count IS NOT NULL AND took > 0 THEN
            -- the rate is charged by the claim statement (worker.claim), for the runs it claimed
            base := base + make_interval(secs => took * interval_s);
            IF rate_bound AND took >= avail THEN
                -- every start the rate allowed was picked: claim again when the next one may
                next_start := extract(epoch FROM base - now())
                              - (wfctl_rate_burst(lim.rate_count, lim.rate_seconds) - 1) * interval_s;
                hint := least(coalesce(hint, next_start), next_start);
            END IF;
        END IF;
    END LOOP;
    IF hint IS NOT NULL THEN
        RETURN QUERY SELECT NULL::uuid, NULL::timestamptz, NULL::integer, NULL::timestamptz,
                            NULL::integer, NULL::text, greatest(hint, 0.001), NULL::text, NULL::text;
    END IF;
    RETURN QUERY SELECT NULL::uuid, NULL::timestamptz, NULL::integer, NULL::timestamptz,
                        NULL::integer, NULL::text, NULL::float8, t.type, t.key
                 FROM unnest(cursor_types, cursor_keys) AS t(type, key);
END;
$$;

-- Pin the functions to this schema, as migrations 0003, 0006, 0007 and 0011 do.
DO $migration$
DECLARE
    fn text;
BEGIN
    FOREACH fn IN ARRAY ARRAY[
        'wfctl_claim_ready(text[], integer, integer, timestamptz, uuid, timestamptz, integer, '
        'timestamptz, uuid)',
        'wfctl_claim_allowed(text[], integer)'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_temp',
                       current_schema(), fn, current_schema());
    END LOOP;
END
$migration$;
