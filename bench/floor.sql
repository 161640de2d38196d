-- Named blocks of bench/floor.py: the throughput floor. The row writes wfctl makes for a
-- run of S no-op steps, on wfctl's own tables (same columns, indexes and triggers), batched 32
-- runs to a statement, with no engine around them: a claim with a lease, one checkpoint row per
-- step together with current_step, the completion. Every write after the claim is fenced by the
-- (id, lease epoch) the claim returned, as wfctl's are.

-- name: session
-- Once per connection: the claim reads the runnable index in claim order and stops after the
-- batch, whatever the statistics say. Without this, a plan built while the table that has just
-- received N rows is not analyzed yet is a bitmap scan of the whole runnable set and a sort
--: every claim would cost O(N), and the floor would fall as N grows.
-- wfctl's own pick is made robust the same way (wfctl_claim_ready, migration 0009).
SELECT set_config('enable_bitmapscan', 'off', false), set_config('enable_sort', 'off', false);

-- name: claim
-- Up to a batch of runnable runs of the type, in wfctl's claim order (the runnable index), taken
-- with a lease: running, this process as the owner, the epoch raised.
WITH picked AS MATERIALIZED (
    SELECT w.id
    FROM workflows w
    WHERE w.status = 'pending' AND w.run_at <= now() AND w.workflow_type = %(type)s
    ORDER BY w.priority DESC, w.run_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
UPDATE workflows w
SET status = 'running',
    lease_owner = %(owner)s,
    lease_epoch = w.lease_epoch + 1,
    started_at = coalesce(w.started_at, now()),
    updated_at = now()
WHERE w.id = ANY (ARRAY(SELECT id FROM picked))
RETURNING w.id, w.lease_epoch;

-- name: step
-- One step of every run of the batch: current_step moved and the step's row written
-- (completed, the no-op's output), in one statement.
WITH moved AS (
    UPDATE workflows w
    SET current_step = %(step)s::int, updated_at = now()
    FROM unnest(%(ids)s::uuid[], %(epochs)s::bigint[]) AS r(id, epoch)
    WHERE w.id = r.id AND w.lease_epoch = r.epoch AND w.status = 'running'
    RETURNING w.id, w.lease_epoch, w.attempt
)
INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, output_data,
                            started_at, completed_at, attempt, lease_epoch)
SELECT m.id, %(step)s::int, 's' || %(step)s::int, 'completed', to_jsonb(%(step)s::int - 1),
       now(), now(), m.attempt, m.lease_epoch
FROM moved m;

-- name: complete
-- The batch's runs completed, with the workflow's output.
UPDATE workflows w
SET status = 'completed', output_data = '{"ok": true}'::jsonb, finished_at = now(), updated_at = now()
FROM unnest(%(ids)s::uuid[], %(epochs)s::bigint[]) AS r(id, epoch)
WHERE w.id = r.id AND w.lease_epoch = r.epoch AND w.status = 'running';
