-- Flow-control limits (wfctl/limits.py): what code declares, what operators set, and the list.
-- The claim enforces them (worker.claim, wfctl_claim_allowed in migrations 0007 and 0017).

-- name: lock
-- Before `declare`, in its transaction: lock the types' rows in name order, the order claims
-- lock them in (wfctl_claim_allowed), so a worker starting while others claim cannot deadlock.
SELECT 1 FROM workflow_limits WHERE workflow_type = ANY (%(types)s::text[])
ORDER BY workflow_type
FOR UPDATE;

-- name: declare
-- A worker at start: write what its code declares for each of its types (code_* columns);
-- a type whose code declares nothing loses earlier declarations. A changed rate starts afresh
-- (rate_tat NULL): an old rate's schedule of starts must not hold back a new one. The
-- operator's values (concurrency, ...) are not touched.
WITH d AS (
    SELECT *
    FROM unnest(%(types)s::text[], %(concurrency)s::int[], %(key_concurrency)s::int[],
                %(rate_count)s::int[], %(rate_seconds)s::float8[])
         AS d(workflow_type, concurrency, key_concurrency, rate_count, rate_seconds)
),
declared AS (
    INSERT INTO workflow_limits AS l (workflow_type, code_concurrency, code_key_concurrency,
                                      code_rate_count, code_rate_seconds, code_updated_at)
    SELECT d.workflow_type, d.concurrency, d.key_concurrency, d.rate_count, d.rate_seconds, (SELECT wfctl_now())
    FROM d
    WHERE coalesce(d.concurrency, d.key_concurrency, d.rate_count) IS NOT NULL
    ON CONFLICT (workflow_type) DO UPDATE
    SET code_concurrency = excluded.code_concurrency,
        code_key_concurrency = excluded.code_key_concurrency,
        code_rate_count = excluded.code_rate_count,
        code_rate_seconds = excluded.code_rate_seconds,
        code_updated_at = (SELECT wfctl_now()),
        rate_tat = CASE WHEN (l.code_rate_count, l.code_rate_seconds)
                             IS DISTINCT FROM (excluded.code_rate_count, excluded.code_rate_seconds)
                        THEN NULL ELSE l.rate_tat END
    WHERE (l.code_concurrency, l.code_key_concurrency, l.code_rate_count, l.code_rate_seconds)
          IS DISTINCT FROM (excluded.code_concurrency, excluded.code_key_concurrency,
                            excluded.code_rate_count, excluded.code_rate_seconds)
    RETURNING l.workflow_type
),
dropped AS (
    UPDATE workflow_limits l
    SET code_concurrency = NULL, code_key_concurrency = NULL, code_rate_count = NULL,
        code_rate_seconds = NULL, code_updated_at = (SELECT wfctl_now()),
        rate_tat = CASE WHEN l.code_rate_count IS NOT NULL THEN NULL ELSE l.rate_tat END
    FROM d
    WHERE l.workflow_type = d.workflow_type
      AND coalesce(d.concurrency, d.key_concurrency, d.rate_count) IS NULL
      AND coalesce(l.code_concurrency, l.code_key_concurrency, l.code_rate_count) IS NOT NULL
    RETURNING l.workflow_type
)
SELECT (SELECT count(*) FROM declared) + (SELECT count(*) FROM dropped) AS changed;

-- name: known
-- Is this a workflow type wfctl has heard of: registered by a worker, submitted, or limited?
SELECT EXISTS (SELECT 1 FROM workers, unnest(workflow_types) AS t WHERE t = %(type)s)
    OR EXISTS (SELECT 1 FROM workflows WHERE workflow_type = %(type)s)
    OR EXISTS (SELECT 1 FROM workflow_limits WHERE workflow_type = %(type)s) AS known;

-- name: set
-- `wfctl limit TYPE --concurrency N --per-key K --rate C/W`: set what was given (a NULL
-- parameter keeps the current value), then NOTIFY the workers so that idle ones claim at once
-- under the new limit. A changed rate starts afresh (the same rate again changes nothing).
WITH changed AS (
    INSERT INTO workflow_limits AS l (workflow_type, concurrency, key_concurrency, rate_count,
                                      rate_seconds, updated_at)
    VALUES (%(type)s, %(concurrency)s, %(key_concurrency)s, %(rate_count)s, %(rate_seconds)s, (SELECT wfctl_now()))
    ON CONFLICT (workflow_type) DO UPDATE
    SET concurrency = coalesce(excluded.concurrency, l.concurrency),
        key_concurrency = coalesce(excluded.key_concurrency, l.key_concurrency),
        rate_count = coalesce(excluded.rate_count, l.rate_count),
        rate_seconds = coalesce(excluded.rate_seconds, l.rate_seconds),
        rate_tat = CASE WHEN excluded.rate_count IS NULL
                             OR (excluded.rate_count, excluded.rate_seconds)
                                IS NOT DISTINCT FROM (l.rate_count, l.rate_seconds)
                        THEN l.rate_tat END,
        updated_at = (SELECT wfctl_now())
    RETURNING l.workflow_type
)
SELECT pg_notify(wfctl_channel(), 'head') FROM changed;

-- name: clear
-- `wfctl limit TYPE --clear`: drop the operator's values; the code's, if any, apply again (a
-- rate that was set starts afresh).
WITH cleared AS (
    UPDATE workflow_limits
    SET concurrency = NULL, key_concurrency = NULL, rate_count = NULL, rate_seconds = NULL,
        rate_tat = CASE WHEN rate_count IS NULL THEN rate_tat END, updated_at = (SELECT wfctl_now())
    WHERE workflow_type = %(type)s
      AND coalesce(concurrency, key_concurrency, rate_count) IS NOT NULL
    RETURNING workflow_type
)
SELECT pg_notify(wfctl_channel(), 'head') FROM cleared;

-- name: list
-- `wfctl limits`: every type with a limit in force (or only %(type)s), the operator's and the
-- code's values, and what runs and waits now (counted through the running and keyed indexes).
SELECT l.workflow_type,
       l.concurrency, l.key_concurrency, l.rate_count, l.rate_seconds,
       l.code_concurrency, l.code_key_concurrency, l.code_rate_count, l.code_rate_seconds,
       (SELECT count(*) FROM workflows w
        WHERE w.workflow_type = l.workflow_type AND w.status = 'running') AS running,
       (SELECT count(*) FROM workflows w
        WHERE w.workflow_type = l.workflow_type AND w.status = 'pending' AND w.run_at <= (SELECT wfctl_now())) AS runnable,
       (SELECT count(DISTINCT w.concurrency_key) FROM workflows w
        WHERE w.workflow_type = l.workflow_type AND w.status = 'running'
          AND w.concurrency_key IS NOT NULL) AS running_keys,
       greatest(l.updated_at, l.code_updated_at) AS changed_at
FROM workflow_limits l
WHERE (%(type)s::text IS NULL OR l.workflow_type = %(type)s)
  AND coalesce(l.concurrency, l.code_concurrency, l.key_concurrency, l.code_key_concurrency,
               l.rate_count, l.code_rate_count) IS NOT NULL
ORDER BY l.workflow_type;
