-- wfctl schema, version 16: a deadline holds for a running run too, by the database's clock.
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
-- And a timeout given at the submit (or to start_child) replaces the type's, longer or
-- shorter: the claim applies the type's timeout only to a run without a deadline, or whose
-- deadline is its parent's alone (a child started without a timeout of its own), and there
-- only when it comes earlier.
--
--   workflows.deadline_inherited  the deadline is the parent's alone (start_child without a
--                                 timeout); false for every other run. Children inserted
--                                 before this version read false: one that no worker has
--                                 claimed yet keeps the deadline it has (its parent's), and
--                                 its type's timeout no longer shortens it.
--
-- Both layouts: the column is added to workflows, partitioned or not (a partitioned table
-- passes it to its partitions), and the functions take the table's row type in either.

ALTER TABLE workflows ADD COLUMN deadline_inherited boolean NOT NULL DEFAULT false;

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

-- Insert children of wf (0011): a child started without a timeout of its own has its
-- parent's deadline alone (deadline_inherited), which its type's timeout may shorten.
CREATE OR REPLACE FUNCTION wfctl_insert_children(wf workflows, p_type text, p_inputs jsonb[], p_keys text[],
                                                 p_priority integer, p_timeout float8, p_timeout_error text)
RETURNS uuid[] LANGUAGE plpgsql AS $$
DECLARE
    own_deadline timestamptz;
    deadline timestamptz;
    deadline_message text;
    new_ids uuid[];
BEGIN
    own_deadline := CASE WHEN p_timeout IS NULL THEN NULL
                         ELSE now() + make_interval(secs => p_timeout) END;
    IF wf.deadline_at IS NOT NULL AND (own_deadline IS NULL OR wf.deadline_at < own_deadline) THEN
        deadline := wf.deadline_at;
        deadline_message := 'timed out: its parent''s deadline passed ('
                            || coalesce(wf.deadline_error, 'timed out') || ')';
    ELSE
        deadline := own_deadline;
        deadline_message := p_timeout_error;
    END IF;
    new_ids := ARRAY(SELECT wfctl_new_id() FROM generate_series(1, cardinality(p_inputs)));
    INSERT INTO workflows (id, workflow_type, input_data, idempotency_key, priority, max_retries,
                           parent_id, deadline_at, deadline_error, deadline_inherited)
    SELECT new_ids[i.ord], p_type, i.input, p_keys[i.ord], coalesce(p_priority, wf.priority),
           NULL, wf.id, deadline, deadline_message, p_timeout IS NULL AND deadline IS NOT NULL
    FROM unnest(p_inputs) WITH ORDINALITY AS i(input, ord)
    ORDER BY i.ord
    ON CONFLICT DO NOTHING;
    -- a new statement: it sees what this one inserted and a keyed workflow committed meanwhile
    RETURN ARRAY(
        SELECT coalesce(mine.id, keyed.id)
        FROM generate_subscripts(new_ids, 1) AS n(ord)
        LEFT JOIN workflows mine ON mine.id = new_ids[n.ord]
        LEFT JOIN workflows keyed ON keyed.idempotency_key = p_keys[n.ord] AND mine.id IS NULL
        ORDER BY n.ord);
END;
$$;

-- Pin the functions to this schema, as migrations 0003, 0006 and 0011 do (CREATE OR REPLACE
-- resets a function's settings).
DO $migration$
DECLARE
    here text := current_schema();
    fn text;
BEGIN
    FOREACH fn IN ARRAY ARRAY[
        'wfctl_step_begin(workflows, bigint, integer)',
        'wfctl_insert_children(workflows, text, jsonb[], text[], integer, float8, text)'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_temp', here, fn, here);
    END LOOP;
END
$migration$;
