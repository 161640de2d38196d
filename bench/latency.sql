-- Named blocks of bench/latency.py (the start latency of a one-step workflow on an idle worker).

-- name: registered
-- The worker is up: its row in `workers` (written by its first heartbeat, before its "ready"
-- line). The database is the round's own: no other worker writes here.
SELECT count(*) FROM workers WHERE stopped_at IS NULL;
