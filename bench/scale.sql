-- Named blocks of bench/scale.py (cost that does not grow with the history or the backlog, and
-- the soak). The claim itself is not here: the benchmark runs the package's own
-- worker.claim and worker.session_setup, so it always measures the claim of the code under test.

-- name: reset
-- Before a phase: no workflow, step, attempt or worker left from the phase before (the other
-- tables that reference workflows go with them).
TRUNCATE workflows, workers CASCADE;

-- name: forget_round
-- Between rounds of the history phase: the round's own workflows go (steps and attempts by
-- ON DELETE CASCADE), the history stays; the workers' rows go too.
WITH gone AS (
    DELETE FROM workflows WHERE id = ANY (%(ids)s::uuid[]) RETURNING 1
)
SELECT count(*) FROM gone;

-- name: forget_workers
DELETE FROM workers;

-- name: history
-- The finished history: %(n)s workflows of 3 steps, created over the last %(days)s days in time
-- order (as they were submitted, so the heap is ordered by age), each finished seconds after its
-- creation. One in 20 failed: 4 attempts (max_retries 3), its third step failed; the others
-- completed in one attempt. Every execution has its row in workflow_attempts. The steps' foreign
-- keys are checked at the end of the statement, as a submit-and-run history would have them.
WITH src AS (
    SELECT g,
           CASE WHEN g %% 20 = 0 THEN 'failed' ELSE 'completed' END AS status,
           now() - make_interval(days => %(days)s)
                 + make_interval(secs => %(days)s * 86400.0 * g / %(n)s + random()) AS created
    FROM generate_series(1, %(n)s) AS g
),
w AS (
    INSERT INTO workflows (workflow_type, status, input_data, current_step, max_retries,
                           error_message, error_traceback, created_at, updated_at, attempt, run_at,
                           output_data, lease_owner, lease_epoch, started_at, finished_at)
    SELECT 'noop3', s.status, '{"steps": 3}'::jsonb,
           CASE WHEN s.status = 'failed' THEN 2 ELSE 3 END, 3,
           CASE WHEN s.status = 'failed' THEN 'ValueError: boom' END,
           CASE WHEN s.status = 'failed'
                THEN 'Traceback (most recent call last):' || chr(10) || '  File "app.py", line 9' || chr(10)
                     || 'ValueError: boom' END,
           s.created, s.created + interval '3 seconds',
           CASE WHEN s.status = 'failed' THEN 4 ELSE 1 END,
           s.created,
           CASE WHEN s.status = 'completed' THEN '{"ok": true}'::jsonb END,
           'bench-host:' || (1000 + g %% 4) || ':a1b2c3',
           CASE WHEN s.status = 'failed' THEN 4 ELSE 1 END,
           s.created + interval '5 milliseconds', s.created + interval '3 seconds'
    FROM src AS s
    ORDER BY g
    RETURNING id, status, attempt, lease_owner, started_at, finished_at
),
steps AS (
    INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, output_data,
                                started_at, completed_at, error_message, attempt, lease_epoch)
    SELECT w.id, k, 's' || k,
           CASE WHEN w.status = 'failed' AND k = 3 THEN 'failed' ELSE 'completed' END,
           CASE WHEN w.status = 'failed' AND k = 3 THEN NULL ELSE to_jsonb(k - 1) END,
           w.started_at + make_interval(secs => k * 0.001), w.started_at + make_interval(secs => k * 0.001),
           CASE WHEN w.status = 'failed' AND k = 3 THEN 'ValueError: boom' END,
           w.attempt, w.attempt
    FROM w CROSS JOIN generate_series(1, 3) AS k
    RETURNING 1
),
attempts AS (
    INSERT INTO workflow_attempts (workflow_id, lease_epoch, attempt, worker_id, started_at, ended_at,
                                   outcome, last_step, error)
    SELECT w.id, e, e, w.lease_owner, w.started_at + make_interval(secs => e - 1),
           w.started_at + make_interval(secs => e - 0.5),
           CASE WHEN w.status = 'completed' THEN 'completed' ELSE 'error' END,
           CASE WHEN w.status = 'completed' THEN 3 ELSE 2 END,
           CASE WHEN w.status = 'failed' THEN 'ValueError: boom' END
    FROM w CROSS JOIN LATERAL generate_series(1, w.attempt) AS e
    RETURNING 1
)
SELECT (SELECT count(*) FROM w) AS workflows, (SELECT count(*) FROM steps) AS steps,
       (SELECT count(*) FROM attempts) AS attempts;

