-- The queries of bench/loaded.py (completion latency under a steady load), as named blocks.

-- name: now
-- The database's clock: the start of the measured window, after the capacity phase.
SELECT clock_timestamp();

-- name: drained
-- The capacity phase's runs (all created before the window): how many completed, and the span
-- from the first claim to the last completion on the database's clock.
SELECT count(*) FILTER (WHERE status = 'completed') AS completed,
       extract(epoch FROM max(finished_at) - min(started_at))::float8 AS span_s
FROM workflows
WHERE workflow_type = %(type)s AND created_at < %(since)s;

-- name: progress
-- The monitor's poll during the load: the window's runs completed, and failed or cancelled.
SELECT count(*) FILTER (WHERE status = 'completed') AS completed,
       count(*) FILTER (WHERE status IN ('failed', 'cancelled')) AS ended_otherwise
FROM workflows
WHERE workflow_type = %(type)s AND created_at >= %(since)s;

-- name: latencies
-- The measured runs (submitted after the warm-up): submit to completion (finished_at, the group
-- commit's transaction start, minus created_at, the submit's) and submit to start (started_at,
-- the first claim's), in milliseconds, percentiles interpolated between the closest ranks; and
-- the runs claimed more than once.
SELECT count(*) AS runs,
       count(*) FILTER (WHERE attempt > 1 OR lease_epoch > 1) AS claimed_again,
       (1000 * extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY finished_at - created_at)))::float8
           AS done_p50_ms,
       (1000 * extract(epoch FROM percentile_cont(0.9) WITHIN GROUP (ORDER BY finished_at - created_at)))::float8
           AS done_p90_ms,
       (1000 * extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY finished_at - created_at)))::float8
           AS done_p99_ms,
       (1000 * extract(epoch FROM max(finished_at - created_at)))::float8 AS done_max_ms,
       (1000 * extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY started_at - created_at)))::float8
           AS start_p50_ms,
       (1000 * extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY started_at - created_at)))::float8
           AS start_p99_ms
FROM workflows
WHERE workflow_type = %(type)s AND created_at >= %(since)s AND status = 'completed';
