-- The wfctl schema as the migrations leave it: the unpartitioned layout, after migration 0031, in
-- the schema public (another schema: its name in place of public).
--
-- NOT APPLIED BY ANYTHING. sql/migrations/NNNN_*.sql install and upgrade a database (`wfctl
-- init`); this file describes the present for a reader. tests/db/test_schema_file.py compares it
-- with a freshly migrated database; after a new migration regenerate it:
--
--     python -m wfctl.schemadump SERVER_DSN > sql/schema.sql
--
-- Tables in alphabetical order, each with its columns, constraints, indexes and triggers;
-- then the sequences no column owns; then the functions, each as pg_get_functiondef() prints
-- it. Privileges are not shown: `wfctl init --grant-JOB` gives them (sql/queries/grants.sql).
--
-- The partitioned layout (`wfctl db partition`, docs/explanation/partitions.md) differs:
-- sql/schema-partitioned.sql. In short: workflows, workflow_steps and workflow_attempts are
-- partitioned by range of the run's created_at (their keys gain it), with one partition per
-- interval and a default partition each (not shown there); workflows_idempotency_key_key gives
-- way to the index workflows_idempotency_idx and the trigger workflows_idempotency; and
-- workflows_finished_brin indexes finished_at. wfctl_settings records the layout.

-- table wfctl_rollup_buckets ---------------------------------------------------------------------

CREATE TABLE wfctl_rollup_buckets (
    bucket_start  timestamp with time zone NOT NULL,
    span          "char" NOT NULL,
    part_oid      oid NOT NULL,
    skewed        boolean NOT NULL,
    computed_at   timestamp with time zone NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT wfctl_rollup_buckets_pkey PRIMARY KEY (bucket_start, span),
    CONSTRAINT wfctl_rollup_buckets_span_check CHECK ((span = ANY (ARRAY['h'::"char", 'd'::"char"])))
);

-- table wfctl_rollup_counts ----------------------------------------------------------------------

CREATE TABLE wfctl_rollup_counts (
    bucket_start   timestamp with time zone NOT NULL,
    span           "char" NOT NULL,
    workflow_type  text NOT NULL,
    status         text NOT NULL,
    workflows      bigint NOT NULL,
    CONSTRAINT wfctl_rollup_counts_pkey PRIMARY KEY (bucket_start, span, workflow_type, status),
    CONSTRAINT wfctl_rollup_counts_bucket_start_span_fkey FOREIGN KEY (bucket_start, span) REFERENCES wfctl_rollup_buckets(bucket_start, span) ON DELETE CASCADE
);

-- table wfctl_rollup_durations -------------------------------------------------------------------

CREATE TABLE wfctl_rollup_durations (
    bucket_start   timestamp with time zone NOT NULL,
    span           "char" NOT NULL,
    kind           "char" NOT NULL,
    workflow_type  text NOT NULL,
    step_name      text,
    bin            integer NOT NULL,
    n              bigint NOT NULL,
    sum_seconds    double precision NOT NULL,
    min_seconds    double precision NOT NULL,
    max_seconds    double precision NOT NULL,
    CONSTRAINT wfctl_rollup_durations_bucket_start_span_fkey FOREIGN KEY (bucket_start, span) REFERENCES wfctl_rollup_buckets(bucket_start, span) ON DELETE CASCADE
);
CREATE INDEX wfctl_rollup_durations_bucket_idx ON public.wfctl_rollup_durations USING btree (bucket_start, span);

-- table wfctl_rollup_horizon ---------------------------------------------------------------------

CREATE TABLE wfctl_rollup_horizon (
    xid          xid8 NOT NULL,
    observed_at  timestamp with time zone NOT NULL,
    CONSTRAINT wfctl_rollup_horizon_pkey PRIMARY KEY (xid)
);

-- table wfctl_rollup_stale -----------------------------------------------------------------------

CREATE TABLE wfctl_rollup_stale (
    bucket_start  timestamp with time zone NOT NULL,
    marked_by     integer NOT NULL DEFAULT pg_backend_pid(),
    CONSTRAINT wfctl_rollup_stale_pkey PRIMARY KEY (bucket_start, marked_by)
);

-- table wfctl_schema_migrations ------------------------------------------------------------------

CREATE TABLE wfctl_schema_migrations (
    version     integer NOT NULL,
    name        text NOT NULL,
    applied_at  timestamp with time zone NOT NULL DEFAULT now(),
    CONSTRAINT wfctl_schema_migrations_pkey PRIMARY KEY (version)
);

-- table wfctl_settings ---------------------------------------------------------------------------

CREATE TABLE wfctl_settings (
    name        text NOT NULL,
    value       text NOT NULL,
    updated_at  timestamp with time zone NOT NULL DEFAULT now(),
    CONSTRAINT wfctl_settings_pkey PRIMARY KEY (name),
    CONSTRAINT wfctl_settings_fake_now_check CHECK (((name <> 'fake_now'::text) OR ((value)::timestamp with time zone IS NOT NULL)))
);
CREATE TRIGGER wfctl_settings_clock_set AFTER INSERT OR UPDATE ON public.wfctl_settings FOR EACH ROW WHEN ((new.name = 'fake_now'::text)) EXECUTE FUNCTION wfctl_settings_clock();
CREATE TRIGGER wfctl_settings_clock_unset AFTER DELETE ON public.wfctl_settings FOR EACH ROW WHEN ((old.name = 'fake_now'::text)) EXECUTE FUNCTION wfctl_settings_clock();

-- table workers ----------------------------------------------------------------------------------

CREATE TABLE workers (
    id                  text NOT NULL,
    hostname            text NOT NULL,
    pid                 integer NOT NULL,
    started_at          timestamp with time zone NOT NULL DEFAULT wfctl_now(),
    heartbeat_at        timestamp with time zone NOT NULL DEFAULT wfctl_now(),
    stopped_at          timestamp with time zone,
    concurrency         integer NOT NULL,
    workflow_types      text[] NOT NULL DEFAULT '{}'::text[],
    version             text,
    heartbeat_seconds   double precision,
    dead_after_seconds  double precision NOT NULL DEFAULT 300,
    idle                boolean NOT NULL DEFAULT false,
    wake_channel        text,
    started_seq         bigint NOT NULL DEFAULT 0,
    abandoned_calls     integer NOT NULL DEFAULT 0,
    schema_version      integer,
    CONSTRAINT workers_pkey PRIMARY KEY (id),
    CONSTRAINT workers_dead_after_positive CHECK ((dead_after_seconds > (0)::double precision)),
    CONSTRAINT workers_heartbeat_positive CHECK ((heartbeat_seconds > (0)::double precision))
) WITH (autovacuum_vacuum_scale_factor=0, autovacuum_vacuum_threshold=100, autovacuum_vacuum_cost_delay=0);
CREATE INDEX workers_heartbeat_idx ON public.workers USING btree (heartbeat_at) WHERE (stopped_at IS NULL);
CREATE INDEX workers_idle_idx ON public.workers USING btree (id) WHERE (idle AND (stopped_at IS NULL));

-- table workflow_attempts ------------------------------------------------------------------------

CREATE TABLE workflow_attempts (
    workflow_id          uuid NOT NULL,
    lease_epoch          bigint NOT NULL,
    attempt              integer NOT NULL,
    worker_id            text,
    started_at           timestamp with time zone NOT NULL DEFAULT wfctl_now(),
    ended_at             timestamp with time zone,
    outcome              text,
    last_step            integer,
    error                text,
    traceback            text,
    workflow_created_at  timestamp with time zone,
    CONSTRAINT workflow_attempts_pkey PRIMARY KEY (workflow_id, lease_epoch),
    CONSTRAINT workflow_attempts_outcome_check CHECK ((outcome = ANY (ARRAY['completed'::text, 'error'::text, 'parked'::text, 'released'::text, 'abandoned'::text, 'cancelled'::text]))),
    CONSTRAINT workflow_attempts_workflow_id_fkey FOREIGN KEY (workflow_id) REFERENCES workflows(id) ON DELETE CASCADE
) WITH (fillfactor=90, autovacuum_vacuum_scale_factor=0.01, autovacuum_vacuum_threshold=1000, autovacuum_vacuum_insert_scale_factor=0.05, autovacuum_analyze_scale_factor=0.02, autovacuum_vacuum_cost_delay=0);

-- table workflow_events --------------------------------------------------------------------------

CREATE TABLE workflow_events (
    workflow_id  uuid NOT NULL,
    key          text NOT NULL,
    value        jsonb,
    step_number  integer,
    updated_at   timestamp with time zone NOT NULL DEFAULT wfctl_now(),
    CONSTRAINT workflow_events_pkey PRIMARY KEY (workflow_id, key),
    CONSTRAINT workflow_events_key_check CHECK (((char_length(key) >= 1) AND (char_length(key) <= 150))),
    CONSTRAINT workflow_events_workflow_id_fkey FOREIGN KEY (workflow_id) REFERENCES workflows(id) ON DELETE CASCADE
);

-- table workflow_limits --------------------------------------------------------------------------

CREATE TABLE workflow_limits (
    workflow_type         character varying(100) NOT NULL,
    concurrency           integer,
    key_concurrency       integer,
    rate_count            integer,
    rate_seconds          double precision,
    code_concurrency      integer,
    code_key_concurrency  integer,
    code_rate_count       integer,
    code_rate_seconds     double precision,
    rate_tat              timestamp with time zone,
    key_cursor            text,
    updated_at            timestamp with time zone NOT NULL DEFAULT wfctl_now(),
    code_updated_at       timestamp with time zone,
    CONSTRAINT workflow_limits_pkey PRIMARY KEY (workflow_type),
    CONSTRAINT workflow_limits_check CHECK (((rate_count IS NULL) = (rate_seconds IS NULL))),
    CONSTRAINT workflow_limits_check1 CHECK (((code_rate_count IS NULL) = (code_rate_seconds IS NULL))),
    CONSTRAINT workflow_limits_code_concurrency_check CHECK (((code_concurrency >= 1) AND (code_concurrency <= 1000000))),
    CONSTRAINT workflow_limits_code_key_concurrency_check CHECK (((code_key_concurrency >= 1) AND (code_key_concurrency <= 1000000))),
    CONSTRAINT workflow_limits_code_rate_count_check CHECK (((code_rate_count >= 1) AND (code_rate_count <= 1000000))),
    CONSTRAINT workflow_limits_code_rate_seconds_check CHECK ((code_rate_seconds > (0)::double precision)),
    CONSTRAINT workflow_limits_concurrency_check CHECK (((concurrency >= 0) AND (concurrency <= 1000000))),
    CONSTRAINT workflow_limits_key_concurrency_check CHECK (((key_concurrency >= 1) AND (key_concurrency <= 1000000))),
    CONSTRAINT workflow_limits_rate_count_check CHECK (((rate_count >= 1) AND (rate_count <= 1000000))),
    CONSTRAINT workflow_limits_rate_seconds_check CHECK ((rate_seconds > (0)::double precision))
);

