-- wfctl schema, version 8: schedules. A schedule submits a run of its workflow type at every
-- tick of a cron expression, in a time zone; any live worker fires the ticks that are due (a
-- duty of its loop), and so does `wfctl tick` from system cron.
--
-- Why each tick gives exactly one run, however many workers and `wfctl tick` fire at once: a
-- firer locks the due rows (FOR UPDATE SKIP LOCKED), inserts the runs and moves next_tick_at
-- past now in one transaction; another firer skips a row while it is locked and, once that
-- transaction has committed, no longer finds it due (the lock re-reads the row). And each run's
-- idempotency key names the schedule and the tick ("schedule:NAME:2026-12-03T14:00:00Z"), so a
-- tick can never be inserted twice, whatever happens to the rows.
--
-- Times are UTC instants; `timezone` only decides when the ticks fall (wfctl/cron.py).

CREATE TABLE workflow_schedules (
    name          text PRIMARY KEY CONSTRAINT workflow_schedules_name_check
                      CHECK (char_length(name) BETWEEN 1 AND 100),
    workflow_type varchar(100) NOT NULL CHECK (workflow_type <> ''),
    cron          text NOT NULL,                    -- five fields, or six with the seconds first
    timezone      text NOT NULL DEFAULT 'UTC',      -- an IANA zone name
    input         jsonb NOT NULL DEFAULT '{}'       -- each run's input, plus "scheduled_at"
                      CONSTRAINT workflow_schedules_input_check CHECK (jsonb_typeof(input) = 'object'),
    paused        boolean NOT NULL DEFAULT false,
    backfill      boolean NOT NULL DEFAULT false,   -- after downtime: every missed tick (bounded)
    -- 'code': @wfctl.workflow(schedule=...), kept by the workers that run the type;
    -- 'cli': `wfctl schedule add` (or an INSERT of the application's own)
    source        text NOT NULL DEFAULT 'cli'
                      CONSTRAINT workflow_schedules_source_check CHECK (source IN ('code', 'cli')),
    next_tick_at  timestamptz NOT NULL,             -- the earliest tick not yet fired
    last_tick_at  timestamptz,                      -- the latest tick fired
    last_run_id   uuid,                             -- the run of that tick (no foreign key: prune)
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()  -- the last change of its definition or state
);

-- What the firers look for: the active schedules by their next tick.
CREATE INDEX workflow_schedules_due_idx ON workflow_schedules (next_tick_at) WHERE NOT paused;
