-- `wfctl init --grant ROLE`: what a worker role needs and nothing more: read and write the
-- wfctl tables (no DELETE: pruning is an operator's job), read the schema version, call the
-- submit function. No DDL, no ownership. {role} is composed with psycopg.sql.Identifier.

-- name: role_exists
SELECT 1 FROM pg_roles WHERE rolname = %(role)s;

-- name: grant_worker
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT, UPDATE ON workflows, workflow_steps, workflow_attempts, workers TO {role};
GRANT SELECT, INSERT, UPDATE ON workflow_messages, workflow_events TO {role};
-- DELETE on schedules only: a worker deletes the schedule its code no longer declares
GRANT SELECT, INSERT, UPDATE, DELETE ON workflow_schedules TO {role};
GRANT SELECT, INSERT, UPDATE ON workflow_limits TO {role};
GRANT SELECT ON wfctl_schema_migrations TO {role};
GRANT USAGE, SELECT ON SEQUENCE workflow_steps_id_seq TO {role};
GRANT EXECUTE ON FUNCTION wfctl_submit(text, jsonb, text, interval, integer, integer) TO {role};
GRANT EXECUTE ON FUNCTION wfctl_channel() TO {role};
