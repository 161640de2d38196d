-- `wfctl demo` (wfctl/demo.py): watching its runs.

-- name: progress
SELECT count(*) FILTER (WHERE status IN ('completed', 'failed', 'cancelled')) AS finished,
       count(*) FILTER (WHERE status = 'running') AS running,
       count(*) AS total
FROM workflows
WHERE id = ANY(%(ids)s::uuid[]);

-- name: current_step
SELECT current_step, status FROM workflows WHERE id = %(id)s;
