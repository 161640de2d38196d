-- pgbench script for bench/pgbench.sh and bench/run.py: one single-row INSERT per transaction,
-- so pgbench's tps is the number of durable (WAL-flushed) commits the server sustains.
-- Needs:  CREATE TABLE wfctl_bench_commit (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
--                                          payload jsonb);
INSERT INTO wfctl_bench_commit (payload) VALUES ('{"step": 1}');
