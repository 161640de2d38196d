-- Submitting workflows (wfctl/client.py). Other languages call wfctl_submit() or INSERT directly.

-- name: submit
-- One workflow; with a key, the existing id when the key was used before.
SELECT wfctl_submit(%(workflow_type)s, %(input)s::jsonb, %(key)s, %(delay)s::interval,
                    %(priority)s, %(max_retries)s) AS id;

-- name: submit_existing
-- Was this idempotency key used already? (to tell the user their submit was a repeat)
SELECT id FROM workflows WHERE idempotency_key = %(key)s;

-- name: submit_many
-- A batch of workflows of one type from an array of inputs: one statement, ids in input order.
INSERT INTO workflows (workflow_type, input_data, run_at, priority, max_retries)
SELECT %(workflow_type)s, t.input, now() + coalesce(%(delay)s::interval, interval '0'),
       %(priority)s, %(max_retries)s
FROM unnest(%(inputs)s::jsonb[]) WITH ORDINALITY AS t(input, ord)
ORDER BY t.ord
RETURNING id;

-- name: known_types
-- Workflow types some worker has registered (to catch a typo in `wfctl submit TYPE`).
SELECT DISTINCT t AS workflow_type FROM workers, unnest(workflow_types) AS t ORDER BY 1;
