-- Whom wfctl's schema trusts (wfctl/schema_trust.py). Run with the search_path set to the catalog
-- alone (catalog_only), so that no operator or function another role made in wfctl's schema
-- can stand in for the catalog's while these look.
--
-- A role is trusted by the role running wfctl when it is that role or a superuser (who can do
-- anything anyway); pg_database_owner (the owner of public since PostgreSQL 15) stands for the
-- database's owner. Running commands also trust the schema's owner and the role that
-- installed wfctl there (the owner of wfctl_schema_migrations): the roles `init --grant-*`
-- serves are given their access by that role, inside a schema it chose.

-- name: catalog_only
SET LOCAL search_path = pg_catalog, pg_temp;

-- name: schema_trust
-- The schema's owner, the role that installed wfctl in it, and the roles besides its owner
-- that may CREATE in it (PUBLIC: every role), each said trusted or not; no row: no such schema.
WITH me AS (
    SELECT oid FROM pg_roles WHERE rolname = current_user
), dbowner AS (
    SELECT datdba AS oid FROM pg_database WHERE datname = current_database()
), ns AS (
    SELECT n.oid, n.nspname, n.nspowner, n.nspacl FROM pg_namespace n WHERE n.nspname = %(schema)s
), installer AS (
    SELECT c.relowner AS oid FROM pg_class c, ns
    WHERE c.relnamespace = ns.oid AND c.relname = 'wfctl_schema_migrations'
), stands AS (  -- a role, and the role it stands for
    SELECT r.oid,
           CASE WHEN r.rolname = 'pg_database_owner' THEN (SELECT oid FROM dbowner) ELSE r.oid END AS real
    FROM pg_roles r
), judged AS (  -- trusted to install (by the role running wfctl), and to use
    SELECT s.oid,
           s.real = (SELECT oid FROM me) OR coalesce(r.rolsuper, false) AS to_install,
           s.real = (SELECT oid FROM me) OR coalesce(r.rolsuper, false)
           OR s.real IN (SELECT real FROM stands WHERE oid IN (SELECT nspowner FROM ns))
           OR s.real IN (SELECT real FROM stands WHERE oid IN (SELECT oid FROM installer)) AS to_use
    FROM stands s LEFT JOIN pg_roles r ON r.oid = s.real
), creators AS (
    SELECT DISTINCT a.grantee,
           CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee)::text END AS name,
           coalesce(j.to_install, false) AS to_install, coalesce(j.to_use, false) AS to_use
    FROM ns, aclexplode(ns.nspacl) a
    LEFT JOIN judged j ON j.oid = a.grantee
    WHERE a.privilege_type = 'CREATE' AND a.grantee <> ns.nspowner
)
SELECT ns.nspname::text AS schema,
       pg_get_userbyid(ns.nspowner)::text AS owner,
       (SELECT pg_get_userbyid(real)::text FROM stands WHERE oid = ns.nspowner) AS owner_stands_for,
       (SELECT to_install FROM judged WHERE oid = ns.nspowner) AS owner_trusted,
       (SELECT pg_get_userbyid(oid)::text FROM installer) AS installer,
       (SELECT to_install FROM judged WHERE oid IN (SELECT oid FROM installer)) AS installer_trusted,
       ARRAY(SELECT name FROM creators ORDER BY name) AS creators,
       ARRAY(SELECT name FROM creators WHERE NOT to_install ORDER BY name) AS untrusted_to_install,
       ARRAY(SELECT name FROM creators WHERE NOT to_use ORDER BY name) AS untrusted_to_use,
       current_user::text AS me
FROM ns;

-- name: foreign_objects
-- Objects in the schema that run or sit beside wfctl's queries and that a role not trusted
-- owns: every function and operator (one can stand in for the catalog's), and, for `init`
-- (%(use)s false), wfctl's own tables and sequences (by their names); the first few. Running
-- commands (%(use)s true) also trust the schema's owner and the role that installed wfctl.
-- Names are qualified (the search_path is the catalog's alone).
WITH me AS (
    SELECT oid FROM pg_roles WHERE rolname = current_user
), dbowner AS (
    SELECT datdba AS oid FROM pg_database WHERE datname = current_database()
), ns AS (
    SELECT oid, nspowner FROM pg_namespace WHERE nspname = %(schema)s
), trusted AS (
    SELECT oid FROM me
    UNION SELECT oid FROM pg_roles WHERE rolsuper
    UNION SELECT CASE WHEN r.rolname = 'pg_database_owner' THEN (SELECT oid FROM dbowner) ELSE r.oid END
          FROM pg_roles r, ns WHERE %(use)s AND r.oid = ns.nspowner
    UNION SELECT c.relowner FROM pg_class c, ns
          WHERE %(use)s AND c.relnamespace = ns.oid AND c.relname = 'wfctl_schema_migrations'
), owned AS (
    SELECT 'table' AS kind, format('%%I.%%I', %(schema)s::text, c.relname) AS name, c.relowner AS owner
    FROM pg_class c, ns
    WHERE NOT %(use)s AND c.relnamespace = ns.oid AND c.relkind IN ('r', 'p', 'S', 'v', 'm', 'f')
      AND (c.relname LIKE 'wfctl%%' OR c.relname LIKE 'workflow%%' OR c.relname = 'workers')
    UNION ALL
    SELECT 'function', p.oid::regprocedure::text, p.proowner
    FROM pg_proc p, ns WHERE p.pronamespace = ns.oid
    UNION ALL
    SELECT 'operator', o.oid::regoperator::text, o.oprowner
    FROM pg_operator o, ns WHERE o.oprnamespace = ns.oid
)
SELECT o.kind, o.name, pg_get_userbyid(o.owner)::text AS owner
FROM owned o
WHERE o.owner NOT IN (SELECT oid FROM trusted)
ORDER BY o.kind DESC, o.name
LIMIT 5;
