-- What a worker runs (wfctl/worker/). Every write for a workflow is fenced by the lease epoch
-- it claimed with: a worker that lost the lease (recovered, cancelled) changes nothing.

-- name: listen
-- The channel is this schema's (wfctl_channel(), migration 0003: wfctl_new for public), so
-- workers of another wfctl schema in the same database are not woken; LISTEN takes only a
-- name, hence the EXECUTE. Without the function (no wfctl schema here) it does nothing, and
-- the schema check that follows says what is missing.
DO $$
BEGIN
    IF to_regprocedure('wfctl_channel()') IS NOT NULL THEN
        EXECUTE format('LISTEN %I', wfctl_channel());
    END IF;
END
$$;

-- name: listen_own
-- The worker's own channel (migration 0014), where a wake-up addressed to it alone comes.
-- {worker} is its id, composed as a literal (a DO block takes no parameters).
DO $$
BEGIN
    IF to_regprocedure('wfctl_worker_channel(text)') IS NOT NULL THEN
        EXECUTE format('LISTEN %I', wfctl_worker_channel({worker}));
    END IF;
END
$$;

-- name: listen_wait
-- The listening duty (wfctl/worker/listening.py): of a pool's idle workers (the same schema,
-- the same types: {pool}, their names joined), the one that holds this session lock LISTENs.
-- The others wait for it here, sent without waiting for the reply, until {millis} (the
-- worker's next heartbeat or alarm: the wait then ends with lock_not_available and is sent
-- again). Two statements in one round trip, each with its own snapshot: when the lock comes
-- and at least {slots} runs of the pool's types ({types}) are due, the worker's claim would
-- fill its {slots} free threads (0: never) and it would leave the duty right after; the
-- second statement passes the duty on at once instead, so the waiting workers of a burst
-- claim side by side, not each after the previous one's claim. It reads at most {scan}
-- entries of the runnable index: an estimate (a run a limit holds back counts), never a
-- scan of the whole backlog.
SELECT pg_advisory_lock(hashtextextended(wfctl_channel() || ' listening ' || {pool}, 0))
FROM (SELECT set_config('lock_timeout', {millis}, true)) AS t;
SELECT CASE WHEN {slots} > 0 AND count(*) >= {slots}
            THEN pg_advisory_unlock(hashtextextended(wfctl_channel() || ' listening ' || {pool}, 0))
            ELSE false END AS passed
FROM (
    SELECT 1 FROM (
        SELECT w.workflow_type, w.run_at FROM workflows w
        WHERE w.status = 'pending'
        ORDER BY w.priority DESC, w.run_at, w.id
        LIMIT {scan}
    ) AS r
    -- due by the clock now, not by now(): the transaction began with the wait
    WHERE r.workflow_type::text = ANY ({types}::text[]) AND r.run_at <= clock_timestamp()
    LIMIT {slots}
) AS due;

-- name: listen_try
-- The listening duty without waiting: a worker with threads free and runs in hand takes it when
-- no other worker of its pool holds it (then LISTENs).
SELECT pg_try_advisory_lock(hashtextextended(wfctl_channel() || ' listening ' || %(pool)s, 0));

-- name: listen_only
-- Taking the listening duty: the pool's other workers (the same types) are not idle any more,
-- whatever their rows say (a holder killed without a word still looks idle until its
-- dead-after), so that the submit trigger addresses its wake-ups to this worker alone.
UPDATE workers SET idle = false
WHERE idle AND id <> %(owner)s
  AND workflow_types @> %(types)s::text[] AND workflow_types <@ %(types)s::text[];

-- name: listen_release
-- Leave the listening duty: stop hearing wake-ups, and let the next idle worker of the pool
-- take it (the lock of listen_wait). {pool} is composed as a literal (two statements, one
-- round trip: no parameters).
UNLISTEN *;
SELECT pg_advisory_unlock(hashtextextended(wfctl_channel() || ' listening ' || {pool}, 0));

-- name: notify
SELECT pg_notify(wfctl_channel(), 'head');

