-- Reports read from a streaming standby (`--replica`, `[reports] dsn`; wfctl/replica.py): how
-- far behind the primary is what it shows?

-- name: status
-- On a standby: the WAL it received and replayed, when the last replayed transaction committed
-- on the primary, whether replay is paused, and whether its WAL receiver is streaming now. All
-- NULL but standby = false on a server that is not in recovery.
SELECT pg_is_in_recovery() AS standby,
       CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() END AS paused,
       extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 AS replayed_age,
       pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::float8 AS unreplayed_bytes,
       (SELECT status FROM pg_stat_wal_receiver) AS receiver;
