-- Named blocks of bench/limits.py (the cost of flow-control limits).

-- name: reset
-- Before each phase, in the benchmark's own database: no workflow, no worker, no limit left from
-- the phase before (TRUNCATE: fresh, empty tables, the same for every variant). The code before
-- the limits commit has no workflow_limits table.
TRUNCATE workflows, workers CASCADE;
DO $$
BEGIN
    IF to_regclass('workflow_limits') IS NOT NULL THEN
        TRUNCATE workflow_limits;
    END IF;
END
$$;

-- name: limit_rows
-- What the phase runs under: the rows of workflow_limits (none for "no limits").
SELECT count(*) FROM workflow_limits;

-- name: sampler
-- The binding phase only: after every statement that changes workflows, how many runs of each
-- type hold a lease, counted in a fresh snapshot (the trigger's own statement). Claims of a
-- limited type are serialized on the limit's row, so the sample a claim takes is the exact number
-- right after it; between claims the number only falls.
CREATE TABLE bench_lease_samples (at timestamptz NOT NULL DEFAULT clock_timestamp(),
                                  workflow_type text NOT NULL, running integer NOT NULL);
CREATE FUNCTION bench_sample_leases() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bench_lease_samples (workflow_type, running)
    SELECT workflow_type, count(*) FROM workflows WHERE status = 'running' GROUP BY workflow_type;
    RETURN NULL;
END
$$;
CREATE TRIGGER bench_sample_leases AFTER UPDATE ON workflows
    FOR EACH STATEMENT EXECUTE FUNCTION bench_sample_leases();

-- name: sampler_drop
DROP TRIGGER IF EXISTS bench_sample_leases ON workflows;
DROP FUNCTION IF EXISTS bench_sample_leases();
DROP TABLE IF EXISTS bench_lease_samples;

-- name: most_leases
-- The highest number of runs of the type holding a lease at once, how many samples there are, and
-- the number holding a lease on average over time (each sample holds until the next one), from
-- the first sample to the last.
WITH s AS (
    SELECT running, extract(epoch FROM lead(at) OVER (ORDER BY at) - at) AS held
    FROM bench_lease_samples
    WHERE workflow_type = %(type)s
)
SELECT coalesce(max(running), 0) AS most, count(*) AS samples,
       sum(running * held) / nullif(sum(held), 0) AS mean
FROM s;
