-- bench/statements.py: where the server's work per workflow goes, statement by statement.

-- name: preloaded
SELECT 'pg_stat_statements' = ANY (
    SELECT btrim(lib) FROM unnest(string_to_array(current_setting('shared_preload_libraries'), ',')) AS lib
);

-- name: create_extension
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;

-- name: reset
SELECT pg_stat_statements_reset();

-- name: statements
-- Every statement of this database since the reset, the benchmark's own left out (they read
-- pg_stat_*, or the backlog's progress), with what it cost in all.
SELECT s.queryid,
       min(s.query) AS query,
       sum(s.calls)::bigint AS calls,
       sum(s.rows)::bigint AS rows,
       sum(s.total_exec_time)::float8 AS exec_ms,
       sum(s.shared_blks_hit)::bigint AS blks_hit,
       sum(s.shared_blks_read)::bigint AS blks_read,
       sum(s.shared_blks_dirtied)::bigint AS blks_dirtied,
       sum(s.wal_bytes)::bigint AS wal_bytes
FROM pg_stat_statements s
WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND s.query NOT LIKE '%%pg_stat_%%'
  AND s.query NOT LIKE '%%FROM workflows WHERE status = $1%%'
GROUP BY s.queryid;
