"""The stateful model's audit (tests/process/test_stateful.py): triggers that record every change of
a run's status, every step write, park, claim, limit change and schedule change with the
transaction that made it, and the check of cancelled trees that other tests run on it too."""

from __future__ import annotations

import collections

import psycopg

TERMINAL = ("completed", "failed", "cancelled")


# -- the audit ------------------------------------------------------------------------------------

AUDIT_SQL = """
CREATE TABLE sf_audit_wf (
    seq bigserial PRIMARY KEY,
    txid bigint NOT NULL DEFAULT txid_current(),
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    workflow_id uuid NOT NULL,
    op text NOT NULL,
    old_status text, new_status text,
    old_epoch bigint, new_epoch bigint,
    old_attempt int, new_attempt int,
    max_retries int,
    current_step int,
    lease_owner text,
    run_at timestamptz,
    deadline_at timestamptz,
    -- the run was claimed ahead and its worker had not started it (migration 0019: its
    -- ahead_seq above the owner's started_seq, read by the same transaction)
    never_started boolean,
    tx_now timestamptz NOT NULL DEFAULT now()  -- the writing transaction's now()
);
CREATE TABLE sf_audit_steps (
    seq bigserial PRIMARY KEY,
    txid bigint NOT NULL DEFAULT txid_current(),
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    workflow_id uuid NOT NULL,
    step_number int NOT NULL,
    step_name text,
    op text NOT NULL,
    status text,
    row_epoch bigint,
    row_attempt int,
    output jsonb,
    wf_status text,
    wf_epoch bigint
);
CREATE FUNCTION sf_audit_wf_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO sf_audit_wf (workflow_id, op, new_status, new_epoch, new_attempt, max_retries,
                                 current_step, lease_owner, run_at, deadline_at)
        VALUES (NEW.id, TG_OP, NEW.status, NEW.lease_epoch, NEW.attempt, NEW.max_retries,
                NEW.current_step, NEW.lease_owner, NEW.run_at, NEW.deadline_at);
    ELSE
        INSERT INTO sf_audit_wf (workflow_id, op, old_status, new_status, old_epoch, new_epoch,
                                 old_attempt, new_attempt, max_retries, current_step, lease_owner,
                                 run_at, deadline_at, never_started)
        VALUES (NEW.id, TG_OP, OLD.status, NEW.status, OLD.lease_epoch, NEW.lease_epoch,
                OLD.attempt, NEW.attempt, NEW.max_retries, NEW.current_step, NEW.lease_owner,
                NEW.run_at, NEW.deadline_at,
                OLD.ahead_seq > (SELECT k.started_seq FROM workers k WHERE k.id = OLD.lease_owner));
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER sf_audit_wf_insert AFTER INSERT ON workflows
    FOR EACH ROW EXECUTE FUNCTION sf_audit_wf_fn();
CREATE TRIGGER sf_audit_wf_update AFTER UPDATE ON workflows
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.lease_epoch IS DISTINCT FROM NEW.lease_epoch
          OR OLD.attempt IS DISTINCT FROM NEW.attempt OR OLD.max_retries IS DISTINCT FROM NEW.max_retries)
    EXECUTE FUNCTION sf_audit_wf_fn();
-- An AFTER ROW trigger runs at the end of the writing statement, inside it: it sees what that
-- statement did to the workflow row (the group commit updates the workflow and writes the step
-- in one statement), so wf_epoch is the epoch holding the lease when the step row was written.
CREATE FUNCTION sf_audit_steps_fn() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r workflow_steps%ROWTYPE;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    INSERT INTO sf_audit_steps (workflow_id, step_number, step_name, op, status, row_epoch, row_attempt,
                                output, wf_status, wf_epoch)
    SELECT r.workflow_id, r.step_number, r.step_name, TG_OP, r.status, r.lease_epoch, r.attempt,
           r.output_data, w.status, w.lease_epoch
    FROM (SELECT 1) AS one
    LEFT JOIN workflows w ON w.id = r.workflow_id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER sf_audit_steps_row AFTER INSERT OR UPDATE OR DELETE ON workflow_steps
    FOR EACH ROW EXECUTE FUNCTION sf_audit_steps_fn();
-- Every change of a run's parked wait (a park at a step, or its clearing), numbered from the
-- step audit's sequence: a run's parks and its step writes are ordered by its row lock, which
-- both hold, so their seqs compare in that order.
CREATE TABLE sf_audit_parks (
    seq bigint PRIMARY KEY DEFAULT nextval('sf_audit_steps_seq_seq'),
    txid bigint NOT NULL DEFAULT txid_current(),
    workflow_id uuid NOT NULL,
    wait_step int,
    wait_kind text,
    wait_topic text,
    epoch bigint
);
CREATE FUNCTION sf_audit_parks_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO sf_audit_parks (workflow_id, wait_step, wait_kind, wait_topic, epoch)
    VALUES (NEW.id, NEW.wait_step, NEW.wait_kind, NEW.wait_topic, NEW.lease_epoch);
    RETURN NULL;
END;
$$;
CREATE TRIGGER sf_audit_parks_update AFTER UPDATE ON workflows
    FOR EACH ROW
    WHEN (OLD.wait_step IS DISTINCT FROM NEW.wait_step OR OLD.wait_kind IS DISTINCT FROM NEW.wait_kind)
    EXECUTE FUNCTION sf_audit_parks_fn();
"""

