-- wfctl schema, version 27: the step a running run is in, as its worker's heartbeats report it.
--
-- A step's row is written with its result; until then nothing in the database said which step a
-- run was in. The stuck report (`wfctl stats`, `wfctl top`) names the step a run was in when its
-- worker went silent from these columns.
--
--   workflows.step_in_flight        the number of the step (or wait) the run's execution last
--                                   started, as its worker's last heartbeat reported it; NULL
--                                   before the first beat that saw one.
--   workflows.step_in_flight_name   its name.
--
-- Written by worker.heartbeat, on the rows it touches anyway (the run's updated_at), and not
-- cleared: a reader compares step_in_flight with current_step + 1 (the step after the last
-- checkpoint) before it trusts the name, so a report from an earlier step or execution is never
-- taken for the present one.
--
-- Both layouts: columns added to a partitioned table go to its partitions; without a default
-- no row is rewritten.

ALTER TABLE workflows ADD COLUMN step_in_flight integer;
ALTER TABLE workflows ADD COLUMN step_in_flight_name text;
