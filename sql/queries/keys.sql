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

