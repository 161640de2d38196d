-- Stale-run recovery (wfctl/recovery.py): `wfctl recover --stale 5m` and the sweep live workers
-- run, safe to run concurrently.
--
-- %(stale)s is a threshold in seconds for every worker (`recover --stale`), or NULL for each
-- worker's own: the dead_after_seconds its row records (its heartbeat interval times the beats
-- it may miss, migration 0004). The sweep passes NULL, so it never takes the runs of a worker
-- whose heartbeat is fresh by that worker's own promise.

-- %(sweep)s is true for a live worker's sweep. One sweeper at a time: the recover statement
-- then first takes a transaction-scoped advisory lock without waiting (the key names the
-- schema, so two wfctl installations in one database sweep independently); a sweeper that does
-- not get it changes nothing and gets one row of NULLs back, "another worker is sweeping now".
-- The lock lives only as long as that one statement: a sweeper paused (SIGSTOP, a long GC, a
-- partition) between statements holds neither the lock nor the rows it requeued.
-- A run its worker claimed ahead and never started (migration 0019: its ahead_seq above its
-- owner's started_seq) is handed back, not charged an attempt: recover makes it pending with
-- its attempt as it was, and its row in the attempt history ends 'released', as at a SIGTERM.
-- (Keep the comments inside a block short: pg_stat_activity shows a statement's first 1 kB.)

-- name: recover
-- Requeue every running workflow whose owner's heartbeat and own updated_at are both older
-- than the threshold (or whose owner stopped or has no worker row), with a fresh epoch so the old
-- owner is fenced out. A run that moved after its worker's last beat (a checkpoint written
-- just before a pause) is not stale yet: recover and the reference "updated_at older than X"
-- query agree.
-- The abandoned attempt counts: past max_retries the workflow fails instead. Its row in the
-- attempt history ends 'abandoned'. (Not a run claimed ahead: top of file.) Rows another recover holds are skipped (SKIP LOCKED), and
-- the row re-check after the lock makes a workflow that a concurrent recover already requeued
-- drop out: each is requeued once.
-- %(sweep)s: see the top of this file.
WITH turn AS MATERIALIZED (
    SELECT CASE WHEN %(sweep)s::bool
                THEN pg_try_advisory_xact_lock(hashtext('wfctl.sweep.' || current_schema()))
                ELSE true END AS ours
),
stale AS MATERIALIZED (
    SELECT w.id, w.lease_owner, k.heartbeat_at,
           coalesce(w.ahead_seq > k.started_seq, false) AS claimed_ahead
    FROM workflows w
    LEFT JOIN workers k ON k.id = w.lease_owner
    WHERE (SELECT ours FROM turn)
      AND w.status = 'running'
      AND (k.id IS NULL OR k.stopped_at IS NOT NULL
           OR (k.heartbeat_at < (SELECT wfctl_now()) - make_interval(secs => coalesce(%(stale)s::float8, k.dead_after_seconds))
               AND w.updated_at < (SELECT wfctl_now()) - make_interval(secs => coalesce(%(stale)s::float8, k.dead_after_seconds))))
    ORDER BY w.updated_at
    FOR UPDATE OF w SKIP LOCKED
),
requeued AS (
    UPDATE workflows w
    SET status = CASE WHEN stale.claimed_ahead THEN 'pending'
                      WHEN w.attempt > coalesce(w.max_retries, 3) THEN 'failed' ELSE 'pending' END,
        attempt = CASE WHEN stale.claimed_ahead OR w.attempt > coalesce(w.max_retries, 3) THEN w.attempt
                       ELSE w.attempt + 1 END,
        lease_epoch = w.lease_epoch + 1,
        ahead_seq = NULL,
        run_at = (SELECT wfctl_now()),
        updated_at = (SELECT wfctl_now()),
        finished_at = CASE WHEN NOT stale.claimed_ahead AND w.attempt > coalesce(w.max_retries, 3)
                           THEN (SELECT wfctl_now()) END,
        error_message = CASE
            WHEN NOT stale.claimed_ahead AND w.attempt > coalesce(w.max_retries, 3) THEN
                format('abandoned: worker %%s stopped heartbeating during attempt %%s of %%s '
                       '(step %%s done); no retries left', coalesce(stale.lease_owner, '?'),
                       w.attempt, coalesce(w.max_retries, 3) + 1, w.current_step)
            ELSE w.error_message
        END,
        error_traceback = CASE WHEN NOT stale.claimed_ahead AND w.attempt > coalesce(w.max_retries, 3)
                               THEN NULL ELSE w.error_traceback END
    FROM stale
    WHERE w.id = stale.id
    RETURNING w.id, w.workflow_type, w.status, w.attempt, w.lease_epoch, w.current_step,
              stale.lease_owner AS previous_owner, stale.heartbeat_at AS owner_heartbeat,
              stale.claimed_ahead
),
closed AS (
    -- the abandoned execution's row in the attempt history (the epoch before the new one);
    -- one claimed ahead and never started was handed back
    UPDATE workflow_attempts wa
    SET ended_at = (SELECT wfctl_now()), outcome = CASE WHEN r.claimed_ahead THEN 'released' ELSE 'abandoned' END,
        last_step = r.current_step,
        error = CASE WHEN r.claimed_ahead THEN NULL
                     WHEN r.owner_heartbeat IS NULL THEN 'worker unknown'
                     ELSE 'worker went silent' END
    FROM requeued r
    WHERE wa.workflow_id = r.id AND wa.lease_epoch = r.lease_epoch - 1 AND wa.ended_at IS NULL
)
SELECT id, workflow_type, status, attempt, lease_epoch, current_step, previous_owner,
       owner_heartbeat, claimed_ahead
FROM requeued
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM turn WHERE NOT ours;

-- name: stale_runs
-- The same set, for --dry-run: nothing is changed.
SELECT w.id, w.workflow_type,
       CASE WHEN w.ahead_seq > k.started_seq THEN 'pending'
            WHEN w.attempt > coalesce(w.max_retries, 3) THEN 'failed' ELSE 'pending' END AS status,
       CASE WHEN w.ahead_seq > k.started_seq OR w.attempt > coalesce(w.max_retries, 3) THEN w.attempt
            ELSE w.attempt + 1 END AS attempt,
       w.lease_epoch + 1 AS lease_epoch, w.current_step, w.lease_owner AS previous_owner,
       k.heartbeat_at AS owner_heartbeat, coalesce(w.ahead_seq > k.started_seq, false) AS claimed_ahead
FROM workflows w
LEFT JOIN workers k ON k.id = w.lease_owner
WHERE w.status = 'running'
  AND (k.id IS NULL OR k.stopped_at IS NOT NULL
           OR (k.heartbeat_at < (SELECT wfctl_now()) - make_interval(secs => coalesce(%(stale)s::float8, k.dead_after_seconds))
               AND w.updated_at < (SELECT wfctl_now()) - make_interval(secs => coalesce(%(stale)s::float8, k.dead_after_seconds))))
ORDER BY w.updated_at;

-- name: notify
SELECT pg_notify(wfctl_channel(), 'head');

-- name: slowest_live_worker
-- The guard on `recover --stale X`: of the live workers (heartbeat fresh by their own rule, not
-- stopped), the one that may stay silent longest before it counts as dead. A shorter X would
-- requeue runs that worker is still running.
SELECT k.id, k.heartbeat_seconds, k.dead_after_seconds
FROM workers k
WHERE k.stopped_at IS NULL
  AND k.heartbeat_at >= (SELECT wfctl_now()) - make_interval(secs => k.dead_after_seconds)
ORDER BY k.dead_after_seconds DESC, k.id
LIMIT 1;

-- name: expire
-- Deadlines (migrations 0006, 0016): fail every pending run (queued, parked, backing off,
-- requeued from a dead worker) and every running one whose deadline passed, with its deadline
-- error. The epoch is raised, as a cancel does, so whatever a running one's worker sends later
-- (its step in flight returning) is fenced out; that execution's row in the attempt history
-- ends 'error' with the same error. Rows someone holds are skipped, to be failed on the next
-- pass (a transactional step's fence holds its run's row only until its commit).
WITH due AS MATERIALIZED (
    SELECT id
    FROM workflows
    WHERE status IN ('pending', 'running') AND deadline_at IS NOT NULL AND deadline_at <= (SELECT wfctl_now())
    ORDER BY deadline_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
expired AS (
    UPDATE workflows w
    SET status = 'failed', finished_at = (SELECT wfctl_now()), updated_at = (SELECT wfctl_now()),
        error_message = coalesce(w.deadline_error, 'timed out'), error_traceback = NULL,
        wait_kind = NULL, lease_epoch = w.lease_epoch + 1
    FROM due
    WHERE w.id = due.id AND w.status IN ('pending', 'running')
    RETURNING w.id, w.workflow_type, w.error_message, w.lease_epoch, w.current_step
),
closed AS (
    -- a running execution's row (a pending run's was closed when it parked, backed off or
    -- was handed back)
    UPDATE workflow_attempts wa
    SET ended_at = (SELECT wfctl_now()), outcome = 'error', last_step = e.current_step, error = e.error_message
    FROM expired e
    WHERE wa.workflow_id = e.id AND wa.lease_epoch = e.lease_epoch - 1 AND wa.ended_at IS NULL
)
SELECT id, workflow_type, error_message FROM expired;

-- name: expire_due
-- What expire would fail, for `recover --dry-run`: nothing is changed. %(failing)s: the runs
-- the same recover would fail first (stale, no retries left), which expire then leaves alone.
SELECT id, workflow_type, coalesce(deadline_error, 'timed out') AS error_message
FROM workflows
WHERE status IN ('pending', 'running')
  AND NOT (id = ANY (%(failing)s::uuid[]))
  AND deadline_at IS NOT NULL AND deadline_at <= (SELECT wfctl_now())
ORDER BY deadline_at, id;
