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
