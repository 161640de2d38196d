-- wfctl schema, version 7: flow control (concurrency limits, rate limits, per-key limits with
-- fairness), enforced by the claim across every worker.
--
-- A workflow type is limited when it has a row in workflow_limits with at least one limit in
-- force. The operator's values (`wfctl limit`) override the code's (`@wfctl.workflow(...)`, which
-- each worker writes at start into the code_* columns); `wfctl limit --clear` falls back to the
-- code's.
--
-- Why the limits hold under concurrent claims: every claim of a limited type first locks the
-- type's workflow_limits row (FOR UPDATE, types in name order, so two claimers never deadlock)
-- and only then counts the runs that hold a lease, in a statement of its own (a fresh READ
-- COMMITTED snapshot: it sees every claim committed before it got the lock). Only a claim makes
-- a run 'running', and a claim commits its runs before it releases the lock, so the next
-- claimer counts them. A run that stops running (completes, fails, parks, is released or
-- recovered) only ever frees a slot, so it needs no lock.

ALTER TABLE workflows
    ADD COLUMN concurrency_key text
        CONSTRAINT workflows_concurrency_key_check CHECK (char_length(concurrency_key) BETWEEN 1 AND 200);

-- What holds a lease, per type and key, is counted through workflows_running_owner_idx (the
-- partial index of the running rows, 0001): no index of its own, because every claim and
-- completion of every type would pay for it (7 % of the standard benchmark's throughput with
-- no limit set); a limited claim reads the running rows, as many as the workers' slots.
-- The pending runs that carry a key, per type and key: the per-key claim walks the keys in
-- order (one probe per key) and takes each key's runs by priority then age.
CREATE INDEX workflows_keyed_pending_idx ON workflows (workflow_type, concurrency_key, priority DESC, run_at)
    WHERE status = 'pending' AND concurrency_key IS NOT NULL;

CREATE TABLE workflow_limits (
    workflow_type        varchar(100) PRIMARY KEY,
    -- set by the operator (`wfctl limit`); NULL: the code's value, if any
    concurrency          integer CHECK (concurrency BETWEEN 0 AND 1000000),   -- 0 pauses the type
    key_concurrency      integer CHECK (key_concurrency BETWEEN 1 AND 1000000),
    rate_count           integer CHECK (rate_count BETWEEN 1 AND 1000000),
    rate_seconds         float8 CHECK (rate_seconds > 0),
    -- declared by code (@wfctl.workflow(concurrency=, key_concurrency=, rate=)), written by workers
    code_concurrency     integer CHECK (code_concurrency BETWEEN 1 AND 1000000),
    code_key_concurrency integer CHECK (code_key_concurrency BETWEEN 1 AND 1000000),
    code_rate_count      integer CHECK (code_rate_count BETWEEN 1 AND 1000000),
    code_rate_seconds    float8 CHECK (code_rate_seconds > 0),
    -- the rate limit's state: the theoretical arrival time of the next start (GCRA)
    rate_tat             timestamptz,
    -- the per-key rotation: the key the last claim stopped at
    key_cursor           text,
    updated_at           timestamptz NOT NULL DEFAULT now(),   -- the operator's last change
    code_updated_at      timestamptz,                           -- a worker's last declaration
    CHECK ((rate_count IS NULL) = (rate_seconds IS NULL)),
    CHECK ((code_rate_count IS NULL) = (code_rate_seconds IS NULL))
);