-- name: backlog
-- A waiting backlog: %(runnable)s runnable runs (submitted over the last 10 minutes, run_at =
-- created_at, as `wfctl submit` leaves them) with %(parked)s parked and delayed runs mixed in,
-- a third each (wfctl/waits.py, migration 0006):
--   sleeping: pending, wait_kind 'sleep', run_at 1-24 h ahead, claimed once (epoch 1, step 1);
--   waiting for a message: pending, wait_kind 'message', topic 'go', run_at in the year 9999;
--   delayed: pending, never claimed, run_at 1-24 h ahead (`wfctl submit --delay`).
-- All are 'pending', so all are in workflows_runnable_idx; rows are in submit order (by
-- created_at), parked ones among the runnable ones as a live table has them. None of them wakes
-- within a benchmark.
WITH src AS (
    SELECT 'runnable' AS kind, now() - interval '10 minutes' + make_interval(secs => 600.0 * g / %(runnable)s) AS created
    FROM generate_series(1, %(runnable)s) AS g
    UNION ALL
    SELECT (ARRAY['sleep', 'message', 'delayed'])[1 + g %% 3],
           now() - interval '10 minutes' + make_interval(secs => 600.0 * g / greatest(%(parked)s, 1))
    FROM generate_series(1, %(parked)s) AS g
),
w AS (
    INSERT INTO workflows (workflow_type, input_data, created_at, updated_at, run_at, max_retries,
                           current_step, lease_owner, lease_epoch, started_at, wait_kind,
                           wait_topic, wait_step)
    SELECT 'noop3', '{"steps": 3}'::jsonb, s.created, s.created,
           CASE s.kind WHEN 'runnable' THEN s.created
                       WHEN 'message' THEN timestamptz '9999-12-31 00:00:00+00'
                       ELSE now() + make_interval(secs => 3600 + random() * 82800) END,
           CASE WHEN s.kind IN ('sleep', 'message') THEN 3 END,
           CASE WHEN s.kind IN ('sleep', 'message') THEN 1 ELSE 0 END,
           CASE WHEN s.kind IN ('sleep', 'message') THEN 'bench-host:1000:a1b2c3' END,
           CASE WHEN s.kind IN ('sleep', 'message') THEN 1 ELSE 0 END,
           CASE WHEN s.kind IN ('sleep', 'message') THEN s.created + interval '5 milliseconds' END,
           CASE WHEN s.kind IN ('sleep', 'message') THEN s.kind END,
           CASE WHEN s.kind = 'message' THEN 'go' END,
           CASE WHEN s.kind = 'message' THEN 2 END
    FROM src AS s
    ORDER BY s.created
    RETURNING run_at <= now() AS runnable
)
SELECT count(*) FILTER (WHERE runnable) AS runnable, count(*) FILTER (WHERE NOT runnable) AS parked
FROM w;

-- name: autovacuum_off
-- claim-plan only, in its throwaway database: no autovacuum (and so no autoanalyze) of workflows
-- between the bulk insert and the measurement of the plan built on stale statistics.
ALTER TABLE workflows SET (autovacuum_enabled = false);

-- name: autovacuum_on
ALTER TABLE workflows RESET (autovacuum_enabled);

-- name: vacuum_analyze
VACUUM ANALYZE workflows, workflow_steps, workflow_attempts;

-- name: analyze
ANALYZE workflows;

-- name: checkpoint
CHECKPOINT;

-- name: statistics_state
-- What the planner knows about workflows: its row estimate, and when it was last analyzed.
SELECT c.reltuples::bigint AS reltuples, c.relpages,
       coalesce(greatest(t.last_analyze, t.last_autoanalyze)::text, 'never') AS analyzed
