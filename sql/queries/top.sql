-- `wfctl top` (wfctl/top/snapshot.py): what its live view reads besides the reports of
-- reports.sql and limits.sql, in the same read-only snapshot, once per refresh.
--
-- Both statements read small ranges: the unfinished runs through the partial indexes on
-- status (workflows_running_owner_idx, workflows_runnable_idx: they stay as small as the work
-- in progress however big the table), and the runs finished in the last %(window)s through
-- the index on finished_at (migration 0025). An optional type filter is written as in
-- reports.sql ("%(x)s::text IS NULL OR ...").

-- name: type_states
-- The unfinished runs of each type now: running, pending (the backlog: queued, backing off,
-- woken) and parked on a wait that has not come (as reports.sql's "waiting"), by what it waits
-- for. Two branches, one per status, so that each reads its own partial index.
SELECT workflow_type,
       sum(running)::bigint AS running,
       sum(pending)::bigint AS pending,
       sum(parked_sleep)::bigint AS parked_sleep,
       sum(parked_message)::bigint AS parked_message,
       sum(parked_children)::bigint AS parked_children
FROM (
    SELECT workflow_type, count(*) AS running, 0 AS pending,
           0 AS parked_sleep, 0 AS parked_message, 0 AS parked_children
    FROM workflows
    WHERE status = 'running'
      AND (%(workflow_type)s::text IS NULL OR workflow_type = %(workflow_type)s)
    GROUP BY workflow_type
    UNION ALL
    SELECT workflow_type, 0,
           count(*) FILTER (WHERE NOT parked),
           count(*) FILTER (WHERE parked AND wait_kind = 'sleep'),
           count(*) FILTER (WHERE parked AND wait_kind = 'message'),
           count(*) FILTER (WHERE parked AND wait_kind = 'children')
    FROM (
        SELECT workflow_type, wait_kind,
               wait_kind IS NOT NULL AND run_at > (SELECT wfctl_now()) AS parked
        FROM workflows
        WHERE status = 'pending'
          AND (%(workflow_type)s::text IS NULL OR workflow_type = %(workflow_type)s)
    ) AS pending
    GROUP BY workflow_type
) AS states
GROUP BY workflow_type
ORDER BY workflow_type;

-- name: finished
-- The runs that finished in the last %(window)s, per type and per %(bucket)s-second bucket
-- counted back from now (bucket 0: the last %(bucket)s seconds), completed and failed apart.
SELECT workflow_type,
       floor(date_part('epoch', (SELECT wfctl_now()) - finished_at) / %(bucket)s)::int AS bucket,
       count(*) FILTER (WHERE status = 'completed') AS completed,
       count(*) FILTER (WHERE status = 'failed') AS failed
FROM workflows
WHERE finished_at > (SELECT wfctl_now()) - %(window)s::interval
  AND (%(workflow_type)s::text IS NULL OR workflow_type = %(workflow_type)s)
GROUP BY 1, 2
ORDER BY 1, 2;