# Flow control. sf_claims: every claim, per type and concurrency key, with the runs of
# the type (and key) that hold a lease right after it, counted by a statement of the trigger
# (a fresh READ COMMITTED snapshot, taken while the claim still holds the limit's row lock).
# sf_limit_changes: every change of a type's limits (by `wfctl limit`, or a worker declaring
# the code's), with the limits then in force; not the claims' own updates of the row (the
# rate's state, the key rotation's cursor). ``at`` is taken while the change holds the row's
# lock, as a limited claim's ``at`` is: the two compare exactly in lock order.
LIMITS_AUDIT_SQL = """
CREATE TABLE sf_claims (
    seq bigserial PRIMARY KEY,
    txid bigint NOT NULL DEFAULT txid_current(),
    at timestamptz NOT NULL DEFAULT clock_timestamp(),  -- the end of the claiming statement
    stmt_at timestamptz NOT NULL DEFAULT statement_timestamp(),  -- its snapshot is younger
    tx_now timestamptz NOT NULL DEFAULT now(),  -- the claim's now(): the rate's clock
    workflow_type text NOT NULL,
    concurrency_key text,
    claimed int NOT NULL,
    running int NOT NULL,
    key_running int
);
CREATE FUNCTION sf_claims_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO sf_claims (workflow_type, concurrency_key, claimed, running, key_running)
    SELECT c.workflow_type, c.concurrency_key, c.n,
           (SELECT count(*) FROM workflows w
            WHERE w.workflow_type = c.workflow_type AND w.status = 'running'),
           (SELECT count(*) FROM workflows w
            WHERE w.workflow_type = c.workflow_type AND w.status = 'running'
              AND w.concurrency_key = c.concurrency_key)
    FROM (SELECT n.workflow_type, n.concurrency_key, count(*)::int AS n
          FROM sf_new n JOIN sf_old o ON o.id = n.id
          WHERE o.status = 'pending' AND n.status = 'running'
          GROUP BY 1, 2) AS c;
    RETURN NULL;
END;
$$;
CREATE TRIGGER sf_claims AFTER UPDATE ON workflows
    REFERENCING OLD TABLE AS sf_old NEW TABLE AS sf_new
    FOR EACH STATEMENT EXECUTE FUNCTION sf_claims_fn();
CREATE TABLE sf_limit_changes (
    seq bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    visible_by timestamptz,  -- committed by then (the test fills it in after the change returned)
    workflow_type text NOT NULL,
    source text NOT NULL,  -- 'operator' (wfctl limit) or 'code' (a worker's declaration)
    concurrency int, key_concurrency int, rate_count int, rate_seconds float8  -- now in force
);
CREATE FUNCTION sf_limit_changes_fn() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    code boolean := NEW.code_updated_at IS NOT NULL;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        code := NEW.code_updated_at IS DISTINCT FROM OLD.code_updated_at;
    END IF;
    -- A worker's declaration is visible to every claim that starts after it: every worker
    -- declares before its first claim, and a second declaration of the same row waits for the
    -- first one's commit (the primary key).
    INSERT INTO sf_limit_changes (visible_by, workflow_type, source, concurrency, key_concurrency,
                                  rate_count, rate_seconds)
    VALUES (CASE WHEN code THEN clock_timestamp() END, NEW.workflow_type,
            CASE WHEN code THEN 'code' ELSE 'operator' END,
            coalesce(NEW.concurrency, NEW.code_concurrency),
            coalesce(NEW.key_concurrency, NEW.code_key_concurrency),
            CASE WHEN NEW.rate_count IS NOT NULL THEN NEW.rate_count ELSE NEW.code_rate_count END,
            CASE WHEN NEW.rate_count IS NOT NULL THEN NEW.rate_seconds ELSE NEW.code_rate_seconds END);
    RETURN NULL;
END;
$$;
CREATE TRIGGER sf_limit_changes_insert AFTER INSERT ON workflow_limits
    FOR EACH ROW EXECUTE FUNCTION sf_limit_changes_fn();
CREATE TRIGGER sf_limit_changes_update AFTER UPDATE ON workflow_limits
    FOR EACH ROW
    WHEN ((OLD.concurrency, OLD.key_concurrency, OLD.rate_count, OLD.rate_seconds, OLD.code_concurrency,
           OLD.code_key_concurrency, OLD.code_rate_count, OLD.code_rate_seconds, OLD.updated_at,
           OLD.code_updated_at)
          IS DISTINCT FROM
          (NEW.concurrency, NEW.key_concurrency, NEW.rate_count, NEW.rate_seconds, NEW.code_concurrency,
           NEW.code_key_concurrency, NEW.code_rate_count, NEW.code_rate_seconds, NEW.updated_at,
           NEW.code_updated_at))
    EXECUTE FUNCTION sf_limit_changes_fn();
"""

