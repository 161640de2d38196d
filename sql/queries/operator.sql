-- The operator API (wfctl/operator.py): wfctl.get, list, cancel and retry run the blocks of
-- reports.sql, keys.sql and control.sql; this is what they add.

-- name: begin
-- A statement that does nothing: on a connection not in autocommit mode with no transaction
-- open, psycopg begins the caller's transaction before it (as before any statement), so that
-- control.cancel and control.retry run in a savepoint of that transaction, which the caller
-- commits or rolls back, instead of in a transaction of their own that would commit.
SELECT;
