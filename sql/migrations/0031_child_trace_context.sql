-- wfctl schema, version 31: a child workflow carries its parent's trace context, as a run
-- carries its submitter's (migration 0026), so a fan-out and its children are one trace
-- (docs/guides/tracing.md).
--
--   wfctl_start_children_step(..., p_started timestamptz, p_trace_context text)
--                                     the step of migration 0006 with a last parameter: the
--                                     context stored on the children it inserts (a child found
--                                     by its key, inserted before, keeps its own); bounded by
--                                     wfctl_check_trace_context.
--
-- Only adds: the signature without it stays for the workers of releases built for schema 30,
-- which call it; contract 0031 (sql/contracts/0031_untraced_child_start.sql) removes it once
-- none of them heartbeats.

CREATE FUNCTION wfctl_start_children_step(p_id uuid, p_epoch bigint, p_attempt integer, p_step integer,
                                          p_name text, p_type text, p_inputs jsonb[], p_keys text[],
                                          p_priority integer, p_timeout double precision,
                                          p_timeout_error text, p_many boolean, p_started timestamptz,
                                          p_trace_context text, OUT state text, OUT output jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    wf workflows;
    ids uuid[];
BEGIN
    PERFORM wfctl_check_trace_context(p_trace_context);
    SELECT * INTO wf FROM workflows WHERE id = p_id FOR NO KEY UPDATE;
    SELECT b.state, b.output INTO state, output FROM wfctl_step_begin(wf, p_epoch, p_step) b;
    IF state <> 'ok' THEN
        RETURN;
    END IF;
    ids := wfctl_insert_children(wf, p_type, p_inputs, p_keys, p_priority, p_timeout,
                                 p_timeout_error);
    IF p_trace_context IS NOT NULL THEN
        -- the children this step inserted (not yet visible to any other transaction)
        UPDATE workflows SET trace_context = p_trace_context
        WHERE id = ANY (ids) AND parent_id = p_id AND trace_context IS NULL;
    END IF;
    output := CASE WHEN p_many THEN to_jsonb(ids::text[]) ELSE to_jsonb(ids[1]::text) END;
    PERFORM wfctl_step_done(p_id, p_epoch, p_attempt, p_step, p_name, output, p_started);
    state := 'done';
END;
$$;

DO $migration$
BEGIN
    EXECUTE format('ALTER FUNCTION %I.wfctl_start_children_step(uuid, bigint, integer, integer, text, text, '
                   'jsonb[], text[], integer, float8, text, boolean, timestamptz, text) '
                   'SET search_path = %I, pg_temp', current_schema(), current_schema());
END
$migration$;
