-- wfctl schema, version 6: coordination (messages, events, child workflows, deadlines).
--
-- Every wait parks the workflow: status 'pending', run_at = the wait's deadline (the year 9999
-- when it has none), and wait_kind says what it waits for (shown by `wfctl show`, filtered by
-- `wfctl list --waiting`; the claim clears it). A wake-up is a write that moves run_at to
-- now() and NOTIFYs the workers.
--
-- No lost wake-up: the worker's wait functions below lock the workflow's own row first and
-- only then look for what they wait for (a message, finished children), in a fresh snapshot.
-- Whoever delivers (a message's commit-time trigger, a child's completion trigger) locks the
-- same row before it looks at whether the workflow waits. So either the delivery committed
-- before the wait function took the lock (the wait sees it and does not park), or the delivery
-- runs after the park committed (it sees the parked row and wakes it).

ALTER TABLE workflows
    ADD COLUMN parent_id      uuid,          -- the workflow that started this one (ctx.start_child)
    ADD COLUMN deadline_at    timestamptz,   -- past it the run fails (a worker duty, `recover`)
    ADD COLUMN deadline_error text,          -- the message it then fails with
    ADD COLUMN wait_kind      text,          -- parked: 'sleep', 'message' or 'children'
    ADD COLUMN wait_topic     text,          -- 'message': the topic
    ADD COLUMN wait_ids       uuid[],        -- 'children': the children waited for
    ADD COLUMN wait_remaining integer,       -- 'children': how many of them are not finished
    ADD COLUMN wait_step      integer,       -- the step number of the wait in progress...
    ADD COLUMN wait_deadline  timestamptz,   -- ...and when it gives up (kept across wake-ups)
    ADD COLUMN awaited        boolean NOT NULL DEFAULT false,  -- someone waits for its result
    ADD CONSTRAINT workflows_wait_kind_check
        CHECK (wait_kind IN ('sleep', 'message', 'children'));

CREATE INDEX workflows_parent_idx ON workflows (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX workflows_deadline_idx ON workflows (deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('pending', 'running');

CREATE TABLE workflow_messages (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- delivery order
    workflow_id     uuid NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
    topic           text NOT NULL CHECK (char_length(topic) BETWEEN 1 AND 150),
    payload         jsonb,
    idempotency_key text CHECK (char_length(idempotency_key) BETWEEN 1 AND 200),
    created_at      timestamptz NOT NULL DEFAULT now(),
    consumed_at     timestamptz,             -- set in the commit of the recv step that took it
    consumed_step   integer,
    consumed_epoch  bigint,
    UNIQUE (workflow_id, idempotency_key)
);
CREATE INDEX workflow_messages_unconsumed_idx ON workflow_messages (workflow_id, topic, id)
    WHERE consumed_at IS NULL;

CREATE TABLE workflow_events (
    workflow_id  uuid NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
    key          text NOT NULL CHECK (char_length(key) BETWEEN 1 AND 150),
    value        jsonb,
    step_number  integer,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow_id, key)
);

-- The channel that wakes callers waiting for a result or an event (payload: the workflow id),
-- per schema like wfctl_channel().
DO $migration$
DECLARE
    here text := current_schema();
    channel text := CASE WHEN current_schema() = 'public' THEN 'wfctl_watch'
                         ELSE left('wfctl_watch_' || current_schema(), 63) END;
BEGIN
    EXECUTE format(
        'CREATE FUNCTION %I.wfctl_watch_channel() RETURNS text LANGUAGE sql IMMUTABLE '
        'PARALLEL SAFE AS %L', here, format('SELECT %L::text', channel));
END
$migration$;

-- A message's commit wakes its workflow if that waits on the topic (a deferred trigger: the
-- row lock is taken at the sender's commit, not for the rest of the sender's transaction).
CREATE FUNCTION wfctl_message_sent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM workflows WHERE id = NEW.workflow_id FOR NO KEY UPDATE;
    UPDATE workflows
    SET run_at = now(), updated_at = now()
    WHERE id = NEW.workflow_id AND status = 'pending' AND wait_kind = 'message'
      AND wait_topic = NEW.topic;
    IF FOUND THEN
        PERFORM pg_notify(wfctl_channel(), '');
    END IF;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER workflow_messages_wake AFTER INSERT ON workflow_messages
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION wfctl_message_sent();

