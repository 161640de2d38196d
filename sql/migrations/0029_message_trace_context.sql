-- wfctl schema, version 29: a message carries its sender's trace context to the run that takes
-- it (docs/guides/tracing.md), as a run carries its submitter's (migration 0026).
--
--   workflow_messages.trace_context   the sender's W3C `traceparent` (and `tracestate` on a
--                                     second line) when the send was traced; NULL otherwise.
--   wfctl_send_message(..., p_trace_context text)
--                                     the send of migration 0021 with a last parameter that
--                                     stores it on the message it creates (a send that finds
--                                     its idempotency key used changes nothing); bounded by
--                                     wfctl_check_trace_context. Like the others: SECURITY
--                                     DEFINER, the search_path pinned, not executable by
--                                     PUBLIC, and executable by whoever may execute the
--                                     signature without it.
--   wfctl_recv_step                   the same, and a message taken with a context returns it
--                                     in the step's output ("trace_context"): the worker links
--                                     the receiving run's span to the sender's.
--
-- Only adds: a nullable column (no rewrite), an overload beside the old signature, and a body
-- whose output has one more key that the code before it does not read.

ALTER TABLE workflow_messages ADD COLUMN trace_context text;

CREATE FUNCTION wfctl_send_message(p_id uuid, p_topic text, p_payload jsonb, p_key text, p_trace_context text,
                                   OUT id bigint, OUT created boolean)
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM wfctl_check_trace_context(p_trace_context);
    SELECT s.id, s.created INTO id, created FROM wfctl_send_message(p_id, p_topic, p_payload, p_key) s;
    IF created AND p_trace_context IS NOT NULL THEN
        UPDATE workflow_messages m SET trace_context = p_trace_context WHERE m.id = wfctl_send_message.id;
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION wfctl_recv_step(p_id uuid, p_epoch bigint, p_attempt integer, p_step integer,
                                           p_name text, p_topic text, p_timeout double precision,
                                           p_started timestamptz, OUT state text, OUT output jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    wf workflows;
    deadline timestamptz;
    message workflow_messages;
BEGIN
    SELECT * INTO wf FROM workflows WHERE id = p_id FOR NO KEY UPDATE;
    SELECT b.state, b.output INTO state, output FROM wfctl_step_begin(wf, p_epoch, p_step) b;
    IF state <> 'ok' THEN
        RETURN;
    END IF;
    deadline := wfctl_wait_deadline(wf, p_step, p_timeout);
    SELECT * INTO message FROM workflow_messages m
    WHERE m.workflow_id = p_id AND m.topic = p_topic AND m.consumed_at IS NULL
    ORDER BY m.id LIMIT 1;
    IF FOUND THEN
        UPDATE workflow_messages
        SET consumed_at = wfctl_now(), consumed_step = p_step, consumed_epoch = p_epoch
        WHERE id = message.id;
        output := jsonb_build_object('payload', message.payload, 'message', message.id)
                  || CASE WHEN message.trace_context IS NOT NULL
                          THEN jsonb_build_object('trace_context', message.trace_context)
                          ELSE '{}'::jsonb END;
    ELSIF deadline IS NOT NULL AND deadline <= wfctl_now() THEN
        output := jsonb_build_object('payload', NULL, 'timed_out', true);
    ELSE
        PERFORM wfctl_step_park(p_id, p_epoch, p_step, 'message', deadline, p_topic, NULL, NULL);
        state := 'parked';
        output := jsonb_build_object('deadline', deadline);
        RETURN;
    END IF;
    PERFORM wfctl_step_done(p_id, p_epoch, p_attempt, p_step, p_name, output, p_started);
    state := 'done';
END;
$$;

DO $migration$
DECLARE
    old text := 'wfctl_send_message(uuid, text, jsonb, text)';
    new text := 'wfctl_send_message(uuid, text, jsonb, text, text)';
    r record;
BEGIN
    EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_temp', current_schema(), new, current_schema());
    EXECUTE format('ALTER FUNCTION %I.wfctl_recv_step(uuid, bigint, integer, integer, text, text, float8, timestamptz)'
                   ' SET search_path = %I, pg_temp', current_schema(), current_schema());
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %I.%s FROM PUBLIC', current_schema(), new);
    -- whoever may execute the old signature (not its owner) may execute the new one
    FOR r IN
        SELECT DISTINCT a.grantee
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = to_regprocedure(format('%I.%s', current_schema(), old))
          AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %I.%s TO %s', current_schema(), new,
                       CASE WHEN r.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(r.grantee)) END);
    END LOOP;
END
$migration$;
