-- A run found by its business key: the idempotency key it was submitted with (wfctl/keys.py).
--
-- The default layout keeps the key unique (the constraint workflows_idempotency_key_key, whose
-- btree index serves the lookups below). The partitioned layout cannot have a unique index
-- without the partition key: there the trigger workflows_idempotency keeps a submit from storing
-- a key twice (migration 0010), the partial index workflows_idempotency_idx (on each partition)
-- serves the lookups, and two runs can still share a key when something went around the trigger
-- (an UPDATE of the column, a restore with triggers off, inserts in two REPEATABLE READ
-- transactions at once): keys.run_id then names them and picks neither.

-- name: runs
-- The runs submitted with this idempotency key, newest first, at most %(limit)s (the caller
-- asks for one more than it names, to tell one run from several). An index scan on the key in
-- either layout: EXPLAIN in the default layout gives "Index Scan using
-- workflows_idempotency_key_key on workflows, Index Cond: (idempotency_key = ...)".
SELECT id
FROM workflows
WHERE idempotency_key = %(key)s
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: code_point_order
-- Whether this database's default collation, the one of workflows.idempotency_key and of its
-- indexes, orders text by code point (the order of UTF-8's bytes): libc's C and POSIX, libc's
-- C.UTF-8 (code point order since glibc 2.35; Debian's C.UTF-8 before that too), and every
-- locale of PostgreSQL's builtin provider (17 and later: C, C.UTF-8, PG_UNICODE_FAST). Only then
-- does the range the prefix search adds (reports.list_workflows) hold every key that starts
-- with the prefix; a linguistic collation (en_US, ICU) orders 'ab-c' and 'abc' by their
-- letters first, so the range would miss some, and the search does without it. The provider
-- is read through to_jsonb(): PostgreSQL before 15 has no column datlocprovider (libc only).
SELECT CASE coalesce(to_jsonb(d) ->> 'datlocprovider', 'c')
           WHEN 'c' THEN d.datcollate IN ('C', 'POSIX') OR d.datcollate ~* '^C\.UTF-?8$'
           WHEN 'b' THEN true
           ELSE false
       END AS code_point_order
FROM pg_database d
WHERE d.datname = current_database();
