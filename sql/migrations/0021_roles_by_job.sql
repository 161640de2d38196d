-- wfctl schema, version 21: roles by job. A role that only submits (`wfctl init --grant-submit`)
-- gets no privilege on any table: it submits, sends messages and reads a run's outcome or events
-- by its id through the functions below, which run as the schema's owner (SECURITY DEFINER, the
-- search_path pinned to this schema and pg_temp last) and bound what such a role can store:
--
--   wfctl_check_value() (0020)     every input and payload they store: the limits of the
--                                  library and the CLI (1,000,000 bytes of compact JSON, 500
--                                  levels, integers of 4,300 digits). Over one: SQLSTATE 22023.
--   wfctl_max_unconsumed_messages() messages a run may hold that no recv took yet: 10,000.
--                                  A send past it: SQLSTATE 54000 (concurrent sends may pass
--                                  it by their number).
--   wfctl_submit_one()    the library's submit: one run, with every option; (id, created), no
--                         row when the key's workflow is not visible (the caller tries again)
--   wfctl_submit_many()   a batch of one type, ids in input order
--   wfctl_send_message()  the library's send: (id, created)
--   wfctl_outcome()       status, output and error of a run (no row: no such run)
--   wfctl_event_value()   status and an event's value (no row: no such run)
--   wfctl_await()         ask for the run's announcement when it finishes
--   wfctl_known_types()   the workflow types workers registered
--
-- wfctl_submit() and wfctl_send() (the SQL API) run as the owner too, with the same bounds.
-- None of these is executable by PUBLIC (a function is, by default): the roles that may
-- INSERT into workflows (or workflow_messages, for wfctl_send) keep what they had; `--grant-*`
-- gives the rest. wfctl_message_sent(), the deferred trigger of a message that runs at the
-- sender's commit, runs as the owner as well: a submit role has no privilege on workflows.

CREATE FUNCTION wfctl_max_unconsumed_messages() RETURNS integer LANGUAGE sql IMMUTABLE
PARALLEL SAFE AS $$
    SELECT 10000
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
    p_concurrency_key text
) RETURNS TABLE (id uuid, created boolean) LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    new_id uuid;
BEGIN
    PERFORM wfctl_check_value(p_input, 'workflow input');
    INSERT INTO workflows AS w (workflow_type, input_data, idempotency_key, run_at, priority,
                                max_retries, deadline_at, deadline_error, concurrency_key)
    VALUES (p_workflow_type, p_input, p_key,
            now() + coalesce(make_interval(secs => p_delay), interval '0'), coalesce(p_priority, 0),
            p_max_retries, now() + make_interval(secs => p_timeout), p_timeout_error,
            p_concurrency_key)
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
    p_concurrency_key text
) RETURNS SETOF uuid LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    one jsonb;
BEGIN
    FOREACH one IN ARRAY coalesce(p_inputs, '{}') LOOP
        PERFORM wfctl_check_value(one, 'workflow input');
    END LOOP;
    RETURN QUERY
    INSERT INTO workflows (workflow_type, input_data, run_at, priority, max_retries, deadline_at,
                           deadline_error, concurrency_key)
    SELECT p_workflow_type, t.input,
           now() + coalesce(make_interval(secs => p_delay), interval '0'), p_priority,
           p_max_retries, now() + make_interval(secs => p_timeout), p_timeout_error,
           p_concurrency_key
    FROM unnest(p_inputs) WITH ORDINALITY AS t(input, ord)
    ORDER BY t.ord
    RETURNING workflows.id;
END;
$$;

