-- Submitting workflows (wfctl/client.py), through the functions of migration 0021: they run as
-- the schema's owner, so a role given only `--grant-submit` submits without any privilege on the
-- tables, and they bound the size of what it stores. Other languages call wfctl_submit().
-- %(trace_context)s: the submit's W3C trace context (migration 0026, wfctl/tracing.py), NULL
-- when tracing is off.

-- name: submit
-- One workflow: (id, created). With a key that was used before, nothing is stored and the row
-- names the existing workflow (created false). The insert itself says whether this call
-- created the workflow, so of several submits of one key at the same moment exactly one
-- reports "created": the others wait for its commit and then do nothing. No row: the key's
-- workflow was deleted (pruned) in between, or is not visible to this transaction's snapshot.
-- A timeout sets the deadline from now (the type's own timeout is filled in at the first
-- claim when this leaves it NULL).
SELECT id, created
FROM wfctl_submit_one(%(workflow_type)s::text, %(input)s::jsonb, %(key)s::text, %(delay)s::float8,
                      %(priority)s::integer, %(max_retries)s::integer, %(timeout)s::float8,
                      %(timeout_error)s::text, %(concurrency_key)s::text, %(trace_context)s::text);

-- name: submit_many
-- A batch of workflows of one type from an array of inputs: one statement, ids in input order.
SELECT id
FROM wfctl_submit_many(%(workflow_type)s::text, %(inputs)s::jsonb[], %(delay)s::float8,
                       %(priority)s::integer, %(max_retries)s::integer, %(timeout)s::float8,
                       %(timeout_error)s::text, %(concurrency_key)s::text,
                       %(trace_context)s::text) AS id;

-- name: known_types
-- Workflow types some worker has registered (to catch a typo in `wfctl submit TYPE`).
SELECT workflow_type FROM wfctl_known_types() AS workflow_type;
