-- From outside a workflow (wfctl/coordination.py): send a message, read an event, wait for a
-- result. The functions and the triggers that deliver wake-ups are migration 0006.

-- name: send
SELECT wfctl_send(%(id)s, %(topic)s, %(payload)s::jsonb, %(key)s);

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
-- UPDATE holds the row until it commits, and a claim at that moment skips it (SKIP LOCKED):
-- when the run is runnable, wake the workers again at this commit, or the run would wait for
-- the next poll (a submit followed at once by a wait for its result meets this often).
WITH watched AS (
    UPDATE workflows SET awaited = true
    WHERE id = %(id)s AND NOT awaited
    RETURNING status, run_at, workflow_type
)
SELECT wfctl_wake(workflow_type, 'head') FROM watched WHERE status = 'pending' AND run_at <= now();

-- name: outcome
SELECT status, output_data, error_message FROM workflows WHERE id = %(id)s;

-- name: event
-- The workflow's status (NULL: no such workflow) and the event's value, if it was set.
SELECT w.status, e.value, e.workflow_id IS NOT NULL AS found
FROM workflows w
LEFT JOIN workflow_events e ON e.workflow_id = w.id AND e.key = %(key)s
WHERE w.id = %(id)s;

-- name: send_key_used
-- The message an earlier send with this key stored (wfctl_send then returns it again).
SELECT id FROM workflow_messages WHERE workflow_id = %(id)s AND idempotency_key = %(key)s;

-- name: sent_now
-- Whether this transaction wrote the message wfctl_send returned (false: a concurrent send
-- with the same key stored it first).
SELECT xmin = pg_current_xact_id()::xid FROM workflow_messages WHERE id = %(message)s;
