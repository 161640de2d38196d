-- wfctl schema, version 18: a submit's wake-up says where its runs sort, so a worker can tell
-- whether they may lie behind where its claims resume.
--
-- A worker's claims resume after the key of the last run it took (priority, run_at, id) and
-- scan from the head of the runnable index at most once a second, or when a wake-up says
-- 'head'. A submit's rows carry its transaction's start as run_at and created_at: a submit in
-- a transaction that began before the worker's last claim sorts behind that claim's key, and a
-- claim prompted by its wake-up, resuming after the key, did not see it; nothing claimed it
-- until the worker's poll. The submit trigger's payload is now 'at P R C': the priority P and
-- run_at R (microseconds since the Unix epoch) of the first of the statement's runs in claim
-- order, and the oldest created_at C among them. A worker whose key sorts at or after (P, R),
-- or whose partitioned-layout floor is after C, scans from the head. A worker of an older
-- version treats the payload as it treated the empty one.

CREATE OR REPLACE FUNCTION wfctl_notify_new() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t record;
    unheard boolean := false;
    first_priority integer;
    first_run_at timestamptz;
    oldest timestamptz;
BEGIN
    FOR t IN
        SELECT DISTINCT ON (i.workflow_type) i.workflow_type, i.priority, i.run_at,
               min(i.created_at) OVER (PARTITION BY i.workflow_type) AS oldest
        FROM inserted i
        ORDER BY i.workflow_type, i.priority DESC, i.run_at
    LOOP
        IF NOT wfctl_wake_idle(ARRAY[t.workflow_type],
                               wfctl_wake_at(t.priority, t.run_at, t.oldest)) THEN
            unheard := true;
            IF first_priority IS NULL OR t.priority > first_priority
               OR (t.priority = first_priority AND t.run_at < first_run_at) THEN
                first_priority := t.priority;
                first_run_at := t.run_at;
            END IF;
            oldest := least(oldest, t.oldest);
        END IF;
    END LOOP;
    IF unheard THEN
        PERFORM pg_notify(wfctl_channel(), wfctl_wake_at(first_priority, first_run_at, oldest));
    END IF;
    RETURN NULL;
END;
$$;

CREATE FUNCTION wfctl_wake_at(p_priority integer, p_run_at timestamptz, p_created timestamptz)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT format('at %s %s %s', p_priority,
                  (extract(epoch FROM p_run_at) * 1000000)::bigint,
                  (extract(epoch FROM p_created) * 1000000)::bigint)
$$;

DO $migration$
BEGIN
    EXECUTE format('ALTER FUNCTION %I.wfctl_notify_new() SET search_path = %I, pg_temp',
                   current_schema(), current_schema());
END
$migration$;
