-- The partitioned layout (wfctl/partitions.py; migration 0010 defines the functions).

-- name: layout
-- 'partitioned' or 'unpartitioned', and the partition interval and how many intervals ahead
-- wfctl keeps partitions (NULL: unpartitioned).
SELECT wfctl_layout() AS layout,
       wfctl_partition_interval() AS interval,
       (SELECT value::integer FROM wfctl_settings WHERE name = 'partition_ahead') AS ahead;

-- name: convert
-- `wfctl db partition`, `wfctl init --partitioned`: in the caller's transaction.
SELECT workflows, steps, attempts, partitions
FROM wfctl_partition_convert(make_interval(days => %(days)s), %(ahead)s);

-- name: analyze
ANALYZE workflows, workflow_steps, workflow_attempts;

-- name: ensure
-- Partitions up to the setting's intervals ahead (a worker duty, init, prune), and whether the
-- layout is the partitioned one (the worker's claims then take a floor: wfctl/worker/claims.py).
SELECT created, moved, busy, wfctl_layout() = 'partitioned' AS partitioned
FROM wfctl_ensure_partitions();

-- name: cutoff
SELECT (SELECT wfctl_now()) - make_interval(secs => %(older_than)s::float8) AS cutoff;

-- name: droppable
-- prune's candidates: the intervals (from the workflows partitions) that end before the cutoff,
-- oldest first.
SELECT range_start, range_end
FROM wfctl_partitions()
WHERE parent = 'workflows' AND NOT is_default AND range_end <= %(cutoff)s
ORDER BY range_start;

-- name: prune_partition
-- One interval: dropped, prunable (dry run) or kept; wfctl_prune_partition says how.
SELECT state, workflows, steps
FROM wfctl_prune_partition(%(start)s, %(end)s, %(statuses)s::text[], %(cutoff)s, %(dry_run)s,
                           %(lock_timeout)s);

-- name: list
-- `wfctl db status`: every partition with its range, the planner's row estimate (reltuples:
-- -1 until the first VACUUM or ANALYZE) and its size on disk (table, indexes, TOAST).
SELECT p.parent, p.partition, p.range_start, p.range_end, p.is_default,
       greatest(c.reltuples, 0)::bigint AS rows_estimate,
       pg_total_relation_size(c.oid) AS bytes
FROM wfctl_partitions() p
JOIN pg_class c ON c.oid = to_regclass(quote_ident(current_schema()) || '.' || quote_ident(p.partition))
ORDER BY p.parent, p.is_default, p.range_start;
