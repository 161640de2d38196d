-- Read-only reports (wfctl/reports.py): stats, list, show, workers, metrics.
--
-- Every window is "created_at > wfctl_now() - %(since)s", served by workflows_created_idx. The
-- per-step numbers also bound workflow_steps.started_at, served by workflow_steps_started_idx
-- (migration 0001), and hash-join the two ranges instead of probing the steps of each workflow
-- at random places (ids are random UUIDs). A step starts after its workflow was created, but
-- its started_at is written by a worker and the workflow's created_at by the database, and a
-- worker's clock may be a little behind: the steps' bound is the window's start less one hour
-- (STEP_CLOCK_SLACK below), so such a step still counts. It costs reading one more hour of
-- steps, whatever the window; the join with the workflows of the window drops them.
-- Durations use date_part('epoch', ...), a float8, rather than extract(), a numeric that is
-- twice as slow to aggregate.
--
-- What "duration" means for a workflow (list, show, the p50/p95 of stats): the time its run
-- spent in its steps, the sum over its step rows of completed_at - started_at (each row is the
-- last run of that step: the one that completed, or the one that failed last). Time spent
-- waiting is not a run's duration: queued, backing off between attempts, parked in a durable
-- sleep, or failed until an operator ran `wfctl retry` days later. NULL while no step row is
-- stored. `show` also gives the elapsed time, from the first claim to the finish (or now).
--
-- Stuck runs and worker counts start from the partial index workflows_running_owner_idx
-- (status = 'running'), which stays small however big the table.
-- Liveness: a worker is live while it is not stopped and its heartbeat is no older than
-- %(stale)s when the caller gives one (`--stale`), else than its own dead_after_seconds (its
-- heartbeat interval times the beats it may miss, recorded by the worker, migration 0004): the
-- rule the sweep live workers run (sql/queries/recovery.sql) judges them by.
-- An optional filter is written "%(x)s::type IS NULL OR col = %(x)s": wfctl sends each of these
-- once per connection, so the server plans it with the value known and drops the unused branch.
-- Waiting (migration 0006): a workflow parked on a wait (ctx.recv, ctx.wait, ctx.sleep) is
-- 'pending' with wait_kind set and run_at at its wake-up time (the year 9999 without one). It
-- is waiting while that run_at is ahead ("status = 'pending' AND wait_kind IS NOT NULL AND
-- run_at > wfctl_now()"): no worker can take it, so stats counts it apart from the pending backlog,
-- and it is never stuck (stuck runs are 'running'). Once woken (a message came, the last child
-- finished, the sleep or the wait's timeout is over) run_at has come: it is runnable, backlog
-- like any pending run, until a worker claims it (the claim clears wait_kind).
-- Rollups (migration 0028): stats and metrics read the finished runs of the hours the workers
-- rolled up (wfctl_rollup_window) from wfctl_rollup_counts and wfctl_rollup_durations, and the
-- rest from the base tables: every run of the other hours (wfctl_rollup_gaps, an index range
-- each, the window's first, partial hour among them) and the unfinished runs of the rolled-up
-- hours (idx_workflows_status), one row per workflow with its steps read by its id. Counts,
-- sums, averages and maxima are exact either way. A percentile is exact (percentile_cont) when
-- the window uses no rollup; with rollups it is placed in the 5 % wide duration bin that holds
-- its rank, between the bin's smallest and largest values, in proportion to the rank: within
-- 5 % of the exact value.
-- Label values of `wfctl metrics` are grouped as they will be written: translate(x,
-- %(controls)s, %(pictures)s) replaces the control characters the exposition format cannot
-- carry (wfctl/prometheus.py), and a NULL step name is the empty one, so no series comes twice.

-- name: snapshot
-- The statements of one report see one snapshot (and work on a read-only standby).
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;

-- name: no_jit
-- The report queries' cost estimates (a CTE's rows, a function's) can pass JIT's thresholds on
-- a big table, and compiling them takes longer than running them.
SET LOCAL jit = off;

-- name: as_of
SELECT (SELECT wfctl_now()) AS as_of;

-- name: success_rate
-- Outcome per workflow type of the workflows created in the window. success_pct keeps the
-- reference design's meaning (completed / all created in the window). p50/p95 are of the
-- durations (time in steps, see the top of this file) of the finished runs that were claimed
-- (completed, failed, cancelled while running) and stored a step. pending is the backlog
-- (queued, backing off, woken); waiting, the parked runs (see the top). Read as the rollups
-- allow (see "Rollups" at the top).
WITH bounds AS MATERIALIZED (
    SELECT (SELECT wfctl_now()) - %(since)s::interval AS start
), used AS MATERIALIZED (
    SELECT u.bucket_start, u.span, u.bucket_end FROM bounds, wfctl_rollup_window(bounds.start) u
), base AS MATERIALIZED (
    SELECT w.id, w.workflow_type, w.status, w.wait_kind, w.run_at, w.started_at, w.finished_at
    FROM bounds, wfctl_rollup_gaps(bounds.start) g
    JOIN workflows w ON w.created_at >= g.lo AND w.created_at < g.hi
    WHERE w.created_at > bounds.start
      AND (%(workflow_type)s::text IS NULL OR w.workflow_type = %(workflow_type)s)
    UNION ALL
    SELECT w.id, w.workflow_type, w.status, w.wait_kind, w.run_at, w.started_at, w.finished_at
    FROM bounds, workflows w
    WHERE w.status IN ('pending', 'running')
      AND w.created_at > bounds.start
      AND EXISTS (SELECT FROM used u WHERE w.created_at >= u.bucket_start AND w.created_at < u.bucket_end)
      AND (%(workflow_type)s::text IS NULL OR w.workflow_type = %(workflow_type)s)
), live AS MATERIALIZED (
    -- no rollup in the window: one row per workflow, its steps read as one range (hash-joined)
    SELECT w.workflow_type, w.status,
           w.status = 'pending' AND w.wait_kind IS NOT NULL AND w.run_at > (SELECT wfctl_now()) AS waiting,
           CASE WHEN w.started_at IS NOT NULL AND w.finished_at IS NOT NULL
                THEN sum(date_part('epoch', s.completed_at - s.started_at)) END AS run_seconds
    FROM workflows w
    LEFT JOIN workflow_steps s
           ON s.workflow_id = w.id
          AND s.started_at > (SELECT start FROM bounds) - interval '1 hour'  -- STEP_CLOCK_SLACK
    WHERE NOT EXISTS (SELECT FROM used)
      AND w.created_at > (SELECT start FROM bounds)
      AND (%(workflow_type)s::text IS NULL OR w.workflow_type = %(workflow_type)s)
    -- the primary key: (id) in the unpartitioned layout, (id, created_at) in the partitioned
    -- one (migration 0010), so the columns above depend on it in both
    GROUP BY w.id, w.created_at
    UNION ALL
    -- with rollups: the runs read from the tables, each one's steps by its id
    SELECT w.workflow_type, w.status,
           w.status = 'pending' AND w.wait_kind IS NOT NULL AND w.run_at > (SELECT wfctl_now()) AS waiting,
           CASE WHEN w.started_at IS NOT NULL AND w.finished_at IS NOT NULL
                THEN (SELECT sum(date_part('epoch', s.completed_at - s.started_at))
                      FROM workflow_steps s
                      WHERE s.workflow_id = w.id
                        AND s.started_at > (SELECT start FROM bounds) - interval '1 hour')  -- STEP_CLOCK_SLACK
           END AS run_seconds
    FROM base w
    WHERE EXISTS (SELECT FROM used)
), counted AS (
    SELECT workflow_type, status, waiting, count(*) AS n FROM live GROUP BY 1, 2, 3
    UNION ALL
    SELECT c.workflow_type, c.status, false, c.workflows
    FROM wfctl_rollup_counts c
    WHERE (c.bucket_start, c.span) IN (SELECT bucket_start, span FROM used)
      AND (%(workflow_type)s::text IS NULL OR c.workflow_type = %(workflow_type)s)
), rates AS (
    SELECT workflow_type,
           sum(n) AS total,
           coalesce(sum(n) FILTER (WHERE status = 'completed'), 0) AS completed,
           coalesce(sum(n) FILTER (WHERE status = 'failed'), 0) AS failed,
           coalesce(sum(n) FILTER (WHERE status = 'running'), 0) AS running,
           coalesce(sum(n) FILTER (WHERE status = 'pending' AND NOT waiting), 0) AS pending,
           coalesce(sum(n) FILTER (WHERE waiting), 0) AS waiting,
           coalesce(sum(n) FILTER (WHERE status = 'cancelled'), 0) AS cancelled
    FROM counted
    GROUP BY workflow_type
), exact AS (
    -- no rollup in the window: the percentiles of the values themselves
    SELECT workflow_type AS g,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY run_seconds) AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY run_seconds) AS p95
    FROM live
    WHERE run_seconds IS NOT NULL AND NOT EXISTS (SELECT FROM used)
    GROUP BY 1
), bins AS (
    -- with rollups: the duration bins of the base rows and of the rollups, merged
    SELECT g, bin, sum(n) AS n, min(lo) AS lo, max(hi) AS hi
    FROM (
        SELECT workflow_type AS g, wfctl_duration_bin(run_seconds) AS bin, count(*) AS n,
               min(run_seconds) AS lo, max(run_seconds) AS hi
        FROM live
        WHERE run_seconds IS NOT NULL AND EXISTS (SELECT FROM used)
        GROUP BY 1, 2
        UNION ALL
        SELECT d.workflow_type, d.bin, d.n, d.min_seconds, d.max_seconds
        FROM used u
        CROSS JOIN LATERAL (
            SELECT d.* FROM wfctl_rollup_durations d
            WHERE d.bucket_start = u.bucket_start AND d.span = u.span AND d.kind = 'r'
              AND (%(workflow_type)s::text IS NULL OR d.workflow_type = %(workflow_type)s)
            OFFSET 0
        ) AS d
    ) AS sources
    GROUP BY g, bin
), binned AS (
    SELECT g, max(v) FILTER (WHERE q = 0.5) AS p50, max(v) FILTER (WHERE q = 0.95) AS p95
    FROM (
        SELECT c.g, f.q,
               CASE WHEN f.q * (c.total - 1) - c.below <= c.n - 1
                    THEN c.lo + (c.hi - c.lo) * (f.q * (c.total - 1) - c.below) / greatest(c.n - 1, 1)
                    ELSE c.hi + (coalesce(c.next_lo, c.hi) - c.hi) * (f.q * (c.total - 1) - c.below - (c.n - 1))
               END AS v
        FROM (SELECT g, bin, n, lo, hi,
                     lead(lo) OVER (PARTITION BY g ORDER BY bin) AS next_lo,
                     sum(n) OVER (PARTITION BY g ORDER BY bin) - n AS below,
                     sum(n) OVER (PARTITION BY g) AS total
              FROM bins) AS c
        CROSS JOIN (VALUES (0.5::float8), (0.95::float8)) AS f(q)
        WHERE floor(f.q * (c.total - 1)) >= c.below AND floor(f.q * (c.total - 1)) < c.below + c.n
    ) AS placed
    GROUP BY g
)
SELECT r.workflow_type,
       r.total::bigint AS total,
       r.completed::bigint AS completed,
       r.failed::bigint AS failed,
       r.running::bigint AS running,
       r.pending::bigint AS pending,
       r.waiting::bigint AS waiting,
       r.cancelled::bigint AS cancelled,
       round(100.0 * r.completed / r.total, 1) AS success_pct,
       round(coalesce(e.p50, b.p50)::numeric, 3) AS p50_seconds,
       round(coalesce(e.p95, b.p95)::numeric, 3) AS p95_seconds
FROM rates r
LEFT JOIN exact e ON e.g = r.workflow_type
LEFT JOIN binned b ON b.g = r.workflow_type
ORDER BY r.total DESC, r.workflow_type;

-- name: stuck
-- Running workflows whose owner is gone: its heartbeat (and the run's updated_at) is older than
-- --stale (by default: than the owner's own dead_after, as the sweep judges it), it shut down,
-- or it has no workers row. Not limited to the window: a run stuck for days is still stuck.
-- step_name is the name of the last checkpointed step (current_step), NULL before the first;
-- step_in_flight the step the run was in when its worker went silent (the next one), and
-- step_in_flight_name its name: as the worker's last heartbeat reported it (migration 0027)
-- when that was this step, else from a 'retrying' row an earlier try of it left (else NULL: a
-- step's row is written with its result).
SELECT w.id,
       w.workflow_type,
       w.current_step,
       s.step_name,
       w.current_step + 1 AS step_in_flight,
       coalesce(CASE WHEN w.step_in_flight = w.current_step + 1 THEN w.step_in_flight_name END,
                f.step_name) AS step_in_flight_name,
       w.attempt,
       w.lease_owner,
       CASE
           WHEN k.id IS NULL THEN 'missing'
           WHEN k.stopped_at IS NOT NULL THEN 'stopped'
           ELSE 'dead'
       END AS owner_state,
       k.heartbeat_at,
       w.updated_at,
       round(extract(epoch FROM (SELECT wfctl_now()) - coalesce(k.heartbeat_at, w.updated_at))::numeric, 1)
           AS age_seconds
FROM workflows w
LEFT JOIN workers k ON k.id = w.lease_owner
LEFT JOIN workflow_steps s ON s.workflow_id = w.id AND s.step_number = w.current_step
LEFT JOIN workflow_steps f ON f.workflow_id = w.id AND f.step_number = w.current_step + 1
WHERE w.status = 'running'
  AND (k.id IS NULL OR k.stopped_at IS NOT NULL
       OR (k.heartbeat_at < (SELECT wfctl_now()) - coalesce(%(stale)s::interval, make_interval(secs => k.dead_after_seconds))
           AND w.updated_at < (SELECT wfctl_now()) - coalesce(%(stale)s::interval, make_interval(secs => k.dead_after_seconds))))
  AND (%(workflow_type)s::text IS NULL OR w.workflow_type = %(workflow_type)s)
ORDER BY age_seconds DESC NULLS FIRST, w.id;

-- name: slow_steps
-- Duration of the completed steps of the workflows created in the window, per type and step
-- name (as the reference design groups them), slowest on average first. Read as success_rate
-- reads; count, avg, max and sum are exact, p50/p95 as "Rollups" at the top says.
WITH bounds AS MATERIALIZED (
    SELECT (SELECT wfctl_now()) - %(since)s::interval AS start
), used AS MATERIALIZED (
    SELECT u.bucket_start, u.span, u.bucket_end FROM bounds, wfctl_rollup_window(bounds.start) u
), base AS MATERIALIZED (
    SELECT w.id, w.workflow_type
    FROM bounds, wfctl_rollup_gaps(bounds.start) g
    JOIN workflows w ON w.created_at >= g.lo AND w.created_at < g.hi
    WHERE w.created_at > bounds.start
      AND (%(workflow_type)s::text IS NULL OR w.workflow_type = %(workflow_type)s)
    UNION ALL
    SELECT w.id, w.workflow_type
    FROM bounds, workflows w
    WHERE w.status IN ('pending', 'running')
      AND w.created_at > bounds.start
      AND EXISTS (SELECT FROM used u WHERE w.created_at >= u.bucket_start AND w.created_at < u.bucket_end)
      AND (%(workflow_type)s::text IS NULL OR w.workflow_type = %(workflow_type)s)
), steps AS MATERIALIZED (
    -- no rollup in the window: the steps of the window's workflows, both read as one range
    -- each (workflow_steps_started_idx serves the steps' side) and hash-joined
    SELECT w.workflow_type, s.step_name, date_part('epoch', s.completed_at - s.started_at) AS seconds
    FROM workflows w
    JOIN workflow_steps s ON s.workflow_id = w.id
    WHERE NOT EXISTS (SELECT FROM used)
      AND w.created_at > (SELECT start FROM bounds)
      -- a step starts after its workflow was created, less the slack for a worker's clock
      AND s.started_at > (SELECT start FROM bounds) - interval '1 hour'  -- STEP_CLOCK_SLACK
      AND (%(workflow_type)s::text IS NULL OR w.workflow_type = %(workflow_type)s)
      AND s.status = 'completed'
      AND s.completed_at IS NOT NULL
    UNION ALL
    -- with rollups: each run read from the tables, its steps by its id (OFFSET 0: not a join
    -- over the steps of the whole window)
    SELECT w.workflow_type, s.step_name, s.seconds
    FROM base w
    CROSS JOIN LATERAL (
        SELECT s.step_name, date_part('epoch', s.completed_at - s.started_at) AS seconds
        FROM workflow_steps s
        WHERE s.workflow_id = w.id
          AND s.started_at > (SELECT start FROM bounds) - interval '1 hour'  -- STEP_CLOCK_SLACK
          AND s.status = 'completed'
          AND s.completed_at IS NOT NULL
        OFFSET 0
    ) AS s
    WHERE EXISTS (SELECT FROM used)
), bins AS MATERIALIZED (
    -- per type, step name and duration bin, from the base rows and from the rollups
    SELECT workflow_type, step_name, bin, sum(n) AS n, sum(total) AS total, min(lo) AS lo, max(hi) AS hi
    FROM (
        SELECT workflow_type, step_name, wfctl_duration_bin(seconds) AS bin, count(*) AS n,
               sum(seconds) AS total, min(seconds) AS lo, max(seconds) AS hi
        FROM steps
        GROUP BY 1, 2, 3
        UNION ALL
        SELECT d.workflow_type, d.step_name, d.bin, d.n, d.sum_seconds, d.min_seconds, d.max_seconds
        FROM used u
        CROSS JOIN LATERAL (
            SELECT d.* FROM wfctl_rollup_durations d
            WHERE d.bucket_start = u.bucket_start AND d.span = u.span AND d.kind = 's'
              AND (%(workflow_type)s::text IS NULL OR d.workflow_type = %(workflow_type)s)
            OFFSET 0
        ) AS d
    ) AS sources
    GROUP BY 1, 2, 3
), parts AS (
    SELECT workflow_type, step_name, sum(n) AS n, sum(total) AS total, max(hi) AS hi
    FROM bins
    GROUP BY 1, 2
), exact AS (
    SELECT workflow_type, step_name,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY seconds) AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY seconds) AS p95
    FROM steps
    WHERE NOT EXISTS (SELECT FROM used)
    GROUP BY 1, 2
), binned AS (
    SELECT workflow_type, step_name, max(v) FILTER (WHERE q = 0.5) AS p50, max(v) FILTER (WHERE q = 0.95) AS p95
    FROM (
        SELECT c.workflow_type, c.step_name, f.q,
               CASE WHEN f.q * (c.count - 1) - c.below <= c.n - 1
                    THEN c.lo + (c.hi - c.lo) * (f.q * (c.count - 1) - c.below) / greatest(c.n - 1, 1)
                    ELSE c.hi + (coalesce(c.next_lo, c.hi) - c.hi) * (f.q * (c.count - 1) - c.below - (c.n - 1))
               END AS v
        FROM (SELECT workflow_type, step_name, bin, n, lo, hi,
                     lead(lo) OVER (PARTITION BY workflow_type, step_name ORDER BY bin) AS next_lo,
                     sum(n) OVER (PARTITION BY workflow_type, step_name ORDER BY bin) - n AS below,
                     sum(n) OVER (PARTITION BY workflow_type, step_name) AS count
              FROM bins) AS c
        CROSS JOIN (VALUES (0.5::float8), (0.95::float8)) AS f(q)
        WHERE EXISTS (SELECT FROM used)
          AND floor(f.q * (c.count - 1)) >= c.below AND floor(f.q * (c.count - 1)) < c.below + c.n
    ) AS placed
    GROUP BY 1, 2
)
SELECT t.workflow_type,
       t.step_name,
       t.n::bigint AS count,
       round((t.total / t.n)::numeric, 3) AS avg_seconds,
       round(coalesce(e.p50, b.p50)::numeric, 3) AS p50_seconds,
       round(coalesce(e.p95, b.p95)::numeric, 3) AS p95_seconds,
       round(t.hi::numeric, 3) AS max_seconds,
       round(t.total::numeric, 3) AS sum_seconds
FROM parts t
LEFT JOIN exact e ON e.workflow_type = t.workflow_type AND e.step_name IS NOT DISTINCT FROM t.step_name
LEFT JOIN binned b ON b.workflow_type = t.workflow_type AND b.step_name IS NOT DISTINCT FROM t.step_name
ORDER BY avg_seconds DESC, t.workflow_type, t.step_name;

-- name: step_metrics
-- slow_steps for `wfctl metrics`, grouped by the label values the exposition will write (the
-- translation only where %(control_class)s finds a control character: translate() with a long
-- multibyte list is slow, and names are almost always clean; it is applied to the groups, not
-- to each step); a type's label value not among %(kept)s (workflow_counts) as %(other)s.
WITH bounds AS MATERIALIZED (
    SELECT (SELECT wfctl_now()) - %(since)s::interval AS start
), used AS MATERIALIZED (
    SELECT u.bucket_start, u.span, u.bucket_end FROM bounds, wfctl_rollup_window(bounds.start) u
), base AS MATERIALIZED (
    SELECT w.id, w.workflow_type
    FROM bounds, wfctl_rollup_gaps(bounds.start) g
    JOIN workflows w ON w.created_at >= g.lo AND w.created_at < g.hi
    WHERE w.created_at > bounds.start
    UNION ALL
    SELECT w.id, w.workflow_type
    FROM bounds, workflows w
    WHERE w.status IN ('pending', 'running')
      AND w.created_at > bounds.start
      AND EXISTS (SELECT FROM used u WHERE w.created_at >= u.bucket_start AND w.created_at < u.bucket_end)
), steps AS MATERIALIZED (
    -- as slow_steps reads them
    SELECT w.workflow_type, s.step_name, date_part('epoch', s.completed_at - s.started_at) AS seconds
    FROM workflows w
    JOIN workflow_steps s ON s.workflow_id = w.id
    WHERE NOT EXISTS (SELECT FROM used)
      AND w.created_at > (SELECT start FROM bounds)
      AND s.started_at > (SELECT start FROM bounds) - interval '1 hour'  -- STEP_CLOCK_SLACK
      AND s.status = 'completed'
      AND s.completed_at IS NOT NULL
    UNION ALL
    SELECT w.workflow_type, s.step_name, s.seconds
    FROM base w
    CROSS JOIN LATERAL (
        SELECT s.step_name, date_part('epoch', s.completed_at - s.started_at) AS seconds
        FROM workflow_steps s
        WHERE s.workflow_id = w.id
          AND s.started_at > (SELECT start FROM bounds) - interval '1 hour'  -- STEP_CLOCK_SLACK
          AND s.status = 'completed'
          AND s.completed_at IS NOT NULL
        OFFSET 0
    ) AS s
    WHERE EXISTS (SELECT FROM used)
), named AS MATERIALIZED (
    -- the label values of each stored (type, step name) pair
    SELECT p.workflow_type, p.step_name,
           CASE WHEN l.label = ANY(%(kept)s::text[]) THEN l.label ELSE %(other)s END AS type_label,
           CASE WHEN p.step_name ~ %(control_class)s
                THEN translate(p.step_name, %(controls)s, %(pictures)s)
                ELSE coalesce(p.step_name, '') END AS step_label
    FROM (SELECT DISTINCT workflow_type, step_name FROM steps
          UNION
          SELECT DISTINCT d.workflow_type, d.step_name
          FROM used u
          CROSS JOIN LATERAL (
              SELECT d.workflow_type, d.step_name FROM wfctl_rollup_durations d
              WHERE d.bucket_start = u.bucket_start AND d.span = u.span AND d.kind = 's'
              OFFSET 0
          ) AS d) AS p
    CROSS JOIN LATERAL (
        SELECT CASE WHEN p.workflow_type ~ %(control_class)s
                    THEN translate(p.workflow_type, %(controls)s, %(pictures)s)
                    ELSE p.workflow_type END AS label
    ) AS l
), bins AS MATERIALIZED (
    SELECT m.type_label, m.step_label, x.bin, sum(x.n) AS n, sum(x.total) AS total, min(x.lo) AS lo, max(x.hi) AS hi
    FROM (
        SELECT workflow_type, step_name, wfctl_duration_bin(seconds) AS bin, count(*) AS n,
               sum(seconds) AS total, min(seconds) AS lo, max(seconds) AS hi
        FROM steps
        GROUP BY 1, 2, 3
        UNION ALL
        SELECT d.workflow_type, d.step_name, d.bin, d.n, d.sum_seconds, d.min_seconds, d.max_seconds
        FROM used u
        CROSS JOIN LATERAL (
            SELECT d.* FROM wfctl_rollup_durations d
            WHERE d.bucket_start = u.bucket_start AND d.span = u.span AND d.kind = 's'
            OFFSET 0
        ) AS d
    ) AS x
    JOIN named m ON m.workflow_type = x.workflow_type AND m.step_name IS NOT DISTINCT FROM x.step_name
    GROUP BY 1, 2, 3
), parts AS (
    SELECT type_label, step_label, sum(n) AS n, sum(total) AS total
    FROM bins
    GROUP BY 1, 2
), exact AS (
    SELECT m.type_label, m.step_label,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY s.seconds) AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY s.seconds) AS p95
    FROM steps s
    JOIN named m ON m.workflow_type = s.workflow_type AND m.step_name IS NOT DISTINCT FROM s.step_name
    WHERE NOT EXISTS (SELECT FROM used)
    GROUP BY 1, 2
), binned AS (
    SELECT type_label, step_label, max(v) FILTER (WHERE q = 0.5) AS p50, max(v) FILTER (WHERE q = 0.95) AS p95
    FROM (
        SELECT c.type_label, c.step_label, f.q,
               CASE WHEN f.q * (c.count - 1) - c.below <= c.n - 1
                    THEN c.lo + (c.hi - c.lo) * (f.q * (c.count - 1) - c.below) / greatest(c.n - 1, 1)
                    ELSE c.hi + (coalesce(c.next_lo, c.hi) - c.hi) * (f.q * (c.count - 1) - c.below - (c.n - 1))
               END AS v
        FROM (SELECT type_label, step_label, bin, n, lo, hi,
                     lead(lo) OVER (PARTITION BY type_label, step_label ORDER BY bin) AS next_lo,
                     sum(n) OVER (PARTITION BY type_label, step_label ORDER BY bin) - n AS below,
                     sum(n) OVER (PARTITION BY type_label, step_label) AS count
              FROM bins) AS c
        CROSS JOIN (VALUES (0.5::float8), (0.95::float8)) AS f(q)
        WHERE EXISTS (SELECT FROM used)
          AND floor(f.q * (c.count - 1)) >= c.below AND floor(f.q * (c.count - 1)) < c.below + c.n
    ) AS placed
    GROUP BY 1, 2
)
SELECT t.type_label AS workflow_type,
       t.step_label AS step_name,
       t.n::bigint AS count,
       round(coalesce(e.p50, b.p50)::numeric, 3) AS p50_seconds,
       round(coalesce(e.p95, b.p95)::numeric, 3) AS p95_seconds,
       round(t.total::numeric, 3) AS sum_seconds
FROM parts t
LEFT JOIN exact e ON e.type_label = t.type_label AND e.step_label = t.step_label
LEFT JOIN binned b ON b.type_label = t.type_label AND b.step_label = t.step_label
ORDER BY 1, 2;

-- name: list_workflows
-- Newest first. ORDER BY created_at DESC matches a backward scan of workflows_created_idx, or
-- of idx_workflows_status (status, created_at) when a status is given, so LIMIT stops early.
-- %(waiting)s: only the waiting ones (`list --waiting`; the caller gives status 'pending').
-- %(statuses)s: several statuses (`list --status failed,cancelled`); one is %(status)s.
-- The wait_* columns say what a parked run waits for (wait_state: waiting, woken, or NULL).
-- %(key_prefix)s: only the runs whose idempotency key starts with it (`list --key`), compared
-- by starts_with(), character for character: a percent sign or an underscore in it is itself,
-- not a LIKE wildcard. A LIKE would not use the key's btree index either: the planner turns a
-- LIKE prefix into a range only under the C collation, and a text_pattern_ops index would take
-- a migration. So where
-- the database orders text by code point (%(key_ranged)s, keys.code_point_order: C, POSIX,
-- C.UTF-8, the builtin provider) the range idempotency_key >= %(key_prefix)s AND <
-- %(key_below)s (keys.successor: the prefix with its last character moved up by one; NULL:
-- no upper bound) holds exactly the keys that start with the prefix, and the index of the key
-- (workflows_idempotency_key_key; workflows_idempotency_idx in the partitioned layout) serves
-- it: EXPLAIN gives "Index Scan using workflows_idempotency_key_key on workflows, Index Cond:
-- ((idempotency_key >= 'order-7') AND (idempotency_key < 'order-8')), Filter:
-- starts_with(...)" under a sort by created_at. Under a linguistic collation the range would
-- miss keys, and the search filters the newest runs instead (the plan without a key). The
-- flags are known when the statement is planned (wfctl plans each with its values, see the top
-- of this file), so the branches not taken drop out of the plan.
SELECT id,
       workflow_type,
       status,
       attempt,
       current_step,
       priority,
       idempotency_key,
       created_at,
       started_at,
       finished_at,
       (SELECT round(sum(date_part('epoch', s.completed_at - s.started_at))::numeric, 3)
          FROM workflow_steps s
         WHERE s.workflow_id = w.id) AS duration_seconds,
       lease_owner,
       error_message,
       CASE WHEN status = 'pending' AND wait_kind IS NOT NULL
            THEN CASE WHEN run_at > (SELECT wfctl_now()) THEN 'waiting' ELSE 'woken' END END AS wait_state,
       wait_kind,
       wait_topic,
       wait_remaining,
       cardinality(wait_ids) AS wait_total,
       CASE WHEN wait_kind = 'sleep' THEN run_at ELSE wait_deadline END AS wait_until,
       round(extract(epoch FROM CASE WHEN wait_kind = 'sleep' THEN run_at ELSE wait_deadline END
                                - (SELECT wfctl_now()))::numeric, 3) AS wait_seconds_left
FROM workflows w
WHERE (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(statuses)s::text[] IS NULL OR status = ANY(%(statuses)s::text[]))
  AND (%(workflow_type)s::text IS NULL OR workflow_type = %(workflow_type)s)
  AND (%(since)s::interval IS NULL OR created_at > (SELECT wfctl_now()) - %(since)s::interval)
  AND (NOT %(waiting)s::bool OR (wait_kind IS NOT NULL AND run_at > (SELECT wfctl_now())))
  AND (%(key_prefix)s::text IS NULL
       OR (starts_with(idempotency_key, %(key_prefix)s)
           AND (NOT %(key_ranged)s::bool
                OR (idempotency_key >= %(key_prefix)s
                    AND (%(key_below)s::text IS NULL OR idempotency_key < %(key_below)s)))))
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: workflow
SELECT id,
       workflow_type,
       status,
       attempt,
       max_retries,
       priority,
       current_step,
       lease_owner,
       lease_epoch,
       idempotency_key,
       concurrency_key,
       created_at,
       run_at,
       started_at,
       finished_at,
       updated_at,
       (SELECT round(sum(date_part('epoch', s.completed_at - s.started_at))::numeric, 3)
          FROM workflow_steps s
         WHERE s.workflow_id = w.id) AS duration_seconds,
       round(extract(epoch FROM coalesce(finished_at, (SELECT wfctl_now())) - started_at)::numeric, 3)
           AS elapsed_seconds,
       input_data,
       output_data,
       error_message,
       error_traceback,
       parent_id,
       deadline_at,
       deadline_error,
       round(extract(epoch FROM deadline_at - (SELECT wfctl_now()))::numeric, 3) AS deadline_seconds_left,
       CASE WHEN status = 'pending' AND wait_kind IS NOT NULL
            THEN CASE WHEN run_at > (SELECT wfctl_now()) THEN 'waiting' ELSE 'woken' END END AS wait_state,
       wait_kind,
       wait_topic,
       wait_remaining,
       cardinality(wait_ids) AS wait_total,
       CASE WHEN wait_kind = 'sleep' THEN run_at ELSE wait_deadline END AS wait_until,
       round(extract(epoch FROM CASE WHEN wait_kind = 'sleep' THEN run_at ELSE wait_deadline END
                                - (SELECT wfctl_now()))::numeric, 3) AS wait_seconds_left
FROM workflows w
WHERE id = %(id)s;

-- name: workflow_children
-- The child workflows of one workflow (ctx.start_child), oldest first (workflows_parent_idx).
SELECT id, workflow_type, status, created_at, finished_at
FROM workflows
WHERE parent_id = %(id)s
ORDER BY created_at, id;

-- name: workflow_events
-- The events one workflow published (ctx.set_event): the latest value of each key.
SELECT key, value, step_number, updated_at
FROM workflow_events
WHERE workflow_id = %(id)s
ORDER BY key;

-- name: workflow_message_topics
-- The messages sent to one workflow, per topic: how many wait to be received, how many were.
SELECT topic,
       count(*) FILTER (WHERE consumed_at IS NULL) AS unconsumed,
       count(*) FILTER (WHERE consumed_at IS NOT NULL) AS consumed,
       max(created_at) AS last_sent_at
FROM workflow_messages
WHERE workflow_id = %(id)s
GROUP BY topic
ORDER BY topic;

-- name: workflow_messages
-- The newest %(limit)s messages sent to one workflow (not their payloads), newest first.
SELECT id, topic, created_at, consumed_at, consumed_step
FROM workflow_messages
WHERE workflow_id = %(id)s
ORDER BY id DESC
LIMIT %(limit)s;

-- name: workflow_attempts
-- Every execution of one workflow (workflow_attempts), oldest first: worker, start, end, how it
-- ended. An execution that has not ended is "running" while its worker still holds the lease,
-- and "lost" when the lease moved on without anything closing the row (it cannot happen with
-- this version's writers; rows from before the history existed are simply absent).
SELECT a.attempt,
       a.lease_epoch,
       a.worker_id,
       a.started_at,
       a.ended_at,
       round(extract(epoch FROM coalesce(a.ended_at, (SELECT wfctl_now())) - a.started_at)::numeric, 3)
           AS duration_seconds,
       coalesce(a.outcome,
                CASE WHEN w.status = 'running' AND w.lease_epoch = a.lease_epoch THEN 'running'
                     ELSE 'lost' END) AS outcome,
       a.last_step,
       a.error,
       a.traceback
FROM workflow_attempts a
JOIN workflows w ON w.id = a.workflow_id
WHERE a.workflow_id = %(id)s
ORDER BY a.lease_epoch;

-- name: workflow_steps
-- The step timeline: offsets from the workflow's first claim (its creation if never claimed).
-- tries (migration 0024): how many tries the step's function took; a retrying step (its run
-- parked until the next try) says when that try is due. sleeping_until: the sleep the run is
-- parked in now, until when (its row is written when the sleep starts; it has not ended).
SELECT s.step_number,
       s.step_name,
       s.status,
       s.attempt,
       s.tries,
       CASE WHEN s.status = 'retrying' THEN (s.output_data ->> 'next_try_at')::timestamptz END AS next_try_at,
       CASE WHEN s.step_name = 'sleep' AND s.step_number = w.current_step AND w.status = 'pending'
                 AND w.wait_kind = 'sleep' AND w.run_at > (SELECT wfctl_now())
            THEN w.run_at END AS sleeping_until,
       s.started_at,
       s.completed_at,
       round(extract(epoch FROM s.started_at - coalesce(w.started_at, w.created_at))::numeric, 3)
           AS offset_seconds,
       round(extract(epoch FROM s.completed_at - s.started_at)::numeric, 3) AS duration_seconds,
       s.output_data,
       s.error_message
FROM workflow_steps s
JOIN workflows w ON w.id = s.workflow_id
WHERE s.workflow_id = %(id)s
ORDER BY s.step_number;

-- name: workers
-- Every registered worker, live ones first. A worker is stopped when it shut down
-- (stopped_at), dead when its heartbeat is older than --stale or, by default, than its own
-- dead_after. "running" counts the workflows it holds leases on.
SELECT *
FROM (
    SELECT k.id,
           k.hostname,
           k.pid,
           CASE
               WHEN k.stopped_at IS NOT NULL THEN 'stopped'
               WHEN k.heartbeat_at
                    < (SELECT wfctl_now()) - coalesce(%(stale)s::interval, make_interval(secs => k.dead_after_seconds))
                   THEN 'dead'
               ELSE 'live'
           END AS state,
           k.stopped_at IS NULL
               AND k.heartbeat_at
                   >= (SELECT wfctl_now()) - coalesce(%(stale)s::interval, make_interval(secs => k.dead_after_seconds))
               AS alive,
           round(extract(epoch FROM (SELECT wfctl_now()) - k.heartbeat_at)::numeric, 1) AS heartbeat_age_seconds,
           k.heartbeat_seconds,
           k.dead_after_seconds,
           (SELECT count(*) FROM workflows w
             WHERE w.status = 'running' AND w.lease_owner = k.id) AS running,
           k.concurrency,
           -- step calls that outlived their timeout and still run there (migration 0024)
           k.abandoned_calls,
           k.workflow_types,
           k.version,
           -- the schema version its release was built for (migration 0030; NULL: a release
           -- before it): during an upgrade, the old release's workers and the new one's
           k.schema_version,
           k.started_at,
           k.heartbeat_at,
           k.stopped_at
    FROM workers k
) AS listed
ORDER BY alive DESC, heartbeat_at DESC, id;

-- name: live_types
-- The workflow types some live worker runs (live by its own heartbeat rule): `stats` and `list`
-- mark pending workflows of any other type, which no running worker will claim.
SELECT DISTINCT t AS workflow_type
FROM workers k, unnest(k.workflow_types) AS t
WHERE k.stopped_at IS NULL
  AND k.heartbeat_at >= (SELECT wfctl_now()) - make_interval(secs => k.dead_after_seconds)
ORDER BY 1;

-- name: workflow_counts
-- Every workflow by type (as its label value) and status, for metrics: grouped by the stored
-- type (the finished runs of the rolled-up hours from their rollups, every other run from the
-- table), then the groups by their label value. Only the %(max_types)s label values with the
-- most workflows (ties by value) are series of their own: the others, and a type whose label
-- value is %(other)s itself, are summed under %(other)s, so that whoever can submit cannot add
-- series without bound. type_count: how many label values there are.
WITH used AS MATERIALIZED (
    SELECT u.bucket_start, u.span, u.bucket_end FROM wfctl_rollup_window('-infinity') u
), stored AS (
    SELECT workflow_type, status, sum(workflows) AS workflows
    FROM (
        SELECT w.workflow_type, w.status, count(*) AS workflows
        FROM wfctl_rollup_gaps('-infinity') g
        JOIN workflows w ON w.created_at >= g.lo AND w.created_at < g.hi
        GROUP BY 1, 2
        UNION ALL
        SELECT w.workflow_type, w.status, count(*)
        FROM workflows w
        WHERE w.status IN ('pending', 'running')
          AND EXISTS (SELECT FROM used u WHERE w.created_at >= u.bucket_start AND w.created_at < u.bucket_end)
        GROUP BY 1, 2
        UNION ALL
        SELECT c.workflow_type, c.status, sum(c.workflows)
        FROM wfctl_rollup_counts c
        WHERE (c.bucket_start, c.span) IN (SELECT bucket_start, span FROM used)
        GROUP BY 1, 2
    ) AS parts
    GROUP BY 1, 2
), labelled AS (
    SELECT translate(workflow_type, %(controls)s, %(pictures)s) AS label, status,
           sum(workflows) AS workflows
    FROM stored
    GROUP BY 1, status
), kept AS (
    SELECT label
    FROM labelled
    WHERE label <> %(other)s
    GROUP BY label
    ORDER BY sum(workflows) DESC, label
    LIMIT %(max_types)s
)
SELECT CASE WHEN k.label IS NOT NULL THEN l.label ELSE %(other)s END AS workflow_type,
       l.status,
       sum(l.workflows)::bigint AS workflows,
       (SELECT count(DISTINCT label) FROM labelled) AS type_count
FROM labelled l
LEFT JOIN kept k ON k.label = l.label
GROUP BY 1, l.status
ORDER BY 1, l.status;

-- name: oldest_pending
-- How long the oldest runnable pending workflow has waited since it became runnable
-- (0 when none waits), served by the partial index workflows_runnable_idx.
SELECT count(*) AS runnable,
       coalesce(round(extract(epoch FROM (SELECT wfctl_now()) - min(run_at))::numeric, 3), 0) AS oldest_pending_age_seconds
FROM workflows
WHERE status = 'pending' AND run_at <= (SELECT wfctl_now());

-- name: waiting_counts
-- The waiting workflows (see the top) by type (as its label value) and what they wait for; a
-- label value not among %(kept)s (the series of their own, workflow_counts) as %(other)s.
SELECT CASE WHEN label = ANY(%(kept)s::text[]) THEN label ELSE %(other)s END AS workflow_type,
       wait_kind AS kind,
       sum(workflows)::bigint AS workflows
FROM (
    SELECT translate(workflow_type, %(controls)s, %(pictures)s) AS label, wait_kind,
           count(*) AS workflows
    FROM workflows
    WHERE status = 'pending' AND wait_kind IS NOT NULL AND run_at > (SELECT wfctl_now())
    GROUP BY workflow_type, wait_kind
) AS parked
GROUP BY 1, wait_kind
ORDER BY 1, wait_kind;