# Schedules: every change of a schedule's row, with the writing transaction's now():
# an add (INSERT, or an UPDATE by `schedule add` of an existing name), a pause, a resume, a
# firing (next_tick_at moved on, updated_at unchanged) and a delete. A firing locks the row, and
# so does every change: ``at``, taken under that lock, orders them exactly, and so does the
# ``at`` of each run the firing inserts (sf_audit_wf).
SCHEDULES_AUDIT_SQL = """
CREATE TABLE sf_schedule_changes (
    seq bigserial PRIMARY KEY,
    txid bigint NOT NULL DEFAULT txid_current(),
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    tx_now timestamptz NOT NULL DEFAULT now(),
    op text NOT NULL,
    name text NOT NULL,
    cron text, paused boolean, backfill boolean,
    next_tick_at timestamptz,
    definition_changed boolean  -- updated_at moved: anything but a firing
);
CREATE FUNCTION sf_schedule_changes_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO sf_schedule_changes (op, name) VALUES (TG_OP, OLD.name);
    ELSE
        INSERT INTO sf_schedule_changes (op, name, cron, paused, backfill, next_tick_at, definition_changed)
        VALUES (TG_OP, NEW.name, NEW.cron, NEW.paused, NEW.backfill, NEW.next_tick_at,
                TG_OP = 'INSERT' OR NEW.updated_at IS DISTINCT FROM OLD.updated_at);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER sf_schedule_changes AFTER INSERT OR UPDATE OR DELETE ON workflow_schedules
    FOR EACH ROW EXECUTE FUNCTION sf_schedule_changes_fn();
"""


def install_audit(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(AUDIT_SQL)
        conn.execute(LIMITS_AUDIT_SQL)
        conn.execute(SCHEDULES_AUDIT_SQL)


def check_cancelled_trees(conn: psycopg.Connection) -> None:
    """A cancel takes every unfinished descendant with it: for each change of a workflow to
    ``cancelled`` (the audit), each of its children that existed by then (its first audit row
    comes before, even in a transaction not yet committed: a fan-out the cancel waited for) was
    either finished already or cancelled in the same transaction. Grandchildren are the
    children's own cancels."""
    history: dict[str, list[tuple[int, int, str]]] = collections.defaultdict(list)
    for wid, seq, txid, status in conn.execute(
        "SELECT workflow_id::text, seq, txid, new_status FROM sf_audit_wf ORDER BY seq"
    ).fetchall():
        history[wid].append((seq, txid, status))
    children: dict[str, list[str]] = collections.defaultdict(list)
    for child, parent in conn.execute(
        "SELECT id::text, parent_id::text FROM workflows WHERE parent_id IS NOT NULL"
    ).fetchall():
        children[parent].append(child)
    for parent, events in history.items():
        before = None
        for seq, txid, status in events:
            if status == "cancelled" and before != "cancelled":
                for child in children.get(parent, []):
                    past = [e for e in history[child] if e[0] < seq]
                    if not past or any(t == txid and st == "cancelled" for _s, t, st in history[child]):
                        continue
                    assert past[-1][2] in TERMINAL, (
                        f"{parent} was cancelled (audit seq {seq}, txid {txid}) while its child {child} "
                        f"was {past[-1][2]}, and the cancel left the child so"
                    )
            before = status