-- table workflow_messages ------------------------------------------------------------------------

CREATE TABLE workflow_messages (
    id               bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    workflow_id      uuid NOT NULL,
    topic            text NOT NULL,
    payload          jsonb,
    idempotency_key  text,
    created_at       timestamp with time zone NOT NULL DEFAULT wfctl_now(),
    consumed_at      timestamp with time zone,
    consumed_step    integer,
    consumed_epoch   bigint,
    trace_context    text,
    CONSTRAINT workflow_messages_pkey PRIMARY KEY (id),
    CONSTRAINT workflow_messages_idempotency_key_check CHECK (((char_length(idempotency_key) >= 1) AND (char_length(idempotency_key) <= 200))),
    CONSTRAINT workflow_messages_topic_check CHECK (((char_length(topic) >= 1) AND (char_length(topic) <= 150))),
    CONSTRAINT workflow_messages_workflow_id_fkey FOREIGN KEY (workflow_id) REFERENCES workflows(id) ON DELETE CASCADE,
    CONSTRAINT workflow_messages_workflow_id_idempotency_key_key UNIQUE (workflow_id, idempotency_key)
);
CREATE INDEX workflow_messages_unconsumed_idx ON public.workflow_messages USING btree (workflow_id, topic, id) WHERE (consumed_at IS NULL);
CREATE CONSTRAINT TRIGGER workflow_messages_wake AFTER INSERT ON public.workflow_messages DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION wfctl_message_sent();

-- table workflow_schedules -----------------------------------------------------------------------

CREATE TABLE workflow_schedules (
    name           text NOT NULL,
    workflow_type  character varying(100) NOT NULL,
    cron           text NOT NULL,
    timezone       text NOT NULL DEFAULT 'UTC'::text,
    input          jsonb NOT NULL DEFAULT '{}'::jsonb,
    paused         boolean NOT NULL DEFAULT false,
    backfill       boolean NOT NULL DEFAULT false,
    source         text NOT NULL DEFAULT 'cli'::text,
    next_tick_at   timestamp with time zone NOT NULL,
    last_tick_at   timestamp with time zone,
    last_run_id    uuid,
    created_at     timestamp with time zone NOT NULL DEFAULT wfctl_now(),
    updated_at     timestamp with time zone NOT NULL DEFAULT wfctl_now(),
    CONSTRAINT workflow_schedules_pkey PRIMARY KEY (name),
    CONSTRAINT workflow_schedules_input_check CHECK ((jsonb_typeof(input) = 'object'::text)),
    CONSTRAINT workflow_schedules_name_check CHECK (((char_length(name) >= 1) AND (char_length(name) <= 100))),
    CONSTRAINT workflow_schedules_source_check CHECK ((source = ANY (ARRAY['code'::text, 'cli'::text]))),
    CONSTRAINT workflow_schedules_workflow_type_check CHECK (((workflow_type)::text <> ''::text))
);
CREATE INDEX workflow_schedules_due_idx ON public.workflow_schedules USING btree (next_tick_at) WHERE (NOT paused);

-- table workflow_steps ---------------------------------------------------------------------------

CREATE TABLE workflow_steps (
    id                   bigint GENERATED BY DEFAULT AS IDENTITY NOT NULL,
    workflow_id          uuid,
    step_number          integer NOT NULL,
    step_name            character varying(200),
    status               character varying(20) NOT NULL DEFAULT 'pending'::character varying,
    output_data          jsonb,
    started_at           timestamp with time zone,
    completed_at         timestamp with time zone,
    error_message        text,
    attempt              integer,
    lease_epoch          bigint,
    workflow_created_at  timestamp with time zone,
    tries                integer NOT NULL DEFAULT 1,
    CONSTRAINT workflow_steps_pkey PRIMARY KEY (id),
    CONSTRAINT workflow_steps_workflow_id_fkey FOREIGN KEY (workflow_id) REFERENCES workflows(id) ON DELETE CASCADE,
    CONSTRAINT workflow_steps_workflow_id_step_number_key UNIQUE (workflow_id, step_number)
) WITH (autovacuum_vacuum_scale_factor=0.05, autovacuum_vacuum_insert_scale_factor=0.05, autovacuum_analyze_scale_factor=0.05, autovacuum_vacuum_cost_delay=0);
CREATE INDEX workflow_steps_started_idx ON public.workflow_steps USING btree (started_at);

-- table workflows --------------------------------------------------------------------------------

CREATE TABLE workflows (
    id                   uuid NOT NULL DEFAULT wfctl_new_id(),
    workflow_type        character varying(100) NOT NULL,
    status               character varying(20) NOT NULL DEFAULT 'pending'::character varying,
    input_data           jsonb,
    current_step         integer DEFAULT 0,
    max_retries          integer,
    error_message        text,
    created_at           timestamp with time zone DEFAULT wfctl_now(),
    updated_at           timestamp with time zone DEFAULT wfctl_now(),
    attempt              integer NOT NULL DEFAULT 1,
    run_at               timestamp with time zone NOT NULL DEFAULT wfctl_now(),
    priority             integer NOT NULL DEFAULT 0,
    idempotency_key      text,
    output_data          jsonb,
    lease_owner          text,
    lease_epoch          bigint NOT NULL DEFAULT 0,
    started_at           timestamp with time zone,
    finished_at          timestamp with time zone,
    error_traceback      text,
    parent_id            uuid,
    deadline_at          timestamp with time zone,
    deadline_error       text,
    wait_kind            text,
    wait_topic           text,
    wait_ids             uuid[],
    wait_remaining       integer,
    wait_step            integer,
    wait_deadline        timestamp with time zone,
    awaited              boolean NOT NULL DEFAULT false,
    concurrency_key      text,
    deadline_inherited   boolean NOT NULL DEFAULT false,
    ahead_seq            bigint,
    trace_context        text,
    step_in_flight       integer,
    step_in_flight_name  text,
    CONSTRAINT workflows_pkey PRIMARY KEY (id),
    CONSTRAINT workflows_concurrency_key_check CHECK (((char_length(concurrency_key) >= 1) AND (char_length(concurrency_key) <= 200))),
    CONSTRAINT workflows_idempotency_key_key UNIQUE (idempotency_key),
    CONSTRAINT workflows_max_retries_check CHECK (((max_retries IS NULL) OR (max_retries >= 0))),
    CONSTRAINT workflows_status_check CHECK (((status)::text = ANY ((ARRAY['pending'::character varying, 'running'::character varying, 'completed'::character varying, 'failed'::character varying, 'cancelled'::character varying])::text[]))),
    CONSTRAINT workflows_type_not_empty CHECK (((workflow_type)::text <> ''::text)),
    CONSTRAINT workflows_wait_kind_check CHECK ((wait_kind = ANY (ARRAY['sleep'::text, 'message'::text, 'children'::text])))
) WITH (fillfactor=85, autovacuum_vacuum_scale_factor=0.01, autovacuum_vacuum_threshold=1000, autovacuum_vacuum_insert_scale_factor=0.05, autovacuum_analyze_scale_factor=0.02, autovacuum_vacuum_cost_delay=0);
CREATE INDEX idx_workflows_status ON public.workflows USING btree (status, created_at);
CREATE INDEX workflows_created_idx ON public.workflows USING btree (created_at);
CREATE INDEX workflows_deadline_idx ON public.workflows USING btree (deadline_at) WHERE ((deadline_at IS NOT NULL) AND ((status)::text = ANY ((ARRAY['pending'::character varying, 'running'::character varying])::text[])));
CREATE INDEX workflows_finished_idx ON public.workflows USING btree (finished_at) WHERE (finished_at IS NOT NULL);
CREATE INDEX workflows_keyed_pending_idx ON public.workflows USING btree (workflow_type, concurrency_key, priority DESC, run_at) WHERE (((status)::text = 'pending'::text) AND (concurrency_key IS NOT NULL));
CREATE INDEX workflows_parent_idx ON public.workflows USING btree (parent_id) WHERE (parent_id IS NOT NULL);
CREATE INDEX workflows_runnable_idx ON public.workflows USING btree (priority DESC, run_at, id) WHERE ((status)::text = 'pending'::text);
CREATE INDEX workflows_running_owner_idx ON public.workflows USING btree (lease_owner) WHERE ((status)::text = 'running'::text);
CREATE TRIGGER workflows_announce_finished AFTER UPDATE OF status ON public.workflows FOR EACH ROW WHEN ((new.awaited AND ((new.status)::text = ANY ((ARRAY['completed'::character varying, 'failed'::character varying, 'cancelled'::character varying])::text[])) AND ((old.status)::text <> ALL ((ARRAY['completed'::character varying, 'failed'::character varying, 'cancelled'::character varying])::text[])))) EXECUTE FUNCTION wfctl_announce_finished();
CREATE TRIGGER workflows_child_finished AFTER UPDATE OF status ON public.workflows FOR EACH ROW WHEN (((new.parent_id IS NOT NULL) AND ((new.status)::text = ANY ((ARRAY['completed'::character varying, 'failed'::character varying, 'cancelled'::character varying])::text[])) AND ((old.status)::text <> ALL ((ARRAY['completed'::character varying, 'failed'::character varying, 'cancelled'::character varying])::text[])))) EXECUTE FUNCTION wfctl_child_finished();
CREATE TRIGGER workflows_notify_new AFTER INSERT ON public.workflows REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION wfctl_notify_new();
CREATE TRIGGER workflows_rollup_delete AFTER DELETE ON public.workflows REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION wfctl_rollup_deleted();
CREATE TRIGGER workflows_rollup_insert AFTER INSERT ON public.workflows FOR EACH ROW WHEN (((date_bin('01:00:00'::interval, new.created_at, '2000-01-01 00:00:00+00'::timestamp with time zone) + '01:10:00'::interval) < clock_timestamp())) EXECUTE FUNCTION wfctl_rollup_touch();
CREATE TRIGGER workflows_rollup_truncate AFTER TRUNCATE ON public.workflows FOR EACH STATEMENT EXECUTE FUNCTION wfctl_rollup_truncated();
CREATE TRIGGER workflows_rollup_update AFTER UPDATE OF status, workflow_type, created_at, started_at, finished_at ON public.workflows FOR EACH ROW WHEN ((((date_bin('01:00:00'::interval, old.created_at, '2000-01-01 00:00:00+00'::timestamp with time zone) + '01:10:00'::interval) < clock_timestamp()) AND (((old.status)::text = ANY ((ARRAY['completed'::character varying, 'failed'::character varying, 'cancelled'::character varying])::text[])) OR ((new.status)::text = ANY ((ARRAY['completed'::character varying, 'failed'::character varying, 'cancelled'::character varying])::text[]))) AND (((old.status)::text IS DISTINCT FROM (new.status)::text) OR ((old.workflow_type)::text IS DISTINCT FROM (new.workflow_type)::text) OR (old.created_at IS DISTINCT FROM new.created_at) OR (old.started_at IS DISTINCT FROM new.started_at) OR (old.finished_at IS DISTINCT FROM new.finished_at)))) EXECUTE FUNCTION wfctl_rollup_touch();