-- The rate limit lets this many starts go at once: 200 ms worth of the rate, at least one (so
-- 100/1m starts one every 0.6 s, 20/s up to 4 at a time, never a whole window's worth at once).
CREATE FUNCTION wfctl_rate_burst(p_count integer, p_seconds float8)
RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT greatest(1, least(p_count, floor(p_count * 0.2 / p_seconds)))::integer;
$$;

-- Pick up to p_want runnable workflows of the limited types among p_types, within their limits,
-- and lock them (the caller, worker.claim, takes the leases in the same transaction). Returns
-- the picked ids, and at most one row with id NULL whose retry_in says in how many seconds a
-- rate limit lets the next start go when a rate held back runnable work (the worker claims
-- again then), and one row without an id per type whose key rotation moved (workflow_type,
-- key_cursor: where the next claim goes on from). This function writes nothing: the caller
-- stores the cursor and charges the rate for the runs it claimed, in one UPDATE of the limit's
-- row (PostgreSQL refuses a second update of a row within one statement). The caller's UPDATE
-- reads its statement's snapshot, older than these picks, so a run committed in between may be
-- picked here and not claimed there (it stays runnable, and costs nothing).
CREATE FUNCTION wfctl_claim_limited(p_types text[], p_want integer)
RETURNS TABLE (id uuid, retry_in float8, workflow_type text, key_cursor text) LANGUAGE plpgsql AS $$
DECLARE
    lim record;
    want integer := p_want;
    avail integer;
    took uuid[];
    picked uuid[] := '{}';
    interval_s float8;
    base timestamptz;
    tokens integer;
    rate_bound boolean;
    next_start float8;
    hint float8;
    key_now text;
    key_next text;
    key_start text;
    wrapped boolean;
    visits integer;
    key_running integer;
    unkeyed_done boolean;
    cursor_types text[] := '{}';
    cursor_keys text[] := '{}';
BEGIN
    FOR lim IN
        SELECT l.workflow_type,
               coalesce(l.concurrency, l.code_concurrency) AS concurrency,
               coalesce(l.key_concurrency, l.code_key_concurrency) AS key_concurrency,
               CASE WHEN l.rate_count IS NOT NULL THEN l.rate_count ELSE l.code_rate_count END AS rate_count,
               CASE WHEN l.rate_count IS NOT NULL THEN l.rate_seconds ELSE l.code_rate_seconds END AS rate_seconds,
               l.rate_tat, l.key_cursor
        FROM workflow_limits l
        WHERE l.workflow_type = ANY (p_types)
        ORDER BY l.workflow_type
        FOR UPDATE
    LOOP
        EXIT WHEN want <= 0;
        CONTINUE WHEN lim.concurrency IS NULL AND lim.key_concurrency IS NULL AND lim.rate_count IS NULL;
        -- What holds a lease now, counted in this statement's own snapshot, taken after the lock:
        -- every claim committed before it counts.
        avail := want;
        IF lim.concurrency IS NOT NULL THEN
            avail := least(avail, greatest(0, lim.concurrency - (
                SELECT count(*) FROM workflows w
                WHERE w.workflow_type = lim.workflow_type AND w.status = 'running')::integer));
        END IF;
        -- The rate (GCRA): one start per interval_s on average, at most a burst at once; the
        -- row keeps the theoretical arrival time of the next start.
        rate_bound := false;
        IF lim.rate_count IS NOT NULL AND avail > 0 THEN
            interval_s := lim.rate_seconds / lim.rate_count;
            base := greatest(coalesce(lim.rate_tat, now()), now());
            tokens := floor(wfctl_rate_burst(lim.rate_count, lim.rate_seconds)
                            - extract(epoch FROM base - now()) / interval_s + 1e-9)::integer;
            IF tokens < avail THEN
                avail := greatest(tokens, 0);
                rate_bound := true;
            END IF;
        END IF;
        IF avail <= 0 THEN
            IF rate_bound AND EXISTS (
                SELECT 1 FROM workflows w
                WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending' AND w.run_at <= now()
            ) THEN
                next_start := extract(epoch FROM base - now())
                              - (wfctl_rate_burst(lim.rate_count, lim.rate_seconds) - 1) * interval_s;
                hint := least(coalesce(hint, next_start), next_start);
            END IF;
            CONTINUE;
        END IF;

        IF lim.key_concurrency IS NULL THEN
            took := ARRAY(
                SELECT w.id FROM workflows w
                WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending' AND w.run_at <= now()
                ORDER BY w.priority DESC, w.run_at
                LIMIT avail
                FOR UPDATE SKIP LOCKED);
        ELSE
            -- Round robin over the keys with pending runs, from after the key the last claim
            -- stopped at; each key gets what its own limit leaves. Runs without a key take one
            -- turn as a group (at the wrap), limited only by the type's limits.
            took := '{}';
            key_start := lim.key_cursor;
            key_now := lim.key_cursor;
            wrapped := false;
            unkeyed_done := false;
            visits := 0;
            LOOP
                EXIT WHEN cardinality(took) >= avail OR visits >= greatest(64, 4 * avail);
                visits := visits + 1;
                -- the next key with a runnable run: one probe of workflows_keyed_pending_idx
                -- (two statements, so that a generic plan has the key as an index condition;
                -- keys whose runs are all parked or delayed are passed over, not visited)
                key_next := NULL;
                IF key_now IS NULL THEN
                    SELECT w.concurrency_key INTO key_next FROM workflows w
                    WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending'
                      AND w.concurrency_key IS NOT NULL AND w.run_at <= now()
                    ORDER BY w.concurrency_key
                    LIMIT 1;
                ELSE
                    SELECT w.concurrency_key INTO key_next FROM workflows w
                    WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending'
                      AND w.concurrency_key > key_now AND w.run_at <= now()
                    ORDER BY w.concurrency_key
                    LIMIT 1;
                END IF;
                EXIT WHEN wrapped AND (key_next IS NULL OR key_next > key_start);  -- all had a turn
                IF key_next IS NULL THEN
                    IF NOT unkeyed_done THEN
                        unkeyed_done := true;
                        took := took || ARRAY(
                            SELECT w.id FROM workflows w
                            WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending'
                              AND w.run_at <= now() AND w.concurrency_key IS NULL
                            ORDER BY w.priority DESC, w.run_at
                            LIMIT avail - cardinality(took)
                            FOR UPDATE SKIP LOCKED);
                    END IF;
                    key_now := NULL;
                    EXIT WHEN key_start IS NULL;  -- started from the first key: all had a turn
                    wrapped := true;
                    CONTINUE;
                END IF;
                key_now := key_next;
                SELECT count(*) INTO key_running FROM workflows w
                WHERE w.workflow_type = lim.workflow_type AND w.status = 'running'
                  AND w.concurrency_key = key_now;
                IF key_running < lim.key_concurrency THEN
                    took := took || ARRAY(
                        SELECT w.id FROM workflows w
                        WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending'
                          AND w.concurrency_key = key_now AND w.run_at <= now()
                        ORDER BY w.priority DESC, w.run_at
                        LIMIT least(lim.key_concurrency - key_running, avail - cardinality(took))
                        FOR UPDATE SKIP LOCKED);
                END IF;
            END LOOP;
            IF key_now IS DISTINCT FROM lim.key_cursor THEN
                cursor_types := cursor_types || lim.workflow_type::text;
                cursor_keys := cursor_keys || key_now;
            END IF;
        END IF;

        IF lim.rate_count IS NOT NULL AND cardinality(took) > 0 THEN
            -- the rate is charged by the claim statement (worker.claim), for the runs it claimed
            base := base + make_interval(secs => cardinality(took) * interval_s);
            IF rate_bound AND cardinality(took) >= avail THEN
                -- every start the rate allowed went: claim again when the next one may
                next_start := extract(epoch FROM base - now())
                              - (wfctl_rate_burst(lim.rate_count, lim.rate_seconds) - 1) * interval_s;
                hint := least(coalesce(hint, next_start), next_start);
            END IF;
        END IF;
        picked := picked || took;
        want := want - cardinality(took);
    END LOOP;
    RETURN QUERY SELECT unnest(picked), NULL::float8, NULL::text, NULL::text;
    IF hint IS NOT NULL THEN
        RETURN QUERY SELECT NULL::uuid, greatest(hint, 0.001), NULL::text, NULL::text;
    END IF;
    RETURN QUERY SELECT NULL::uuid, NULL::float8, t.type, t.key
                 FROM unnest(cursor_types, cursor_keys) AS t(type, key);
END;
$$;

-- Pin the functions to this schema, as migrations 0003 and 0006 do.
DO $migration$
DECLARE
    here text := current_schema();
BEGIN
    EXECUTE format('ALTER FUNCTION %I.wfctl_claim_limited(text[], integer) SET search_path = %I, pg_temp',
                   here, here);
END
$migration$;
