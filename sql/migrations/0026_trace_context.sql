-- wfctl schema, version 26: the trace context a run carries from its submit to its executions.
--
-- With tracing on (the optional extra wfctl[otel], wfctl/tracing.py, docs/guides/tracing.md) a
-- submit stores the W3C context of its span with the run, and every execution of the run on a
-- worker is a child of that span, across processes, parks, retries and recoveries.
--
--   workflows.trace_context   the submitter's W3C `traceparent`, then a newline and its
--                             `tracestate` when it has one. NULL: the submit was not traced
--                             (every row written before, and every submit without tracing).
--                             The claim returns it to the worker (worker.claim).
--   wfctl_submit_one(..., p_trace_context text)
--   wfctl_submit_many(..., p_trace_context text)
--                             new overloads of migration 0021's functions that store it (at
--                             most 1,024 characters: SQLSTATE 22023 past it); the signatures
--                             without it stay as they were, for clients of version 24, and
--                             store NULL. Like them: SECURITY DEFINER, the search_path pinned
--                             to this schema and pg_temp last, not executable by PUBLIC, and
--                             executable by whoever may execute the old signature (the roles
--                             given a job by `wfctl init --grant-*`, and those that may insert
--                             runs).
--
-- Both layouts: the column goes to the partitions of a partitioned workflows table; a column
-- without a default rewrites no rows.

ALTER TABLE workflows ADD COLUMN trace_context text;

CREATE FUNCTION wfctl_check_trace_context(p_trace_context text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF char_length(p_trace_context) > 1024 THEN
        RAISE EXCEPTION 'a trace context must have at most 1024 characters, not %',
            char_length(p_trace_context) USING ERRCODE = '22023';
    END IF;
END;
$$;

CREATE FUNCTION wfctl_submit_one(
    p_workflow_type text,
    p_input jsonb,
    p_key text,
    p_delay float8,
    p_priority integer,
    p_max_retries integer,
    p_timeout float8,
    p_timeout_error text,
    p_concurrency_key text,
    p_trace_context text
) RETURNS TABLE (id uuid, created boolean) LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    new_id uuid;
BEGIN
    PERFORM wfctl_check_value(p_input, 'workflow input');
    PERFORM wfctl_check_trace_context(p_trace_context);
    INSERT INTO workflows AS w (workflow_type, input_data, idempotency_key, run_at, priority,
                                max_retries, deadline_at, deadline_error, concurrency_key,
                                trace_context)
    VALUES (p_workflow_type, p_input, p_key,
            wfctl_now() + coalesce(make_interval(secs => p_delay), interval '0'), coalesce(p_priority, 0),
            p_max_retries, wfctl_now() + make_interval(secs => p_timeout), p_timeout_error,
            p_concurrency_key, p_trace_context)
    ON CONFLICT DO NOTHING
    RETURNING w.id INTO new_id;
    IF new_id IS NOT NULL THEN
        RETURN QUERY SELECT new_id, true;
        RETURN;
    END IF;
    RETURN QUERY SELECT w.id, false FROM workflows w WHERE w.idempotency_key = p_key;
END;
$$;

CREATE FUNCTION wfctl_submit_many(
    p_workflow_type text,
    p_inputs jsonb[],
    p_delay float8,
    p_priority integer,
    p_max_retries integer,
    p_timeout float8,
    p_timeout_error text,
    p_concurrency_key text,
    p_trace_context text
) RETURNS SETOF uuid LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    one jsonb;
BEGIN
    FOREACH one IN ARRAY coalesce(p_inputs, '{}') LOOP
        PERFORM wfctl_check_value(one, 'workflow input');
    END LOOP;
    PERFORM wfctl_check_trace_context(p_trace_context);
    RETURN QUERY
    INSERT INTO workflows (workflow_type, input_data, run_at, priority, max_retries, deadline_at,
                           deadline_error, concurrency_key, trace_context)
    SELECT p_workflow_type, t.input,
           wfctl_now() + coalesce(make_interval(secs => p_delay), interval '0'), p_priority,
           p_max_retries, wfctl_now() + make_interval(secs => p_timeout), p_timeout_error,
           p_concurrency_key, p_trace_context
    FROM unnest(p_inputs) WITH ORDINALITY AS t(input, ord)
    ORDER BY t.ord
    RETURNING workflows.id;
END;
$$;

DO $migration$
DECLARE
    pair text[];
    r record;
BEGIN
    FOREACH pair SLICE 1 IN ARRAY ARRAY[
        ['wfctl_submit_one(text, jsonb, text, float8, integer, integer, float8, text, text)',
         'wfctl_submit_one(text, jsonb, text, float8, integer, integer, float8, text, text, text)'],
        ['wfctl_submit_many(text, jsonb[], float8, integer, integer, float8, text, text)',
         'wfctl_submit_many(text, jsonb[], float8, integer, integer, float8, text, text, text)']
    ] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_temp',
                       current_schema(), pair[2], current_schema());
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %I.%s FROM PUBLIC', current_schema(), pair[2]);
        -- whoever may execute the old signature (not its owner) may execute the new one
        FOR r IN
            SELECT DISTINCT a.grantee
            FROM pg_proc p, aclexplode(p.proacl) a
            WHERE p.oid = to_regprocedure(format('%I.%s', current_schema(), pair[1]))
              AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %I.%s TO %s', current_schema(), pair[2],
                           CASE WHEN r.grantee = 0 THEN 'PUBLIC'
                                ELSE quote_ident(pg_get_userbyid(r.grantee)) END);
        END LOOP;
    END LOOP;
    EXECUTE format('ALTER FUNCTION %I.wfctl_check_trace_context(text) SET search_path = %I, pg_temp',
                   current_schema(), current_schema());
END
$migration$;
