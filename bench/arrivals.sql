-- Named blocks of bench/arrivals.py (steady arrivals against W idle workers).

-- name: capacity
-- On the server's own database, before anything starts: the connections a run may take.
SELECT current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int AS reserved,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend') AS in_use,
       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS superuser;

-- name: data_directory
-- On the server's own database: where the server keeps its files (no row for a role that may not
-- read the setting), to check that the postmaster found through /proc is this server's.
SELECT setting FROM pg_settings WHERE name = 'data_directory';

-- name: sessions
-- On the server's own database: the client sessions connected to the measured database (the
-- workers', the submitter's, the monitor's), with their process ids.
SELECT pid FROM pg_stat_activity WHERE datname = %(db)s AND backend_type = 'client backend';

-- name: transactions
-- On the server's own database (so that reading it adds nothing to the figure): the transactions
-- the measured database has counted so far, committed and rolled back. A session's counts reach
-- this view when it flushes them (PostgreSQL 15: at most once a second while busy, within 10 s
-- when idle, and at its exit).
SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %(db)s;

-- name: flush
-- In the measured database: flush this session's statistics now (PostgreSQL 15+; superuser, or
-- EXECUTE granted), so that its earlier transactions are counted before the "before" reading.
SELECT pg_stat_force_next_flush();

-- name: nudge
-- The fallback of flush: a statement more than a second after the session's last flush makes it
-- flush at once, this statement included.
SELECT 1;

-- name: claim_scans
-- In the measured database: the index scans of the claim's index so far (workflows_runnable_idx,
-- the partial index of the pending runs), whether the claim found work or not; NULL when the
-- schema has no such index. Neither the submits nor the completions, nor the monitor's poll,
-- scan it.
SELECT sum(idx_scan)::bigint FROM pg_stat_user_indexes WHERE indexrelname = 'workflows_runnable_idx';

-- name: progress
-- The monitor's poll while the runs finish (the database holds this measurement's runs only).
SELECT count(*) FILTER (WHERE status = 'completed') AS completed,
       count(*) FILTER (WHERE status IN ('failed', 'cancelled')) AS ended_otherwise
FROM workflows;

-- name: figures
-- After the "after" reading: the submitted runs, and from the database's clock the span from the
-- first submit (created_at, the submit's transaction start) to the last completion, and the
-- submit-to-start latency (started_at, the first claim's transaction start) in milliseconds,
-- percentiles interpolated between the closest ranks.
SELECT count(*) AS submitted,
       count(*) FILTER (WHERE status = 'completed') AS completed,
       count(*) FILTER (WHERE attempt > 1 OR lease_epoch > 1) AS claimed_again,
       extract(epoch FROM max(finished_at) - min(created_at))::float8 AS wall_s,
       (1000 * extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY started_at - created_at)))::float8
           AS p50_ms,
       (1000 * extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY started_at - created_at)))::float8
           AS p99_ms,
       (1000 * extract(epoch FROM max(started_at - created_at)))::float8 AS max_ms
FROM workflows
WHERE workflow_type = %(type)s;
