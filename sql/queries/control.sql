-- Operator actions on workflows (wfctl/control.py): cancel, retry, prune.

-- name: lookup
SELECT id, status, lease_owner, current_step FROM workflows WHERE id = %(id)s;

-- name: cancel
-- The workflow and its unfinished descendants (child workflows, their children, ...). Pending:
-- cancelled at once. Running: cancelled, and the epoch raised, so every further write of its
-- worker is fenced out; the worker notices and stops it at its next step boundary. A running
-- execution's row in the attempt history ends 'cancelled'. The first row is the workflow
-- asked for (none: it had finished, and nothing is cancelled), then one per descendant
-- cancelled. With descendants_only, the workflow itself is left as it is and only its
-- unfinished descendants are cancelled: control.cancel repeats that, each time in a fresh
-- snapshot, until it finds none, so children committed while this statement waited for a lock
-- (a start_children step holding the parent's row) are cancelled too.
-- Rows are locked deepest first: a child's end locks the child and then its parent, and the
-- same order here cannot deadlock with it.
WITH RECURSIVE tree AS (
    SELECT %(id)s::uuid AS id, 0 AS depth
    UNION
    SELECT c.id, t.depth + 1 FROM workflows c JOIN tree t ON c.parent_id = t.id
    WHERE t.depth < 100
),
old AS MATERIALIZED (
    SELECT w.id, w.status, w.lease_owner, w.lease_epoch, tree.depth
    FROM workflows w JOIN tree ON tree.id = w.id
    WHERE w.status IN ('pending', 'running')
      AND (tree.depth > 0 OR NOT %(descendants_only)s)
    ORDER BY tree.depth DESC, w.id
    FOR UPDATE OF w
),
cancelled AS (
    UPDATE workflows w
    SET status = 'cancelled', lease_epoch = w.lease_epoch + 1, finished_at = (SELECT wfctl_now()),
        updated_at = (SELECT wfctl_now()), error_traceback = NULL,
        error_message = CASE WHEN old.depth = 0 THEN coalesce(%(reason)s, 'cancelled by an operator')
                             ELSE format('cancelled with its ancestor %%s', %(id)s::uuid) END
    FROM old
    WHERE w.id = old.id
      -- the workflow asked for had finished by the time its lock was had: nothing at all
      AND (%(descendants_only)s OR EXISTS (SELECT 1 FROM old r WHERE r.depth = 0))
    RETURNING w.id, w.current_step, w.error_message
),
closed AS (
    UPDATE workflow_attempts wa
    SET ended_at = (SELECT wfctl_now()), outcome = 'cancelled', last_step = c.current_step, error = c.error_message
    FROM cancelled c JOIN old ON old.id = c.id
    WHERE old.status = 'running' AND wa.workflow_id = c.id AND wa.lease_epoch = old.lease_epoch
      AND wa.ended_at IS NULL
)
SELECT c.id, old.status AS previous_status, old.lease_owner AS worker, old.depth
FROM cancelled c JOIN old ON old.id = c.id
ORDER BY old.depth, c.id;

-- name: retry_delete_steps
-- `wfctl retry --from-step N`: forget the checkpoints from step N on, and give back the
-- messages their recv steps took, so that the replay's recv takes the same message again (the
-- oldest unconsumed on its topic) rather than the next one, or none.
WITH unconsumed AS (
    UPDATE workflow_messages
    SET consumed_at = NULL, consumed_step = NULL, consumed_epoch = NULL
    WHERE workflow_id = %(id)s AND consumed_step >= %(from_step)s
)
DELETE FROM workflow_steps WHERE workflow_id = %(id)s AND step_number >= %(from_step)s;

