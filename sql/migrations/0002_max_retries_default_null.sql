-- wfctl schema, version 2.
--
-- workflows.max_retries no longer defaults to 3: a row that does not set it (a plain INSERT of
-- the reference columns, as wfctl_submit() without p_max_retries always did) keeps NULL, and
-- the worker that claims it fills in the policy its workflow type was registered with. Rows
-- stored before this migration keep the value they have (an explicit 3 cannot be told apart
-- from the old default).

ALTER TABLE workflows ALTER COLUMN max_retries DROP DEFAULT;
