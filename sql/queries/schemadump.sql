-- The catalogue as wfctl/schemadump.py prints it into sql/schema.sql: the objects of the
-- schema the search_path names (current_schema()), each in a fixed order, each definition as
-- PostgreSQL itself prints it (pg_get_*def, format_type, pg_get_expr).

-- name: version
SELECT coalesce(max(version), 0) AS version FROM wfctl_schema_migrations;

-- name: tables
-- The tables, not their partitions (the partitioned layout's parents stand for them).
SELECT c.oid, c.relname AS name, c.relkind = 'p' AS partitioned,
       pg_get_partkeydef(c.oid) AS partition_key, c.reloptions AS options
FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
  AND NOT c.relispartition
ORDER BY c.relname;

-- name: columns
SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
       pg_get_expr(d.adbin, d.adrelid) AS default_value, a.attidentity AS identity
FROM pg_attribute a
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = %(table)s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum;

-- name: constraints
-- Primary key first, then by name; NOT NULL is a column's (PostgreSQL 18 also catalogues it
-- as a constraint, 15 does not).
SELECT c.conname AS name, pg_get_constraintdef(c.oid) AS definition
FROM pg_constraint c
WHERE c.conrelid = %(table)s AND c.contype IN ('p', 'u', 'f', 'c', 'x')
ORDER BY c.contype <> 'p', c.conname;

-- name: indexes
-- The indexes no constraint stands for.
SELECT pg_get_indexdef(i.indexrelid) AS definition
FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
WHERE i.indrelid = %(table)s
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid)
ORDER BY ic.relname;

-- name: triggers
SELECT pg_get_triggerdef(t.oid) AS definition
FROM pg_trigger t
WHERE t.tgrelid = %(table)s AND NOT t.tgisinternal
ORDER BY t.tgname;

-- name: sequences
-- The sequences no column owns (a column's is its default's nextval()).
SELECT s.relname AS name
FROM pg_class s
WHERE s.relnamespace = current_schema()::regnamespace AND s.relkind = 'S'
  AND NOT EXISTS (SELECT 1 FROM pg_depend d
                  WHERE d.classid = 'pg_class'::regclass AND d.objid = s.oid
                    AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i'))
ORDER BY s.relname;

-- name: functions
SELECT p.proname AS name, pg_get_functiondef(p.oid) AS definition
FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace AND p.prokind = 'f'
ORDER BY p.proname, pg_get_function_identity_arguments(p.oid);
