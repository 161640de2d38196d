-- wfctl schema, version 24: the tries of a step, and the step calls a worker abandoned.
--
-- A step function may be given retries, a backoff and a timeout (@wfctl.step): its tries run
-- within one attempt of the run, and a backoff too long to wait in the worker parks the run
-- until the next try (docs/decisions/2026-12-06-step-options.md).
--
--   workflow_steps.tries     how many tries the step's function took in the attempt that wrote
--                            the row (the last one returned, or raised). 1 for every row
--                            written before, and for the coordination steps.
--   workflow_steps.status    a new word, 'retrying' (the column has no CHECK constraint): the
--                            step's tries failed so far and the run parked until the next one;
--                            output_data {"tries", "type", "message", "next_try_at"}, the last
--                            try's error in error_message. Not a result: the claim returns it
--                            with the journal (worker.claim), and a replay in the same attempt
--                            tries the function again and goes on counting. The step's next
--                            write (completed, handled or failed) replaces it; `wfctl retry`
--                            removes it (control.retry).
--   workers.abandoned_calls  the worker's step calls that outlived their timeout and still run
--                            in their threads (wfctl/caller.py), written by its heartbeat and
--                            shown by `wfctl workers`.
--
-- A run parked for its step's next try is 'pending' with run_at at that try and no wait_kind,
-- as a run backing off after a failed attempt is.
--
-- Both layouts: a column added to a partitioned table goes to its partitions; the constant
-- defaults rewrite no rows.

ALTER TABLE workflow_steps ADD COLUMN tries integer NOT NULL DEFAULT 1;
ALTER TABLE workers ADD COLUMN abandoned_calls integer NOT NULL DEFAULT 0;
