-- wfctl schema, version 15: a deadline holds for a running run too, by the database's clock.
--
-- Before, a running run failed at its deadline only when its worker reached the next step
-- boundary: a step that outlived the deadline was checkpointed, a workflow whose last step did
-- completed, and a step that never returned kept its run running for good. Now:
--
-- - Every write of a worker is fenced by the deadline as by the lease epoch: past deadline_at
--   a checkpoint, a completion, a park, a release or a retry matches no row (the group commit,
--   sql/queries/worker.sql, flush), and a coordination step changes nothing and answers
--   'expired' with the run's deadline error (wfctl_step_begin below, which every step function
--   of migration 0006 calls first). The one write that passes past the deadline is "the run
--   timed out", and only past it.
-- - The deadline duty (recovery.expire: every worker, and `wfctl recover`) fails running runs
--   past their deadline as well as pending ones, raising the epoch as a cancel does and
--   closing the execution's row in the attempt history.
--
-- Both layouts: the function takes the workflows table's row type, partitioned or not.

-- The common prologue of the step functions (0006): 'expired' past the run's deadline.
CREATE OR REPLACE FUNCTION wfctl_step_begin(wf workflows, p_epoch bigint, p_step integer,
                                            OUT state text, OUT output jsonb)
LANGUAGE plpgsql AS $$
BEGIN
    IF wf.id IS NULL OR wf.lease_epoch <> p_epoch THEN
        state := 'fenced';
        RETURN;
    END IF;
    SELECT s.output_data INTO output FROM workflow_steps s
    WHERE s.workflow_id = wf.id AND s.step_number = p_step AND s.status = 'completed'
      AND s.lease_epoch = p_epoch;
    IF FOUND THEN
        state := 'done';
    ELSIF wf.status = 'pending' AND wf.wait_step = p_step AND wf.wait_kind IS NOT NULL THEN
        state := 'parked';
    ELSIF wf.status <> 'running' THEN
        state := 'fenced';
    ELSIF wf.deadline_at <= now() THEN
        -- the caller fails the run with this error (the one write past the deadline)
        state := 'expired';
        output := to_jsonb(coalesce(wf.deadline_error, 'timed out'));
    ELSE
        state := 'ok';
    END IF;
END;
$$;

-- Pin the function to this schema, as migrations 0003, 0006 and 0011 do (CREATE OR REPLACE
-- resets a function's settings).
DO $migration$
DECLARE
    here text := current_schema();
    fn text;
BEGIN
    FOREACH fn IN ARRAY ARRAY[
        'wfctl_step_begin(workflows, bigint, integer)'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_temp', here, fn, here);
    END LOOP;
END
$migration$;
