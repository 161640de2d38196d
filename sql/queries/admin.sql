-- Server-level statements: databases, roles. Identifiers in {braces} are composed with
-- psycopg.sql.Identifier, never with string formatting.

-- name: database_exists
SELECT 1 FROM pg_database WHERE datname = %(name)s;

-- name: create_database
CREATE DATABASE {name};

-- name: create_database_from
-- A copy of a database (the tests' migrated template: one copy per test instead of migrating
-- each). FILE_COPY: for a small database, copying its files beats writing them to the WAL.
CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY;

-- name: drop_database
DROP DATABASE IF EXISTS {name} WITH (FORCE);

-- name: server_version
SELECT current_setting('server_version') AS version,
       current_setting('server_version_num')::int AS version_num;

-- name: schema_overview
-- The tables wfctl installed: columns, indexes and size on disk (rows: admin.count_rows, per
-- table, so a table an older schema version lacks is simply not listed).
SELECT c.relname AS table_name,
       (SELECT count(*) FROM pg_attribute a
         WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS columns,
       (SELECT count(*) FROM pg_index i WHERE i.indrelid = c.oid) AS indexes,
       -- a partitioned table's size is its partitions' (pg_partition_tree: none for a plain table)
       coalesce((SELECT sum(pg_total_relation_size(t.relid)) FROM pg_partition_tree(c.oid) t)::bigint,
                pg_total_relation_size(c.oid)) AS bytes
FROM pg_class c
WHERE c.relkind IN ('r', 'p')
  AND c.relname IN ('workflows', 'workflow_steps', 'workflow_attempts', 'workers',
                    'wfctl_schema_migrations')
  AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
ORDER BY c.relname;

-- name: count_rows
-- {table} is one of schema_overview's tables, composed with psycopg.sql.Identifier.
SELECT count(*) FROM {table};

-- name: whoami
SELECT current_user AS role, current_database() AS database, current_schema() AS schema;

-- name: search_path
-- The session's search_path as the server applied it: wfctl.connection checks it against the
-- schema the DSN asked for, and wfctl.schema.migrate creates that schema when it is missing.
SELECT current_setting('search_path') AS search_path;

-- name: backend_pid
-- Compared with the pid the server announced at connect time, to notice a pooler in between.
SELECT pg_backend_pid() AS pid;

-- name: set_local
-- A setting for the current transaction only (SET LOCAL: nothing is left on a pooled server
-- connection). wfctl.connection.set_local; e.g. idle_in_transaction_session_timeout, so that a
-- process frozen inside a transaction loses it, and every lock it holds, after that long.
SELECT set_config(%(setting)s, %(value)s, true);