-- sequences --------------------------------------------------------------------------------------

CREATE SEQUENCE wfctl_wake_turn;

-- function wfctl_announce_finished ---------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_announce_finished()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
BEGIN
    PERFORM pg_notify(wfctl_watch_channel(), NEW.id::text);
    RETURN NULL;
END;
$function$;

-- function wfctl_await ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_await(p_id uuid)
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
    WITH watched AS (
        UPDATE workflows SET awaited = true
        WHERE id = p_id AND NOT awaited
        RETURNING status, run_at, workflow_type
    )
    SELECT wfctl_wake(workflow_type, 'head') FROM watched WHERE status = 'pending' AND run_at <= wfctl_now();
$function$;

-- function wfctl_channel -------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_channel()
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$SELECT 'wfctl_new'::text$function$;

-- function wfctl_check_trace_context -------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_check_trace_context(p_trace_context text)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'public', 'pg_temp'
AS $function$
BEGIN
    IF char_length(p_trace_context) > 1024 THEN
        RAISE EXCEPTION 'a trace context must have at most 1024 characters, not %',
            char_length(p_trace_context) USING ERRCODE = '22023';
    END IF;
END;
$function$;

-- function wfctl_check_value ---------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_check_value(p_value jsonb, p_what text)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    text_size bigint;
    size bigint;
    big text;
BEGIN
    IF p_value IS NULL THEN
        RETURN;
    END IF;
    -- compact JSON is at least two thirds of jsonb's text (the shortest item with a separator,
    -- "1, ", loses one byte of three): only a text between 1,000,000 and 1,500,000 bytes needs
    -- its separators' spaces counted out
    text_size := octet_length(p_value::text);
    IF text_size > 1000000 AND text_size <= 1500000 THEN
        size := octet_length(regexp_replace(p_value::text, '("(?:[^"\\]|\\.)*")|([,:]) ', '\1\2', 'g'));
        IF size > 1000000 THEN
            RAISE EXCEPTION '% is % bytes, over the limit of 1000000 bytes', p_what, size
                USING ERRCODE = '22023';
        END IF;
    ELSIF text_size > 1500000 THEN
        RAISE EXCEPTION '% is more than % bytes, over the limit of 1000000 bytes', p_what,
            text_size * 2 / 3 USING ERRCODE = '22023';
    END IF;
    IF text_size < 1002 THEN
        RETURN;  -- too short to nest 501 deep (501 brackets open, 501 close) or to hold 4,301 digits
    END IF;
    -- an item at level 500 that is an array or an object is a container 501 deep
    IF jsonb_path_exists(p_value, 'strict $.**{500} ? (@.type() == "array" || @.type() == "object")') THEN
        RAISE EXCEPTION '% is nested more than 500 levels deep (the limit)', p_what
            USING ERRCODE = '22023';
    END IF;
    SELECT n::text INTO big
    FROM jsonb_path_query(p_value, 'strict $.** ? (@.type() == "number" && (@ >= 1e4300 || @ <= -1e4300))') AS n
    WHERE position('.' IN n::text) = 0
    LIMIT 1;
    IF big IS NOT NULL THEN
        RAISE EXCEPTION '% holds an integer of % digits, more than the 4300 that Python reads', p_what,
            length(ltrim(big, '-')) USING ERRCODE = '22023';
    END IF;
END;
$function$;

-- function wfctl_child_finished ------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_child_finished()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
        run_at = CASE WHEN p.wait_remaining <= 1 THEN wfctl_now() ELSE p.run_at END,
        updated_at = wfctl_now()
    WHERE p.id = NEW.parent_id AND p.status = 'pending' AND p.wait_kind = 'children'
      AND NEW.id = ANY (p.wait_ids)
    RETURNING p.wait_remaining INTO remaining;
    -- the last one of a wait wakes a worker (not every countdown); so does a parent that was
    -- already due, which a claim meanwhile skipped
    IF remaining <= 0 OR (parent_status = 'pending' AND due <= wfctl_now()) THEN
        PERFORM wfctl_wake(parent_type, 'head');
    END IF;
    RETURN NULL;
END;
$function$;

-- function wfctl_claim_allowed -------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_claim_allowed(p_types text[], p_want integer)
 RETURNS TABLE(id uuid, created_at timestamp with time zone, priority integer, run_at timestamp with time zone, turn integer, concurrency_key text, retry_in double precision, workflow_type text, key_cursor text)
 LANGUAGE plpgsql
 SET enable_bitmapscan TO 'off'
 SET enable_sort TO 'off'
 SET enable_seqscan TO 'off'
 SET search_path TO 'public', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    lim record;
    avail integer;
    took integer;
    got integer;
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
    IF p_want <= 0 THEN
        RETURN;
    END IF;
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
        CONTINUE WHEN lim.concurrency IS NULL AND lim.key_concurrency IS NULL AND lim.rate_count IS NULL;
        -- What holds a lease now, counted in this statement's own snapshot, taken after the lock:
        -- every claim committed before it counts.
        avail := p_want;
        IF lim.concurrency IS NOT NULL THEN
            avail := least(avail, greatest(0, lim.concurrency - (
                SELECT count(*) FROM workflows w
                WHERE w.workflow_type = lim.workflow_type AND w.status = 'running')::integer));
        END IF;
        -- The rate (GCRA), as in 0007.
        rate_bound := false;
        IF lim.rate_count IS NOT NULL AND avail > 0 THEN
            interval_s := lim.rate_seconds / lim.rate_count;
            base := greatest(coalesce(lim.rate_tat, wfctl_now()), wfctl_now());
            tokens := floor(wfctl_rate_burst(lim.rate_count, lim.rate_seconds)
                            - extract(epoch FROM base - wfctl_now()) / interval_s + 1e-9)::integer;
            IF tokens < avail THEN
                avail := greatest(tokens, 0);
                rate_bound := true;
            END IF;
        END IF;
        IF avail <= 0 THEN
            IF rate_bound AND EXISTS (
                SELECT 1 FROM workflows w
                WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending' AND w.run_at <= wfctl_now()
            ) THEN
                next_start := extract(epoch FROM base - wfctl_now())
                              - (wfctl_rate_burst(lim.rate_count, lim.rate_seconds) - 1) * interval_s;
                hint := least(coalesce(hint, next_start), next_start);
            END IF;
            CONTINUE;
        END IF;

        took := 0;
        IF lim.key_concurrency IS NULL THEN
            RETURN QUERY
                SELECT w.id, w.created_at, w.priority, w.run_at, NULL::integer, NULL::text,
                       NULL::float8, lim.workflow_type::text, NULL::text
                FROM workflows w
                WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending' AND w.run_at <= wfctl_now()
                ORDER BY w.priority DESC, w.run_at, w.id
                LIMIT avail
                FOR UPDATE SKIP LOCKED;
            GET DIAGNOSTICS took = ROW_COUNT;
        ELSE
            -- The key walk of 0007: round robin over the keys with runnable runs, from after the
            -- key the last claim stopped at; each key gets what its own limit leaves; the runs
            -- without a key take one turn as a group (at the wrap).
            key_start := lim.key_cursor;
            key_now := lim.key_cursor;
            wrapped := false;
            unkeyed_done := false;
            visits := 0;
            LOOP
                EXIT WHEN took >= avail OR visits >= greatest(64, 4 * avail);
                visits := visits + 1;
                key_next := NULL;
                IF key_now IS NULL THEN
                    SELECT w.concurrency_key INTO key_next FROM workflows w
                    WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending'
                      AND w.concurrency_key IS NOT NULL AND w.run_at <= wfctl_now()
                    ORDER BY w.concurrency_key
                    LIMIT 1;
                ELSE
                    SELECT w.concurrency_key INTO key_next FROM workflows w
                    WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending'
                      AND w.concurrency_key > key_now AND w.run_at <= wfctl_now()
                    ORDER BY w.concurrency_key
                    LIMIT 1;
                END IF;
                EXIT WHEN wrapped AND (key_next IS NULL OR key_next > key_start);  -- all had a turn
                IF key_next IS NULL THEN
                    IF NOT unkeyed_done THEN
                        unkeyed_done := true;
                        RETURN QUERY
                            SELECT w.id, w.created_at, w.priority, w.run_at, visits, NULL::text,
                                   NULL::float8, lim.workflow_type::text, NULL::text
                            FROM workflows w
                            WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending'
                              AND w.run_at <= wfctl_now() AND w.concurrency_key IS NULL
                            ORDER BY w.priority DESC, w.run_at, w.id
                            LIMIT avail - took
                            FOR UPDATE SKIP LOCKED;
                        GET DIAGNOSTICS got = ROW_COUNT;
                        took := took + got;
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
                    RETURN QUERY
                        SELECT w.id, w.created_at, w.priority, w.run_at, visits, key_now,
                               NULL::float8, lim.workflow_type::text, NULL::text
                        FROM workflows w
                        WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending'
                          AND w.concurrency_key = key_now AND w.run_at <= wfctl_now()
                        ORDER BY w.priority DESC, w.run_at
                        LIMIT least(lim.key_concurrency - key_running, avail - took)
                        FOR UPDATE SKIP LOCKED;
                    GET DIAGNOSTICS got = ROW_COUNT;
                    took := took + got;
                END IF;
            END LOOP;
            IF key_now IS DISTINCT FROM lim.key_cursor THEN
                cursor_types := cursor_types || lim.workflow_type::text;
                cursor_keys := cursor_keys || key_now;
            END IF;
        END IF;

        IF lim.rate_count IS NOT NULL AND took > 0 THEN
            -- the rate is charged by the claim statement (worker.claim), for the runs it claimed
            base := base + make_interval(secs => took * interval_s);
            IF rate_bound AND took >= avail THEN
                -- every start the rate allowed was picked: claim again when the next one may
                next_start := extract(epoch FROM base - wfctl_now())
                              - (wfctl_rate_burst(lim.rate_count, lim.rate_seconds) - 1) * interval_s;
                hint := least(coalesce(hint, next_start), next_start);
            END IF;
        END IF;
    END LOOP;
    IF hint IS NOT NULL THEN
        RETURN QUERY SELECT NULL::uuid, NULL::timestamptz, NULL::integer, NULL::timestamptz,
                            NULL::integer, NULL::text, greatest(hint, 0.001), NULL::text, NULL::text;
    END IF;
    RETURN QUERY SELECT NULL::uuid, NULL::timestamptz, NULL::integer, NULL::timestamptz,
                        NULL::integer, NULL::text, NULL::float8, t.type, t.key
                 FROM unnest(cursor_types, cursor_keys) AS t(type, key);
