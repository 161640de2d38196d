-- wfctl schema, version 19: a run claimed ahead is told apart from a run that started.
--
-- A worker claims up to twice its concurrency: the runs beyond its free threads wait in its
-- backlog, claimed ahead, for a thread (README, "Flow control"). Before, the database could
-- not tell them from the runs that had started: when their worker died, the sweep and
-- `wfctl recover` charged each of them an attempt although none of its code had run (with
-- max_retries 0 it ended failed, "abandoned ... no retries left").
--
--   workflows.ahead_seq  set by the claim that took the run beyond the worker's free threads:
--                        its place in the order in which that worker starts what it claimed
--                        ahead (1, 2, 3, ... per worker process); NULL for a run claimed into
--                        a free thread. Cleared by a hand-back and by recover.
--   workers.started_seq  the ahead_seq of the last run claimed ahead that the worker started:
--                        it writes it, and that commits, before any of those runs' code runs
--                        (in the group commit that frees their threads, worker.flush, or on
--                        its own, worker.start_ahead). One write per commit, not per run.
--
-- A running run whose ahead_seq is above its owner's started_seq never started: recover (and
-- the sweep) hands it back without charging an attempt (its attempt-history row ends
-- 'released', as at a SIGTERM); a run that started is charged as before. The worker hands back
-- what found no thread within a second (worker.release_owned).
--
-- Both layouts: the column is added to workflows, partitioned or not (a partitioned table
-- passes it to its partitions); the defaults rewrite no rows.

ALTER TABLE workflows ADD COLUMN ahead_seq bigint;
ALTER TABLE workers ADD COLUMN started_seq bigint NOT NULL DEFAULT 0;
