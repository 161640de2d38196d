-- From outside a workflow (wfctl/coordination.py): send a message, read an event, wait for a
-- result. The functions and the triggers that deliver wake-ups are migration 0006; what this
-- file calls runs as the schema's owner (migration 0021), so a role given only
-- `--grant-submit` sends and reads by id without any privilege on the tables.

-- name: send
-- The message's id, and whether this transaction stored it (false: its key was used before, or
-- a concurrent send with the same key stored it first); with the sender's trace context (NULL
-- when the send is not traced), migration 0029.
SELECT id, created
FROM wfctl_send_message(%(id)s::uuid, %(topic)s::text, %(payload)s::jsonb, %(key)s::text,
                        %(trace_context)s::text);

-- name: listen
-- The channel that announces results and events (payload: the workflow id).
DO $$
BEGIN
    EXECUTE format('LISTEN %I', wfctl_watch_channel());
END
$$;

-- name: unlisten
DO $$
BEGIN
    EXECUTE format('UNLISTEN %I', wfctl_watch_channel());
END
$$;

-- name: watch
-- Ask for an announcement when this workflow finishes (its trigger notifies only then). The
-- function's UPDATE holds the row until it commits, and a claim at that moment skips it (SKIP
-- LOCKED): when the run is runnable, it wakes the workers again at this commit, or the run
-- would wait for the next poll (a submit followed at once by a wait for its result meets this
-- often).
SELECT wfctl_await(%(id)s::uuid);

-- name: outcome
SELECT status, output, error FROM wfctl_outcome(%(id)s::uuid);

-- name: event
-- The workflow's status (no row: no such workflow) and the event's value, if it was set.
SELECT status, value, found FROM wfctl_event_value(%(id)s::uuid, %(key)s::text);