END;
$function$;

-- function wfctl_claim_limited -------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_claim_limited(p_types text[], p_want integer)
 RETURNS TABLE(id uuid, retry_in double precision, workflow_type text, key_cursor text)
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
 SET enable_bitmapscan TO 'off'
 SET enable_sort TO 'off'
 SET enable_seqscan TO 'off'
AS $function$
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
            base := greatest(coalesce(lim.rate_tat, wfctl_now()), wfctl_now());
            tokens := floor(wfctl_rate_burst(lim.rate_count, lim.rate_seconds)
                            - extract(epoch FROM base - wfctl_now()) / interval_s + 1e-9)::integer;
            IF tokens < avail THEN
                avail := greatest(tokens, 0);
                rate_bound := true;
            END IF;
        END IF;
        IF avail <= 0 THEN
            IF rate_bound AND EXISTS (
                SELECT 1 FROM workflows w
                WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending' AND w.run_at <= wfctl_now()
            ) THEN
                next_start := extract(epoch FROM base - wfctl_now())
                              - (wfctl_rate_burst(lim.rate_count, lim.rate_seconds) - 1) * interval_s;
                hint := least(coalesce(hint, next_start), next_start);
            END IF;
            CONTINUE;
        END IF;

        IF lim.key_concurrency IS NULL THEN
            took := ARRAY(
                SELECT w.id FROM workflows w
                WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending' AND w.run_at <= wfctl_now()
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
                      AND w.concurrency_key IS NOT NULL AND w.run_at <= wfctl_now()
                    ORDER BY w.concurrency_key
                    LIMIT 1;
                ELSE
                    SELECT w.concurrency_key INTO key_next FROM workflows w
                    WHERE w.workflow_type = lim.workflow_type AND w.status = 'pending'
                      AND w.concurrency_key > key_now AND w.run_at <= wfctl_now()
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
                              AND w.run_at <= wfctl_now() AND w.concurrency_key IS NULL
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
                          AND w.concurrency_key = key_now AND w.run_at <= wfctl_now()
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
                next_start := extract(epoch FROM base - wfctl_now())
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
$function$;

-- function wfctl_claim_ready ---------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_claim_ready(p_types text[], p_limit integer, p_after_priority integer DEFAULT NULL::integer, p_after_run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_after_id uuid DEFAULT NULL::uuid, p_floor timestamp with time zone DEFAULT NULL::timestamp with time zone, p_before_priority integer DEFAULT NULL::integer, p_before_run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_before_id uuid DEFAULT NULL::uuid)
 RETURNS TABLE(id uuid, created_at timestamp with time zone, priority integer, run_at timestamp with time zone)
 LANGUAGE plpgsql
 SET enable_bitmapscan TO 'off'
 SET enable_sort TO 'off'
 SET enable_seqscan TO 'off'
 SET search_path TO 'public', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    want integer := p_limit;
    got integer;
    prio integer;
    -- each key is used only whole
    keyed boolean := p_after_priority IS NOT NULL AND p_after_run_at IS NOT NULL
                     AND p_after_id IS NOT NULL;
    bounded boolean := p_before_priority IS NOT NULL AND p_before_run_at IS NOT NULL
                       AND p_before_id IS NOT NULL;
    -- the runs read: created from p_floor to an hour from now (NULL: all); the bounds are
    -- known when each statement starts, so the other partitions are never opened
    lo timestamptz := coalesce(p_floor, '-infinity');
    hi timestamptz := CASE WHEN p_floor IS NULL THEN 'infinity' ELSE wfctl_now() + interval '1 hour' END;
    -- at one priority, the range of (run_at, id) scanned: after the frontier's key at its
    -- priority (elsewhere a bound no run has), and up to wfctl_now() or, at the stop's priority,
    -- before the stop. One upper bound, not run_at <= wfctl_now() beside a row comparison: btree
    -- cannot tell which of two upper bounds on run_at ends the scan, so with both it read
    -- every due entry of the priority past the stop.
    from_at timestamptz;
    from_id uuid;
    to_at timestamptz;
    to_id uuid;
BEGIN
    IF want <= 0 OR cardinality(p_types) = 0 THEN
        RETURN;
    END IF;
    -- The highest priority present. With a key, only the priorities above the key's are probed
    -- (the probe reads the index from its head, where the claimed rows' entries are, and stops
    -- at the key's priority); the key's own priority is then taken as present.
    IF keyed THEN
        SELECT w.priority INTO prio FROM workflows w
        WHERE w.status = 'pending' AND w.created_at >= lo AND w.created_at < hi
          AND w.priority > p_after_priority
        ORDER BY w.priority DESC
        LIMIT 1;
        prio := coalesce(prio, p_after_priority);
    ELSE
        SELECT w.priority INTO prio FROM workflows w
        WHERE w.status = 'pending' AND w.created_at >= lo AND w.created_at < hi
        ORDER BY w.priority DESC
        LIMIT 1;
    END IF;
    WHILE prio IS NOT NULL LOOP
        EXIT WHEN bounded AND prio < p_before_priority;  -- all of it sorts after the stop
        IF keyed AND prio = p_after_priority THEN
            from_at := p_after_run_at;
            from_id := p_after_id;
        ELSE
            from_at := '-infinity';
            from_id := '00000000-0000-0000-0000-000000000000';
        END IF;
        IF bounded AND prio = p_before_priority AND p_before_run_at <= wfctl_now() THEN
            to_at := p_before_run_at;
            to_id := p_before_id;
        ELSE
            -- run_at <= wfctl_now(): the greatest uuid is no id wfctl_new_id or gen_random_uuid makes
            to_at := wfctl_now();
            to_id := 'ffffffff-ffff-ffff-ffff-ffffffffffff';
        END IF;
        RETURN QUERY
            SELECT w.id, w.created_at, w.priority, w.run_at FROM workflows w
            WHERE w.status = 'pending' AND w.created_at >= lo AND w.created_at < hi
              AND w.priority = prio
              AND (w.run_at, w.id) > (from_at, from_id)
              AND (w.run_at, w.id) < (to_at, to_id)
              AND w.workflow_type = ANY (p_types)
            ORDER BY w.run_at, w.id
            LIMIT want
            FOR UPDATE SKIP LOCKED;
        GET DIAGNOSTICS got = ROW_COUNT;
        want := want - got;
        EXIT WHEN want <= 0;
        EXIT WHEN bounded AND prio = p_before_priority;  -- the lower ones sort after the stop
        IF keyed AND prio > p_after_priority THEN
            SELECT w.priority INTO prio FROM workflows w
            WHERE w.status = 'pending' AND w.created_at >= lo AND w.created_at < hi
              AND w.priority < prio AND w.priority > p_after_priority
            ORDER BY w.priority DESC
            LIMIT 1;
            prio := coalesce(prio, p_after_priority);
        ELSE
            SELECT w.priority INTO prio FROM workflows w
            WHERE w.status = 'pending' AND w.created_at >= lo AND w.created_at < hi
              AND w.priority < prio
            ORDER BY w.priority DESC
            LIMIT 1;
        END IF;
    END LOOP;
END;
$function$;

-- function wfctl_create_partition ----------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_create_partition(p_start timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    iv interval := wfctl_partition_interval();
    stop timestamptz;
    suffix text := to_char(p_start AT TIME ZONE 'UTC', 'YYYYMMDD');
    parent text;
    keycol text;
    part text;
    dflt text;
    opts text;
    cols text;
    n bigint;
    moved bigint;
BEGIN
    IF iv IS NULL THEN
        RAISE EXCEPTION 'this database is not partitioned' USING ERRCODE = '55000';
    END IF;
    IF p_start <> wfctl_partition_start(p_start, iv) THEN
        RAISE EXCEPTION 'a partition starts at the start of an interval, not at %', p_start
            USING ERRCODE = '22023';
    END IF;
    stop := wfctl_partition_step(p_start, 1, iv);
    FOREACH parent IN ARRAY ARRAY['workflows', 'workflow_steps', 'workflow_attempts'] LOOP
        part := parent || '_p' || suffix;
        CONTINUE WHEN to_regclass(format('%I.%I', current_schema(), part)) IS NOT NULL;
        moved := coalesce(moved, 0);
        keycol := CASE parent WHEN 'workflows' THEN 'created_at' ELSE 'workflow_created_at' END;
        dflt := parent || '_default';
        SELECT coalesce(' WITH (' || array_to_string(c.reloptions, ', ') || ')', '') INTO opts
        FROM pg_class c WHERE c.oid = to_regclass(format('%I.%I', current_schema(), dflt));
        EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', dflt);
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS '
                       'INCLUDING STORAGE INCLUDING COMPRESSION)%s', part, parent, coalesce(opts, ''));
        SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO cols
        FROM pg_attribute a
        WHERE a.attrelid = format('%I.%I', current_schema(), parent)::regclass
          AND a.attnum > 0 AND NOT a.attisdropped;
        EXECUTE format('WITH moved AS (DELETE FROM %I WHERE %I >= $1 AND %I < $2 RETURNING %s) '
                       'INSERT INTO %I (%s) SELECT %s FROM moved',
                       dflt, keycol, keycol, cols, part, cols, cols)
            USING p_start, stop;
        GET DIAGNOSTICS n = ROW_COUNT;
        moved := moved + n;
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       parent, part, p_start, stop);
    END LOOP;
    RETURN moved;
END;
$function$;

-- function wfctl_duration_bin --------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_duration_bin(p_seconds double precision)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
RETURN CASE WHEN (p_seconds > (0)::double precision) THEN (floor((ln(p_seconds) * (20)::double precision)))::integer ELSE '-2147483647'::integer END;

-- function wfctl_ensure_partitions ---------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_ensure_partitions(p_ahead integer DEFAULT NULL::integer, OUT created integer, OUT moved bigint, OUT busy boolean)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    iv interval := wfctl_partition_interval();
    ahead integer;
    first timestamptz;
    k integer;
    n bigint;
BEGIN
    created := 0;
    moved := 0;
    busy := false;
    IF iv IS NULL THEN
        RETURN;
    END IF;
    ahead := coalesce(p_ahead, (SELECT value::integer FROM wfctl_settings WHERE name = 'partition_ahead'), 7);
    first := wfctl_partition_start(wfctl_now(), iv);
    IF NOT EXISTS (
        SELECT 1 FROM generate_series(0, ahead) AS g(k)
        WHERE to_regclass(format('%I.%I', current_schema(),
                                 'workflow_attempts_p' || to_char(wfctl_partition_step(first, g.k, iv) AT TIME ZONE 'UTC', 'YYYYMMDD')))
              IS NULL
    ) THEN
        RETURN;
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext('wfctl.partitions.' || current_schema())) THEN
        busy := true;
        RETURN;
    END IF;
    FOR k IN 0..ahead LOOP
        n := wfctl_create_partition(wfctl_partition_step(first, k, iv));
        IF n IS NOT NULL THEN
            created := created + 1;
            moved := moved + n;
        END IF;
    END LOOP;