FROM pg_class c LEFT JOIN pg_stat_user_tables t ON t.relid = c.oid
WHERE c.oid = 'workflows'::regclass;

-- name: prepared_claim
-- The claim as psycopg prepared it on this connection: the statement's text as the server got it
-- ($1, $2, ...) and the parameter types psycopg sent. (psycopg forgets its prepared statements
-- when a transaction rolls back, so the benchmark prepares the same text with the same types
-- under a name of its own: prepare_claim.)
SELECT name, statement, parameter_types::text[] AS types
FROM pg_prepared_statements
WHERE NOT from_sql
ORDER BY prepare_time DESC
LIMIT 1;

-- name: prepare_claim
PREPARE {name} ({types}) AS {statement};

-- name: explain_execute
EXPLAIN (ANALYZE, BUFFERS, FORMAT {format}) EXECUTE {name}({args});

-- name: xact_index_reads
-- Index entries returned (idx_tup_read's counter) and blocks fetched, per index of workflows, by
-- this transaction so far: read before and after one claim, the difference is that claim's.
SELECT i.indexrelid::regclass::text AS index,
       pg_stat_get_xact_tuples_returned(i.indexrelid) AS tuples,
       pg_stat_get_xact_blocks_fetched(i.indexrelid) AS blocks
FROM pg_index i
WHERE i.indrelid = 'workflows'::regclass;

-- name: index_stats
-- The cumulative statistics of the claim's index (flushed by backends; read after they exit).
SELECT coalesce(sum(idx_scan), 0)::bigint AS scans, coalesce(sum(idx_tup_read), 0)::bigint AS tuples
FROM pg_stat_user_indexes
WHERE indexrelname = 'workflows_runnable_idx';

-- name: worker_backends
-- Worker sessions still connected to this database (their statistics are flushed when they end).
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE 'wfctl worker%%';

-- name: unfinished
-- Runs not finished: through the partial indexes of pending and running rows, so the poll costs
-- the same with a history of any size.
SELECT (SELECT count(*) FROM workflows WHERE status = 'pending')
     + (SELECT count(*) FROM workflows WHERE status = 'running') AS unfinished;

-- name: own_index_reads
-- The scans and entries of the claim's index this session has counted and not flushed yet, read
-- before and after a poll's count in one transaction: the difference is the poll's own reads (the
-- count of pending runs goes through that partial index), which the run's figures leave out.
SELECT pg_stat_get_xact_numscans('workflows_runnable_idx'::regclass) AS scans,
       pg_stat_get_xact_tuples_returned('workflows_runnable_idx'::regclass) AS tuples;

-- name: runnable
-- What the soak's feeder tops up: pending runs that are due.
SELECT count(*) FROM workflows WHERE status = 'pending' AND run_at <= now();

-- name: completed
SELECT count(*) FROM workflows WHERE status = 'completed';

-- name: verify_ids
-- The runs a phase submitted: how many exist, completed, were claimed more than once, and their
-- step rows; the first claim and the last completion on the database clock.
SELECT count(*) AS workflows,
       count(*) FILTER (WHERE w.status = 'completed') AS completed,
       count(*) FILTER (WHERE w.lease_epoch > 1 OR w.attempt > 1) AS reclaimed,
       (SELECT count(*) FROM workflow_steps s WHERE s.workflow_id = ANY (%(ids)s::uuid[])
                                               AND s.status = 'completed') AS steps,
       extract(epoch FROM max(w.finished_at) - min(w.started_at)) AS span
FROM workflows w
WHERE w.id = ANY (%(ids)s::uuid[]);

-- name: first_completions
-- The backlog phase: the span from the first claim to the %(count)s-th completion (database
-- clock), and what failed or was claimed more than once. The parked rows were never claimed
-- here: they are 'pending', so min(started_at) is the workers' first claim.
SELECT extract(epoch FROM (SELECT finished_at FROM workflows WHERE status = 'completed'
                           ORDER BY finished_at OFFSET %(count)s - 1 LIMIT 1)
                          - (SELECT min(started_at) FROM workflows
                             WHERE status IN ('completed', 'running'))) AS span,
       (SELECT count(*) FROM workflows WHERE status = 'completed'
                                         AND (lease_epoch > 1 OR attempt > 1)) AS reclaimed,
       (SELECT count(*) FROM workflows WHERE status = 'failed') AS failed;

-- name: soak_verify
-- After the soak: runs that failed, and runs claimed more than once, among those not pruned.
SELECT count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) FILTER (WHERE lease_epoch > 1 OR attempt > 1) AS reclaimed
FROM workflows;

