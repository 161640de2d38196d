#!/bin/sh
# The server's commit ceiling: how many single-row INSERT transactions per second PostgreSQL
# commits (durably, with the server's own fsync/synchronous_commit settings) from 4 clients.
#
#   bench/pgbench.sh DSN [SECONDS] [CLIENTS]        e.g. bench/pgbench.sh "host=/tmp/pg dbname=x" 10
#
# Creates the table wfctl_bench_commit in that database, runs pgbench with
# bench/pgbench_commit.sql, prints pgbench's summary, and drops the table again.
# bench/run.py measures the same thing on its own server (see bench/README.md).
set -eu
[ $# -ge 1 ] || { echo "usage: $0 DSN [SECONDS] [CLIENTS]" >&2; exit 2; }
dsn=$1
seconds=${2:-10}
clients=${3:-4}
jobs=$(( clients < 2 ? clients : 2 ))
here=$(cd "$(dirname "$0")" && pwd)

psql "$dsn" -X -q -v ON_ERROR_STOP=1 -c "SHOW fsync" -c "SHOW synchronous_commit" \
    -c "CREATE TABLE wfctl_bench_commit (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload jsonb)"
trap 'psql "$dsn" -X -q -c "DROP TABLE IF EXISTS wfctl_bench_commit"' EXIT
pgbench -n -f "$here/pgbench_commit.sql" -c "$clients" -j "$jobs" -T "$seconds" "$dsn"
