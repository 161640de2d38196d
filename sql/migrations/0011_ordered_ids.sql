-- wfctl schema, version 11: costs that stay flat as history and claims pile up.
--
-- 1. Time-ordered workflow ids. wfctl_new_id() returns a UUID of version 7 (RFC 9562): the
--    first 48 bits are the milliseconds since 1970 from clock_timestamp(), then the version
--    nibble 7, then 74 random bits (and the variant bits gen_random_uuid() already sets). It is
--    the default of workflows.id, and wfctl_insert_children takes its children's ids from it.
--    With random (version 4) ids every new run inserted its key at a random leaf of
--    workflows_pkey and of workflow_steps' (workflow_id, step_number) index, and every checkpoint
--    and completion looked its run up there: once the history's indexes outgrow shared_buffers
--    (1,000,000 finished runs: about 1.3 GB in all), each run read a dozen pages from outside
--    the cache. Ordered ids put every live run's keys in the last few leaves of those indexes,
--    which stay cached however long the history is. Ids already stored are unchanged; nothing
--    reads meaning into an id's bits (ordering by id is never relied on for correctness).
--
-- 2. A claim that starts where the worker's last one stopped. workflows_runnable_idx gains id
--    ((priority DESC, run_at, id) WHERE status = 'pending'), and wfctl_claim_ready takes the
--    key (priority, run_at, id) of the last run the worker claimed from it: at that priority it
--    scans from just after that key instead of from the head. A claimed row leaves the index's
--    live set, but its entry stays until a vacuum removes it, and an index scan from the head
--    stepped over the entries of every run claimed since the last vacuum (65 entries read for a
--    claim of 64 just after a vacuum, 20,065 after 10,000 claims), so throughput followed
--    autovacuum's rhythm. From the worker's key a scan steps over only what other workers
--    claimed since its own last claim. Rows that land behind the key (a submit whose
--    transaction committed after later rows were claimed, a claim rolled back, a run handed
--    back by recovery with an older run_at) are taken by the worker's scan from the head, which
--    it makes at least once a second (docs/explanation/claim.md, "The frontier"). Without a
--    key (NULL) the function scans from the head, as in version 9.
--
-- Ids: the partitioned layout (0010) keeps the default, as its conversion copies defaults.

CREATE FUNCTION wfctl_new_id() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
            || '7' || substr(r.hex, 14, 3) || substr(r.hex, 17, 16))::uuid
    FROM (SELECT replace(gen_random_uuid()::text, '-', '') AS hex) AS r;
$$;

ALTER TABLE workflows ALTER COLUMN id SET DEFAULT wfctl_new_id();

-- Insert children of wf (0010), their ids from wfctl_new_id().
CREATE OR REPLACE FUNCTION wfctl_insert_children(wf workflows, p_type text, p_inputs jsonb[], p_keys text[],
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
    new_ids := ARRAY(SELECT wfctl_new_id() FROM generate_series(1, cardinality(p_inputs)));
    INSERT INTO workflows (id, workflow_type, input_data, idempotency_key, priority, max_retries,
                           parent_id, deadline_at, deadline_error)
    SELECT new_ids[i.ord], p_type, i.input, p_keys[i.ord], coalesce(p_priority, wf.priority),
           NULL, wf.id, deadline, deadline_message
    FROM unnest(p_inputs) WITH ORDINALITY AS i(input, ord)
    ORDER BY i.ord
    ON CONFLICT DO NOTHING;
    -- a new statement: it sees what this one inserted and a keyed workflow committed meanwhile
    RETURN ARRAY(
        SELECT coalesce(mine.id, keyed.id)
        FROM generate_subscripts(new_ids, 1) AS n(ord)
        LEFT JOIN workflows mine ON mine.id = new_ids[n.ord]
        LEFT JOIN workflows keyed ON keyed.idempotency_key = p_keys[n.ord] AND mine.id IS NULL
        ORDER BY n.ord);
END;
$$;

DROP INDEX workflows_runnable_idx;
CREATE INDEX workflows_runnable_idx ON workflows (priority DESC, run_at, id)
    WHERE status = 'pending';

DROP FUNCTION wfctl_claim_ready(text[], integer);
CREATE FUNCTION wfctl_claim_ready(p_types text[], p_limit integer,
                                  p_after_priority integer DEFAULT NULL,
                                  p_after_run_at timestamptz DEFAULT NULL,
                                  p_after_id uuid DEFAULT NULL)
RETURNS SETOF uuid LANGUAGE plpgsql
SET enable_bitmapscan = off SET enable_sort = off SET enable_seqscan = off
AS $$
DECLARE
    want integer := p_limit;
    got integer;
    prio integer;
    -- the key is used only whole
    keyed boolean := p_after_priority IS NOT NULL AND p_after_run_at IS NOT NULL
                     AND p_after_id IS NOT NULL;
BEGIN
    IF want <= 0 OR cardinality(p_types) = 0 THEN
        RETURN;
    END IF;
    -- The highest priority present. With a key, only the priorities above the key's are probed
    -- (the probe reads the index from its head, where the claimed rows' entries are, and stops
    -- at the key's priority); the key's own priority is then taken as present.
    IF keyed THEN
        SELECT w.priority INTO prio FROM workflows w
        WHERE w.status = 'pending' AND w.priority > p_after_priority
        ORDER BY w.priority DESC
        LIMIT 1;
        prio := coalesce(prio, p_after_priority);
    ELSE
        SELECT w.priority INTO prio FROM workflows w
        WHERE w.status = 'pending'
        ORDER BY w.priority DESC
        LIMIT 1;
    END IF;
    WHILE prio IS NOT NULL LOOP
        IF keyed AND prio = p_after_priority THEN
            RETURN QUERY
                SELECT w.id FROM workflows w
                WHERE w.status = 'pending' AND w.priority = prio AND w.run_at <= now()
                  AND (w.run_at, w.id) > (p_after_run_at, p_after_id)
                  AND w.workflow_type = ANY (p_types)
                ORDER BY w.run_at, w.id
                LIMIT want
                FOR UPDATE SKIP LOCKED;
        ELSE
            RETURN QUERY
                SELECT w.id FROM workflows w
                WHERE w.status = 'pending' AND w.priority = prio AND w.run_at <= now()
                  AND w.workflow_type = ANY (p_types)
                ORDER BY w.run_at, w.id
                LIMIT want
                FOR UPDATE SKIP LOCKED;
        END IF;
        GET DIAGNOSTICS got = ROW_COUNT;
        want := want - got;
        EXIT WHEN want <= 0;
        IF keyed AND prio > p_after_priority THEN
            SELECT w.priority INTO prio FROM workflows w
            WHERE w.status = 'pending' AND w.priority < prio AND w.priority > p_after_priority
            ORDER BY w.priority DESC
            LIMIT 1;
            prio := coalesce(prio, p_after_priority);
        ELSE
            SELECT w.priority INTO prio FROM workflows w
            WHERE w.status = 'pending' AND w.priority < prio
            ORDER BY w.priority DESC
            LIMIT 1;
        END IF;
    END LOOP;
END;
$$;

-- Pin the functions to this schema, as migrations 0003, 0006 and 0007 do.
DO $migration$
DECLARE
    here text := current_schema();
    fn text;
BEGIN
    FOREACH fn IN ARRAY ARRAY[
        'wfctl_new_id()',
        'wfctl_insert_children(workflows, text, jsonb[], text[], integer, float8, text)',
        'wfctl_claim_ready(text[], integer, integer, timestamptz, uuid)'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_temp', here, fn, here);
    END LOOP;
END
$migration$;
