-- wfctl schema, version 9: a claim whose cost does not grow with the backlog.
--
-- wfctl_claim_ready(types, n) picks up to n runnable workflows of those types, by priority then
-- age, locked FOR UPDATE SKIP LOCKED: the claim statement's pick of every type without a limit
-- (worker.claim; the limited types go through wfctl_claim_limited). Two things made the pick
-- it replaces read the whole pending set:
--   1. Its plan. workflows_runnable_idx (priority DESC, run_at) WHERE status = 'pending' holds the
--      rows in the claim's order, so an index scan can stop after n rows; but a plan built while
--      the statistics said the table was small (a table that has just received 20,000 rows and
--      not been analyzed yet, and the worker's generic plans are built once) was a bitmap scan of
--      that index and a sort of everything it returned. Here the planner is left no such choice:
--      the function runs with enable_bitmapscan, enable_sort and enable_seqscan off, so its
--      plans are the ordered index scans, whatever the statistics say and whenever they are built.
--   2. Rows that are pending but not due: delayed submits, retries backing off, sleeps, and runs
--      parked on a message or on children (their run_at is their deadline, or 9999-01-01). In an
--      index led by priority, run_at <= now() bounds nothing: with fewer than n rows due, the
--      scan read every pending row of the priority. Here each priority present is scanned on its
--      own, WHERE priority = p AND run_at <= now(): a range of the index that holds only rows due.
--      The priorities present are found by skipping through the same index (one probe each, the
--      highest first; the loop stops as soon as n rows are picked, so with one priority in use,
--      as usual, that is one probe).
-- What the pick still reads beyond the rows it takes: due rows of types this worker does not run
-- (filtered, as before), and rows other workers hold (skipped). wfctl_claim_limited gets the same
-- planner settings (its picks and key probes are ordered index scans with LIMIT; its counts of
-- running rows read the status index either way).
--
-- Per-table storage and autovacuum settings (each says why at its ALTER TABLE below): a queue's tables change far faster than the defaults assume, and the defaults scale
-- with the table's size, so a table holding months of history would wait for millions of dead
-- rows before a vacuum.

CREATE FUNCTION wfctl_claim_ready(p_types text[], p_limit integer)
RETURNS SETOF uuid LANGUAGE plpgsql
SET enable_bitmapscan = off SET enable_sort = off SET enable_seqscan = off
AS $$
DECLARE
    want integer := p_limit;
    got integer;
    prio integer;
BEGIN
    IF want <= 0 OR cardinality(p_types) = 0 THEN
        RETURN;
    END IF;
    SELECT w.priority INTO prio FROM workflows w
    WHERE w.status = 'pending'
    ORDER BY w.priority DESC
    LIMIT 1;
    WHILE prio IS NOT NULL LOOP
        RETURN QUERY
            SELECT w.id FROM workflows w
            WHERE w.status = 'pending' AND w.priority = prio AND w.run_at <= now()
              AND w.workflow_type = ANY (p_types)
            ORDER BY w.run_at
            LIMIT want
            FOR UPDATE SKIP LOCKED;
        GET DIAGNOSTICS got = ROW_COUNT;
        want := want - got;
        EXIT WHEN want <= 0;
        SELECT w.priority INTO prio FROM workflows w
        WHERE w.status = 'pending' AND w.priority < prio
        ORDER BY w.priority DESC
        LIMIT 1;
    END LOOP;
END;
$$;

ALTER FUNCTION wfctl_claim_limited(text[], integer)
    SET enable_bitmapscan = off SET enable_sort = off SET enable_seqscan = off;

-- workflows: every run is inserted, updated by its claim, by each step (current_step,
-- updated_at: HOT when its page has room, fillfactor 85 since migration 0001), by heartbeats,
-- and at its end. Vacuum after 1 % of the table (plus 1,000 rows) changed, not 20 %: the dead
-- entries of the runnable index are what every claim steps over; without the cost delay, so a
-- vacuum of a busy table ends before the next one is due; analyze after 2 %.
ALTER TABLE workflows SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
-- workflow_attempts: a row per execution, updated once when it ends (ended_at, outcome: no
-- index holds them, so the update is HOT when the page has room: fillfactor 90).
ALTER TABLE workflow_attempts SET (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
-- workflow_steps: inserted once per step and deleted only by prune: vacuumed after inserts
-- (5 %: it keeps the visibility map current for the reports' index-only scans) and after a
-- prune's deletes (5 %).
ALTER TABLE workflow_steps SET (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
-- workers: one row per worker, updated by every heartbeat (5 a second for a worker with
-- --heartbeat 200ms): vacuumed after 100 changes whatever its size.
ALTER TABLE workers SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 100,
    autovacuum_vacuum_cost_delay = 0
);

-- Pin the function to this schema, as migrations 0003, 0006 and 0007 do.
DO $migration$
DECLARE
    here text := current_schema();
BEGIN
    EXECUTE format('ALTER FUNCTION %I.wfctl_claim_ready(text[], integer) SET search_path = %I, pg_temp',
                   here, here);
END
$migration$;
