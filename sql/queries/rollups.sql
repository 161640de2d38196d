-- The rollups of finished runs that stats and metrics read (migration 0028): what a worker's
-- rollups duty calls (wfctl/rollups.py, wfctl/worker/rollups.py).

-- name: due
SELECT wfctl_rollup_due() AS due;

-- name: refresh
SELECT wfctl_rollup_refresh(%(hours)s) AS hours;
