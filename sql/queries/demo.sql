-- `wfctl demo` (wfctl/demo.py): watching its runs.

-- name: progress
SELECT count(*) FILTER (WHERE status IN ('completed', 'failed', 'cancelled')) AS finished,
       count(*) AS total
FROM workflows
WHERE id = ANY(%(ids)s::uuid[]);

-- name: current_step
SELECT current_step, status FROM workflows WHERE id = %(id)s;

-- name: summary
SELECT status, count(*) AS runs, max(attempt) AS max_attempt
FROM workflows WHERE id = ANY(%(ids)s::uuid[])
GROUP BY status ORDER BY status;
