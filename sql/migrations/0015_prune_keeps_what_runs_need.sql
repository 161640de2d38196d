-- wfctl schema, version 15: a partition's drop keeps what an unfinished run still needs, and
-- takes all of an interval's rows or none.
--
-- wfctl_prune_partition keeps an interval (state 'kept') when any workflow in it is a child of
-- a workflow that is not prunable itself (unfinished, finished after the cutoff, or of a status
-- not pruned): its parent may still wait for it, replay a wait on it after a retry, and read
-- its outcome (the parent may sit in a later interval). A child goes with its parent, or after. And the interval's messages
-- and events, deleted before the tables are locked so the lock is held briefly, are deleted in
-- a block of their own that is rolled back when the check made under the lock keeps the
-- interval (a run in it was retried meanwhile): a kept interval keeps every row.

CREATE OR REPLACE FUNCTION wfctl_prune_partition(p_start timestamptz, p_end timestamptz,
                                                 p_statuses text[], p_cutoff timestamptz,
                                                 p_dry boolean, p_lock_timeout text,
                                                 OUT state text, OUT workflows bigint,
                                                 OUT steps bigint)
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    others text[] := ARRAY(SELECT s FROM unnest(ARRAY['pending', 'running', 'completed', 'failed',
                                                      'cancelled']) AS s
                           WHERE s <> ALL (p_statuses));
    wp text;
    sp text;
    ap text;
    check_sql text;
    blocked boolean;
BEGIN
    SELECT max(p.partition) FILTER (WHERE p.parent = 'workflows'),
           max(p.partition) FILTER (WHERE p.parent = 'workflow_steps'),
           max(p.partition) FILTER (WHERE p.parent = 'workflow_attempts')
    INTO wp, sp, ap
    FROM wfctl_partitions() p
    WHERE p.range_start = p_start AND p.range_end = p_end;
    IF wp IS NULL OR p_end > p_cutoff THEN
        state := 'kept';
        RETURN;
    END IF;
    check_sql := format('SELECT EXISTS (SELECT 1 FROM %1$I WHERE status = ANY ($1)) '
                        'OR EXISTS (SELECT 1 FROM %1$I WHERE finished_at >= $2 '
                        '           OR (finished_at IS NULL AND updated_at >= $2)) '
                        'OR EXISTS (SELECT 1 FROM %1$I c JOIN workflows p ON p.id = c.parent_id '
                        '           WHERE p.status = ANY ($1) OR p.finished_at >= $2 '
                        '           OR (p.finished_at IS NULL AND p.updated_at >= $2))', wp);
    EXECUTE check_sql USING others, p_cutoff INTO blocked;
    IF blocked THEN
        state := 'kept';
        RETURN;
    END IF;
    EXECUTE format('SELECT count(*) FROM %I', wp) INTO workflows;
    steps := 0;
    IF sp IS NOT NULL THEN
        EXECUTE format('SELECT count(*) FROM %I', sp) INTO steps;
    END IF;
    IF p_dry THEN
        state := 'prunable';
        RETURN;
    END IF;
    BEGIN
        EXECUTE format('DELETE FROM workflow_messages m USING %I w WHERE m.workflow_id = w.id', wp);
        EXECUTE format('DELETE FROM workflow_events e USING %I w WHERE e.workflow_id = w.id', wp);
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
        LOCK TABLE workflows, workflow_steps, workflow_attempts IN ACCESS EXCLUSIVE MODE;
        EXECUTE check_sql USING others, p_cutoff INTO blocked;
        IF blocked THEN
            -- undoes this block: the deletions above, and the locks
            RAISE EXCEPTION USING ERRCODE = 'WFKPT', MESSAGE = 'interval kept';
        END IF;
        IF sp IS NOT NULL THEN
            EXECUTE format('DROP TABLE %I', sp);
        END IF;
        IF ap IS NOT NULL THEN
            EXECUTE format('DROP TABLE %I', ap);
        END IF;
        EXECUTE format('DROP TABLE %I', wp);
        state := 'dropped';
    EXCEPTION WHEN SQLSTATE 'WFKPT' THEN
        state := 'kept';
    END;
END;
$$;


-- CREATE OR REPLACE drops the function's settings: pin it to this schema again, as 0010 did.
DO $migration$
BEGIN
    EXECUTE format('ALTER FUNCTION %I.wfctl_prune_partition(timestamptz, timestamptz, text[], '
                   'timestamptz, boolean, text) SET search_path = %I, pg_temp',
                   current_schema(), current_schema());
END
$migration$;
