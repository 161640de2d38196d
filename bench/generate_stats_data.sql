-- Named blocks of bench/generate_stats_data.py: a realistic history of workflows, steps and
-- workers, generated in the server with generate_series (no row-by-row Python).

-- name: seed
SELECT setseed(%(seed)s);

-- name: reset
TRUNCATE workflow_steps, workflow_attempts, workflow_messages, workflow_events, workflows, workers;

-- name: workers
-- Twelve workers: 1-6 live, 7-9 dead (silent for 1 to 3 hours), 10-12 shut down cleanly.
INSERT INTO workers (id, hostname, pid, started_at, heartbeat_at, stopped_at, concurrency,
                     workflow_types, version)
SELECT 'worker-' || k || '.bench:' || (1000 + k) || ':bench',
       'worker-' || k || '.bench',
       1000 + k,
       beat - interval '6 hours',
       beat,
       CASE WHEN k >= 10 THEN beat END,
       8,
       '{}',
       'bench'
FROM (
    SELECT k,
           CASE
               WHEN k <= 6 THEN now() - random() * interval '5 seconds'
               WHEN k <= 9 THEN now() - (k - 6) * interval '1 hour'
               ELSE now() - (k - 9) * interval '1 day'
           END AS beat
    FROM generate_series(1, 12) AS k
) AS w;

-- name: plan
-- One row per workflow: id, type, creation time spread evenly over --days (in creation
-- order, as a real table fills), the three step durations drawn from per-step exponential
-- distributions, and what happened to it.
CREATE TEMP TABLE bench_plan AS
WITH types (t, workflow_type, step_names, means, upto) AS (
    VALUES (1, 'order.fulfil', ARRAY['validate', 'charge_card', 'ship'], ARRAY[0.02, 0.8, 2.5], 0.30),
           (2, 'invoice.send', ARRAY['render_pdf', 'upload', 'email'], ARRAY[1.2, 0.3, 0.2], 0.50),
           (3, 'email.welcome', ARRAY['load_user', 'render', 'send'], ARRAY[0.01, 0.05, 0.4], 0.75),
           (4, 'report.nightly', ARRAY['extract', 'transform', 'load'], ARRAY[8.0, 4.0, 2.0], 0.80),
           (5, 'payment.refund', ARRAY['lookup', 'refund', 'notify'], ARRAY[0.05, 1.5, 0.2], 0.90),
           (6, 'user.signup', ARRAY['create_account', 'provision', 'welcome'], ARRAY[0.1, 3.0, 0.3], 1.00)
),
base AS (
    SELECT g,
           gen_random_uuid() AS id,
           now() - %(span)s::interval * (1 - g::float8 / %(n)s) - random() * interval '1 second'
               AS created,
           random() AS r_type,
           random() AS r_status,
           random() AS r_fail,
           -ln(1 - random()) * 0.3 AS queued
    FROM generate_series(1, %(n)s) AS g
),
drawn AS (
    SELECT b.*, t.workflow_type, t.step_names,
           ARRAY[-ln(1 - random()) * t.means[1],
                 -ln(1 - random()) * t.means[2],
                 -ln(1 - random()) * t.means[3]] AS d
    FROM base b
    CROSS JOIN LATERAL (SELECT * FROM types WHERE types.upto >= b.r_type ORDER BY upto LIMIT 1) t
),
timed AS (
    SELECT d.*,
           created + make_interval(secs => queued) AS started,
           created + make_interval(secs => queued + d[1]) AS end1,
           created + make_interval(secs => queued + d[1] + d[2]) AS end2,
           created + make_interval(secs => queued + d[1] + d[2] + d[3]) AS end3
    FROM drawn d
)
SELECT *,
       CASE
           WHEN started > now() THEN 'pending'
           WHEN end3 > now() THEN 'running'
           WHEN g %% %(stuck_every)s = 0 AND created > now() - interval '23 hours' THEN 'stuck'
           WHEN r_status < 0.94 THEN 'completed'
           WHEN r_status < 0.985 THEN 'failed'
           ELSE 'cancelled'
       END AS kind
FROM timed;