END;
$function$;

-- function wfctl_event_value ---------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_event_value(p_id uuid, p_key text)
 RETURNS TABLE(status text, value jsonb, found boolean)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
    SELECT w.status, e.value, e.workflow_id IS NOT NULL
    FROM workflows w
    LEFT JOIN workflow_events e ON e.workflow_id = w.id AND e.key = p_key
    WHERE w.id = p_id
$function$;

-- function wfctl_fake_now ------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_fake_now()
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 STABLE PARALLEL SAFE SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    fake text;
BEGIN
    SELECT s.value INTO fake FROM wfctl_settings s WHERE s.name = 'fake_now';
    RETURN coalesce(fake::timestamptz, now());
END
$function$;

-- function wfctl_idempotency_guard ---------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_idempotency_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('wfctl.idempotency.' || current_schema()),
                                  hashtext(NEW.idempotency_key));
    IF EXISTS (SELECT 1 FROM workflows WHERE idempotency_key = NEW.idempotency_key) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END;
$function$;

-- function wfctl_insert_children -----------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_insert_children(wf workflows, p_type text, p_inputs jsonb[], p_keys text[], p_priority integer, p_timeout double precision, p_timeout_error text)
 RETURNS uuid[]
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    own_deadline timestamptz;
    deadline timestamptz;
    deadline_message text;
    new_ids uuid[];
BEGIN
    own_deadline := CASE WHEN p_timeout IS NULL THEN NULL
                         ELSE wfctl_now() + make_interval(secs => p_timeout) END;
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
                           parent_id, deadline_at, deadline_error, deadline_inherited)
    SELECT new_ids[i.ord], p_type, i.input, p_keys[i.ord], coalesce(p_priority, wf.priority),
           NULL, wf.id, deadline, deadline_message, p_timeout IS NULL AND deadline IS NOT NULL
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
$function$;

-- function wfctl_join_step -----------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_join_step(p_id uuid, p_epoch bigint, p_attempt integer, p_step integer, p_name text, p_ids uuid[], p_timeout double precision, p_started timestamp with time zone, OUT state text, OUT output jsonb)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
    ELSIF deadline IS NOT NULL AND deadline <= wfctl_now() THEN
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
$function$;

-- function wfctl_known_types ---------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_known_types()
 RETURNS SETOF text
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
    SELECT DISTINCT t FROM workers, unnest(workflow_types) AS t ORDER BY 1
$function$;

-- function wfctl_layout --------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_layout()
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path TO 'public', 'pg_temp'
AS $function$
    SELECT coalesce((SELECT value FROM wfctl_settings WHERE name = 'layout'), 'unpartitioned');
$function$;

-- function wfctl_max_unconsumed_messages ---------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_max_unconsumed_messages()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'public', 'pg_temp'
AS $function$
    SELECT 10000
$function$;

-- function wfctl_message_sent --------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_message_sent()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    target_status text;
    due timestamptz;
    target_type text;
BEGIN
    SELECT status, run_at, workflow_type INTO target_status, due, target_type
    FROM workflows WHERE id = NEW.workflow_id FOR NO KEY UPDATE;
    UPDATE workflows
    SET run_at = wfctl_now(), updated_at = wfctl_now()
    WHERE id = NEW.workflow_id AND status = 'pending' AND wait_kind = 'message'
      AND wait_topic = NEW.topic;
    IF FOUND OR (target_status = 'pending' AND due <= wfctl_now()) THEN
        PERFORM wfctl_wake(target_type, 'head');
    END IF;
    RETURN NULL;
END;
$function$;

-- function wfctl_new_id --------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_new_id()
 RETURNS uuid
 LANGUAGE sql
 PARALLEL SAFE
 SET search_path TO 'public', 'pg_temp'
AS $function$
    SELECT (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
            || '7' || substr(r.hex, 14, 3) || substr(r.hex, 17, 16))::uuid
    FROM (SELECT replace(gen_random_uuid()::text, '-', '') AS hex) AS r;
$function$;

-- function wfctl_notify_new ----------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_notify_new()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    t record;
    unheard boolean := false;
    first_priority integer;
    first_run_at timestamptz;
    oldest timestamptz;
BEGIN
    FOR t IN
        SELECT DISTINCT ON (i.workflow_type) i.workflow_type, i.priority, i.run_at,
               min(i.created_at) OVER (PARTITION BY i.workflow_type) AS oldest
        FROM inserted i
        ORDER BY i.workflow_type, i.priority DESC, i.run_at
    LOOP
        IF NOT wfctl_wake_idle(ARRAY[t.workflow_type],
                               wfctl_wake_at(t.priority, t.run_at, t.oldest)) THEN
            unheard := true;
            IF first_priority IS NULL OR t.priority > first_priority
               OR (t.priority = first_priority AND t.run_at < first_run_at) THEN
                first_priority := t.priority;
                first_run_at := t.run_at;
            END IF;
            oldest := least(oldest, t.oldest);
        END IF;
    END LOOP;
    IF unheard THEN
        PERFORM pg_notify(wfctl_channel(), wfctl_wake_at(first_priority, first_run_at, oldest));
    END IF;
    RETURN NULL;
END;
$function$;

-- function wfctl_now -----------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_now()
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE PARALLEL SAFE
RETURN now();

