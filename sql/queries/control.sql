-- Operator actions on workflows (wfctl/control.py): cancel, retry, prune.

-- name: lookup
SELECT id, status, lease_owner, current_step FROM workflows WHERE id = %(id)s;

-- name: cancel
-- Pending: cancelled at once. Running: cancelled, and the epoch raised, so every further write
-- of its worker is fenced out; the worker notices and stops it at its next step boundary.
-- A running execution's row in the attempt history ends 'cancelled'.
WITH old AS (
    SELECT id, status, lease_owner, lease_epoch FROM workflows WHERE id = %(id)s FOR UPDATE
),
cancelled AS (
    UPDATE workflows w
    SET status = 'cancelled', lease_epoch = w.lease_epoch + 1, finished_at = now(),
        updated_at = now(), error_message = coalesce(%(reason)s, 'cancelled by an operator'),
        error_traceback = NULL
    FROM old
    WHERE w.id = old.id AND old.status IN ('pending', 'running')
    RETURNING w.id, w.current_step, w.error_message
),
closed AS (
    UPDATE workflow_attempts wa
    SET ended_at = now(), outcome = 'cancelled', last_step = c.current_step, error = c.error_message
    FROM cancelled c, old
    WHERE old.status = 'running' AND wa.workflow_id = c.id AND wa.lease_epoch = old.lease_epoch
      AND wa.ended_at IS NULL
)
SELECT c.id, old.status AS previous_status, old.lease_owner AS worker
FROM cancelled c, old;

-- name: retry_delete_steps
-- `wfctl retry --from-step N`: forget the checkpoints from step N on.
DELETE FROM workflow_steps WHERE workflow_id = %(id)s AND step_number >= %(from_step)s;

-- name: retry
-- A failed or cancelled workflow back to pending, its attempt counter reset, keeping the
-- checkpoints that are left (all of them unless --from-step deleted some).
UPDATE workflows w
SET status = 'pending', attempt = 1, lease_epoch = w.lease_epoch + 1, run_at = now(),
    updated_at = now(), finished_at = NULL, error_message = NULL, error_traceback = NULL,
    output_data = NULL,
    current_step = coalesce((SELECT max(s.step_number) FROM workflow_steps s
                             WHERE s.workflow_id = w.id AND s.status = 'completed'), 0)
WHERE w.id = %(id)s AND w.status IN ('failed', 'cancelled')
RETURNING w.current_step;

-- name: notify
SELECT pg_notify(wfctl_channel(), '');

-- name: prune_count
SELECT count(*) AS workflows,
       (SELECT count(*) FROM workflow_steps s
         JOIN workflows w ON w.id = s.workflow_id
        WHERE w.status = ANY(%(statuses)s::text[])
          AND coalesce(w.finished_at, w.updated_at) < now() - make_interval(secs => %(older_than)s::float8)) AS steps
FROM workflows
WHERE status = ANY(%(statuses)s::text[])
  AND coalesce(finished_at, updated_at) < now() - make_interval(secs => %(older_than)s::float8);

-- name: prune_batch
-- One batch: a bounded DELETE (its steps go with it, ON DELETE CASCADE), committed on its own
-- so no lock is held long on a busy table. SKIP LOCKED: never wait for a row someone holds.
WITH doomed AS (
    SELECT id FROM workflows
    WHERE status = ANY(%(statuses)s::text[])
      AND coalesce(finished_at, updated_at) < now() - make_interval(secs => %(older_than)s::float8)
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
),
steps AS (
    DELETE FROM workflow_steps s USING doomed WHERE s.workflow_id = doomed.id RETURNING 1
),
gone AS (
    DELETE FROM workflows w USING doomed WHERE w.id = doomed.id RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS workflows, (SELECT count(*) FROM steps) AS steps;

-- name: prune_workers
-- Worker rows that stopped (or went silent) before the cutoff and hold nothing.
DELETE FROM workers k
WHERE coalesce(k.stopped_at, k.heartbeat_at) < now() - make_interval(secs => %(older_than)s::float8)
  AND NOT EXISTS (SELECT 1 FROM workflows w WHERE w.lease_owner = k.id AND w.status = 'running')
RETURNING k.id;

-- name: prune_workers_count
-- What prune_workers would delete (`wfctl prune --dry-run`): the same condition.
SELECT count(*) AS workers
FROM workers k
WHERE coalesce(k.stopped_at, k.heartbeat_at) < now() - make_interval(secs => %(older_than)s::float8)
  AND NOT EXISTS (SELECT 1 FROM workflows w WHERE w.lease_owner = k.id AND w.status = 'running');
