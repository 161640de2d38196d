"""A rolling upgrade from the last tagged release to this tree, under load.

The release before is built from its tag into a wheel and installed in a virtualenv of its own
(tests/releases.py). It installs the schema, and two of its workers run a steady load that its
own client submits (orders that sleep, start a child, write in a transactional step and wait for
a message). Then this tree's `wfctl init` upgrades the schema under them, this tree's workers
start beside them, and the old ones get SIGTERM. Every run completes as the Guarantees say: none
fails, no step runs twice, the transactional step's row is written once, and `wfctl workers`
lists both releases while they overlap. What the release before still needs is removed only by
an `init` after its workers have gone.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import psycopg
import pytest
import releases
from helpers import APPS, REPO, hermetic, isolated_env, rows, wait_for, wfctl_command

import wfctl
from wfctl import schema

FIRST_RELEASE = "0.2.0"


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, releases.Installed]:
    """The last release before this tree, built from its tag (or its commit) and installed."""
    if not (REPO / ".git").exists():
        pytest.skip("needs the git repository: the release before is built from its tag")
    found = releases.previous_release()
    if found is None:
        if releases.version_here() == FIRST_RELEASE:
            pytest.skip(f"{FIRST_RELEASE} is the first tagged release: there is none before it")
        pytest.fail(f"no release before {releases.version_here()} in CHANGELOG.md or the tags")
    version, revision = found
    root = tmp_path_factory.mktemp("previous")
    source = releases.export(revision, root / "source")
    wheel = releases.build(source, root / "dist")
    assert wheel.name == f"wfctl-{version}-py3-none-any.whl", f"{revision} is not release {version}"
    return version, releases.install(wheel, root / "venv")


class Release:
    """Processes of one release: its `python -m wfctl` from tests/apps."""

    def __init__(self, python: Path, dsn: str, tmp: Path, name: str) -> None:
        self.python, self.dsn, self.tmp, self.name = python, dsn, tmp, name
        self.env = isolated_env(WFCTL_DSN=dsn, WFCTL_TEST_LOG=str(tmp / "effects.log"))
        self.workers: list[subprocess.Popen[bytes]] = []

    def command(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), "-m", "wfctl", *args],
            cwd=APPS,
            env=hermetic(self.env, APPS),
            capture_output=True,
            text=True,
            timeout=120,
        )

    def start_worker(self) -> subprocess.Popen[bytes]:
        log = self.tmp / f"{self.name}-worker{len(self.workers)}.log"
        args = [
            "worker",
            "--app",
            "upgradeflows",
            "--concurrency",
            "16",
            "--poll",
            "100ms",
            "--heartbeat",
            "200ms",
        ]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [str(self.python), "-m", "wfctl", *args, "--log-format", "plain"],
                cwd=APPS,
                env=hermetic(self.env, APPS),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        proc.log_path = log  # type: ignore[attr-defined]
        self.workers.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


def _effects(tmp: Path) -> list[tuple[str, str, int]]:
    path = tmp / "effects.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [
        (run, step, int(pid)) for run, step, pid in (line.split() for line in lines if line.count(" ") == 2)
    ]


def _done(dsn: str) -> int:
    return rows(
        dsn, "SELECT count(*) FROM workflows WHERE workflow_type = 'upgrade_order' AND status = 'completed'"
    )[0][0]


def _live_releases(dsn: str) -> set[str]:
    return {
        version
        for (version,) in rows(
            dsn,
            "SELECT version FROM workers"
            " WHERE stopped_at IS NULL AND heartbeat_at > wfctl_now() - interval '5s'",
        )
    }


@pytest.mark.slow
def test_a_rolling_upgrade_from_the_release_before_under_load(previous, empty_dsn, tmp_path):
    version, installed = previous
    old = Release(installed.python, empty_dsn, tmp_path, "old")
    new = Release(Path(sys.executable), empty_dsn, tmp_path, "new")
    stop_file = tmp_path / "stop"
    load: subprocess.Popen[bytes] | None = None
    try:
        assert old.command("--version").stdout.startswith(f"wfctl {version} (schema version ")
        installed_by_old = old.command("init")
        assert installed_by_old.returncode == 0, installed_by_old.stderr
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            old_schema = schema.current_version(conn) or 0
            conn.execute("CREATE TABLE upgrade_ledger (workflow_id text PRIMARY KEY, amount int NOT NULL)")
        old_workers = [old.start_worker(), old.start_worker()]
        ids_file = tmp_path / "ids"
        load = subprocess.Popen(
            [str(installed.python), str(APPS / "upgrade_load.py"), empty_dsn, str(ids_file), str(stop_file)],
            cwd=tmp_path,
            env=isolated_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        wait_for(lambda: _done(empty_dsn) >= 20, timeout=60, what="the old release to complete 20 orders")

        if schema.latest_version() > old_schema:
            # this tree's worker, started before its init: refused, in one line, exit 5
            early = new.command("worker", "--app", "upgradeflows")
            assert early.returncode == 5, early.stderr
            assert f"older than this wfctl's {schema.latest_version()}" in early.stderr

        upgraded = new.command("init")
        assert upgraded.returncode == 0, upgraded.stderr
        in_flight_at_upgrade = rows(
            empty_dsn, "SELECT count(*) FROM workflows WHERE status IN ('pending', 'running')"
        )[0][0]
        if schema.contracts():
            assert "left for later" in upgraded.stderr and f"(wfctl {version})" in upgraded.stderr
        done_at_upgrade = _done(empty_dsn)
        # the old release goes on completing runs on the new schema
        wait_for(
            lambda: _done(empty_dsn) >= done_at_upgrade + 20, timeout=60, what="the old workers after init"
        )

        new.start_worker()
        new.start_worker()
        wait_for(
            lambda: _live_releases(empty_dsn) == {version, wfctl.__version__},
            timeout=60,
            what="both releases",
        )
        listed = json.loads(wfctl_command("--json", "workers", env=new.env).stdout)
        shown = {(w["version"], w["schema_version"]) for w in listed if w["state"] == "live"}
        assert (wfctl.__version__, schema.latest_version()) in shown
        assert version in {v for v, _ in shown}
        # the old release's client on the new schema: a submit and a send from its CLI
        by_old_cli = old.command("submit", "upgrade_order", '{"n": -1, "sleep": 0}')
        assert by_old_cli.returncode == 0, by_old_cli.stderr
        old_cli_run = by_old_cli.stdout.split()[-1]

        for proc in old_workers:
            proc.send_signal(signal.SIGTERM)
        for proc in old_workers:
            assert proc.wait(timeout=60) == 0, proc.log_path.read_text()  # type: ignore[attr-defined]
        assert old.command("send", old_cli_run, "go", '{"from": "cli"}').returncode == 0
        moved = _done(empty_dsn)
        wait_for(lambda: _done(empty_dsn) >= moved + 20, timeout=60, what="the new workers alone")
        stop_file.touch()
        assert load.wait(timeout=60) == 0, load.stdout.read().decode() if load.stdout else ""

        submitted = [line.split()[0] for line in ids_file.read_text().splitlines()] + [old_cli_run]
        wait_for(lambda: _done(empty_dsn) == len(submitted), timeout=120, what="every order")
        statuses = Counter(s for (s,) in rows(empty_dsn, "SELECT status FROM workflows"))
        assert statuses == {"completed": 2 * len(submitted)}  # each order and its child
        outputs = dict(
            rows(
                empty_dsn, "SELECT id::text, output_data FROM workflows WHERE workflow_type = 'upgrade_order'"
            )
        )
        for line in ids_file.read_text().splitlines():
            run, n = line.split()
            assert outputs[run]["n"] == int(n) and outputs[run]["made"] == 2 * int(n)
            assert outputs[run]["message"] == {"from": version}

        effects = _effects(tmp_path)
        twice = [key for key, count in Counter((run, step) for run, step, _ in effects).items() if count > 1]
        assert twice == []
        ledger = rows(empty_dsn, "SELECT count(*), count(DISTINCT workflow_id) FROM upgrade_ledger")[0]
        assert ledger == (len(submitted), len(submitted))
        old_pids = {p.pid for p in old_workers}
        by_run: dict[str, set[bool]] = {}
        for run, _, pid in effects:
            by_run.setdefault(run, set()).add(pid in old_pids)
        across = sum(1 for seen in by_run.values() if seen == {True, False})
        assert across > 0, "no run had steps on both releases"
        assert in_flight_at_upgrade > 0

        contracted = new.command("init")
        assert contracted.returncode == 0, contracted.stderr
        assert "left for later" not in contracted.stderr
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            assert schema.floor(conn) == max((c.version for c in schema.contracts()), default=0)
        if schema.contracts():
            refused = old.command("list")
            assert refused.returncode == 5 and "is too old for the database" in refused.stderr
        print(
            f"runs {len(submitted)}, in flight at the upgrade {in_flight_at_upgrade}, "
            f"with steps on both releases {across}, steps run twice {len(twice)}"
        )
    finally:
        stop_file.touch()
        if load is not None and load.poll() is None:
            load.kill()
        old.kill_all()
        new.kill_all()