-- function wfctl_outcome -------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_outcome(p_id uuid)
 RETURNS TABLE(status text, output jsonb, error text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
    SELECT w.status, w.output_data, w.error_message FROM workflows w WHERE w.id = p_id
$function$;

-- function wfctl_partition_convert ---------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_partition_convert(p_interval interval, p_ahead integer DEFAULT 7, OUT workflows bigint, OUT steps bigint, OUT attempts bigint, OUT partitions integer)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    here text := current_schema();
    aside text := left('wfctl_unpartitioned_' || current_schema(), 63);
    tables text[] := ARRAY['workflows', 'workflow_steps', 'workflow_attempts'];
    t text;
    keycol text;
    saved text[] := '{}';
    functions text[] := '{}';
    grants text[] := '{}';
    opts text[];
    statement text;
    r record;
    cols text;
    oldest timestamptz;
    first timestamptz;
    k integer;
BEGIN
    IF wfctl_layout() = 'partitioned' THEN
        RAISE EXCEPTION 'this database is partitioned already' USING ERRCODE = '55000';
    END IF;
    IF p_interval IS NULL OR p_interval NOT IN (interval '1 day', interval '7 days', interval '30 days') THEN
        RAISE EXCEPTION 'the partition interval is 1 day, 7 days or 30 days, not %', p_interval
            USING ERRCODE = '22023';
    END IF;
    IF p_ahead IS NULL OR p_ahead NOT BETWEEN 0 AND 1000 THEN
        RAISE EXCEPTION 'partitions ahead: 0 to 1000, not %', p_ahead USING ERRCODE = '22023';
    END IF;
    LOCK TABLE workflows, workflow_steps, workflow_attempts, workflow_messages, workflow_events
        IN ACCESS EXCLUSIVE MODE;

    -- what the catalog says about the tables, before they move
    FOR r IN
        SELECT pg_get_indexdef(i.indexrelid) AS def
        FROM pg_index i
        WHERE i.indrelid = ANY (ARRAY['workflows'::regclass, 'workflow_steps'::regclass,
                                      'workflow_attempts'::regclass])
          AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
        ORDER BY i.indexrelid
    LOOP
        saved := saved || r.def;
    END LOOP;
    FOR r IN
        SELECT pg_get_triggerdef(g.oid) AS def
        FROM pg_trigger g
        WHERE g.tgrelid = ANY (ARRAY['workflows'::regclass, 'workflow_steps'::regclass,
                                     'workflow_attempts'::regclass])
          AND NOT g.tgisinternal
        ORDER BY g.oid
    LOOP
        saved := saved || r.def;
    END LOOP;
    FOR r IN
        SELECT DISTINCT p.oid, pg_get_functiondef(p.oid) AS def
        FROM pg_depend d
        JOIN pg_proc p ON p.oid = d.objid
        WHERE d.classid = 'pg_proc'::regclass AND d.refclassid = 'pg_type'::regclass
          AND d.refobjid IN (SELECT c.reltype FROM pg_class c
                             WHERE c.oid = ANY (ARRAY['workflows'::regclass, 'workflow_steps'::regclass,
                                                      'workflow_attempts'::regclass]))
    LOOP
        functions := functions || r.def;
        EXECUTE format('DROP FUNCTION %s', r.oid::regprocedure);
    END LOOP;
    FOR r IN
        SELECT c.relname, a.privilege_type, a.grantee
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = ANY (ARRAY['workflows'::regclass, 'workflow_steps'::regclass,
                                 'workflow_attempts'::regclass, 'workflow_steps_id_seq'::regclass])
          AND a.grantee <> c.relowner
    LOOP
        grants := grants || format('GRANT %s ON %s %I TO %s', r.privilege_type,
                                   CASE WHEN r.relname LIKE '%_seq' THEN 'SEQUENCE' ELSE 'TABLE' END,
                                   r.relname,
                                   CASE WHEN r.grantee = 0 THEN 'PUBLIC'
                                        ELSE quote_ident(pg_get_userbyid(r.grantee)) END);
    END LOOP;
    -- foreign keys to workflows(id): a partitioned workflows has no unique key on id alone
    FOR r IN
        SELECT c.conrelid::regclass AS tab, c.conname
        FROM pg_constraint c
        WHERE c.contype = 'f' AND c.confrelid = 'workflows'::regclass
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.tab, r.conname);
    END LOOP;

    EXECUTE format('CREATE SCHEMA %I', aside);
    FOREACH t IN ARRAY tables LOOP
        EXECUTE format('ALTER TABLE %I SET SCHEMA %I', t, aside);
    END LOOP;
    EXECUTE format('UPDATE %I.workflows SET created_at = coalesce(updated_at, wfctl_now()) '
                   'WHERE created_at IS NULL', aside);

    INSERT INTO wfctl_settings (name, value) VALUES
        ('layout', 'partitioned'), ('partition_interval', p_interval::text),
        ('partition_ahead', p_ahead::text);

    FOREACH t IN ARRAY tables LOOP
        keycol := CASE t WHEN 'workflows' THEN 'created_at' ELSE 'workflow_created_at' END;
        EXECUTE format('CREATE TABLE %I (LIKE %I.%I INCLUDING ALL EXCLUDING INDEXES) '
                       'PARTITION BY RANGE (%I)', t, aside, t, keycol);
        EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET NOT NULL', t, keycol);
        SELECT c.reloptions INTO opts FROM pg_class c WHERE c.oid = format('%I.%I', aside, t)::regclass;
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT%s', t || '_default', t,
                       coalesce(' WITH (' || array_to_string(opts, ', ') || ')', ''));
    END LOOP;

    EXECUTE format('SELECT min(created_at) FROM %I.workflows', aside) INTO oldest;
    first := wfctl_partition_start(least(coalesce(oldest, wfctl_now()), wfctl_now()), p_interval);
    partitions := 0;
    LOOP
        EXIT WHEN first > wfctl_partition_step(wfctl_partition_start(wfctl_now(), p_interval), p_ahead, p_interval);
        PERFORM wfctl_create_partition(first);
        partitions := partitions + 1;
        first := wfctl_partition_step(first, 1, p_interval);
    END LOOP;

    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO cols
    FROM pg_attribute a WHERE a.attrelid = 'workflows'::regclass AND a.attnum > 0 AND NOT a.attisdropped;
    EXECUTE format('INSERT INTO workflows (%s) SELECT %s FROM %I.workflows', cols, cols, aside);
    GET DIAGNOSTICS workflows = ROW_COUNT;
    FOREACH t IN ARRAY tables[2:3] LOOP
        SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO cols
        FROM pg_attribute a
        WHERE a.attrelid = t::regclass AND a.attnum > 0 AND NOT a.attisdropped
          AND a.attname <> 'workflow_created_at';
        EXECUTE format('INSERT INTO %1$I (%2$s, workflow_created_at) '
                       'SELECT %3$s, coalesce(w.created_at, x.workflow_created_at, wfctl_now()) '
                       'FROM %4$I.%1$I x LEFT JOIN %4$I.workflows w ON w.id = x.workflow_id',
                       t, cols, (SELECT string_agg('x.' || c, ', ') FROM unnest(string_to_array(cols, ', ')) c),
                       aside);
        IF t = 'workflow_steps' THEN
            GET DIAGNOSTICS steps = ROW_COUNT;
        ELSE
            GET DIAGNOSTICS attempts = ROW_COUNT;
        END IF;
    END LOOP;
    PERFORM setval(pg_get_serial_sequence('workflow_steps', 'id'), max(id)) FROM workflow_steps
    HAVING max(id) IS NOT NULL;

    -- unique constraints under their names, with the partition key; the idempotency key's
    -- uniqueness becomes an index and a trigger
    FOR r IN
        SELECT c.conname, c.contype, cl.relname,
               (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord)
                FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
                JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum) AS cols
        FROM pg_constraint c JOIN pg_class cl ON cl.oid = c.conrelid
        WHERE c.contype IN ('p', 'u') AND cl.relnamespace = aside::regnamespace
        ORDER BY c.oid
    LOOP
        keycol := CASE r.relname WHEN 'workflows' THEN 'created_at' ELSE 'workflow_created_at' END;
        IF r.relname = 'workflows' AND r.cols = 'idempotency_key' THEN
            CONTINUE;
        END IF;
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I %s (%s, %I)', r.relname, r.conname,
                       CASE r.contype WHEN 'p' THEN 'PRIMARY KEY' ELSE 'UNIQUE' END, r.cols, keycol);
    END LOOP;
    CREATE INDEX workflows_idempotency_idx ON workflows (idempotency_key)
        WHERE idempotency_key IS NOT NULL;
    -- prune's check that an old partition holds nothing finished after the cutoff: a few pages
    -- of ranges instead of a scan of the partition
    CREATE INDEX workflows_finished_brin ON workflows USING brin (finished_at);
    FOREACH statement IN ARRAY saved LOOP
        EXECUTE statement;
    END LOOP;
    CREATE TRIGGER workflows_idempotency BEFORE INSERT ON workflows
        FOR EACH ROW WHEN (NEW.idempotency_key IS NOT NULL) EXECUTE FUNCTION wfctl_idempotency_guard();
    FOREACH statement IN ARRAY functions LOOP
        EXECUTE statement;
    END LOOP;
    FOREACH statement IN ARRAY grants LOOP
        EXECUTE statement;
    END LOOP;
    EXECUTE format('DROP SCHEMA %I CASCADE', aside);
    partitions := partitions;
END;
$function$;

-- function wfctl_partition_interval --------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_partition_interval()
 RETURNS interval
 LANGUAGE sql
 STABLE
 SET search_path TO 'public', 'pg_temp'
AS $function$
    SELECT value::interval FROM wfctl_settings WHERE name = 'partition_interval';
$function$;

-- function wfctl_partition_start -----------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_partition_start(p_at timestamp with time zone, p_interval interval)
 RETURNS timestamp with time zone
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT to_timestamp(946857600 + floor((extract(epoch FROM p_at) - 946857600)
                                          / extract(epoch FROM p_interval))
                                    * extract(epoch FROM p_interval));
$function$;

-- function wfctl_partition_step ------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_partition_step(p_start timestamp with time zone, p_count integer, p_interval interval)
 RETURNS timestamp with time zone
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
RETURN to_timestamp(((EXTRACT(epoch FROM p_start) + ((p_count)::numeric * EXTRACT(epoch FROM p_interval))))::double precision);

-- function wfctl_partitions ----------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_partitions()
 RETURNS TABLE(parent text, partition text, range_start timestamp with time zone, range_end timestamp with time zone, is_default boolean)
 LANGUAGE sql
 STABLE
 SET search_path TO 'public', 'pg_temp'
AS $function$
    SELECT p.relname::text, c.relname::text,
           (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']*)''\)'))[1]::timestamptz,
           (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']*)''\)'))[1]::timestamptz,
           pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'
    FROM pg_inherits i
    JOIN pg_class p ON p.oid = i.inhparent
    JOIN pg_class c ON c.oid = i.inhrelid
    WHERE p.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
      AND p.relname IN ('workflows', 'workflow_steps', 'workflow_attempts')
      AND p.relkind = 'p';
$function$;

-- function wfctl_prune_partition -----------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_prune_partition(p_start timestamp with time zone, p_end timestamp with time zone, p_statuses text[], p_cutoff timestamp with time zone, p_dry boolean, p_lock_timeout text, OUT state text, OUT workflows bigint, OUT steps bigint)
 RETURNS record
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    others text[] := ARRAY(SELECT s FROM unnest(ARRAY['pending', 'running', 'completed', 'failed',
                                                      'cancelled']) AS s
                           WHERE s <> ALL (p_statuses));
    wp text;
    sp text;
    ap text;
    check_sql text;
    blocked boolean;
BEGIN
    SELECT max(p.partition) FILTER (WHERE p.parent = 'workflows'),
           max(p.partition) FILTER (WHERE p.parent = 'workflow_steps'),
           max(p.partition) FILTER (WHERE p.parent = 'workflow_attempts')
    INTO wp, sp, ap
    FROM wfctl_partitions() p
    WHERE p.range_start = p_start AND p.range_end = p_end;
    IF wp IS NULL OR p_end > p_cutoff THEN
        state := 'kept';
        RETURN;
    END IF;
    check_sql := format('SELECT EXISTS (SELECT 1 FROM %1$I WHERE status = ANY ($1)) '
                        'OR EXISTS (SELECT 1 FROM %1$I WHERE finished_at >= $2 '
                        '           OR (finished_at IS NULL AND updated_at >= $2)) '
                        'OR EXISTS (SELECT 1 FROM %1$I c JOIN workflows p ON p.id = c.parent_id '
                        '           WHERE p.status = ANY ($1) OR p.finished_at >= $2 '
                        '           OR (p.finished_at IS NULL AND p.updated_at >= $2))', wp);
    EXECUTE check_sql USING others, p_cutoff INTO blocked;
    IF blocked THEN
        state := 'kept';
        RETURN;
    END IF;
    EXECUTE format('SELECT count(*) FROM %I', wp) INTO workflows;
    steps := 0;
    IF sp IS NOT NULL THEN
        EXECUTE format('SELECT count(*) FROM %I', sp) INTO steps;
    END IF;
    IF p_dry THEN
        state := 'prunable';
        RETURN;
    END IF;
    BEGIN
        EXECUTE format('DELETE FROM workflow_messages m USING %I w WHERE m.workflow_id = w.id', wp);
        EXECUTE format('DELETE FROM workflow_events e USING %I w WHERE e.workflow_id = w.id', wp);
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
        LOCK TABLE workflows, workflow_steps, workflow_attempts IN ACCESS EXCLUSIVE MODE;
        EXECUTE check_sql USING others, p_cutoff INTO blocked;
        IF blocked THEN
            -- undoes this block: the deletions above, and the locks
            RAISE EXCEPTION USING ERRCODE = 'WFKPT', MESSAGE = 'interval kept';
        END IF;
        IF sp IS NOT NULL THEN
            EXECUTE format('DROP TABLE %I', sp);
        END IF;
        IF ap IS NOT NULL THEN
            EXECUTE format('DROP TABLE %I', ap);
        END IF;
        EXECUTE format('DROP TABLE %I', wp);
        state := 'dropped';
    EXCEPTION WHEN SQLSTATE 'WFKPT' THEN
        state := 'kept';
    END;
END;
$function$;

-- function wfctl_rate_burst ----------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_rate_burst(p_count integer, p_seconds double precision)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT greatest(1, least(p_count, floor(p_count * 0.2 / p_seconds)))::integer;
$function$;

-- function wfctl_recv_step -----------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_recv_step(p_id uuid, p_epoch bigint, p_attempt integer, p_step integer, p_name text, p_topic text, p_timeout double precision, p_started timestamp with time zone, OUT state text, OUT output jsonb)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
$function$;

-- function wfctl_rollup_deleted ------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_rollup_deleted()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
BEGIN
    INSERT INTO wfctl_rollup_stale (bucket_start)
    SELECT DISTINCT wfctl_rollup_hour(g.created_at)
    FROM gone g
    WHERE wfctl_rollup_hour(g.created_at) + interval '70 minutes' < clock_timestamp()  -- ROLLUP_SETTLE
      AND g.status IN ('completed', 'failed', 'cancelled')
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $function$;