-- name: retry
-- A failed or cancelled workflow back to pending, its attempt counter reset, keeping the
-- checkpoints that are left (all of them unless --from-step deleted some) and the failures the
-- workflow handled, but not the record of a step's tries (they start afresh). A retried run has
-- no deadline (it may have failed by timing out), and a wait in progress starts afresh.
-- A wait the run had parked in (it has no step stored) stays part of its history, as what
-- the run's next step is, unless --from-step is at or before it: its topic or ids are kept
-- while its wait_step and wait_deadline go, so that the replay meets the same wait there
-- (worker.claim's parked_step) and takes a new deadline for it (wfctl_wait_deadline).
-- With it, its descendants that a cancel's cascade took (error 'cancelled with its ancestor
-- ...') and that its history still names: a completed step of their parent whose output holds
-- their id (the checkpoint of the start_child or start_children step), walking down through
-- those revived, so the retried run finds its children as they were. A child cancelled on its
-- own stays cancelled; one whose starting step --from-step forgot is not revived (that step
-- starts a new one). The first row is the workflow asked for (none: it changed meanwhile).
WITH RECURSIVE revive AS (
    SELECT %(id)s::uuid AS id, 0 AS depth
    UNION
    SELECT c.id, r.depth + 1
    FROM revive r JOIN workflows c ON c.parent_id = r.id
    WHERE r.depth < 100 AND c.status = 'cancelled'
      AND c.error_message LIKE 'cancelled with its ancestor %%'
      AND EXISTS (SELECT 1 FROM workflow_steps s
                  WHERE s.workflow_id = r.id AND s.status = 'completed'
                    AND s.output_data @> to_jsonb(c.id::text))
),
left_off AS (
    -- the last step checkpointed, and whether the parked wait (at wait_step, or at the step
    -- after the last checkpoint once a retry took its wait_step) is still the next step
    SELECT r.id, r.depth, l.step,
           coalesce(w.wait_step, w.current_step + 1) = l.step + 1
           AND (r.depth > 0 OR %(from_step)s::int IS NULL
                OR coalesce(w.wait_step, w.current_step + 1) < %(from_step)s::int) AS keeps_wait
    FROM revive r
    JOIN workflows w ON w.id = r.id
    CROSS JOIN LATERAL (
        -- a handled failure is history as a completed step is (the replay raises it again)
        SELECT coalesce(max(s.step_number), 0) AS step FROM workflow_steps s
        WHERE s.workflow_id = r.id AND s.status IN ('completed', 'handled')
    ) AS l
),
tries_forgotten AS (
    -- the record of a step's tries (retrying, migration 0024) counts within an attempt; the
    -- retried run starts at attempt 1, its steps' tries afresh
    DELETE FROM workflow_steps s USING left_off o
    WHERE s.workflow_id = o.id AND s.status = 'retrying'
)
UPDATE workflows w
SET status = 'pending', attempt = 1, lease_epoch = w.lease_epoch + 1, run_at = (SELECT wfctl_now()),
    updated_at = (SELECT wfctl_now()), finished_at = NULL, error_message = NULL, error_traceback = NULL,
    output_data = NULL, deadline_at = NULL, deadline_error = NULL, wait_kind = NULL,
    wait_step = NULL, wait_deadline = NULL, wait_remaining = NULL,
    wait_topic = CASE WHEN o.keeps_wait THEN w.wait_topic END,
    wait_ids = CASE WHEN o.keeps_wait THEN w.wait_ids END,
    current_step = o.step
FROM left_off o
WHERE w.id = o.id AND w.status IN ('failed', 'cancelled')
RETURNING o.depth, w.current_step;

-- name: notify
SELECT pg_notify(wfctl_channel(), 'head');

-- name: prune_count
-- What prune_batch would delete (`wfctl prune --dry-run`): the same condition.
WITH doomed AS MATERIALIZED (
    SELECT w.id FROM workflows w
    WHERE w.status = ANY(%(statuses)s::text[])
      AND coalesce(w.finished_at, w.updated_at) < (SELECT wfctl_now()) - make_interval(secs => %(older_than)s::float8)
      AND NOT EXISTS (SELECT 1 FROM workflows p
                      WHERE p.id = w.parent_id
                        AND NOT (p.status = ANY(%(statuses)s::text[])
                                 AND coalesce(p.finished_at, p.updated_at)
                                     < (SELECT wfctl_now()) - make_interval(secs => %(older_than)s::float8)))
)
SELECT (SELECT count(*) FROM doomed) AS workflows,
       (SELECT count(*) FROM workflow_steps s JOIN doomed d ON d.id = s.workflow_id) AS steps;

-- name: prune_batch
-- One batch: a bounded DELETE, committed on its own so no lock is held long on a busy table.
-- SKIP LOCKED: never wait for a row someone holds. Every dependent table is deleted from here:
-- the partitioned layout has no foreign keys (and so no ON DELETE CASCADE) to workflows.
-- A child goes only with its parent (or after it): while the parent stays, unfinished or
-- finished within the cutoff (or of a status not pruned), so does the child. The parent may
-- still wait for it, replay a wait on it after a retry (which revives the children a cancel
-- took), and read its outcome.
WITH doomed AS (
    SELECT w.id FROM workflows w
    WHERE w.status = ANY(%(statuses)s::text[])
      AND coalesce(w.finished_at, w.updated_at) < (SELECT wfctl_now()) - make_interval(secs => %(older_than)s::float8)
      AND NOT EXISTS (SELECT 1 FROM workflows p
                      WHERE p.id = w.parent_id
                        AND NOT (p.status = ANY(%(statuses)s::text[])
                                 AND coalesce(p.finished_at, p.updated_at)
                                     < (SELECT wfctl_now()) - make_interval(secs => %(older_than)s::float8)))
    LIMIT %(batch)s
    FOR UPDATE OF w SKIP LOCKED
),
steps AS (
    DELETE FROM workflow_steps s USING doomed WHERE s.workflow_id = doomed.id RETURNING 1
),
attempts AS (
    DELETE FROM workflow_attempts a USING doomed WHERE a.workflow_id = doomed.id
),
messages AS (
    DELETE FROM workflow_messages m USING doomed WHERE m.workflow_id = doomed.id
),
events AS (
    DELETE FROM workflow_events e USING doomed WHERE e.workflow_id = doomed.id
),
gone AS (
    DELETE FROM workflows w USING doomed WHERE w.id = doomed.id RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS workflows, (SELECT count(*) FROM steps) AS steps;

-- name: prune_workers
-- Worker rows that stopped (or went silent) before the cutoff and hold nothing. One that has
-- not stopped is kept while it may be alive (silent for less than its own dead-after), however
-- short the cutoff: the runs it claims next would look ownerless.
DELETE FROM workers k
WHERE coalesce(k.stopped_at, k.heartbeat_at) < (SELECT wfctl_now()) - make_interval(secs => %(older_than)s::float8)
  AND (k.stopped_at IS NOT NULL
       OR k.heartbeat_at < (SELECT wfctl_now()) - make_interval(secs => k.dead_after_seconds))
  AND NOT EXISTS (SELECT 1 FROM workflows w WHERE w.lease_owner = k.id AND w.status = 'running')
RETURNING k.id;

-- name: prune_workers_count
-- What prune_workers would delete (`wfctl prune --dry-run`): the same condition.
SELECT count(*) AS workers
FROM workers k
WHERE coalesce(k.stopped_at, k.heartbeat_at) < (SELECT wfctl_now()) - make_interval(secs => %(older_than)s::float8)
  AND (k.stopped_at IS NOT NULL
       OR k.heartbeat_at < (SELECT wfctl_now()) - make_interval(secs => k.dead_after_seconds))
  AND NOT EXISTS (SELECT 1 FROM workflows w WHERE w.lease_owner = k.id AND w.status = 'running');
