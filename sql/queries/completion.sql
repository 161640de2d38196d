-- What the shell completions offer from the database (wfctl/cli/candidates.py): cheap reads,
-- at most %(limit)s values each, starting with %(prefix)s (LIKE's wildcards in it escaped).

-- name: types
-- The workflow types some worker has registered (as `wfctl submit` checks a type).
SELECT t FROM wfctl_known_types() AS t
WHERE t LIKE %(prefix)s || '%%' ESCAPE '\'
LIMIT %(limit)s;

-- name: ids
-- The ids of the newest runs (of the last 1,000 submitted), newest first.
SELECT r.id::text FROM (
    SELECT id, created_at FROM workflows ORDER BY created_at DESC LIMIT 1000
) AS r
WHERE r.id::text LIKE %(prefix)s || '%%' ESCAPE '\'
ORDER BY r.created_at DESC
LIMIT %(limit)s;

-- name: topics
-- The topic the run %(workflow_id)s is parked on now (ctx.recv), if any.
SELECT w.wait_topic
FROM workflows w
WHERE w.id = %(workflow_id)s::uuid AND w.status = 'pending' AND w.wait_kind = 'message'
  AND w.wait_topic LIKE %(prefix)s || '%%' ESCAPE '\'
LIMIT %(limit)s;

-- name: schedules
SELECT s.name FROM workflow_schedules s
WHERE s.name LIKE %(prefix)s || '%%' ESCAPE '\'
ORDER BY s.name
LIMIT %(limit)s;
