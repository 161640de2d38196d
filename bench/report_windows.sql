-- Named blocks of bench/report_windows.py.

-- name: sizes
SELECT (SELECT count(*) FROM workflows) AS workflows,
       (SELECT count(*) FROM workflow_steps) AS steps,
       current_setting('server_version') AS server_version;

-- name: rollup_sizes
SELECT (SELECT count(*) FROM wfctl_rollup_buckets WHERE span = 'h') AS hours,
       (SELECT count(*) FROM wfctl_rollup_buckets WHERE span = 'd') AS days,
       (SELECT count(*) FROM wfctl_rollup_durations) AS duration_rows,
       pg_size_pretty(pg_total_relation_size('wfctl_rollup_durations')
                      + pg_total_relation_size('wfctl_rollup_counts')
                      + pg_total_relation_size('wfctl_rollup_buckets')) AS size;

-- name: forget
-- (inside a transaction the benchmark rolls back: the reports as the tables alone give them;
-- without JIT, as the reports' own snapshot runs)
DELETE FROM wfctl_rollup_buckets;
SET LOCAL jit = off;

-- name: freeze
-- The schema's clock stopped at now (wfctl_now(), migration 0022), so that the reports read
-- from the rollups and from the tables alone see the same window.
INSERT INTO wfctl_settings (name, value) VALUES ('fake_now', now()::text)
ON CONFLICT (name) DO UPDATE SET value = excluded.value;

-- name: thaw
DELETE FROM wfctl_settings WHERE name = 'fake_now';
