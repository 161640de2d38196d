-- wfctl schema, version 4.
--
-- Every worker records its own heartbeat, so that everything that judges liveness (the sweep
-- live workers run, `wfctl recover`'s guard, `wfctl workers`, `wfctl metrics`, the stuck
-- reports) judges each worker by the interval it promised rather than by one threshold for all:
--
--   heartbeat_seconds   the interval between its beats; NULL when not recorded (a row written
--                       by a wfctl from before this version)
--   dead_after_seconds  a worker silent for longer than this is dead: its interval times the
--                       beats it may miss (`wfctl worker --missed-beats`, at least one second).
--                       Rows from before this version, and rows inserted without it, get 300:
--                       five minutes, the threshold `wfctl recover` used by default until now, so
--                       a worker still running an older wfctl during an upgrade is judged as cron
--                       judged it, never sooner.

ALTER TABLE workers ADD COLUMN heartbeat_seconds double precision
    CONSTRAINT workers_heartbeat_positive CHECK (heartbeat_seconds > 0);
ALTER TABLE workers ADD COLUMN dead_after_seconds double precision NOT NULL DEFAULT 300
    CONSTRAINT workers_dead_after_positive CHECK (dead_after_seconds > 0);