-- name: claim
-- Claim up to %(limit)s runnable workflows of the types this worker knows, by priority, then
-- run_at, then id, across limited and unlimited types alike: a limit only holds runs back.
-- The picks (FOR UPDATE SKIP LOCKED, in functions whose plans cannot turn into a scan of the
-- whole runnable set) sit in MATERIALIZED CTEs so they are evaluated once, and the UPDATE
-- finds the picked rows by primary key (= ANY of an array), a plan that stays right under a
-- cached generic plan and stale statistics. The same statement takes the lease
-- (owner, epoch + 1), fills in the type's retry policy when the submitter left max_retries
-- NULL (and its timeout, at the first claim), clears what a parked run waited for, opens
-- the execution's row in workflow_attempts, and returns the journal of completed steps for a
-- run that resumes.
-- Types with a limit in force (workflow_limits, migration 0007) are picked by
-- wfctl_claim_allowed (migration 0017), which serializes their claims on the limit's row and
-- counts in a fresh snapshot; it is not called at all when none of the worker's types is
-- limited. The batch is the first %(limit)s of its picks and of the other types' pick by
-- (priority DESC, run_at, id). A rate limit that held back runnable work adds one row without
-- an id whose retry_in says when to claim again. The statement charges the rate and stores the
-- key rotation's cursor (charged).
WITH limited AS MATERIALIZED (
    SELECT coalesce(array_agg(l.workflow_type::text), '{}') AS types
    FROM workflow_limits l
    WHERE l.workflow_type = ANY (%(types)s::text[])
      AND coalesce(l.concurrency, l.code_concurrency, l.key_concurrency, l.code_key_concurrency,
                   l.rate_count, l.code_rate_count) IS NOT NULL
),
held AS MATERIALIZED (
    SELECT g.id, g.created_at, g.priority, g.run_at, g.turn, g.concurrency_key, g.retry_in,
           g.workflow_type, g.key_cursor
    FROM limited CROSS JOIN LATERAL wfctl_claim_allowed(limited.types, %(limit)s) AS g
    WHERE cardinality(limited.types) > 0
),
stop AS MATERIALIZED (
    -- the %(limit)s-th of the limited types' picks in claim order, if they are as many: no
    -- run that sorts after it can be in the batch, so the unlimited types' scan stops there
    SELECT h.priority, h.run_at, h.id FROM held h
    WHERE h.id IS NOT NULL
    ORDER BY h.priority DESC, h.run_at, h.id
    OFFSET greatest(%(limit)s - 1, 0) LIMIT 1
),
in_order AS MATERIALIZED (
    -- the worker's types without a limit: wfctl_claim_ready (migrations 0009, 0011, 0017) reads
    -- the runnable index in order, one priority at a time, only as far as the rows it takes,
    -- at the priority of the worker's frontier (its last claim's key; NULL: from the head)
    -- from just after that key, and no further than the stop; between scans from the head, in
    -- the partitioned layout, only the runs created from the frontier's floor on (migration
    -- 0012; NULL: all)
    SELECT f.id, f.created_at, f.priority, f.run_at
    FROM wfctl_claim_ready(
        ARRAY(SELECT t FROM unnest(%(types)s::text[]) AS t
              WHERE t <> ALL ((SELECT types FROM limited)::text[])),
        %(limit)s,
        %(after_priority)s::integer, %(after_run_at)s::timestamptz, %(after_id)s::uuid,
        %(floor)s::timestamptz,
        (SELECT priority FROM stop), (SELECT run_at FROM stop), (SELECT id FROM stop)
    ) AS f
),
picked AS MATERIALIZED (
    -- the batch: the first of both picks in claim order; what is left out stays pending (the
    -- unlimited runs left out sort after the frontier's new key, the last of them taken).
    -- ord: the place in claim order; beyond the worker's free threads (%(room)s) the run
    -- waits in its backlog, claimed ahead (ahead_seq, migration 0019)
    SELECT c.id, c.created_at, c.in_order,
           row_number() OVER (ORDER BY c.priority DESC, c.run_at, c.id) AS ord
    FROM (
        SELECT h.id, h.created_at, h.priority, h.run_at, false AS in_order
        FROM held h WHERE h.id IS NOT NULL
        UNION ALL
        SELECT o.id, o.created_at, o.priority, o.run_at, true FROM in_order o
    ) AS c
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT %(limit)s
),
claimed AS (
    UPDATE workflows w
    SET status = 'running',
        lease_owner = %(owner)s,
        lease_epoch = w.lease_epoch + 1,
        max_retries = coalesce(w.max_retries, p.max_retries),
        -- the type's timeout (@wfctl.workflow(timeout=...)) counts from the submit; a
        -- timeout of the submit's own replaces it (longer or shorter), a parent's deadline
        -- alone (deadline_inherited, migration 0016) only when it comes earlier
        deadline_at = CASE WHEN w.started_at IS NULL AND p.timeout IS NOT NULL
                            AND (w.deadline_at IS NULL
                                 OR (w.deadline_inherited
                                     AND w.created_at + make_interval(secs => p.timeout) < w.deadline_at))
                           THEN w.created_at + make_interval(secs => p.timeout)
                           ELSE w.deadline_at END,
        deadline_error = CASE WHEN w.started_at IS NULL AND p.timeout IS NOT NULL
                               AND (w.deadline_at IS NULL
                                    OR (w.deadline_inherited
                                        AND w.created_at + make_interval(secs => p.timeout) < w.deadline_at))
                              THEN p.timeout_error ELSE w.deadline_error END,
        wait_kind = NULL,
        -- claimed ahead: its place in the order the worker starts such runs (from %(ahead_from)s)
        ahead_seq = %(ahead_from)s::bigint - 1
                    + array_position(ARRAY(SELECT p2.id FROM picked p2 WHERE p2.ord > %(room)s
                                           ORDER BY p2.ord), w.id),
        started_at = coalesce(w.started_at, (SELECT wfctl_now())),
        updated_at = (SELECT wfctl_now())
    FROM unnest(%(types)s::text[], %(retries)s::int[], %(timeouts)s::float8[],
                %(timeout_errors)s::text[]) AS p(workflow_type, max_retries, timeout, timeout_error)
    WHERE w.id = ANY (ARRAY(SELECT id FROM picked))
      AND p.workflow_type = w.workflow_type
      /* claim_pruned */
    RETURNING w.id, w.workflow_type, w.input_data, w.lease_epoch, w.attempt, w.max_retries,
              w.current_step, w.deadline_at, w.deadline_error,
              CASE WHEN w.current_step > 0 THEN (
                  -- a handled step (its function raised, the workflow caught the StepError)
                  -- is history too: its output is the error's type and message; a retrying
                  -- step (migration 0024: tries failed, the run parked until the next) is the
                  -- record of its tries, which the replay goes on counting in the same attempt
                  SELECT json_agg(json_build_array(s.step_number, s.step_name, s.output_data,
                                                   s.status, s.attempt, s.tries)
                                  ORDER BY s.step_number)
                  FROM workflow_steps s
                  WHERE s.workflow_id = w.id AND s.status IN ('completed', 'handled', 'retrying')
              ) END AS journal,
              (SELECT wfctl_now()) AS db_now, w.created_at,
              -- the frontier's key: where in the runnable index this run was
              w.priority, w.run_at, w.id IN (SELECT id FROM picked WHERE picked.in_order) AS in_order,
              -- the partition holding the run (the table itself when unpartitioned): in the
              -- partitioned layout the group commit writes there (worker.flush)
              w.tableoid::oid AS partition,
              -- the wait (recv: its topic; ctx.wait: its ids) the run parked in and has not got
              -- past: no step is stored for it, but its replay must meet it at that step (the
              -- claim leaves these columns as they are). A retry makes the wait start afresh
              -- (no wait_step, for a new deadline) and leaves it at the run's next step
              -- (control.retry).
              CASE WHEN w.wait_topic IS NOT NULL OR w.wait_ids IS NOT NULL
                   THEN coalesce(w.wait_step, w.current_step + 1) END AS parked_step,
              w.wait_topic AS parked_topic, w.wait_ids IS NOT NULL AS parked_children,
              w.ahead_seq,
              -- the submitter's W3C trace context (migration 0026): the parent of the
              -- execution's span when the worker traces (wfctl/tracing.py)
              w.trace_context
),
opened AS (
    -- the attempt history (workflow_attempts): this execution starts now, on this worker (its
    -- workflow's created_at: the partition key of the partitioned layout, migration 0010; the
    -- constraint named, not its columns, which gain that key in that layout)
    INSERT INTO workflow_attempts (workflow_id, lease_epoch, attempt, worker_id, started_at,
                                   workflow_created_at)
    SELECT c.id, c.lease_epoch, c.attempt, %(owner)s, c.db_now, c.created_at FROM claimed c
    ON CONFLICT ON CONSTRAINT workflow_attempts_pkey DO NOTHING
),
charged AS (
    -- one write of each limited type's row (the function writes none, and a row may change
    -- once per statement): the rate charged for the runs claimed (not for those the function
    -- picked: see there), and the key rotation's new cursor; the rows are locked already.
    -- The cursor: where the walk stopped when every pick of the type was claimed; else the
    -- key of the last run claimed before the first turn whose run was left out (passed over
    -- by older or higher-priority work, or not seen by this statement's snapshot), so that
    -- key's turn comes first in the next claim (no run claimed before it: the cursor stays)
    UPDATE workflow_limits l
    SET rate_tat = CASE WHEN u.runs > 0 AND coalesce(l.rate_count, l.code_rate_count) IS NOT NULL
                        THEN greatest(coalesce(l.rate_tat, (SELECT wfctl_now())), (SELECT wfctl_now()))
                             + make_interval(secs => u.runs * CASE WHEN l.rate_count IS NOT NULL
                                                                   THEN l.rate_seconds / l.rate_count
                                                                   ELSE l.code_rate_seconds / l.code_rate_count END)
                        ELSE l.rate_tat END,
        key_cursor = CASE WHEN u.moved THEN u.key_cursor ELSE l.key_cursor END
    FROM (
        SELECT lt.workflow_type,
               (SELECT count(*) FROM claimed c WHERE c.workflow_type = lt.workflow_type) AS runs,
               CASE WHEN d.turn IS NULL THEN h.workflow_type IS NOT NULL
                    ELSE k.found IS NOT NULL END AS moved,
               CASE WHEN d.turn IS NULL THEN h.key_cursor ELSE k.concurrency_key END AS key_cursor
        FROM unnest((SELECT types FROM limited)) AS lt(workflow_type)
        LEFT JOIN held h ON h.id IS NULL AND h.retry_in IS NULL AND h.workflow_type = lt.workflow_type
        CROSS JOIN LATERAL (
            SELECT min(p.turn) AS turn FROM held p
            WHERE p.id IS NOT NULL AND p.turn IS NOT NULL AND p.workflow_type = lt.workflow_type
              AND NOT EXISTS (SELECT 1 FROM claimed c WHERE c.id = p.id)
        ) AS d
        LEFT JOIN LATERAL (
            SELECT p.concurrency_key, true AS found FROM held p
            WHERE p.id IS NOT NULL AND p.workflow_type = lt.workflow_type AND p.turn < d.turn
              AND EXISTS (SELECT 1 FROM claimed c WHERE c.id = p.id)
            ORDER BY p.turn DESC
            LIMIT 1
        ) AS k ON true
    ) AS u
    WHERE l.workflow_type = u.workflow_type
      AND (u.moved OR (u.runs > 0 AND coalesce(l.rate_count, l.code_rate_count) IS NOT NULL))
),
marked AS (
    -- whether this worker waits for wake-ups now (migration 0014): its claim left threads
    -- free (%(room)s: its threads not yet given a run, claimed ahead or running); written only
    -- when that changes. A worker that hears no addressed wake-ups never is.
    UPDATE workers k
    SET idle = t.idle
    FROM (SELECT %(addressable)s AND count(*) < %(room)s AS idle FROM claimed) AS t
    WHERE k.id = %(owner)s AND k.idle IS DISTINCT FROM t.idle
),
passed AS (
    -- a claim that came back full may have left runnable work behind: wake another idle
    -- worker of these types (none idle: every worker claims again as its slots free)
    SELECT wfctl_wake_idle(%(types)s::text[], '') AS woken
    FROM (SELECT count(*) AS got FROM claimed) AS t
    WHERE t.got >= %(limit)s
)
SELECT c.*, NULL::float8 AS retry_in FROM claimed c
WHERE (SELECT count(*) FROM passed) >= 0
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, h.retry_in
FROM held h WHERE h.id IS NULL AND h.retry_in IS NOT NULL;

-- name: claim_pruned
-- In the partitioned layout wfctl/worker/claims.py splices this into worker.claim's UPDATE in
-- place of its marker /* claim_pruned */ (migration 0012): the oldest picked run's created_at (the
-- partition key, migration 0010), so the partitions older than it are not read (every pick
-- comes with its created_at since migration 0017; one without: all are). Not in the
-- unpartitioned layout:
-- there, on statistics taken when the table was nearly empty, the planner added
-- workflows_created_idx to the primary key (a BitmapAnd) and read every entry from that
-- created_at on, the whole backlog at every claim.
AND w.created_at >= (SELECT CASE WHEN bool_and(created_at IS NOT NULL) THEN min(created_at)
                                 ELSE '-infinity' END
                     FROM picked)

