-- What a worker runs (wfctl/worker/). Every write for a workflow is fenced by the lease epoch
-- it claimed with: a worker that lost the lease (recovered, cancelled) changes nothing.

-- name: listen
LISTEN wfctl_new;

-- name: notify
SELECT pg_notify('wfctl_new', '');

-- name: claim
-- Claim up to %(limit)s runnable workflows of the types this worker knows, by priority then
-- age. The LIMIT ... SKIP LOCKED sits in a MATERIALIZED CTE so it is evaluated once, and the
-- UPDATE finds the picked rows by primary key (= ANY of an array), a plan that stays right
-- under a cached generic plan and stale statistics. The same statement takes the lease
-- (owner, epoch + 1), fills in the type's retry policy when the submitter left max_retries
-- NULL, and returns the journal of completed steps for a run that resumes.
WITH picked AS MATERIALIZED (
    SELECT w.id
    FROM workflows w
    WHERE w.status = 'pending'
      AND w.run_at <= now()
      AND w.workflow_type = ANY(%(types)s::text[])
    ORDER BY w.priority DESC, w.run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE workflows w
SET status = 'running',
    lease_owner = %(owner)s,
    lease_epoch = w.lease_epoch + 1,
    max_retries = coalesce(w.max_retries, (
        SELECT p.max_retries
        FROM unnest(%(types)s::text[], %(retries)s::int[]) AS p(workflow_type, max_retries)
        WHERE p.workflow_type = w.workflow_type
    )),
    started_at = coalesce(w.started_at, now()),
    updated_at = now()
WHERE w.id = ANY (ARRAY(SELECT id FROM picked))
RETURNING w.id, w.workflow_type, w.input_data, w.lease_epoch, w.attempt, w.max_retries,
          w.current_step,
          CASE WHEN w.current_step > 0 THEN (
              SELECT json_agg(json_build_array(s.step_number, s.step_name, s.output_data)
                              ORDER BY s.step_number)
              FROM workflow_steps s
              WHERE s.workflow_id = w.id AND s.status = 'completed'
          ) END AS journal,
          now() AS db_now;

-- name: flush
-- Group commit: the writes of many workflows in one statement, hence one commit. Each input
-- row is one request: 'step' (checkpoint), 'park' (checkpoint a sleep and leave until
-- wake; without a step number: a replayed sleep leaving again), 'complete' (with the last
-- step's checkpoint when it has not been sent yet), 'fail' (final, or back to pending after
-- a backoff), 'release' (back to pending now, at shutdown).
-- A row with a step number also writes that step's row. Every part is keyed by (id, epoch):
-- a row whose epoch no longer matches changes nothing and is reported as fenced out, even when
-- a fresh epoch's write for the same workflow travels in the same batch.
-- A completion whose last checkpoint travels separately commits only if that checkpoint did
-- (current_step = expect): a run never ends 'completed' without its steps.
-- Re-sending a batch whose commit was not acknowledged is harmless and reports the same: a
-- step row written by the same epoch is written again, a completion of a completed run
-- matches again, and a park, fail or release already applied under the same epoch (the
-- workflow already shows its effect) is reported as done.
WITH r AS (
    SELECT *
    FROM unnest(%(ids)s::uuid[], %(epochs)s::bigint[], %(kinds)s::text[], %(steps)s::int[],
                %(names)s::text[], %(outputs)s::jsonb[], %(started)s::timestamptz[],
                %(errors)s::text[], %(final)s::bool[], %(delays)s::float8[],
                %(wake)s::timestamptz[], %(attempts)s::int[], %(details)s::text[],
                %(results)s::jsonb[], %(expects)s::int[])
         AS t(id, epoch, kind, step, name, output, started, error, final, delay, wake, attempt,
              detail, result, expect)
),
w AS (
    UPDATE workflows wf
    SET status = CASE r.kind
            WHEN 'step' THEN 'running'
            WHEN 'complete' THEN 'completed'
            WHEN 'fail' THEN CASE WHEN r.final THEN 'failed' ELSE 'pending' END
            ELSE 'pending'
        END,
        current_step = CASE WHEN r.step IS NOT NULL AND r.kind <> 'fail' THEN r.step
                            ELSE wf.current_step END,
        output_data = CASE WHEN r.kind = 'complete' THEN r.result ELSE wf.output_data END,
        error_message = CASE r.kind WHEN 'fail' THEN r.error WHEN 'complete' THEN NULL
                                    ELSE wf.error_message END,
        attempt = CASE WHEN r.kind = 'fail' AND NOT r.final THEN wf.attempt + 1 ELSE wf.attempt END,
        run_at = CASE r.kind
            WHEN 'fail' THEN now() + make_interval(secs => coalesce(r.delay, 0))
            WHEN 'park' THEN r.wake
            WHEN 'release' THEN now()
            ELSE wf.run_at
        END,
        finished_at = CASE WHEN r.kind = 'complete' OR (r.kind = 'fail' AND r.final) THEN now()
                           ELSE wf.finished_at END,
        updated_at = now()
    FROM r
    WHERE wf.id = r.id
      AND wf.lease_epoch = r.epoch
      -- written so that it depends on r: the planner must find rows by id (primary key), not
      -- by a status index, even when the table's statistics are stale
      AND wf.status = ANY (CASE WHEN r.kind = 'complete' THEN ARRAY['running', 'completed']
                                ELSE ARRAY['running'] END)
      AND (r.kind <> 'complete' OR r.step IS NOT NULL OR wf.current_step = r.expect)
    RETURNING wf.id, wf.lease_epoch
),
s AS (
    INSERT INTO workflow_steps AS ws (workflow_id, step_number, step_name, status, output_data,
                                      started_at, completed_at, error_message, attempt, lease_epoch)
    SELECT r.id, r.step, r.name,
           CASE WHEN r.kind = 'fail' THEN 'failed' ELSE 'completed' END,
           CASE WHEN r.kind = 'fail' THEN NULL ELSE r.output END,
           r.started, now(), CASE WHEN r.kind = 'fail' THEN coalesce(r.detail, r.error) END,
           r.attempt, r.epoch
    FROM r
    JOIN w ON w.id = r.id AND w.lease_epoch = r.epoch
    WHERE r.step IS NOT NULL
    ON CONFLICT (workflow_id, step_number) DO UPDATE
    SET step_name = excluded.step_name, status = excluded.status,
        output_data = excluded.output_data, started_at = excluded.started_at,
        completed_at = excluded.completed_at, error_message = excluded.error_message,
        attempt = excluded.attempt, lease_epoch = excluded.lease_epoch
    WHERE ws.status <> 'completed' OR ws.lease_epoch = excluded.lease_epoch
    RETURNING ws.workflow_id, ws.lease_epoch
)
SELECT r.id, r.epoch,
       CASE WHEN w.id IS NOT NULL THEN r.step IS NULL OR s.workflow_id IS NOT NULL
            ELSE
                -- not written now: already applied by an earlier send of the same request?
                -- (this reads the workflow as it was before this statement)
                r.kind IN ('park', 'fail', 'release') AND EXISTS (
                    SELECT 1 FROM workflows cur
                    WHERE cur.id = r.id AND cur.lease_epoch = r.epoch
                      AND CASE r.kind
                              WHEN 'fail' THEN CASE WHEN r.final THEN cur.status = 'failed'
                                                    ELSE cur.status = 'pending'
                                                         AND cur.attempt = r.attempt + 1 END
                              WHEN 'park' THEN cur.status = 'pending' AND cur.run_at = r.wake
                              ELSE cur.status = 'pending'
                          END)
       END AS stored
FROM r
LEFT JOIN w ON w.id = r.id AND w.lease_epoch = r.epoch
LEFT JOIN s ON s.workflow_id = r.id AND s.lease_epoch = r.epoch;

-- name: heartbeat
-- One statement per beat: register/refresh the worker row, and touch updated_at of the
-- workflows it runs (so the reference "stuck for 5 minutes" query agrees with `recover`).
-- Returns what the database thinks this worker runs, to notice lost leases early.
WITH beat AS (
    INSERT INTO workers (id, hostname, pid, concurrency, workflow_types, version)
    VALUES (%(id)s, %(hostname)s, %(pid)s, %(concurrency)s, %(types)s::text[], %(version)s)
    ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), stopped_at = NULL
    RETURNING id
)
UPDATE workflows
SET updated_at = now()
WHERE lease_owner = %(id)s AND status = 'running'
RETURNING id, lease_epoch;

-- name: release_owned
-- Shutdown, and runs claimed by a statement whose reply never arrived: hand back these
-- executions (id and epoch) if this worker still holds them, runnable at once. The attempt
-- is not counted: none of their steps ran here.
UPDATE workflows w
SET status = 'pending', run_at = now(), updated_at = now()
FROM unnest(%(ids)s::uuid[], %(epochs)s::bigint[]) AS r(id, epoch)
WHERE w.id = r.id AND w.lease_epoch = r.epoch
  AND w.lease_owner = %(id)s AND w.status = 'running'
RETURNING w.id;

-- name: stopped
UPDATE workers SET stopped_at = now(), heartbeat_at = now() WHERE id = %(id)s;

-- name: whereabouts
-- Where did workflows whose lease we lost go? (for the log line)
SELECT id, status, lease_owner, lease_epoch FROM workflows WHERE id = ANY(%(ids)s::uuid[]);

-- name: session_setup
-- The worker's statements run thousands of times with small arrays: plan them once (a generic
-- plan) instead of re-planning each execution. Session-level, so not sent through a
-- transaction pooler (--no-listen), where statements are not prepared anyway.
SET plan_cache_mode = force_generic_plan;
