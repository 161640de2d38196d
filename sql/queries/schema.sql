-- Migrations and the version check (wfctl/schema.py).

-- name: lock
-- One `wfctl init` at a time per wfctl schema of a database (the key names the schema:
-- wfctl.schema.lock_key); the lock ends with the transaction.
SELECT pg_advisory_xact_lock(hashtext(%(key)s));

-- name: schema_exists
SELECT 1 FROM pg_namespace WHERE nspname = %(schema)s;

-- name: create_schema
-- Only when missing: CREATE SCHEMA IF NOT EXISTS would need the CREATE privilege on the
-- database even for a schema that a DBA made beforehand.
CREATE SCHEMA {schema};

-- name: create_version_table
CREATE TABLE IF NOT EXISTS wfctl_schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: applied
SELECT version, name, applied_at FROM wfctl_schema_migrations ORDER BY version;

-- name: record
INSERT INTO wfctl_schema_migrations (version, name) VALUES (%(version)s, %(name)s);

-- name: current_version
SELECT coalesce(max(version), 0) AS version FROM wfctl_schema_migrations;

-- name: version_table_exists
SELECT to_regclass('wfctl_schema_migrations') IS NOT NULL AS present;

-- name: floor
-- The oldest release schema the database still runs: the highest contract applied. A contract
-- (sql/contracts/NNNN_*.sql) is recorded here with its number negated, so the schema version
-- (current_version: the highest migration) is the same to every release.
SELECT coalesce(-min(version), 0) AS floor FROM wfctl_schema_migrations WHERE version < 0;

-- name: record_contract
INSERT INTO wfctl_schema_migrations (version, name) VALUES (-%(version)s::int, %(name)s);

-- name: lock_timeout
-- How long a migration or a contract waits for a table lock before it gives up and retries
-- (wfctl/schema.py): a DDL statement waiting for a lock holds back every statement queued
-- behind it, the workers' claims included.
SELECT set_config('lock_timeout', %(timeout)s, true);

-- name: older_live_workers
-- Live workers (stopped_at unset, a heartbeat within their own dead_after) of a release built
-- for a schema before %(version)s, or of one before workers recorded it (NULL): a contract
-- that removes what they need waits for them.
SELECT id, hostname, pid, version, schema_version
FROM workers
WHERE stopped_at IS NULL
  AND heartbeat_at >= (SELECT wfctl_now()) - make_interval(secs => dead_after_seconds)
  AND (schema_version IS NULL OR schema_version < %(version)s::int)
ORDER BY hostname, pid;

-- name: is_applied
SELECT 1 FROM wfctl_schema_migrations WHERE version = %(version)s::int;