-- A child that finishes (completed, failed, cancelled, timed out) counts down its parent's
-- wait; the last one wakes it, once.
CREATE FUNCTION wfctl_child_finished() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    remaining integer;
BEGIN
    PERFORM 1 FROM workflows WHERE id = NEW.parent_id FOR NO KEY UPDATE;
    UPDATE workflows p
    SET wait_remaining = p.wait_remaining - 1,
        run_at = CASE WHEN p.wait_remaining <= 1 THEN now() ELSE p.run_at END,
        updated_at = now()
    WHERE p.id = NEW.parent_id AND p.status = 'pending' AND p.wait_kind = 'children'
      AND NEW.id = ANY (p.wait_ids)
    RETURNING p.wait_remaining INTO remaining;
    IF remaining <= 0 THEN  -- the last one: wake a worker (not for every countdown)
        PERFORM pg_notify(wfctl_channel(), '');
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER workflows_child_finished AFTER UPDATE OF status ON workflows
    FOR EACH ROW
    WHEN (NEW.parent_id IS NOT NULL
          AND NEW.status IN ('completed', 'failed', 'cancelled')
          AND OLD.status NOT IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION wfctl_child_finished();

-- A finished workflow someone waits for (wfctl.result, `wfctl wait`) is announced.
CREATE FUNCTION wfctl_announce_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(wfctl_watch_channel(), NEW.id::text);
    RETURN NULL;
END;
$$;

CREATE TRIGGER workflows_announce_finished AFTER UPDATE OF status ON workflows
    FOR EACH ROW
    WHEN (NEW.awaited
          AND NEW.status IN ('completed', 'failed', 'cancelled')
          AND OLD.status NOT IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION wfctl_announce_finished();

-- Send a message from any language. Idempotent with a key: the same key returns the first
-- message's id (also once the workflow has finished). Refused: an unknown workflow
-- (SQLSTATE P0002), a finished one (55000), a bad topic or key (22023).
CREATE FUNCTION wfctl_send(
    p_id uuid,
    p_topic text,
    p_payload jsonb DEFAULT NULL,
    p_key text DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    found_status text;
    message_id bigint;
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
    SELECT status INTO found_status FROM workflows WHERE id = p_id;
    IF found_status IS NULL THEN
        RAISE EXCEPTION 'no workflow %', p_id USING ERRCODE = 'P0002';
    END IF;
    IF found_status IN ('completed', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'workflow % is %: it takes no more messages', p_id, found_status
            USING ERRCODE = '55000';
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

-- The worker's side. Each function is one step of a workflow, called by its worker with the
-- lease epoch it holds; it locks the workflow's row, and changes nothing unless that epoch
-- still runs it ('fenced'). A call re-sent after a lost reply answers as the first one did:
-- the step row its epoch wrote is returned ('done'), a park it made is reported ('parked').

-- The common prologue, on the row the caller locked: 'ok' (run the step), 'fenced', or
-- 'done'/'parked' for a re-send.
CREATE FUNCTION wfctl_step_begin(wf workflows, p_epoch bigint, p_step integer,
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
    ELSE
        state := 'ok';
    END IF;
END;
$$;

-- Checkpoint step p_step with p_output (the wait, if any, is over).
CREATE FUNCTION wfctl_step_done(p_id uuid, p_epoch bigint, p_attempt integer, p_step integer,
                                p_name text, p_output jsonb, p_started timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO workflow_steps AS ws (workflow_id, step_number, step_name, status, output_data,
                                      started_at, completed_at, attempt, lease_epoch)
    VALUES (p_id, p_step, p_name, 'completed', p_output, p_started, now(), p_attempt, p_epoch)
    ON CONFLICT (workflow_id, step_number) DO UPDATE
    SET step_name = excluded.step_name, status = excluded.status,
        output_data = excluded.output_data, started_at = excluded.started_at,
        completed_at = excluded.completed_at, error_message = NULL,
        attempt = excluded.attempt, lease_epoch = excluded.lease_epoch;
    UPDATE workflows
    SET current_step = p_step, updated_at = now(), wait_step = NULL, wait_deadline = NULL,
        wait_kind = NULL, wait_topic = NULL, wait_ids = NULL, wait_remaining = NULL
    WHERE id = p_id;
END;
$$;

-- Park the workflow at step p_step until a wake-up or p_deadline (NULL: no deadline).
CREATE FUNCTION wfctl_step_park(p_id uuid, p_epoch bigint, p_step integer, p_kind text,
                                p_deadline timestamptz, p_topic text, p_ids uuid[],
                                p_remaining integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE workflows
    SET status = 'pending', run_at = coalesce(p_deadline, '9999-01-01 00:00:00+00'), updated_at = now(),
        wait_kind = p_kind, wait_step = p_step, wait_deadline = p_deadline,
        wait_topic = p_topic, wait_ids = p_ids, wait_remaining = p_remaining
    WHERE id = p_id;
    UPDATE workflow_attempts wa
    SET ended_at = now(), outcome = 'parked',
        last_step = (SELECT current_step FROM workflows WHERE id = p_id)
    WHERE wa.workflow_id = p_id AND wa.lease_epoch = p_epoch AND wa.ended_at IS NULL;
END;
$$;

-- The deadline of the wait at p_step: the one set when this wait first parked, else now() +
-- p_timeout seconds (NULL: none).
CREATE FUNCTION wfctl_wait_deadline(wf workflows, p_step integer, p_timeout float8)
RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN wf.wait_step = p_step THEN wf.wait_deadline
                WHEN p_timeout IS NULL THEN NULL
                ELSE now() + make_interval(secs => p_timeout) END;
$$;

-- ctx.recv: take the oldest unconsumed message on p_topic, or give up past the deadline, or
-- park until a message comes.
CREATE FUNCTION wfctl_recv_step(p_id uuid, p_epoch bigint, p_attempt integer, p_step integer,
                                p_name text, p_topic text, p_timeout float8,
                                p_started timestamptz,
                                OUT state text, OUT output jsonb)
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
        SET consumed_at = now(), consumed_step = p_step, consumed_epoch = p_epoch
        WHERE id = message.id;
        output := jsonb_build_object('payload', message.payload, 'message', message.id);
    ELSIF deadline IS NOT NULL AND deadline <= now() THEN
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

-- ctx.wait: the children's outcomes once all are finished (in the order asked), or give up
-- past the deadline, or park until the last one finishes.
CREATE FUNCTION wfctl_join_step(p_id uuid, p_epoch bigint, p_attempt integer, p_step integer,
                                p_name text, p_ids uuid[], p_timeout float8,
                                p_started timestamptz,
                                OUT state text, OUT output jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    wf workflows;
    deadline timestamptz;
    unfinished integer;
    strangers text;
BEGIN
    SELECT * INTO wf FROM workflows WHERE id = p_id FOR NO KEY UPDATE;
    SELECT b.state, b.output INTO state, output FROM wfctl_step_begin(wf, p_epoch, p_step) b;
    IF state <> 'ok' THEN
        RETURN;
    END IF;
    deadline := wfctl_wait_deadline(wf, p_step, p_timeout);
    -- only a child's completion counts the wait down: an unfinished workflow that is not a
    -- child of this one would never wake it
    SELECT string_agg(c.id::text, ', ') INTO strangers FROM workflows c
    WHERE c.id = ANY (p_ids) AND c.parent_id IS DISTINCT FROM p_id
      AND c.status NOT IN ('completed', 'failed', 'cancelled');
    IF strangers IS NOT NULL THEN
        state := 'refused';
        output := to_jsonb('ctx.wait waits for this workflow''s own children, and these '
                           || 'unfinished workflows are not: ' || strangers);
        RETURN;
    END IF;
    SELECT count(*) INTO unfinished FROM workflows c
    WHERE c.id = ANY (p_ids) AND c.status NOT IN ('completed', 'failed', 'cancelled');
    IF unfinished = 0 THEN
        SELECT jsonb_build_object('children', jsonb_agg(
                   jsonb_build_object('id', i.id, 'status', coalesce(c.status, 'missing'),
                                      'output', c.output_data, 'error', c.error_message)
                   ORDER BY i.ord))
        INTO output
        FROM unnest(p_ids) WITH ORDINALITY AS i(id, ord)
        LEFT JOIN workflows c ON c.id = i.id;
    ELSIF deadline IS NOT NULL AND deadline <= now() THEN
        output := jsonb_build_object('timed_out', true, 'unfinished', unfinished);
    ELSE
        PERFORM wfctl_step_park(p_id, p_epoch, p_step, 'children', deadline, NULL, p_ids,
                                unfinished);
        state := 'parked';
        output := jsonb_build_object('deadline', deadline);
        RETURN;
    END IF;
    PERFORM wfctl_step_done(p_id, p_epoch, p_attempt, p_step, p_name, output, p_started);
    state := 'done';
END;
$$;

-- Insert children of wf, one per input (their deadline at most the parent's), and return their
-- ids in input order. With a key, an existing workflow of that key is that child (started
-- once, ever).
CREATE FUNCTION wfctl_insert_children(wf workflows, p_type text, p_inputs jsonb[], p_keys text[],
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
    new_ids := ARRAY(SELECT gen_random_uuid() FROM generate_series(1, cardinality(p_inputs)));
    INSERT INTO workflows (id, workflow_type, input_data, idempotency_key, priority, max_retries,
                           parent_id, deadline_at, deadline_error)
    SELECT new_ids[i.ord], p_type, i.input, p_keys[i.ord], coalesce(p_priority, wf.priority),
           NULL, wf.id, deadline, deadline_message
    FROM unnest(p_inputs) WITH ORDINALITY AS i(input, ord)
    ORDER BY i.ord
    ON CONFLICT (idempotency_key) DO NOTHING;
    -- a new statement: it sees what this one inserted and a keyed workflow committed meanwhile
    RETURN ARRAY(
        SELECT coalesce(mine.id, keyed.id)
        FROM generate_subscripts(new_ids, 1) AS n(ord)
        LEFT JOIN workflows mine ON mine.id = new_ids[n.ord]
        LEFT JOIN workflows keyed ON keyed.idempotency_key = p_keys[n.ord] AND mine.id IS NULL
        ORDER BY n.ord);
END;
$$;

-- ctx.start_child and ctx.start_children: insert the children and checkpoint their ids (one
-- id, or the list of them: p_many).
CREATE FUNCTION wfctl_start_children_step(p_id uuid, p_epoch bigint, p_attempt integer,
                                          p_step integer, p_name text, p_type text,
                                          p_inputs jsonb[], p_keys text[], p_priority integer,
                                          p_timeout float8, p_timeout_error text, p_many boolean,
                                          p_started timestamptz,
                                          OUT state text, OUT output jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    wf workflows;
    ids uuid[];
BEGIN
    SELECT * INTO wf FROM workflows WHERE id = p_id FOR NO KEY UPDATE;
    SELECT b.state, b.output INTO state, output FROM wfctl_step_begin(wf, p_epoch, p_step) b;
    IF state <> 'ok' THEN
        RETURN;
    END IF;
    ids := wfctl_insert_children(wf, p_type, p_inputs, p_keys, p_priority, p_timeout,
                                 p_timeout_error);
    output := CASE WHEN p_many THEN to_jsonb(ids::text[]) ELSE to_jsonb(ids[1]::text) END;
    PERFORM wfctl_step_done(p_id, p_epoch, p_attempt, p_step, p_name, output, p_started);
    state := 'done';
END;
$$;

-- ctx.set_event: the latest value wins; callers waiting in wfctl.get_event are woken.
CREATE FUNCTION wfctl_set_event_step(p_id uuid, p_epoch bigint, p_attempt integer,
                                     p_step integer, p_name text, p_key text, p_value jsonb,
                                     p_started timestamptz,
                                     OUT state text, OUT output jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    wf workflows;
BEGIN
    SELECT * INTO wf FROM workflows WHERE id = p_id FOR NO KEY UPDATE;
    SELECT b.state, b.output INTO state, output FROM wfctl_step_begin(wf, p_epoch, p_step) b;
    IF state <> 'ok' THEN
        RETURN;
    END IF;
    INSERT INTO workflow_events AS e (workflow_id, key, value, step_number)
    VALUES (p_id, p_key, p_value, p_step)
    ON CONFLICT (workflow_id, key) DO UPDATE
    SET value = excluded.value, step_number = excluded.step_number, updated_at = now();
    output := jsonb_build_object('key', p_key, 'value', p_value);
    PERFORM wfctl_step_done(p_id, p_epoch, p_attempt, p_step, p_name, output, p_started);
    PERFORM pg_notify(wfctl_watch_channel(), p_id::text);
    state := 'done';
END;
$$;

-- Pin the functions to this schema, as migration 0003 does for wfctl_submit.
DO $migration$
DECLARE
    here text := current_schema();
    fn text;
BEGIN
    FOREACH fn IN ARRAY ARRAY[
        'wfctl_message_sent()', 'wfctl_child_finished()', 'wfctl_announce_finished()',
        'wfctl_send(uuid, text, jsonb, text)',
        'wfctl_step_begin(workflows, bigint, integer)',
        'wfctl_step_done(uuid, bigint, integer, integer, text, jsonb, timestamptz)',
        'wfctl_step_park(uuid, bigint, integer, text, timestamptz, text, uuid[], integer)',
        'wfctl_recv_step(uuid, bigint, integer, integer, text, text, float8, timestamptz)',
        'wfctl_join_step(uuid, bigint, integer, integer, text, uuid[], float8, timestamptz)',
        'wfctl_insert_children(workflows, text, jsonb[], text[], integer, float8, text)',
        'wfctl_start_children_step(uuid, bigint, integer, integer, text, text, jsonb[], text[], '
            'integer, float8, text, boolean, timestamptz)',
        'wfctl_set_event_step(uuid, bigint, integer, integer, text, text, jsonb, timestamptz)'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_temp', here, fn, here);
    END LOOP;
END
$migration$;
