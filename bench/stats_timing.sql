-- Named blocks of bench/stats_timing.py.

-- name: sizes
SELECT (SELECT count(*) FROM workflows) AS workflows,
       (SELECT count(*) FROM workflow_steps) AS steps,
       pg_size_pretty(pg_total_relation_size('workflows')) AS workflows_size,
       pg_size_pretty(pg_total_relation_size('workflow_steps')) AS steps_size,
       (SELECT count(*) FROM workflows WHERE created_at > now() - %(since)s::interval) AS in_window,
       current_setting('server_version') AS server_version;

-- name: explain
-- The query is a named block of sql/queries, composed in with psycopg.sql.
EXPLAIN (ANALYZE, BUFFERS, SETTINGS) {query};