-- Submit from any language (0001, 0010), bounded like wfctl_submit_one.
CREATE OR REPLACE FUNCTION wfctl_submit(
    p_workflow_type text,
    p_input jsonb DEFAULT NULL,
    p_key text DEFAULT NULL,
    p_delay interval DEFAULT NULL,
    p_priority integer DEFAULT 0,
    p_max_retries integer DEFAULT NULL
) RETURNS uuid LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    new_id uuid;
BEGIN
    PERFORM wfctl_check_value(p_input, 'workflow input');
    LOOP
        INSERT INTO workflows (workflow_type, input_data, idempotency_key, run_at, priority,
                               max_retries)
        VALUES (p_workflow_type, p_input, p_key, now() + coalesce(p_delay, interval '0'),
                coalesce(p_priority, 0), p_max_retries)
        ON CONFLICT DO NOTHING
        RETURNING id INTO new_id;
        IF new_id IS NOT NULL THEN
            RETURN new_id;
        END IF;
        SELECT id INTO new_id FROM workflows WHERE idempotency_key = p_key;
        IF new_id IS NOT NULL THEN
            RETURN new_id;
        END IF;
        -- the conflicting row was deleted between the two statements: try again
    END LOOP;
END;
$$;

-- Send a message from any language (0006), bounded: the payload's size and the run's
-- unconsumed messages.
CREATE OR REPLACE FUNCTION wfctl_send(
    p_id uuid,
    p_topic text,
    p_payload jsonb DEFAULT NULL,
    p_key text DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    found_status text;
    message_id bigint;
    waiting integer;
BEGIN
    IF p_topic IS NULL OR char_length(p_topic) NOT BETWEEN 1 AND 150 THEN
        RAISE EXCEPTION 'a message topic must have 1 to 150 characters' USING ERRCODE = '22023';
    END IF;
    IF p_key IS NOT NULL AND char_length(p_key) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'a message key must have 1 to 200 characters' USING ERRCODE = '22023';
    END IF;
    IF p_key IS NOT NULL THEN
        SELECT id INTO message_id FROM workflow_messages
        WHERE workflow_id = p_id AND idempotency_key = p_key;
        IF message_id IS NOT NULL THEN
            RETURN message_id;
        END IF;
    END IF;
    PERFORM wfctl_check_value(p_payload, 'message payload');
    SELECT status INTO found_status FROM workflows WHERE id = p_id;
    IF found_status IS NULL THEN
        RAISE EXCEPTION 'no workflow %', p_id USING ERRCODE = 'P0002';
    END IF;
    IF found_status IN ('completed', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'workflow % is %: it takes no more messages', p_id, found_status
            USING ERRCODE = '55000';
    END IF;
    SELECT count(*) INTO waiting FROM (
        SELECT 1 FROM workflow_messages
        WHERE workflow_id = p_id AND consumed_at IS NULL
        LIMIT wfctl_max_unconsumed_messages()
    ) held;
    IF waiting >= wfctl_max_unconsumed_messages() THEN
        RAISE EXCEPTION 'workflow % holds % messages that no recv took yet, the limit: it takes no more until it reads some',
            p_id, waiting USING ERRCODE = '54000';
    END IF;
    INSERT INTO workflow_messages (workflow_id, topic, payload, idempotency_key)
    VALUES (p_id, p_topic, p_payload, p_key)
    ON CONFLICT (workflow_id, idempotency_key) DO NOTHING
    RETURNING id INTO message_id;
    IF message_id IS NULL THEN  -- a concurrent send with the same key won
        SELECT id INTO message_id FROM workflow_messages
        WHERE workflow_id = p_id AND idempotency_key = p_key;
    END IF;
    RETURN message_id;
END;
$$;

-- The library's send: wfctl_send, and whether this call stored the message (false: its key was
-- used before, or a concurrent send with the same key stored it first).
CREATE FUNCTION wfctl_send_message(p_id uuid, p_topic text, p_payload jsonb, p_key text,
                                   OUT id bigint, OUT created boolean)
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    message bigint;
BEGIN
    IF p_key IS NOT NULL THEN
        SELECT m.id INTO message FROM workflow_messages m
        WHERE m.workflow_id = p_id AND m.idempotency_key = p_key;
        IF message IS NOT NULL THEN
            id := message;
            created := false;
            RETURN;
        END IF;
    END IF;
    message := wfctl_send(p_id, p_topic, p_payload, p_key);
    id := message;
    created := coalesce((SELECT m.xmin = pg_current_xact_id()::xid
                         FROM workflow_messages m WHERE m.id = message), false);
END;
$$;

CREATE FUNCTION wfctl_outcome(p_id uuid)
RETURNS TABLE (status text, output jsonb, error text) LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT w.status, w.output_data, w.error_message FROM workflows w WHERE w.id = p_id
$$;

CREATE FUNCTION wfctl_event_value(p_id uuid, p_key text)
RETURNS TABLE (status text, value jsonb, found boolean) LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT w.status, e.value, e.workflow_id IS NOT NULL
    FROM workflows w
    LEFT JOIN workflow_events e ON e.workflow_id = w.id AND e.key = p_key
    WHERE w.id = p_id
$$;

-- coordination.watch: mark the run awaited; a runnable one wakes the workers at this commit.
CREATE FUNCTION wfctl_await(p_id uuid) RETURNS void LANGUAGE sql SECURITY DEFINER AS $$
    WITH watched AS (
        UPDATE workflows SET awaited = true
        WHERE id = p_id AND NOT awaited
        RETURNING status, run_at, workflow_type
    )
    SELECT wfctl_wake(workflow_type, 'head') FROM watched WHERE status = 'pending' AND run_at <= now();
$$;

CREATE FUNCTION wfctl_known_types() RETURNS SETOF text LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT DISTINCT t FROM workers, unnest(workflow_types) AS t ORDER BY 1
$$;

ALTER FUNCTION wfctl_message_sent() SECURITY DEFINER;

DO $migration$
DECLARE
    fn text;
    r record;
BEGIN
    FOREACH fn IN ARRAY ARRAY[
        'wfctl_max_unconsumed_messages()',
        'wfctl_submit_one(text, jsonb, text, float8, integer, integer, float8, text, text)',
        'wfctl_submit_many(text, jsonb[], float8, integer, integer, float8, text, text)',
        'wfctl_submit(text, jsonb, text, interval, integer, integer)',
        'wfctl_send(uuid, text, jsonb, text)', 'wfctl_send_message(uuid, text, jsonb, text)',
        'wfctl_outcome(uuid)', 'wfctl_event_value(uuid, text)', 'wfctl_await(uuid)',
        'wfctl_known_types()'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_temp',
                       current_schema(), fn, current_schema());
    END LOOP;
    FOREACH fn IN ARRAY ARRAY[
        'wfctl_submit_one(text, jsonb, text, float8, integer, integer, float8, text, text)',
        'wfctl_submit_many(text, jsonb[], float8, integer, integer, float8, text, text)',
        'wfctl_submit(text, jsonb, text, interval, integer, integer)',
        'wfctl_send(uuid, text, jsonb, text)', 'wfctl_send_message(uuid, text, jsonb, text)',
        'wfctl_outcome(uuid)', 'wfctl_event_value(uuid, text)', 'wfctl_await(uuid)',
        'wfctl_known_types()'
    ] LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %I.%s FROM PUBLIC', current_schema(), fn);
    END LOOP;
    -- who may insert runs (or messages) keeps submitting (or sending) through the functions
    FOR r IN
        SELECT DISTINCT c.relname, a.grantee
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid IN ('workflows'::regclass, 'workflow_messages'::regclass)
          AND a.privilege_type = 'INSERT' AND a.grantee <> c.relowner
    LOOP
        FOREACH fn IN ARRAY CASE WHEN r.relname = 'workflows' THEN ARRAY[
            'wfctl_submit_one(text, jsonb, text, float8, integer, integer, float8, text, text)',
            'wfctl_submit_many(text, jsonb[], float8, integer, integer, float8, text, text)',
            'wfctl_submit(text, jsonb, text, interval, integer, integer)',
            'wfctl_outcome(uuid)', 'wfctl_event_value(uuid, text)', 'wfctl_await(uuid)',
            'wfctl_known_types()']
            ELSE ARRAY['wfctl_send(uuid, text, jsonb, text)',
                       'wfctl_send_message(uuid, text, jsonb, text)'] END
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %I.%s TO %s', current_schema(), fn,
                           CASE WHEN r.grantee = 0 THEN 'PUBLIC'
                                ELSE quote_ident(pg_get_userbyid(r.grantee)) END);
        END LOOP;
    END LOOP;
END
$migration$;
