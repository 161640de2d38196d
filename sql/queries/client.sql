-- Submitting workflows (wfctl/client.py). Other languages call wfctl_submit() or INSERT directly.

-- name: submit
-- One workflow; with a key that was used before, nothing is stored and no row comes back (then
-- submit_existing finds the workflow). The insert itself says whether this call created the
-- workflow, so of several submits of one key at the same moment exactly one reports "created":
-- the others wait for its commit and then do nothing. The same insert as wfctl_submit().
-- A timeout sets the deadline from now (the type's own timeout is filled in at the first
-- claim when this leaves it NULL).
INSERT INTO workflows (workflow_type, input_data, idempotency_key, run_at, priority, max_retries,
                       deadline_at, deadline_error, concurrency_key)
VALUES (%(workflow_type)s, %(input)s::jsonb, %(key)s,
        now() + coalesce(make_interval(secs => %(delay)s::float8), interval '0'), coalesce(%(priority)s, 0),
        %(max_retries)s, now() + make_interval(secs => %(timeout)s::float8), %(timeout_error)s,
        %(concurrency_key)s)
-- target-less: the partitioned layout has no unique index on the key alone (a trigger skips
-- a used key there); in the unpartitioned one the key's index is the only one a new row can hit
ON CONFLICT DO NOTHING
RETURNING id;

-- name: submit_existing
-- The workflow an idempotency key was used for (after submit stored nothing).
SELECT id FROM workflows WHERE idempotency_key = %(key)s;

-- name: submit_many
-- A batch of workflows of one type from an array of inputs: one statement, ids in input order.
INSERT INTO workflows (workflow_type, input_data, run_at, priority, max_retries, deadline_at,
                       deadline_error, concurrency_key)
SELECT %(workflow_type)s, t.input, now() + coalesce(make_interval(secs => %(delay)s::float8), interval '0'),
       %(priority)s, %(max_retries)s, now() + make_interval(secs => %(timeout)s::float8),
       %(timeout_error)s, %(concurrency_key)s
FROM unnest(%(inputs)s::jsonb[]) WITH ORDINALITY AS t(input, ord)
ORDER BY t.ord
RETURNING id;

-- name: known_types
-- Workflow types some worker has registered (to catch a typo in `wfctl submit TYPE`).
SELECT DISTINCT t AS workflow_type FROM workers, unnest(workflow_types) AS t ORDER BY 1;
