-- Named blocks of bench/throughput.py (throughput to the CPU limit).

-- name: enqueue
-- naive and floor: N runs of one type in one statement (one transaction), as a user of a queue
-- would enqueue them in plain SQL.
INSERT INTO workflows (workflow_type, input_data)
SELECT %(type)s, %(input)s::jsonb
FROM generate_series(1, %(n)s);

-- name: completed
-- The clock's poll: how many runs are completed (the database holds one side's runs only).
SELECT count(*) FROM workflows WHERE status = 'completed';

-- name: backends
-- On the server's own database: the worker processes' sessions in the side's database, and how
-- many of them are idle (connected and between statements, or waiting for their pool's
-- listening duty: an advisory lock, wfctl/worker/listening.py).
SELECT count(*) AS connected,
       count(*) FILTER (WHERE state = 'idle' OR wait_event = 'advisory') AS idle
FROM pg_stat_activity
WHERE datname = %(db)s AND application_name = %(app)s;

-- name: gone
-- On the server's own database: sessions left in the side's database besides the benchmark's.
SELECT count(*) FROM pg_stat_activity WHERE datname = %(db)s AND application_name <> %(me)s;

-- name: waits
-- --waits: what every session of the side's database is doing right now (sampled).
SELECT application_name, state, wait_event_type, wait_event
FROM pg_stat_activity
WHERE datname = %(db)s AND application_name <> %(me)s AND backend_type = 'client backend';
