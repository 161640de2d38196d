-- bench/upgrade_locks.py: what the workers waited for while `wfctl init` ran.

-- name: worker_lock_wait
-- The longest a worker's statement (its loop and its transactional steps' connections) has been
-- waiting for a lock right now, in seconds (0: none waits). pg_locks.waitstart: PostgreSQL 14+.
SELECT coalesce(max(extract(epoch FROM clock_timestamp() - l.waitstart)), 0)::float8
FROM pg_locks l
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE NOT l.granted AND l.waitstart IS NOT NULL
  AND a.datname = current_database() AND a.application_name LIKE 'wfctl worker%%';

-- name: now
SELECT clock_timestamp();

-- name: completion_gap
-- The longest time between two runs finishing, in seconds, within the window (while workers
-- run at full speed with a backlog, a claim held back shows as a gap).
SELECT coalesce(max(gap), 0)::float8, count(*)
FROM (
    SELECT extract(epoch FROM finished_at - lag(finished_at) OVER (ORDER BY finished_at)) AS gap
    FROM workflows
    WHERE status = 'completed' AND finished_at BETWEEN %(start)s AND %(end)s
) AS gaps;
