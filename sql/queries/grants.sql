-- `wfctl init --grant-worker/--grant-submit/--grant-read ROLE`: what each job needs and nothing
-- more. No DDL, no ownership, no DELETE (pruning is an operator's job) but on schedules. {role}
-- and {schema} are composed with psycopg.sql.Identifier.

-- name: role_exists
SELECT 1 FROM pg_roles WHERE rolname = %(role)s;

-- name: grant_worker
-- A worker: read and write the wfctl tables, call every function (the submit and send ones
-- too: a worker role may submit and send as well).
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT, UPDATE ON workflows, workflow_steps, workflow_attempts, workers TO {role};
GRANT SELECT, INSERT, UPDATE ON workflow_messages, workflow_events TO {role};
-- DELETE on schedules only: a worker deletes the schedule its code no longer declares
GRANT SELECT, INSERT, UPDATE, DELETE ON workflow_schedules TO {role};
GRANT SELECT, INSERT, UPDATE ON workflow_limits TO {role};
GRANT SELECT ON wfctl_schema_migrations TO {role};
GRANT USAGE, SELECT ON SEQUENCE workflow_steps_id_seq TO {role};
-- the rollups the reports read: a worker refreshes them (through functions that run as the
-- schema's owner) and may run the reports too
GRANT SELECT ON wfctl_rollup_buckets, wfctl_rollup_counts, wfctl_rollup_durations, wfctl_rollup_stale TO {role};
GRANT EXECUTE ON FUNCTION wfctl_rollup_refresh(integer), wfctl_rollup_due(), wfctl_rollup_window(timestamptz),
    wfctl_rollup_gaps(timestamptz) TO {role};
GRANT EXECUTE ON FUNCTION wfctl_submit(text, jsonb, text, interval, integer, integer) TO {role};
GRANT EXECUTE ON FUNCTION wfctl_channel() TO {role};
GRANT EXECUTE ON FUNCTION
    wfctl_submit_one(text, jsonb, text, float8, integer, integer, float8, text, text),
    wfctl_submit_many(text, jsonb[], float8, integer, integer, float8, text, text),
    wfctl_submit_one(text, jsonb, text, float8, integer, integer, float8, text, text, text),
    wfctl_submit_many(text, jsonb[], float8, integer, integer, float8, text, text, text),
    wfctl_send(uuid, text, jsonb, text), wfctl_send_message(uuid, text, jsonb, text),
    wfctl_send_message(uuid, text, jsonb, text, text),
    wfctl_outcome(uuid), wfctl_event_value(uuid, text), wfctl_await(uuid), wfctl_known_types()
    TO {role};

-- name: grant_submit
-- An application that submits runs, sends them messages and reads a run's outcome and events
-- by its id: only through the SECURITY DEFINER functions of migration 0021 (bounded sizes), no
-- privilege on any table but reading the schema version (the check every command runs).
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON wfctl_schema_migrations TO {role};
GRANT EXECUTE ON FUNCTION
    wfctl_submit(text, jsonb, text, interval, integer, integer),
    wfctl_submit_one(text, jsonb, text, float8, integer, integer, float8, text, text),
    wfctl_submit_many(text, jsonb[], float8, integer, integer, float8, text, text),
    wfctl_submit_one(text, jsonb, text, float8, integer, integer, float8, text, text, text),
    wfctl_submit_many(text, jsonb[], float8, integer, integer, float8, text, text, text),
    wfctl_send(uuid, text, jsonb, text), wfctl_send_message(uuid, text, jsonb, text),
    wfctl_send_message(uuid, text, jsonb, text, text),
    wfctl_outcome(uuid), wfctl_event_value(uuid, text), wfctl_await(uuid), wfctl_known_types()
    TO {role};

-- name: grant_read
-- Reports (`stats`, `list`, `show`, `workers`, `metrics`, `schedules`, `limits`): read every
-- wfctl table, write none.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON workflows, workflow_steps, workflow_attempts, workers, workflow_messages,
    workflow_events, workflow_schedules, workflow_limits, wfctl_settings, wfctl_schema_migrations,
    wfctl_rollup_buckets, wfctl_rollup_counts, wfctl_rollup_durations, wfctl_rollup_stale
    TO {role};
GRANT EXECUTE ON FUNCTION wfctl_rollup_window(timestamptz), wfctl_rollup_gaps(timestamptz) TO {role};