-- name: flush
-- Group commit: the writes of many workflows in one statement, hence one commit. It knows no
-- kinds of write: each input row carries the values it sets (wfctl/worker/checkpoints.py
-- turns a checkpoint, park, completion, failure or release into them), with NULL or a false
-- flag for "keep", and the step row it writes, if any. Every part is keyed by (id, epoch) and
-- requires the status the writer holds the workflow in (require_status): a row whose epoch
-- moved on, or whose workflow is no longer in that status, changes nothing and is reported as
-- fenced out, even when a fresh epoch's write for the same workflow travels in the same batch.
-- expect (when not NULL) requires current_step to equal it: a completion whose last checkpoint
-- travels separately commits only if that checkpoint did.
-- %(started_seq)s (NULL: none): the runs claimed ahead that take the threads this batch frees
-- start when it commits: the worker's started_seq goes up to theirs (migration 0019).
-- The run's deadline fences every write as the epoch does (migration 0016): past deadline_at
-- (by the statement's wfctl_now()) a row matches only if it is a timeout (the run fails with its
-- deadline error, which the worker sends), and a timeout matches only past it.
-- Re-sending a batch whose commit was not acknowledged is harmless and reports the same: a
-- step row written by the same epoch is written again, and a write that leaves the required
-- status (complete, fail, park, release) is reported as done when the workflow, under the
-- same epoch, already shows its effect (status, attempt and, if set, run_at).
-- The workflows and workflow_attempts it updates are placeholders, filled with those tables
-- or, in the partitioned layout, with the partitions that hold the batch's runs
-- (wfctl/worker/targets.py): a plan over one partition neither probes nor locks the other
-- intervals' (docs/explanation/partitions.md, "The hot path").
WITH r AS (
    SELECT *
    FROM unnest(%(ids)s::uuid[], %(epochs)s::bigint[], %(require)s::text[], %(expects)s::int[],
                %(statuses)s::text[], %(current)s::int[], %(do_output)s::bool[],
                %(results)s::jsonb[], %(do_error)s::bool[], %(errors)s::text[],
                %(attempt_inc)s::int[], %(run_at)s::timestamptz[], %(delays)s::float8[],
                %(finish)s::bool[], %(attempts)s::int[], %(steps)s::int[], %(names)s::text[],
                %(step_status)s::text[], %(outputs)s::jsonb[], %(started)s::float8[],
                %(step_errors)s::text[], %(tracebacks)s::text[], %(outcomes)s::text[],
                %(timeouts)s::bool[], %(step_tries)s::int[], %(wait_kinds)s::text[])
         AS t(id, epoch, require_status, expect, set_status, set_step, do_output, set_output,
              do_error, set_error, attempt_inc, run_at, run_delay, finish, attempt, step, name,
              step_status, output, started, step_error, set_traceback, outcome, timeout, tries,
              wait_kind)
),
w AS (
    UPDATE {workflows} wf
    SET status = coalesce(r.set_status, wf.status),
        current_step = coalesce(r.set_step, wf.current_step),
        output_data = CASE WHEN r.do_output THEN r.set_output ELSE wf.output_data END,
        error_message = CASE WHEN r.do_error THEN r.set_error ELSE wf.error_message END,
        error_traceback = CASE WHEN r.do_error THEN r.set_traceback ELSE wf.error_traceback END,
        attempt = wf.attempt + r.attempt_inc,
        run_at = CASE WHEN r.run_delay IS NOT NULL THEN (SELECT wfctl_now()) + make_interval(secs => r.run_delay)
                      ELSE coalesce(r.run_at, wf.run_at) END,
        finished_at = CASE WHEN r.finish THEN (SELECT wfctl_now()) ELSE wf.finished_at END,
        -- a parked run: a sleep waits for its time ('sleep'); a step's next try (a backoff,
        -- migration 0024) waits for nothing (NULL), as a failed attempt's backoff
        wait_kind = CASE WHEN r.outcome = 'parked' THEN r.wait_kind ELSE wf.wait_kind END,
        updated_at = (SELECT wfctl_now())
    FROM r
    WHERE wf.id = r.id
      AND wf.lease_epoch = r.epoch
      -- a condition on r's own column: the planner finds rows by id (primary key), not by a
      -- status index, even when the table's statistics are stale
      AND wf.status = r.require_status
      AND (r.expect IS NULL OR wf.current_step = r.expect)
      AND CASE WHEN r.timeout THEN wf.deadline_at <= (SELECT wfctl_now())
               ELSE wf.deadline_at IS NULL OR wf.deadline_at > (SELECT wfctl_now()) END
    RETURNING wf.id, wf.lease_epoch, wf.current_step, wf.created_at
),
a AS (
    -- the execution ends (outcome set): close its row in the attempt history
    UPDATE {workflow_attempts} wa
    SET ended_at = (SELECT wfctl_now()), outcome = r.outcome, last_step = w.current_step,
        error = r.set_error, traceback = r.set_traceback
    FROM r
    JOIN w ON w.id = r.id AND w.lease_epoch = r.epoch
    WHERE r.outcome IS NOT NULL
      AND wa.workflow_id = r.id AND wa.lease_epoch = r.epoch AND wa.ended_at IS NULL
),
s AS (
    -- workflow_created_at: the partition key of the partitioned layout (migration 0010); the
    -- constraint is named so that one text serves both layouts (it has the key in that one)
    -- tries (migration 0024): how many tries the step's function took (@wfctl.step's retries)
    INSERT INTO workflow_steps AS ws (workflow_id, step_number, step_name, status, output_data,
                                      started_at, completed_at, error_message, attempt, lease_epoch,
                                      workflow_created_at, tries)
    SELECT r.id, r.step, r.name, r.step_status, r.output, to_timestamp(r.started), (SELECT wfctl_now()),
           r.step_error,
           r.attempt, r.epoch, w.created_at, coalesce(r.tries, 1)
    FROM r
    JOIN w ON w.id = r.id AND w.lease_epoch = r.epoch
    WHERE r.step IS NOT NULL
    ON CONFLICT ON CONSTRAINT workflow_steps_workflow_id_step_number_key DO UPDATE
    SET step_name = excluded.step_name, status = excluded.status,
        output_data = excluded.output_data, started_at = excluded.started_at,
        completed_at = excluded.completed_at, error_message = excluded.error_message,
        attempt = excluded.attempt, lease_epoch = excluded.lease_epoch, tries = excluded.tries
    WHERE ws.status <> 'completed' OR ws.lease_epoch = excluded.lease_epoch
    RETURNING ws.workflow_id, ws.lease_epoch
),
started AS (
    UPDATE workers SET started_seq = greatest(started_seq, %(started_seq)s::bigint)
    WHERE id = %(owner)s AND %(started_seq)s::bigint IS NOT NULL
)
-- It returns the executions (id, epoch) none of whose rows it stored: fenced out. A batch that
-- stored everything returns no row, and the worker decodes nothing.
SELECT x.id, x.epoch
FROM (
    SELECT r.id, r.epoch,
           CASE WHEN w.id IS NOT NULL THEN r.step IS NULL OR s.workflow_id IS NOT NULL
                ELSE
                    -- not written now: already applied by an earlier send of the same request?
                    -- (this reads the workflow as it was before this statement)
                    r.set_status IS DISTINCT FROM r.require_status AND EXISTS (
                        SELECT 1 FROM {workflows} cur
                        WHERE cur.id = r.id AND cur.lease_epoch = r.epoch
                          AND cur.status = r.set_status
                          AND cur.attempt = r.attempt + r.attempt_inc
                          AND (r.run_at IS NULL OR cur.run_at = r.run_at))
           END AS stored
    FROM r
    LEFT JOIN w ON w.id = r.id AND w.lease_epoch = r.epoch
    LEFT JOIN s ON s.workflow_id = r.id AND s.lease_epoch = r.epoch
) AS x
GROUP BY x.id, x.epoch
HAVING NOT bool_or(x.stored);

