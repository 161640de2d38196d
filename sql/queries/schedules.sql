-- Schedules (wfctl/schedules.py): adding, pausing, resuming, triggering, deleting and listing
-- them, the workers' declarations of the schedules their code names, and firing the due ticks
-- (a worker duty, and `wfctl tick`). Migration 0008 says why a tick gives exactly one run.

-- name: clock
-- The database's time: every tick is computed from it, never from a machine's clock.
SELECT (SELECT wfctl_now()) AS now;

-- name: lock
-- One schedule, locked until the end of the transaction (an edit, a resume, a declaration).
SELECT name, workflow_type, cron, timezone, input, paused, backfill, source, next_tick_at,
       last_tick_at, last_run_id, created_at, updated_at
FROM workflow_schedules
WHERE name = %(name)s
FOR UPDATE;

-- name: add
-- `wfctl schedule add`: a new schedule, or a new definition for one added before (its pause is
-- kept, its next tick computed afresh). Nothing comes back for a schedule the code declares.
INSERT INTO workflow_schedules AS s (name, workflow_type, cron, timezone, input, backfill, source,
                                     next_tick_at)
VALUES (%(name)s, %(workflow_type)s, %(cron)s, %(timezone)s, %(input)s::jsonb, %(backfill)s, 'cli',
        %(next_tick_at)s)
ON CONFLICT (name) DO UPDATE
SET workflow_type = excluded.workflow_type, cron = excluded.cron, timezone = excluded.timezone,
    input = excluded.input, backfill = excluded.backfill, next_tick_at = excluded.next_tick_at,
    updated_at = (SELECT wfctl_now())
WHERE s.source = 'cli'
RETURNING s.name, s.workflow_type, s.cron, s.timezone, s.input, s.paused, s.backfill, s.source,
          s.next_tick_at, s.last_tick_at, s.last_run_id, s.created_at, s.updated_at;

-- name: pause
UPDATE workflow_schedules SET paused = true, updated_at = (SELECT wfctl_now())
WHERE name = %(name)s AND NOT paused;

-- name: resume
-- The next tick comes from now: resuming fires nothing that fell while it was paused.
UPDATE workflow_schedules SET paused = false, next_tick_at = %(next_tick_at)s, updated_at = (SELECT wfctl_now())
WHERE name = %(name)s AND paused;

-- name: delete
DELETE FROM workflow_schedules WHERE name = %(name)s
RETURNING name, workflow_type, source;

-- name: get
SELECT name, workflow_type, cron, timezone, input, paused, backfill, source, next_tick_at,
       last_tick_at, last_run_id, created_at, updated_at
FROM workflow_schedules
WHERE name = %(name)s;

-- name: list
SELECT name, workflow_type, cron, timezone, input, paused, backfill, source, next_tick_at,
       last_tick_at, last_run_id, created_at, updated_at
FROM workflow_schedules
ORDER BY name;

-- name: due
-- The schedules with a tick due, oldest first, locked: a firer running at the same time skips
-- them (and finds them no longer due once this transaction commits).
SELECT name, workflow_type, cron, timezone, backfill, next_tick_at, (SELECT wfctl_now()) AS now
FROM workflow_schedules
WHERE NOT paused AND next_tick_at <= (SELECT wfctl_now())
ORDER BY next_tick_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: insert_runs
-- One run per (schedule, tick): the schedule's input with "scheduled_at", under an idempotency
-- key that names the schedule and the tick, so a tick is never stored twice. In tick order.
INSERT INTO workflows (workflow_type, input_data, idempotency_key)
SELECT s.workflow_type, s.input || jsonb_build_object('scheduled_at', t.scheduled_at), t.key
FROM unnest(%(names)s::text[], %(scheduled_at)s::text[], %(keys)s::text[]) WITH ORDINALITY
     AS t(name, scheduled_at, key, ord)
JOIN workflow_schedules s ON s.name = t.name
ORDER BY t.ord
ON CONFLICT DO NOTHING  -- target-less: works in both layouts (client.submit)
RETURNING id, workflow_type, idempotency_key;

-- name: advance
-- After firing: the next tick (after now), the latest tick fired and its run.
UPDATE workflow_schedules s
SET next_tick_at = u.next_tick_at,
    last_tick_at = coalesce(u.last_tick_at, s.last_tick_at),
    last_run_id = coalesce(u.last_run_id, s.last_run_id)
FROM unnest(%(names)s::text[], %(next_tick_at)s::timestamptz[], %(last_tick_at)s::timestamptz[],
            %(last_run_id)s::uuid[]) AS u(name, next_tick_at, last_tick_at, last_run_id)
WHERE s.name = u.name;

-- name: next_due
-- Seconds until the earliest tick of an active schedule (negative: due now; NULL: none), by
-- the database's clock: when a worker's tick duty runs next.
SELECT extract(epoch FROM min(next_tick_at) - clock_timestamp())::float8 AS seconds
FROM workflow_schedules
WHERE NOT paused;

-- name: declare
-- A worker at start, for a type whose code declares a schedule: the schedule named after the
-- type, created when missing (nothing happens when the name is taken: the caller looked first).
INSERT INTO workflow_schedules (name, workflow_type, cron, timezone, source, next_tick_at)
VALUES (%(name)s, %(name)s::text, %(cron)s, %(timezone)s, 'code', %(next_tick_at)s)
ON CONFLICT (name) DO NOTHING;

-- name: redeclare
-- The code's cron or zone changed: the new definition, its next tick from now (an operator's
-- pause is kept).
UPDATE workflow_schedules
SET cron = %(cron)s, timezone = %(timezone)s, next_tick_at = %(next_tick_at)s, updated_at = (SELECT wfctl_now())
WHERE name = %(name)s AND source = 'code';

-- name: undeclare
-- A worker at start, for the types it runs whose code declares no schedule (any more): their
-- code schedules go (a schedule added with `wfctl schedule add` is never touched).
DELETE FROM workflow_schedules
WHERE source = 'code' AND name = ANY(%(types)s::text[]) AND workflow_type = name
RETURNING name, cron;
