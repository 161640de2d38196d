-- wfctl schema, version 13: a write that holds a runnable run's row wakes the workers.
--
-- The claim locks the runs it takes FOR UPDATE SKIP LOCKED: a run whose row someone else holds
-- at that moment is skipped, and the claim's NOTIFY has been spent. Whoever held the row must
-- wake the workers again once it lets go, or the run waits for the next --poll. A message sent
-- to a workflow holds its row (the foreign key's share lock for the sender's transaction, then
-- the delivery trigger's lock at its commit), and so does a child's end (its parent's row, in
-- the transaction that ends the child). Both triggers now NOTIFY when the workflow they locked
-- is pending and due, not only when they woke it. (wfctl.result's watch does the same,
-- sql/queries/coordination.sql.)
--
-- The payload 'head': the run may sort behind where the worker's last claim stopped in the
-- runnable index (its run_at is the waker's transaction start, or older), so the claim it
-- prompts scans from the head. Every wake-up but a submit's carries it (a submit's is '').

CREATE OR REPLACE FUNCTION wfctl_message_sent() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    target_status text;
    due timestamptz;
BEGIN
    SELECT status, run_at INTO target_status, due
    FROM workflows WHERE id = NEW.workflow_id FOR NO KEY UPDATE;
    UPDATE workflows
    SET run_at = now(), updated_at = now()
    WHERE id = NEW.workflow_id AND status = 'pending' AND wait_kind = 'message'
      AND wait_topic = NEW.topic;
    IF FOUND OR (target_status = 'pending' AND due <= now()) THEN
        PERFORM pg_notify(wfctl_channel(), 'head');
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION wfctl_child_finished() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    remaining integer;
    parent_status text;
    due timestamptz;
BEGIN
    SELECT status, run_at INTO parent_status, due
    FROM workflows WHERE id = NEW.parent_id FOR NO KEY UPDATE;
    UPDATE workflows p
    SET wait_remaining = p.wait_remaining - 1,
        run_at = CASE WHEN p.wait_remaining <= 1 THEN now() ELSE p.run_at END,
        updated_at = now()
    WHERE p.id = NEW.parent_id AND p.status = 'pending' AND p.wait_kind = 'children'
      AND NEW.id = ANY (p.wait_ids)
    RETURNING p.wait_remaining INTO remaining;
    -- the last one of a wait wakes a worker (not every countdown); so does a parent that was
    -- already due, which a claim meanwhile skipped
    IF remaining <= 0 OR (parent_status = 'pending' AND due <= now()) THEN
        PERFORM pg_notify(wfctl_channel(), 'head');
    END IF;
    RETURN NULL;
END;
$$;

-- Pin the functions to this schema, as migration 0006 did.
DO $migration$
DECLARE
    fn text;
BEGIN
    FOREACH fn IN ARRAY ARRAY['wfctl_message_sent()', 'wfctl_child_finished()'] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_temp',
                       current_schema(), fn, current_schema());
    END LOOP;
END
$migration$;
