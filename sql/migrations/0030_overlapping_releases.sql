-- wfctl schema, version 30: two releases run side by side during an upgrade
-- (docs/guides/upgrade.md).
--
--   workers.schema_version   the schema version a worker's release was built for (the number
--                            of its latest migration); NULL for a worker of a release before
--                            this column. `wfctl init` removes nothing such a release needs
--                            while one of its workers heartbeats.
--
-- From this version on, a release runs on any schema from its own version up, as long as the
-- schema still keeps what it needs: migrations only add, and what a release no longer needs is
-- removed later by a contract (sql/contracts/NNNN_*.sql), which `wfctl init` applies once no
-- live worker of an older release remains. A contract is recorded in wfctl_schema_migrations
-- with its number negated (wfctl/schema.py): the highest number negated is the oldest release
-- schema the database still runs, readable by every role that may read the schema version.
--
-- Only adds: a nullable column (no rewrite, a brief lock on the small workers table).

ALTER TABLE workers ADD COLUMN schema_version integer;

