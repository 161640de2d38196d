-- wfctl schema, version 14: a wake-up goes to one idle worker, not to every worker.
--
-- Before, every submit NOTIFYed the schema's channel and every listening worker ran a claim,
-- almost all of which found nothing: the database's work per workflow grew with the number of
-- idle workers. Now a worker says in its row whether its last claim left it slots to fill
-- (workers.idle, written by the claim statement when it changes) and listens on a channel of
-- its own as well (workers.wake_channel). A wake-up picks one live idle worker that runs the
-- workflow's type, in turn (a sequence: no row is locked or written on the submit path), and
-- NOTIFYs its channel only. When no such worker exists it NOTIFYs the schema's channel as
-- before: every worker that is not idle has claims of its own coming (its last claim came
-- back full, so it claims again as soon as a slot frees), and workers that take no addressed
-- wake-ups (an older version, --no-listen, behind a transaction pooler) hear it there.
-- A claim that comes back full passes a wake-up on to another idle worker (worker.claim).
--
--   workers.idle           the worker's last claim left slots free: it waits for a wake-up
--   workers.wake_channel   the worker's own channel (NULL: it takes no addressed wake-ups)
--   wfctl_worker_channel() the channel of a worker id: the schema's channel cut to 45 bytes,
--                          '.', and 16 hex digits of the id's md5 (63 bytes at most)
--   wfctl_wake_idle()      NOTIFY one live idle worker running one of the types; whether one
--                          was found
--   wfctl_wake()           wfctl_wake_idle, or else the schema's channel
--   wfctl_notify_new()     the submit trigger: one wake-up per type in the statement's rows
--                          (a transition table), the schema's channel for the types no idle
--                          worker runs

ALTER TABLE workers ADD COLUMN idle boolean NOT NULL DEFAULT false;
ALTER TABLE workers ADD COLUMN wake_channel text;
CREATE INDEX workers_idle_idx ON workers (id) WHERE idle AND stopped_at IS NULL;
CREATE SEQUENCE wfctl_wake_turn;

CREATE FUNCTION wfctl_worker_channel(p_worker text) RETURNS text LANGUAGE sql IMMUTABLE
PARALLEL SAFE AS $$
    SELECT left(wfctl_channel(), 45) || '.' || left(md5(p_worker), 16)
$$;

-- SECURITY DEFINER: a role that may submit (INSERT into workflows) needs no access to the
-- workers table or the sequence for its submit's wake-up; search_path is pinned below.
CREATE FUNCTION wfctl_wake_idle(p_types text[], p_payload text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    candidates text[];
BEGIN
    -- live by the worker's own rule (migration 0004), as recovery judges it
    SELECT array_agg(k.wake_channel ORDER BY k.id) INTO candidates
    FROM workers k
    WHERE k.idle AND k.stopped_at IS NULL AND k.wake_channel IS NOT NULL
      AND k.workflow_types && p_types
      AND k.heartbeat_at >= now() - make_interval(secs => k.dead_after_seconds);
    IF candidates IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_notify(
        candidates[1 + (nextval('wfctl_wake_turn') % cardinality(candidates))::integer], p_payload);
    RETURN true;
END;
$$;

CREATE FUNCTION wfctl_wake(p_type text, p_payload text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF NOT wfctl_wake_idle(ARRAY[p_type], p_payload) THEN
        PERFORM pg_notify(wfctl_channel(), p_payload);
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION wfctl_notify_new() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t text;
    unheard boolean := false;
BEGIN
    FOR t IN SELECT DISTINCT i.workflow_type FROM inserted i LOOP
        IF NOT wfctl_wake_idle(ARRAY[t], '') THEN
            unheard := true;
        END IF;
    END LOOP;
    IF unheard THEN
        PERFORM pg_notify(wfctl_channel(), '');
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER workflows_notify_new ON workflows;
CREATE TRIGGER workflows_notify_new AFTER INSERT ON workflows
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION wfctl_notify_new();

-- The wake-ups of migration 0013, addressed.
CREATE OR REPLACE FUNCTION wfctl_message_sent() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    target_status text;
    due timestamptz;
    target_type text;
BEGIN
    SELECT status, run_at, workflow_type INTO target_status, due, target_type
    FROM workflows WHERE id = NEW.workflow_id FOR NO KEY UPDATE;
    UPDATE workflows
    SET run_at = now(), updated_at = now()
    WHERE id = NEW.workflow_id AND status = 'pending' AND wait_kind = 'message'
      AND wait_topic = NEW.topic;
    IF FOUND OR (target_status = 'pending' AND due <= now()) THEN
        PERFORM wfctl_wake(target_type, 'head');
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION wfctl_child_finished() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    remaining integer;
    parent_status text;
    due timestamptz;
    parent_type text;
BEGIN
    SELECT status, run_at, workflow_type INTO parent_status, due, parent_type
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
        PERFORM wfctl_wake(parent_type, 'head');
    END IF;
    RETURN NULL;
END;
$$;

-- Pin the functions to this schema, as migrations 0003 and 0006 do.
DO $migration$
DECLARE
    fn text;
BEGIN
    FOREACH fn IN ARRAY ARRAY[
        'wfctl_worker_channel(text)', 'wfctl_wake_idle(text[], text)', 'wfctl_wake(text, text)',
        'wfctl_notify_new()', 'wfctl_message_sent()', 'wfctl_child_finished()'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_temp',
                       current_schema(), fn, current_schema());
    END LOOP;
END
$migration$;
