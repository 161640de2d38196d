-- Named blocks of bench/harness.py (what every benchmark runs its measurements with).

-- name: setting
-- One setting of the server, as SHOW prints it (server_version, fsync, synchronous_commit).
SELECT current_setting(%(name)s);

-- name: create_database
CREATE DATABASE {name};

-- name: drop_database
DROP DATABASE IF EXISTS {name} WITH (FORCE);

-- name: type_count
-- --dsn: the runs of the benchmark's types already in the database it was given.
SELECT count(*) FROM workflows WHERE workflow_type = ANY (%(types)s);

-- name: delete_steps
-- --dsn: the benchmark's rows, deleted at the end (steps first: they reference their runs).
DELETE FROM workflow_steps
WHERE workflow_id IN (SELECT id FROM workflows WHERE workflow_type = ANY (%(types)s));

-- name: delete_workflows
DELETE FROM workflows WHERE workflow_type = ANY (%(types)s);

-- name: backend_pid
-- The session's server process (its parent is the postmaster when the server runs here).
SELECT pg_backend_pid();

-- name: registered
-- wfctl's workers that are up: the rows of the running ones in `workers` (written by their first
-- heartbeat, before their "ready" line). The database is the round's own: no other worker writes
-- here.
SELECT count(*) FROM workers WHERE stopped_at IS NULL;

-- name: status
-- One run's status, polled until it has finished.
SELECT status FROM workflows WHERE id = %(id)s;

-- name: xact_commits
-- The database's committed transactions so far.
SELECT xact_commit FROM pg_stat_database WHERE datname = current_database();

-- name: queue_noop
-- N workflows of bench/noop_app.py's type, queued in one statement (a backlog to drain).
INSERT INTO workflows (workflow_type, input_data)
SELECT 'noop3', jsonb_build_object('steps', %(steps)s::int) FROM generate_series(1, %(n)s::int);

-- name: completed
SELECT count(*) FROM workflows WHERE status = 'completed';

-- name: wal_flushes_18
-- The server's WAL fsyncs so far, PostgreSQL 18 and later.
SELECT sum(fsyncs) FROM pg_stat_io WHERE object = 'wal';

-- name: wal_flushes_14
-- The server's WAL fsyncs so far, PostgreSQL 14 to 17.
SELECT wal_sync FROM pg_stat_wal;

-- name: vacuum_analyze
-- Before a timed phase, the same for every side: fresh statistics.
VACUUM ANALYZE workflows, workflow_steps;

-- name: checkpoint
-- ... and no side inherits another's dirty buffers (skipped without the privilege).
CHECKPOINT;

-- name: commit_table
-- The commit ceiling's table (bench/pgbench_commit.sql inserts into it).
CREATE TABLE wfctl_bench_commit (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload jsonb);

-- name: commit_table_drop
DROP TABLE IF EXISTS wfctl_bench_commit;