-- name: partition_targets
-- Where the partitioned layout's group commit writes the runs of one workflows partition
-- (%(oid)s, the claim's tableoid): its schema and name, and the workflow_attempts partition
-- with the same bounds (NULL: none, and that table is written through its parent). No row:
-- not a partition of workflows (any more), or its default partition, whose rows move out
-- when their interval's partition is made (wfctl_create_partition): those are written through
-- the parents, which find a row wherever it is.
SELECT n.nspname AS schema, wf.relname AS workflows,
       (SELECT a.relname
        FROM pg_inherits ai
        JOIN pg_class a ON a.oid = ai.inhrelid
        WHERE ai.inhparent = 'workflow_attempts'::regclass
          AND a.relnamespace = wf.relnamespace
          AND pg_get_expr(a.relpartbound, a.oid) = pg_get_expr(wf.relpartbound, wf.oid)
        LIMIT 1) AS attempts
FROM pg_class wf
JOIN pg_namespace n ON n.oid = wf.relnamespace
JOIN pg_inherits wi ON wi.inhrelid = wf.oid AND wi.inhparent = 'workflows'::regclass
JOIN pg_partitioned_table pt ON pt.partrelid = wi.inhparent
WHERE wf.oid = %(oid)s AND wf.oid <> pt.partdefid;

-- name: heartbeat
-- One statement per beat: register/refresh the worker row, and touch updated_at of the
-- workflows it runs (so the reference "stuck for 5 minutes" query agrees with `recover`).
-- Returns what the database thinks this worker runs, to notice lost leases early. The row
-- carries the worker's heartbeat interval and the silence after which it counts as dead
-- (migration 0004): everyone judges this worker by them.
-- wake_channel (migration 0014): the channel it takes addressed wake-ups on, NULL when it
-- does not listen (--no-listen, a transaction pooler).
-- abandoned_calls (migration 0024): the worker's step calls that outlived their timeout and
-- still run (wfctl/caller.py).
-- step_in_flight (migration 0027): see the touched CTE.
-- The pool's timer (%(horizon)s > 0 for the worker that listens for its pool, and for one that
-- hears no wake-ups): one more row, without an id, whose next_due_in says in how many seconds
-- the first run of its types parked until a time (a sleep, a wait's timeout, a backoff) falls
-- due within the horizon. Nothing announces such a time; the worker that parked the run sets
-- an alarm, and this one finds it when that worker stopped or died since. It reads the
-- runnable index one priority at a time (a loose scan: each level costs one descent), and at
-- each level only the runs due within the horizon.
WITH beat AS (
    INSERT INTO workers (id, hostname, pid, concurrency, workflow_types, version, schema_version,
                         heartbeat_seconds, dead_after_seconds, wake_channel, abandoned_calls)
    VALUES (%(id)s, %(hostname)s, %(pid)s, %(concurrency)s, %(types)s::text[], %(version)s,
            %(schema_version)s::int, %(interval)s, %(dead_after)s,
            CASE WHEN %(addressable)s THEN wfctl_worker_channel(%(id)s) END, %(abandoned)s)
    ON CONFLICT (id) DO UPDATE
    SET heartbeat_at = (SELECT wfctl_now()), stopped_at = NULL, wake_channel = excluded.wake_channel,
        idle = workers.idle AND excluded.wake_channel IS NOT NULL,
        abandoned_calls = excluded.abandoned_calls
    RETURNING id
),
touched AS (
    -- step_in_flight (migration 0027): the step each of its runs is in now, for the executions
    -- that started one (%(flight_ids)s, %(flight_epochs)s, %(flight_steps)s, %(flight_names)s),
    -- by the execution that holds the lease (an older one of the same run, cancelled and
    -- retried, may still run here); the others keep theirs
    UPDATE workflows w
    SET updated_at = (SELECT wfctl_now()),
        step_in_flight = coalesce(
            (SELECT f.step
             FROM unnest(%(flight_ids)s::uuid[], %(flight_epochs)s::bigint[], %(flight_steps)s::integer[])
                  AS f(id, epoch, step)
             WHERE f.id = w.id AND f.epoch = w.lease_epoch), w.step_in_flight),
        step_in_flight_name = coalesce(
            (SELECT f.name
             FROM unnest(%(flight_ids)s::uuid[], %(flight_epochs)s::bigint[], %(flight_names)s::text[])
                  AS f(id, epoch, name)
             WHERE f.id = w.id AND f.epoch = w.lease_epoch), w.step_in_flight_name)
    WHERE w.lease_owner = %(id)s AND w.status = 'running'
    RETURNING w.id, w.lease_epoch
),
levels AS (
    SELECT l.priority FROM (
        WITH RECURSIVE level(priority) AS (
            (SELECT w.priority FROM workflows w
             WHERE w.status = 'pending' AND %(horizon)s::float8 > 0
             ORDER BY w.priority DESC LIMIT 1)
            UNION ALL
            SELECT (SELECT w.priority FROM workflows w
                    WHERE w.status = 'pending' AND w.priority < v.priority
                    ORDER BY w.priority DESC LIMIT 1)
            FROM level v WHERE v.priority IS NOT NULL
        )
        SELECT priority FROM level
    ) AS l
    WHERE l.priority IS NOT NULL
),
due AS (
    SELECT extract(epoch FROM min(f.run_at) - (SELECT wfctl_now()))::float8 AS next_due_in
    FROM levels l
    CROSS JOIN LATERAL (
        SELECT w.run_at FROM workflows w
        WHERE w.status = 'pending' AND w.priority = l.priority
          AND w.run_at > (SELECT wfctl_now())
          AND w.run_at <= (SELECT wfctl_now()) + make_interval(secs => %(horizon)s::float8)
          AND w.workflow_type = ANY (%(types)s::text[])
        ORDER BY w.run_at
        LIMIT 1
    ) AS f
)
SELECT t.id, t.lease_epoch, NULL::float8 AS next_due_in FROM touched t
UNION ALL
SELECT NULL, NULL, d.next_due_in FROM due d WHERE d.next_due_in IS NOT NULL;

-- name: release_owned
-- Shutdown, runs claimed ahead that found no free thread in time, and runs claimed by a
-- statement whose reply never arrived: hand back these executions (id and epoch) if this
-- worker still holds them, runnable at once. The attempt is not counted: none of their steps
-- ran here. Their attempt-history rows end 'released'.
WITH released AS (
    UPDATE workflows w
    SET status = 'pending', run_at = (SELECT wfctl_now()), updated_at = (SELECT wfctl_now()), ahead_seq = NULL
    FROM unnest(%(ids)s::uuid[], %(epochs)s::bigint[]) AS r(id, epoch)
    WHERE w.id = r.id AND w.lease_epoch = r.epoch
      AND w.lease_owner = %(id)s AND w.status = 'running'
    RETURNING w.id, w.lease_epoch, w.current_step
),
closed AS (
    UPDATE workflow_attempts wa
    SET ended_at = (SELECT wfctl_now()), outcome = 'released', last_step = released.current_step
    FROM released
    WHERE wa.workflow_id = released.id AND wa.lease_epoch = released.lease_epoch
      AND wa.ended_at IS NULL
)
SELECT id FROM released;

-- name: start_ahead
-- Runs claimed ahead (ahead_seq, migration 0019) that now have a free thread, when no group
-- commit carries their start (worker.flush, started): the worker has started every run it
-- claimed ahead up to %(seq)s, and this commits before any of their code runs, so that from
-- now on its death charges them an attempt. Idempotent.
UPDATE workers SET started_seq = greatest(started_seq, %(seq)s::bigint) WHERE id = %(id)s;

-- name: stopped
UPDATE workers SET stopped_at = (SELECT wfctl_now()), heartbeat_at = (SELECT wfctl_now()) WHERE id = %(id)s;

-- name: burst_outlook
-- A --burst worker with nothing runnable: is work of its types due within the horizon
-- (%(horizon)s seconds: a retry backing off, a short sleep, a short --delay)? Then it waits for
-- it (next_due_in seconds); otherwise it exits and says what it leaves behind: the pending
-- workflows of its types due later, those parked on a message or on children (they run when
-- woken), those of its types paused (concurrency 0), and those of types it does not run.
SELECT extract(epoch FROM min(run_at) FILTER (WHERE mine AND run_at <= horizon_end) - (SELECT wfctl_now()))::float8
           AS next_due_in,
       count(*) FILTER (WHERE mine AND run_at > horizon_end AND NOT waiting) AS later,
       min(run_at) FILTER (WHERE mine AND run_at > horizon_end AND NOT waiting) AS later_first,
       max(run_at) FILTER (WHERE mine AND run_at > horizon_end AND NOT waiting) AS later_last,
       count(*) FILTER (WHERE mine AND run_at > horizon_end AND waiting) AS waiting,
       count(*) FILTER (WHERE NOT mine) AS other_types,
       count(DISTINCT workflow_type) FILTER (WHERE NOT mine) AS other_type_count,
       (array_agg(DISTINCT workflow_type) FILTER (WHERE NOT mine))[1:5] AS other_type_names,
       count(*) FILTER (WHERE paused) AS paused
FROM (
    SELECT w.run_at, w.workflow_type,
           w.workflow_type = ANY(%(types)s::text[]) AND p.workflow_type IS NULL AS mine,
           w.workflow_type = ANY(%(types)s::text[]) AND p.workflow_type IS NOT NULL AS paused,
           coalesce(w.wait_kind IN ('message', 'children'), false) AS waiting,
           (SELECT wfctl_now()) + make_interval(secs => %(horizon)s::float8) AS horizon_end
    FROM workflows w
    -- a type paused with `wfctl limit TYPE --concurrency 0` runs nothing: not waited for
    LEFT JOIN workflow_limits p
           ON p.workflow_type = w.workflow_type AND coalesce(p.concurrency, p.code_concurrency) = 0
    WHERE w.status = 'pending'
) AS pending;

-- name: session_setup
-- The worker's statements run thousands of times with small arrays: plan them once (a generic
-- plan) instead of re-planning each execution. Session-level, so not sent through a
-- transaction pooler (--no-listen), where statements are not prepared anyway.
SET plan_cache_mode = force_generic_plan;

