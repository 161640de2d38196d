-- Named blocks of bench/coordination.py (the coordination benchmark).

-- name: type_counts
-- Progress of one workflow type: how many there are, completed, parked in a wait, finished badly.
SELECT count(*) AS total,
       count(*) FILTER (WHERE status = 'completed') AS completed,
       count(*) FILTER (WHERE status = 'pending' AND wait_kind IN ('message', 'children')) AS parked,
       count(*) FILTER (WHERE status IN ('failed', 'cancelled')) AS failed
FROM workflows
WHERE workflow_type = %(type)s;

-- name: now
SELECT now();

-- name: ready_workers
-- Worker processes (by pid) that registered since the benchmark started them.
SELECT count(*) FROM workers
WHERE pid = ANY(%(pids)s::int[]) AND started_at >= %(since)s AND stopped_at IS NULL;

-- name: children
SELECT parent_id, id FROM workflows WHERE parent_id = ANY(%(ids)s::uuid[]);

-- name: resumed_at
-- The time.time() each timed workflow recorded in its step "run" (bench/coord_app.py).
SELECT id, (output_data ->> 'at')::float8 AS at FROM workflows WHERE id = ANY(%(ids)s::uuid[]);

-- name: send_batch
-- One message on the topic to each workflow, in the caller's transaction (wfctl_send, migration 0006).
SELECT count(wfctl_send(t.id, %(topic)s, NULL, NULL)) FROM unnest(%(ids)s::uuid[]) AS t(id);

-- name: vacuum
-- Before a quiet interval, with workflows and workflow_steps (bench/run.py prepare_tables): fresh
-- statistics, so that autovacuum has no reason to run inside the interval.
VACUUM ANALYZE workflow_messages, workflow_attempts, workflow_events, workers;

-- name: activity
-- Counters of this database and of its tables, read at both ends of a quiet interval. One
-- statement, so one transaction of the benchmark's own.
SELECT d.xact_commit + d.xact_rollback AS xacts,
       d.tup_returned + d.tup_fetched AS tuples,
       d.blks_hit + d.blks_read AS blocks,
       (SELECT coalesce(sum(coalesce(t.seq_scan, 0) + coalesce(t.idx_scan, 0)), 0)
        FROM pg_stat_user_tables t) AS scans,
       (SELECT coalesce(sum(i.idx_scan), 0) FROM pg_stat_user_indexes i
        WHERE i.indexrelid = to_regclass('workflows_runnable_idx')) AS runnable_scans,
       (SELECT coalesce(sum(i.idx_blks_hit + i.idx_blks_read), 0) FROM pg_statio_user_indexes i
        WHERE i.indexrelid = to_regclass('workflows_runnable_idx')) AS runnable_blocks
FROM pg_stat_database d
WHERE d.datname = current_database();

-- name: statements_preloaded
SELECT 'pg_stat_statements' = ANY (
    SELECT btrim(lib) FROM unnest(string_to_array(current_setting('shared_preload_libraries'), ',')) AS lib
);

-- name: statements_create
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;

-- name: statements_installed
SELECT to_regclass('pg_stat_statements') IS NOT NULL;

-- name: statements
-- pg_stat_statements of this database: calls per statement so far.
SELECT s.queryid, sum(s.calls)::bigint AS calls, min(s.query) AS query
FROM pg_stat_statements s
WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
GROUP BY s.queryid;

-- name: explain
-- One statement run inside EXPLAIN (the caller rolls the transaction back).
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {query};

-- name: fan
-- The fan-out run: the parent's span, the children's start-up and the join (database clock),
-- and the parent's executions (workflow_attempts: one row per claim).
SELECT extract(epoch FROM p.finished_at - p.created_at)::float8 AS total,
       extract(epoch FROM max(c.created_at) - min(c.created_at))::float8 AS starting,
       extract(epoch FROM p.finished_at - max(c.finished_at))::float8 AS joining,
       count(c.id) AS children,
       count(c.id) FILTER (WHERE c.status = 'completed') AS completed,
       count(c.id) FILTER (WHERE c.finished_at > park.ended_at) AS unfinished_at_park,
       (SELECT count(*) FROM workflow_attempts a WHERE a.workflow_id = p.id) AS executions,
       (SELECT string_agg(coalesce(a.outcome, 'open'), ', ' ORDER BY a.lease_epoch)
        FROM workflow_attempts a WHERE a.workflow_id = p.id) AS outcomes,
       p.status
FROM workflows p
LEFT JOIN workflows c ON c.parent_id = p.id
LEFT JOIN LATERAL (
    SELECT min(a.ended_at) AS ended_at FROM workflow_attempts a
    WHERE a.workflow_id = p.id AND a.outcome = 'parked'
) AS park ON true
WHERE p.id = %(id)s
GROUP BY p.id, p.finished_at, p.created_at, p.status, park.ended_at;

-- name: span
-- Submit of the first to completion of the last, database clock.
SELECT extract(epoch FROM max(finished_at) - min(created_at))::float8
FROM workflows WHERE id = ANY(%(ids)s::uuid[]);

-- name: verify
-- Per workflow type: not completed, executions other than 'parked' then 'completed' for the
-- types that wait once, and messages sent / consumed.
SELECT w.workflow_type,
       count(*) AS workflows,
       count(*) FILTER (WHERE w.status <> 'completed') AS not_completed,
       count(*) FILTER (WHERE w.attempt > 1) AS retried,
       count(*) FILTER (
           WHERE w.workflow_type IN ('coord_recv', 'coord_child')
             AND (SELECT string_agg(a.outcome, ',' ORDER BY a.lease_epoch)
                  FROM workflow_attempts a WHERE a.workflow_id = w.id)
                 IS DISTINCT FROM 'parked,completed'
       ) AS not_parked_once,
       (SELECT count(*) FROM workflow_messages m JOIN workflows x ON x.id = m.workflow_id
        WHERE x.workflow_type = w.workflow_type) AS messages,
       (SELECT count(*) FROM workflow_messages m JOIN workflows x ON x.id = m.workflow_id
        WHERE x.workflow_type = w.workflow_type AND m.consumed_at IS NOT NULL) AS consumed
FROM workflows w
WHERE w.workflow_type = ANY(%(types)s::text[])
GROUP BY w.workflow_type
ORDER BY w.workflow_type;