-- function wfctl_rollup_due ----------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_rollup_due()
 RETURNS boolean
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
    SELECT EXISTS (SELECT FROM wfctl_rollup_stale)
        OR EXISTS (
            SELECT
            FROM (SELECT wfctl_rollup_hour(min(created_at)) AS first FROM workflows) AS f,
                 generate_series(f.first, clock_timestamp() - interval '10 minutes' - interval '1 hour',
                                 interval '1 hour') AS g(b)
            WHERE NOT EXISTS (SELECT FROM wfctl_rollup_buckets r WHERE r.bucket_start = g.b AND r.span = 'h'))
$function$;

-- function wfctl_rollup_gaps ---------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_rollup_gaps(p_start timestamp with time zone)
 RETURNS TABLE(lo timestamp with time zone, hi timestamp with time zone)
 LANGUAGE sql
 STABLE SECURITY DEFINER ROWS 4
 SET search_path TO 'public', 'pg_temp'
AS $function$
    WITH used AS (SELECT bucket_start AS s, bucket_end AS e FROM wfctl_rollup_window(p_start)),
    edges AS (SELECT coalesce(lag(e) OVER (ORDER BY s), p_start) AS lo, s AS hi FROM used
              UNION ALL
              SELECT coalesce(max(e), p_start), 'infinity' FROM used)
    SELECT lo, hi FROM edges WHERE lo < hi
$function$;

-- function wfctl_rollup_hour ---------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_rollup_hour(p_at timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
RETURN date_bin('01:00:00'::interval, p_at, '2000-01-01 00:00:00+00'::timestamp with time zone);

-- function wfctl_rollup_refresh ------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_rollup_refresh(p_hours integer)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    moment timestamptz := clock_timestamp();  -- before this transaction's id is assigned
    horizon timestamptz;
    first timestamptz;
    computed integer;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('wfctl_rollup_refresh'), hashtext(current_schema())) THEN
        RETURN 0;
    END IF;
    SELECT max(h.observed_at) INTO horizon
    FROM wfctl_rollup_horizon h
    WHERE h.xid < pg_snapshot_xmin(pg_current_snapshot());
    DELETE FROM wfctl_rollup_horizon h WHERE h.observed_at < horizon;
    INSERT INTO wfctl_rollup_horizon VALUES (pg_current_xact_id(), moment);
    IF horizon IS NULL THEN
        RETURN 0;
    END IF;
    -- buckets of a dropped partition, and those marked stale (a day with any of its hours):
    -- computed again
    DELETE FROM wfctl_rollup_buckets b
    WHERE NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = b.part_oid);
    WITH marked AS (DELETE FROM wfctl_rollup_stale RETURNING bucket_start)
    DELETE FROM wfctl_rollup_buckets b
    USING marked m
    WHERE (b.span = 'h' AND b.bucket_start = m.bucket_start)
       OR (b.span = 'd' AND b.bucket_start = date_bin('1 day', m.bucket_start, '2000-01-01 00:00:00+00'));
    SELECT wfctl_rollup_hour(min(created_at)) INTO first FROM workflows;
    IF first IS NULL THEN
        RETURN 0;
    END IF;
    CREATE TEMP TABLE wfctl_rollup_todo ON COMMIT DROP AS
    SELECT g.b AS bucket_start
    FROM generate_series(first, horizon - interval '10 minutes' - interval '1 hour', interval '1 hour') AS g(b)
    WHERE NOT EXISTS (SELECT FROM wfctl_rollup_buckets r WHERE r.bucket_start = g.b AND r.span = 'h')
    ORDER BY g.b DESC
    LIMIT greatest(p_hours, 0);
    SELECT count(*) INTO computed FROM wfctl_rollup_todo;
    IF computed > 0 THEN
        CREATE TEMP TABLE wfctl_rollup_runs ON COMMIT DROP AS
        SELECT t.bucket_start, w.id, w.tableoid AS part_oid, w.workflow_type, w.status,
               w.started_at IS NOT NULL AND w.finished_at IS NOT NULL AS timed
        FROM wfctl_rollup_todo t
        JOIN workflows w ON w.created_at >= t.bucket_start AND w.created_at < t.bucket_start + interval '1 hour'
        WHERE w.status IN ('completed', 'failed', 'cancelled');
        CREATE TEMP TABLE wfctl_rollup_steps ON COMMIT DROP AS
        SELECT r.bucket_start, r.id, r.workflow_type, r.timed, s.step_name, s.status, s.completed_at,
               s.started_at <= r.bucket_start - interval '1 hour' AS early,  -- STEP_CLOCK_SLACK
               date_part('epoch', s.completed_at - s.started_at) AS seconds
        FROM wfctl_rollup_runs r
        JOIN workflow_steps s ON s.workflow_id = r.id
        WHERE s.started_at IS NOT NULL;
        INSERT INTO wfctl_rollup_buckets (bucket_start, span, part_oid, skewed)
        SELECT t.bucket_start, 'h',
               coalesce((SELECT min(r.part_oid) FROM wfctl_rollup_runs r WHERE r.bucket_start = t.bucket_start),
                        'workflows'::regclass::oid),
               EXISTS (SELECT FROM wfctl_rollup_steps s WHERE s.bucket_start = t.bucket_start AND s.early)
               OR (SELECT count(DISTINCT r.part_oid) > 1 FROM wfctl_rollup_runs r WHERE r.bucket_start = t.bucket_start)
        FROM wfctl_rollup_todo t;
        INSERT INTO wfctl_rollup_counts
        SELECT bucket_start, 'h', workflow_type, status, count(*)
        FROM wfctl_rollup_runs
        GROUP BY 1, 3, 4;
        INSERT INTO wfctl_rollup_durations
        SELECT bucket_start, 'h', 'r', workflow_type, NULL, wfctl_duration_bin(seconds), count(*),
               sum(seconds), min(seconds), max(seconds)
        FROM (SELECT bucket_start, id, workflow_type, sum(seconds) AS seconds
              FROM wfctl_rollup_steps
              WHERE timed
              GROUP BY 1, 2, 3) AS runs
        WHERE seconds IS NOT NULL
        GROUP BY 1, 4, 6;
        INSERT INTO wfctl_rollup_durations
        SELECT bucket_start, 'h', 's', workflow_type, step_name, wfctl_duration_bin(seconds), count(*),
               sum(seconds), min(seconds), max(seconds)
        FROM wfctl_rollup_steps
        WHERE status = 'completed' AND completed_at IS NOT NULL
        GROUP BY 1, 4, 5, 6;
        DROP TABLE wfctl_rollup_runs, wfctl_rollup_steps;
    END IF;
    DROP TABLE wfctl_rollup_todo;
    -- the days: merged from their hours (exact: counts and sums add, minima and maxima compare)
    CREATE TEMP TABLE wfctl_rollup_days ON COMMIT DROP AS
    SELECT date_bin('1 day', b.bucket_start, '2000-01-01 00:00:00+00') AS bucket_start, min(b.part_oid) AS part_oid
    FROM wfctl_rollup_buckets b
    WHERE b.span = 'h' AND NOT b.skewed
      AND NOT EXISTS (SELECT FROM wfctl_rollup_buckets d
                      WHERE d.span = 'd' AND d.bucket_start = date_bin('1 day', b.bucket_start, '2000-01-01 00:00:00+00'))
    GROUP BY 1
    HAVING count(*) = 24 AND count(DISTINCT b.part_oid) = 1;
    INSERT INTO wfctl_rollup_buckets (bucket_start, span, part_oid, skewed)
    SELECT bucket_start, 'd', part_oid, false FROM wfctl_rollup_days;
    INSERT INTO wfctl_rollup_counts
    SELECT d.bucket_start, 'd', c.workflow_type, c.status, sum(c.workflows)
    FROM wfctl_rollup_days d
    JOIN wfctl_rollup_counts c ON c.span = 'h' AND c.bucket_start >= d.bucket_start
                              AND c.bucket_start < d.bucket_start + interval '1 day'
    GROUP BY 1, 3, 4;
    INSERT INTO wfctl_rollup_durations
    SELECT d.bucket_start, 'd', u.kind, u.workflow_type, u.step_name, u.bin, sum(u.n), sum(u.sum_seconds),
           min(u.min_seconds), max(u.max_seconds)
    FROM wfctl_rollup_days d
    JOIN wfctl_rollup_durations u ON u.span = 'h' AND u.bucket_start >= d.bucket_start
                                 AND u.bucket_start < d.bucket_start + interval '1 day'
    GROUP BY 1, 3, 4, 5, 6;
    DROP TABLE wfctl_rollup_days;
    RETURN computed;
END $function$;

-- function wfctl_rollup_touch --------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_rollup_touch()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO wfctl_rollup_stale (bucket_start) VALUES (wfctl_rollup_hour(OLD.created_at)) ON CONFLICT DO NOTHING;
    END IF;
    INSERT INTO wfctl_rollup_stale (bucket_start) VALUES (wfctl_rollup_hour(NEW.created_at)) ON CONFLICT DO NOTHING;
    RETURN NULL;
END $function$;

-- function wfctl_rollup_truncated ----------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_rollup_truncated()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
BEGIN
    DELETE FROM wfctl_rollup_buckets;
    DELETE FROM wfctl_rollup_stale;
    RETURN NULL;
END $function$;

-- function wfctl_rollup_window -------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_rollup_window(p_start timestamp with time zone)
 RETURNS TABLE(bucket_start timestamp with time zone, span "char", bucket_end timestamp with time zone)
 LANGUAGE sql
 STABLE SECURITY DEFINER ROWS 80
 SET search_path TO 'public', 'pg_temp'
AS $function$
    WITH usable AS (
        SELECT b.bucket_start, b.span,
               b.bucket_start + CASE b.span WHEN 'd' THEN interval '1 day' ELSE interval '1 hour' END AS bucket_end
        FROM wfctl_rollup_buckets b
        WHERE b.bucket_start > p_start
          AND NOT b.skewed
          AND EXISTS (SELECT FROM pg_class c WHERE c.oid = b.part_oid)
          AND NOT EXISTS (SELECT FROM wfctl_rollup_stale m
                          WHERE m.bucket_start >= b.bucket_start
                            AND m.bucket_start < b.bucket_start
                                + CASE b.span WHEN 'd' THEN interval '1 day' ELSE interval '1 hour' END)
    )
    SELECT u.bucket_start, u.span, u.bucket_end
    FROM usable u
    WHERE u.span = 'd'
       OR NOT EXISTS (SELECT FROM usable d
                      WHERE d.span = 'd' AND u.bucket_start >= d.bucket_start AND u.bucket_start < d.bucket_end)
