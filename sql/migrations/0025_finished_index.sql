-- wfctl schema, version 25: the runs that finished lately, found by when they finished.
--
-- `wfctl top` counts, once per refresh, the runs of each type that finished in the last ten
-- minutes (sql/queries/top.sql, finished). Without an index on finished_at that is a scan of
-- the whole table (300 ms and 270 MB read at a million runs); with it, a few index pages.
--
--   workflows_finished_idx   finished_at, only where it is set: an unfinished run has no
--                            entry, so a run adds one entry when it finishes (its finishing
--                            update writes new entries in the status index already), and a
--                            retry's update another.
--
-- Both layouts: an index created on the partitioned table goes to each partition, and a
-- conversion to the partitioned layout later keeps it (it recreates every index).

CREATE INDEX workflows_finished_idx ON workflows (finished_at) WHERE finished_at IS NOT NULL;
