-- The partitioned layout's benchmark (bench/partitions.py): its own statements, by name.

-- name: empty
TRUNCATE workflows, workflow_steps, workflow_attempts, workflow_messages, workflow_events, workers;

-- name: old_partition
-- One partition interval in the past (the hot-path phase runs among ~40 of them).
SELECT wfctl_create_partition(wfctl_partition_start(now() - make_interval(days => %(days)s),
                                                    wfctl_partition_interval()));

-- name: submit
-- N workflows of the benchmark's type in one statement (as one `wfctl submit --input-file`).
INSERT INTO workflows (workflow_type, input_data)
SELECT 'noop3', jsonb_build_object('steps', %(steps)s::int) FROM generate_series(1, %(n)s);

-- name: completed
SELECT count(*) FILTER (WHERE status = 'completed') AS completed, count(*) AS total FROM workflows;

-- name: db_now
SELECT now();

-- name: completed_since
-- The warm protocol's check at the end: the runs of the timed batch (created from %(since)s on)
-- that completed; planned with the value, so the partitioned layout reads its newest partitions.
SELECT count(*) FROM workflows WHERE created_at >= %(since)s AND status = 'completed';

-- name: unfinished_since
-- The warm protocol's clock, polled every 20 ms: whether a run of the batch is still pending or
-- running. It stops at the first such row, so a poll costs about the same however far the batch
-- is (a count of the completed ones every 20 ms cost the server a good part of a CPU at N=10,000).
SELECT EXISTS (SELECT 1 FROM workflows
               WHERE created_at >= %(since)s AND status IN ('pending', 'running')) AS unfinished;

-- name: generate_workflows
-- History for the prune phase: finished runs created over span whole days (midnight UTC to
-- midnight UTC) from the day 40 days ago, one chunk of ids [lo, hi) of n at a time (created_at
-- spread evenly): whole partitions of the partitioned layout, all older than 30 days.
INSERT INTO workflows (workflow_type, status, input_data, output_data, current_step, lease_epoch,
                       created_at, updated_at, started_at, finished_at)
SELECT 'noop3', 'completed', '{"steps": 1}', '{"ok": true}', 1, 1, t.at, t.at, t.at, t.at + interval '1 second'
FROM (SELECT wfctl_partition_start(now() - interval '40 days', interval '1 day')
             + make_interval(secs => g * %(span_days)s::float8 * 86400 / %(n)s) AS at
      FROM generate_series(%(lo)s::bigint, %(hi)s::bigint - 1) AS g) AS t;

-- name: generate_steps
-- One step per generated run, carrying its workflow's created_at.
INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, output_data, started_at,
                            completed_at, attempt, lease_epoch, workflow_created_at)
SELECT w.id, 1, 's1', 'completed', '0', w.started_at, w.finished_at, 1, 1, w.created_at
FROM workflows w
WHERE w.created_at >= %(from)s AND w.created_at < %(to)s;

-- name: bounds
SELECT min(created_at) AS first, max(created_at) + interval '1 microsecond' AS last FROM workflows;

-- name: counts
SELECT (SELECT count(*) FROM workflows) AS workflows, (SELECT count(*) FROM workflow_steps) AS steps;

-- name: vacuum
VACUUM ANALYZE;

-- name: checkpoint
CHECKPOINT;