$function$;

-- function wfctl_send ----------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_send(p_id uuid, p_topic text, p_payload jsonb DEFAULT NULL::jsonb, p_key text DEFAULT NULL::text)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
$function$;

-- function wfctl_send_message --------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_send_message(p_id uuid, p_topic text, p_payload jsonb, p_key text, OUT id bigint, OUT created boolean)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
$function$;

-- function wfctl_send_message --------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_send_message(p_id uuid, p_topic text, p_payload jsonb, p_key text, p_trace_context text, OUT id bigint, OUT created boolean)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
BEGIN
    PERFORM wfctl_check_trace_context(p_trace_context);
    SELECT s.id, s.created INTO id, created FROM wfctl_send_message(p_id, p_topic, p_payload, p_key) s;
    IF created AND p_trace_context IS NOT NULL THEN
        UPDATE workflow_messages m SET trace_context = p_trace_context WHERE m.id = wfctl_send_message.id;
    END IF;
END;
$function$;

-- function wfctl_set_event_step ------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_set_event_step(p_id uuid, p_epoch bigint, p_attempt integer, p_step integer, p_name text, p_key text, p_value jsonb, p_started timestamp with time zone, OUT state text, OUT output jsonb)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
    SET value = excluded.value, step_number = excluded.step_number, updated_at = wfctl_now();
    output := jsonb_build_object('key', p_key, 'value', p_value);
    PERFORM wfctl_step_done(p_id, p_epoch, p_attempt, p_step, p_name, output, p_started);
    PERFORM pg_notify(wfctl_watch_channel(), p_id::text);
    state := 'done';
END;
$function$;

-- function wfctl_settings_clock ------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_settings_clock()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
BEGIN
    IF EXISTS (SELECT FROM wfctl_settings WHERE name = 'fake_now') THEN
        EXECUTE format('CREATE OR REPLACE FUNCTION %I.wfctl_now() RETURNS timestamptz LANGUAGE sql'
                       ' STABLE PARALLEL SAFE RETURN %I.wfctl_fake_now()', TG_TABLE_SCHEMA, TG_TABLE_SCHEMA);
    ELSE
        EXECUTE format('CREATE OR REPLACE FUNCTION %I.wfctl_now() RETURNS timestamptz LANGUAGE sql'
                       ' STABLE PARALLEL SAFE RETURN pg_catalog.now()', TG_TABLE_SCHEMA);
    END IF;
    RETURN NULL;
END
$function$;

-- function wfctl_start_children_step -------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_start_children_step(p_id uuid, p_epoch bigint, p_attempt integer, p_step integer, p_name text, p_type text, p_inputs jsonb[], p_keys text[], p_priority integer, p_timeout double precision, p_timeout_error text, p_many boolean, p_started timestamp with time zone, p_trace_context text, OUT state text, OUT output jsonb)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
$function$;

-- function wfctl_step_begin ----------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_step_begin(wf workflows, p_epoch bigint, p_step integer, OUT state text, OUT output jsonb)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
    ELSIF wf.deadline_at <= wfctl_now() THEN
        -- the caller fails the run with this error (the one write past the deadline)
        state := 'expired';
        output := to_jsonb(coalesce(wf.deadline_error, 'timed out'));
    ELSE
        state := 'ok';
    END IF;
END;
$function$;

-- function wfctl_step_done -----------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_step_done(p_id uuid, p_epoch bigint, p_attempt integer, p_step integer, p_name text, p_output jsonb, p_started timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    created timestamptz;
BEGIN
    UPDATE workflows
    SET current_step = p_step, updated_at = wfctl_now(), wait_step = NULL, wait_deadline = NULL,
        wait_kind = NULL, wait_topic = NULL, wait_ids = NULL, wait_remaining = NULL
    WHERE id = p_id
    RETURNING created_at INTO created;
    INSERT INTO workflow_steps AS ws (workflow_id, step_number, step_name, status, output_data,
                                      started_at, completed_at, attempt, lease_epoch,
                                      workflow_created_at)
    VALUES (p_id, p_step, p_name, 'completed', p_output, p_started, wfctl_now(), p_attempt, p_epoch, created)
    ON CONFLICT ON CONSTRAINT workflow_steps_workflow_id_step_number_key DO UPDATE
    SET step_name = excluded.step_name, status = excluded.status,
        output_data = excluded.output_data, started_at = excluded.started_at,
        completed_at = excluded.completed_at, error_message = NULL,
        attempt = excluded.attempt, lease_epoch = excluded.lease_epoch;
END;
$function$;

-- function wfctl_step_park -----------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_step_park(p_id uuid, p_epoch bigint, p_step integer, p_kind text, p_deadline timestamp with time zone, p_topic text, p_ids uuid[], p_remaining integer)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
BEGIN
    UPDATE workflows
    SET status = 'pending', run_at = coalesce(p_deadline, '9999-01-01 00:00:00+00'), updated_at = wfctl_now(),
        wait_kind = p_kind, wait_step = p_step, wait_deadline = p_deadline,
        wait_topic = p_topic, wait_ids = p_ids, wait_remaining = p_remaining
    WHERE id = p_id;
    UPDATE workflow_attempts wa
    SET ended_at = wfctl_now(), outcome = 'parked',
        last_step = (SELECT current_step FROM workflows WHERE id = p_id)
    WHERE wa.workflow_id = p_id AND wa.lease_epoch = p_epoch AND wa.ended_at IS NULL;
END;
$function$;

-- function wfctl_submit --------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_submit(p_workflow_type text, p_input jsonb DEFAULT NULL::jsonb, p_key text DEFAULT NULL::text, p_delay interval DEFAULT NULL::interval, p_priority integer DEFAULT 0, p_max_retries integer DEFAULT NULL::integer)
 RETURNS uuid
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    new_id uuid;
BEGIN
    PERFORM wfctl_check_value(p_input, 'workflow input');
    LOOP
        INSERT INTO workflows (workflow_type, input_data, idempotency_key, run_at, priority,
                               max_retries)
        VALUES (p_workflow_type, p_input, p_key, wfctl_now() + coalesce(p_delay, interval '0'),
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
$function$;

-- function wfctl_submit_many ---------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_submit_many(p_workflow_type text, p_inputs jsonb[], p_delay double precision, p_priority integer, p_max_retries integer, p_timeout double precision, p_timeout_error text, p_concurrency_key text)
 RETURNS SETOF uuid
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
           wfctl_now() + coalesce(make_interval(secs => p_delay), interval '0'), p_priority,
           p_max_retries, wfctl_now() + make_interval(secs => p_timeout), p_timeout_error,
           p_concurrency_key
    FROM unnest(p_inputs) WITH ORDINALITY AS t(input, ord)
    ORDER BY t.ord
    RETURNING workflows.id;
END;
$function$;

-- function wfctl_submit_many ---------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_submit_many(p_workflow_type text, p_inputs jsonb[], p_delay double precision, p_priority integer, p_max_retries integer, p_timeout double precision, p_timeout_error text, p_concurrency_key text, p_trace_context text)
 RETURNS SETOF uuid
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
$function$;

-- function wfctl_submit_one ----------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_submit_one(p_workflow_type text, p_input jsonb, p_key text, p_delay double precision, p_priority integer, p_max_retries integer, p_timeout double precision, p_timeout_error text, p_concurrency_key text)
 RETURNS TABLE(id uuid, created boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    new_id uuid;
BEGIN
    PERFORM wfctl_check_value(p_input, 'workflow input');
    INSERT INTO workflows AS w (workflow_type, input_data, idempotency_key, run_at, priority,
                                max_retries, deadline_at, deadline_error, concurrency_key)
    VALUES (p_workflow_type, p_input, p_key,
            wfctl_now() + coalesce(make_interval(secs => p_delay), interval '0'), coalesce(p_priority, 0),
            p_max_retries, wfctl_now() + make_interval(secs => p_timeout), p_timeout_error,
            p_concurrency_key)
    ON CONFLICT DO NOTHING
    RETURNING w.id INTO new_id;
    IF new_id IS NOT NULL THEN
        RETURN QUERY SELECT new_id, true;
        RETURN;
    END IF;
    RETURN QUERY SELECT w.id, false FROM workflows w WHERE w.idempotency_key = p_key;
END;
$function$;

-- function wfctl_submit_one ----------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_submit_one(p_workflow_type text, p_input jsonb, p_key text, p_delay double precision, p_priority integer, p_max_retries integer, p_timeout double precision, p_timeout_error text, p_concurrency_key text, p_trace_context text)
 RETURNS TABLE(id uuid, created boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
$function$;

-- function wfctl_wait_deadline -------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_wait_deadline(wf workflows, p_step integer, p_timeout double precision)
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE
AS $function$
    SELECT CASE WHEN wf.wait_step = p_step THEN wf.wait_deadline
                WHEN p_timeout IS NULL THEN NULL
                ELSE wfctl_now() + make_interval(secs => p_timeout) END;
$function$;

-- function wfctl_wake ----------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_wake(p_type text, p_payload text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'public', 'pg_temp'
AS $function$
BEGIN
    IF NOT wfctl_wake_idle(ARRAY[p_type], p_payload) THEN
        PERFORM pg_notify(wfctl_channel(), p_payload);
    END IF;
END;
$function$;

-- function wfctl_wake_at -------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_wake_at(p_priority integer, p_run_at timestamp with time zone, p_created timestamp with time zone)
 RETURNS text
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
    SELECT format('at %s %s %s', p_priority,
                  (extract(epoch FROM p_run_at) * 1000000)::bigint,
                  (extract(epoch FROM p_created) * 1000000)::bigint)
$function$;

-- function wfctl_wake_idle -----------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_wake_idle(p_types text[], p_payload text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    candidates text[];
BEGIN
    -- live by the worker's own rule (migration 0004), as recovery judges it
    SELECT array_agg(k.wake_channel ORDER BY k.id) INTO candidates
    FROM workers k
    WHERE k.idle AND k.stopped_at IS NULL AND k.wake_channel IS NOT NULL
      AND k.workflow_types && p_types
      AND k.heartbeat_at >= wfctl_now() - make_interval(secs => k.dead_after_seconds);
    IF candidates IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_notify(
        candidates[1 + (nextval('wfctl_wake_turn') % cardinality(candidates))::integer], p_payload);
    RETURN true;
END;
$function$;

-- function wfctl_watch_channel -------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_watch_channel()
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$SELECT 'wfctl_watch'::text$function$;

-- function wfctl_worker_channel ------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.wfctl_worker_channel(p_worker text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'public', 'pg_temp'
AS $function$
    SELECT left(wfctl_channel(), 45) || '.' || left(md5(p_worker), 16)
$function$;