-- name: idle_session_limit
-- A worker that may hold the listening duty (wfctl/worker/listening.py): its loop's session
-- is never idle longer than a heartbeat interval while the worker runs, so a session idle
-- far longer (%(limit)s, milliseconds: twice the dead-after, at least a minute) belongs to a
-- frozen worker; the server ends it, and the duty's lock and its LISTEN with it.
SELECT set_config('idle_session_timeout', %(limit)s, false);

-- name: recv
-- ctx.recv (wfctl/worker/calls.py): one function call, migration 0006.
SELECT state, output
FROM wfctl_recv_step(%(id)s, %(epoch)s, %(attempt)s, %(step)s, %(name)s, %(topic)s,
                     %(timeout)s::float8, %(started)s);

-- name: join
-- ctx.wait: finished children's outcomes, or park until the last one finishes.
SELECT state, output
FROM wfctl_join_step(%(id)s, %(epoch)s, %(attempt)s, %(step)s, %(name)s, %(ids)s::uuid[],
                     %(timeout)s::float8, %(started)s);

-- name: start_children
-- ctx.start_child / ctx.start_children: the children inserted and their ids checkpointed; a
-- traced run's children carry its trace context (migration 0031).
SELECT state, output
FROM wfctl_start_children_step(%(id)s, %(epoch)s, %(attempt)s, %(step)s, %(name)s, %(type)s,
                               %(inputs)s::jsonb[], %(keys)s::text[], %(priority)s::int,
                               %(timeout)s::float8, %(timeout_error)s, %(many)s, %(started)s,
                               %(trace_context)s::text);

