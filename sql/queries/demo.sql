-- `wfctl demo` (wfctl/demo.py): watching its runs.

-- name: progress
SELECT count(*) FILTER (WHERE status IN ('completed', 'failed', 'cancelled')) AS finished,
       count(*) AS total
FROM workflows
WHERE id = ANY(%(ids)s::uuid[]);

-- name: worker_id
-- The worker row of one of the demo's worker processes.
SELECT id FROM workers WHERE hostname = %(hostname)s AND pid = %(pid)s
ORDER BY started_at DESC
LIMIT 1;

-- name: held
-- The runs a worker holds (the killed one's, until the other worker's sweep requeues them).
SELECT count(*) AS held FROM workflows WHERE lease_owner = %(owner)s AND status = 'running';

-- name: current_step
SELECT current_step, status FROM workflows WHERE id = %(id)s;

-- name: waiting_for
-- What a parked workflow waits for ('sleep', 'message', 'children'; NULL: not parked).
SELECT wait_kind FROM workflows WHERE id = %(id)s AND status = 'pending';

-- name: parks
-- How many of a workflow's executions ended parked (waiting for children, a message, a sleep).
SELECT count(*) AS parks FROM workflow_attempts WHERE workflow_id = %(id)s AND outcome = 'parked';
