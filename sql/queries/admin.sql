-- Server-level statements: databases, roles. Identifiers in {braces} are composed with
-- psycopg.sql.Identifier, never with string formatting.

-- name: database_exists
SELECT 1 FROM pg_database WHERE datname = %(name)s;

-- name: create_database
CREATE DATABASE {name};

-- name: drop_database
DROP DATABASE IF EXISTS {name} WITH (FORCE);

-- name: server_version
SELECT current_setting('server_version') AS version,
       current_setting('server_version_num')::int AS version_num;

-- name: schema_overview
-- The tables wfctl installed: columns, indexes, rows and size on disk.
SELECT c.relname AS table_name,
       (SELECT count(*) FROM pg_attribute a
         WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS columns,
       (SELECT count(*) FROM pg_index i WHERE i.indrelid = c.oid) AS indexes,
       CASE c.relname
           WHEN 'workflows' THEN (SELECT count(*) FROM workflows)
           WHEN 'workflow_steps' THEN (SELECT count(*) FROM workflow_steps)
           WHEN 'workers' THEN (SELECT count(*) FROM workers)
           WHEN 'wfctl_schema_migrations' THEN (SELECT count(*) FROM wfctl_schema_migrations)
       END AS rows,
       pg_total_relation_size(c.oid) AS bytes
FROM pg_class c
WHERE c.relkind IN ('r', 'p')
  AND c.relname IN ('workflows', 'workflow_steps', 'workers', 'wfctl_schema_migrations')
  AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
ORDER BY c.relname;

-- name: whoami
SELECT current_user AS role, current_database() AS database, current_schema() AS schema;

-- name: search_path
-- The session's search_path as the server applied it: wfctl.connection checks it against the
-- schema the DSN asked for, and wfctl.schema.migrate creates that schema when it is missing.
SELECT current_setting('search_path') AS search_path;

-- name: backend_pid
-- Compared with the pid the server announced at connect time, to notice a pooler in between.
SELECT pg_backend_pid() AS pid;