-- name: sizes
-- Per table: total (heap, indexes, TOAST), heap, indexes; live and dead tuples, and how often
-- autovacuum and autoanalyze ran (pg_stat_user_tables).
SELECT c.relname AS name,
       pg_total_relation_size(c.oid) AS total, pg_relation_size(c.oid) AS heap,
       pg_indexes_size(c.oid) AS indexes,
       t.n_live_tup AS live, t.n_dead_tup AS dead,
       t.autovacuum_count AS autovacuums, t.autoanalyze_count AS autoanalyzes,
       t.n_tup_hot_upd AS hot_updates, t.n_tup_upd AS updates
FROM pg_class c JOIN pg_stat_user_tables t ON t.relid = c.oid
WHERE c.oid IN ('workflows'::regclass, 'workflow_steps'::regclass, 'workflow_attempts'::regclass)
ORDER BY c.relname;

-- name: index_sizes
-- Every index of the three tables, its size and the reads it served.
SELECT s.relname AS "table", s.indexrelname AS index, pg_relation_size(s.indexrelid) AS size,
       s.idx_scan AS scans
FROM pg_stat_user_indexes s
WHERE s.relname IN ('workflows', 'workflow_steps', 'workflow_attempts')
ORDER BY s.relname, s.indexrelname;

-- name: auto_explain_load
-- claim-plan's printed plan: the plans of the statements the claim's functions run
-- (wfctl_claim_ready, wfctl_claim_allowed), which EXPLAIN shows as one Function Scan. Loaded
-- for the session when the server has the module and allows it; without it those are left out.
LOAD 'auto_explain';

-- name: auto_explain_on
-- For the rest of this transaction (rolled back): every nested statement's plan, with its
-- actual rows and buffers, sent to this client as a LOG message.
SELECT set_config('auto_explain.log_min_duration', '0', true),
       set_config('auto_explain.log_nested_statements', 'on', true),
       set_config('auto_explain.log_analyze', 'on', true),
       set_config('auto_explain.log_buffers', 'on', true),
       set_config('client_min_messages', 'log', true);

-- name: auto_explain_off
SELECT set_config('auto_explain.log_min_duration', '-1', true);

-- name: claim_front
-- claim-plan's last state: %(count)s runs claimed from the front of the queue (in the claim's
-- order) and committed, as workers leave them between two vacuums: 'running' under a new epoch.
-- Their old versions stay in workflows_runnable_idx until a vacuum removes them.
WITH front AS (
    SELECT id FROM workflows
    WHERE status = 'pending' AND run_at <= now()
    ORDER BY priority DESC, run_at
    LIMIT %(count)s
),
moved AS (
    UPDATE workflows w
    SET status = 'running', lease_owner = 'bench-host:1000:a1b2c3', lease_epoch = w.lease_epoch + 1,
        started_at = now(), updated_at = now()
    FROM front WHERE w.id = front.id
    RETURNING 1
)
SELECT count(*) FROM moved;

-- name: block_reads
-- Blocks of the three tables and their indexes found in shared buffers (hit) and read from outside
-- them (read: the OS cache or the disk), so far.
SELECT coalesce(sum(heap_blks_hit + coalesce(idx_blks_hit, 0)), 0)::bigint AS hit,
       coalesce(sum(heap_blks_read + coalesce(idx_blks_read, 0)), 0)::bigint AS read
FROM pg_statio_user_tables
WHERE relname IN ('workflows', 'workflow_steps', 'workflow_attempts');