-- name: set_event
SELECT state, output
FROM wfctl_set_event_step(%(id)s, %(epoch)s, %(attempt)s, %(step)s, %(name)s, %(key)s,
                          %(value)s::jsonb, %(started)s);

-- name: transaction_fence
-- After fn returned, in its transaction: this execution still holds the run (its lease epoch,
-- running), or nothing is returned and the transaction rolls back. The row stays locked until
-- the commit, so no recover, cancel or claim moves the lease in between (FOR NO KEY UPDATE:
-- rows inserted with a foreign key to it, a message or a child, do not wait). Also: whether the
-- run's deadline has passed (by the database's clock now, not at the transaction's start: then
-- its error message), and the output of a checkpoint already stored for this step (by any
-- epoch), which is never overwritten.
SELECT CASE WHEN w.deadline_at <= clock_timestamp() THEN coalesce(w.deadline_error, 'timed out')
       END AS expired,
       s.id IS NOT NULL AS recorded, s.output_data
FROM workflows w
LEFT JOIN workflow_steps s
       ON s.workflow_id = w.id AND s.step_number = %(step)s AND s.status = 'completed'
WHERE w.id = %(id)s AND w.lease_epoch = %(epoch)s AND w.status = 'running'
FOR NO KEY UPDATE OF w;

-- name: transaction_recorded
-- The checkpoint this epoch committed for a transactional step whose COMMIT reply was lost
-- with the connection: looked up on another connection, so fn is not called again for it.
SELECT output_data FROM workflow_steps
WHERE workflow_id = %(id)s AND step_number = %(step)s AND status = 'completed'
  AND lease_epoch = %(epoch)s;

-- name: transaction_checkpoint
-- The step's checkpoint, in the application's transaction, after the fence (the same function
-- the coordination steps use, migration 0006).
SELECT wfctl_step_done(%(id)s, %(epoch)s, %(attempt)s, %(step)s, %(name)s, %(output)s::jsonb,
                       %(started)s);

-- name: transaction_tries
-- After the checkpoint, in the same transaction: the tries the step's function took, when more
-- than one (@wfctl.step's retries; migration 0024). wfctl_step_done leaves the column as it was.
UPDATE workflow_steps SET tries = %(tries)s
WHERE workflow_id = %(id)s AND step_number = %(step)s AND lease_epoch = %(epoch)s;