-- name: shape
-- How many steps each run has recorded: all three when completed; the failing one (after 0-2
-- completed) when failed; those finished by now when running; one or two when stuck.
CREATE TEMP TABLE bench_run AS
SELECT p.*,
       CASE kind
           WHEN 'completed' THEN 3
           WHEN 'failed' THEN floor(r_fail * 3)::int
           WHEN 'running' THEN (end1 <= now())::int + (end2 <= now())::int
           WHEN 'stuck' THEN 1 + floor(r_fail * 2)::int
           ELSE 0
       END AS done,
       CASE
           WHEN kind = 'running' THEN 'worker-' || (1 + g %% 6) || '.bench:' || (1001 + g %% 6) || ':bench'
           WHEN kind = 'stuck' AND g %% (4 * %(stuck_every)s) = 0 THEN 'vanished.bench:1:gone'
           WHEN kind = 'stuck' THEN 'worker-' || (7 + g %% 3) || '.bench:' || (1007 + g %% 3) || ':bench'
       END AS owner
FROM bench_plan p;

-- name: insert_workflows
INSERT INTO workflows (id, workflow_type, status, input_data, current_step, max_retries,
                       error_message, created_at, updated_at, attempt, run_at, priority,
                       output_data, lease_owner, lease_epoch, started_at, finished_at)
SELECT id,
       workflow_type,
       CASE kind WHEN 'stuck' THEN 'running' ELSE kind END,
       jsonb_build_object('order_id', g, 'amount', round((r_fail * 500)::numeric, 2)),
       done,
       3,
       CASE WHEN kind = 'failed'
            THEN 'step ' || step_names[done + 1] || ' raised TimeoutError: upstream timed out' END,
       created,
       CASE kind
           WHEN 'completed' THEN end3
           WHEN 'failed' THEN ends[done + 1]
           WHEN 'cancelled' THEN created + interval '2 minutes'
           WHEN 'running' THEN now()
           WHEN 'stuck' THEN now() - (1 + g %% 3) * interval '1 hour'
           ELSE created
       END,
       CASE kind WHEN 'failed' THEN 4 ELSE 1 END,
       created,
       CASE WHEN r_type > 0.97 THEN 10 ELSE 0 END,
       CASE WHEN kind = 'completed' THEN jsonb_build_object('ok', true) END,
       owner,
       CASE kind WHEN 'failed' THEN 4 WHEN 'pending' THEN 0 WHEN 'cancelled' THEN 0 ELSE 1 END,
       CASE WHEN kind IN ('pending', 'cancelled') THEN NULL ELSE started END,
       CASE kind
           WHEN 'completed' THEN end3
           WHEN 'failed' THEN ends[done + 1]
           WHEN 'cancelled' THEN created + interval '2 minutes'
       END
FROM (SELECT *, ARRAY[end1, end2, end3] AS ends FROM bench_run) AS r;

-- name: insert_steps
-- done completed steps, plus the failing step of a failed run.
INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, output_data, started_at,
                            completed_at, error_message, attempt, lease_epoch)
SELECT r.id,
       s,
       r.step_names[s],
       CASE WHEN s <= r.done THEN 'completed' ELSE 'failed' END,
       CASE WHEN s <= r.done THEN jsonb_build_object('step', s) END,
       (ARRAY[r.started, r.end1, r.end2])[s],
       (ARRAY[r.end1, r.end2, r.end3])[s],
       CASE WHEN s > r.done THEN 'TimeoutError: upstream timed out' END,
       CASE r.kind WHEN 'failed' THEN 4 ELSE 1 END,
       CASE r.kind WHEN 'failed' THEN 4 ELSE 1 END
FROM bench_run r
CROSS JOIN LATERAL generate_series(1, r.done + (r.kind = 'failed')::int) AS s;

-- name: drop_temp
DROP TABLE IF EXISTS bench_run, bench_plan;

-- name: vacuum_workflows
VACUUM (ANALYZE) workflows;

-- name: vacuum_steps
VACUUM (ANALYZE) workflow_steps;

-- name: vacuum_workers
VACUUM (ANALYZE) workers;

-- name: counts
SELECT (SELECT count(*) FROM workflows) AS workflows,
       (SELECT count(*) FROM workflow_steps) AS steps,
       (SELECT count(*) FROM workflows WHERE created_at > now() - interval '24 hours') AS last_24h,
       (SELECT count(*) FROM workflows WHERE status = 'running') AS running,
       pg_size_pretty(pg_total_relation_size('workflows')) AS workflows_size,
       pg_size_pretty(pg_total_relation_size('workflow_steps')) AS steps_size;
