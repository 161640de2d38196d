-- wfctl schema, version 5.
--
-- Every attempt is kept. A row per execution of a workflow, that is per lease: the claim
-- inserts it (worker, epoch, attempt number, start), and whatever ends the execution closes it
-- with its outcome:
--   completed  the run completed;
--   error      the attempt failed (error and traceback kept; the run retries or fails);
--   parked     a durable sleep parked the run (it resumes in a new execution);
--   released   the worker handed it back (shutdown, or a claim whose reply was lost);
--   abandoned  the worker stopped heartbeating and recovery requeued (or failed) the run;
--   cancelled  an operator cancelled it while it ran.
-- ended_at NULL: the execution is still running (or its worker died and nobody has recovered
-- it yet). Rows go with their workflow (prune).
--
-- workflows.error_traceback holds the traceback of the latest error (error_message keeps the
-- one-line "ValueError: bad sku"), for `show --traceback` and `--json`.

CREATE TABLE workflow_attempts (
    workflow_id  uuid NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
    lease_epoch  bigint NOT NULL,
    attempt      int NOT NULL,
    worker_id    text,
    started_at   timestamptz NOT NULL DEFAULT now(),
    ended_at     timestamptz,
    outcome      text CHECK (outcome IN ('completed', 'error', 'parked', 'released',
                                         'abandoned', 'cancelled')),
    last_step    int,          -- the last checkpointed step when it ended
    error        text,
    traceback    text,
    PRIMARY KEY (workflow_id, lease_epoch)
);

ALTER TABLE workflows ADD COLUMN error_traceback text;
