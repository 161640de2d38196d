"""The code in docs/api.md, docs/testing.md and docs/operations.md runs and does what the text
says.

A Markdown comment right before a code block marks it: ``<!-- sample: run -->`` (a Python script,
run with ``WFCTL_DSN`` naming a scratch database with the schema installed), ``<!-- sample: file
PATH -->`` (written to PATH in a scratch project, in which the scripts run; test files among
them are run with pytest, as the testing guide says to), ``<!-- sample: sql -->`` (run in the
scratch database before the scripts), ``<!-- sample: signature -->`` (a call's signature, shown
as Python but not code). Every other Python block must at least compile.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from helpers import HERE, isolated_env, rows, wait_for, wfctl_command, wfctl_process
from markdown_blocks import Block, blocks

import wfctl
from wfctl import exits

DOCS = HERE.parent / "docs"
API, TESTING, OPERATIONS = DOCS / "api.md", DOCS / "testing.md", DOCS / "operations.md"
SAMPLED = [API, TESTING, OPERATIONS]

pytestmark = pytest.mark.skipif(not API.exists(), reason="needs the source tree")


@dataclass
class Samples:
    files: dict[str, str] = field(default_factory=dict)
    runs: list[Block] = field(default_factory=list)
    sql: list[str] = field(default_factory=list)


def samples(document: Path) -> Samples:
    found = Samples()
    for block in blocks(document):
        if block.marker is None or not block.marker.startswith("sample:"):
            continue
        kind, _, arg = block.marker.removeprefix("sample:").strip().partition(" ")
        if kind == "run":
            assert block.lang == "python" and not arg
            found.runs.append(block)
        elif kind == "file":
            assert arg and not arg.startswith("/") and ".." not in arg, block.marker
            found.files[arg] = block.text
        elif kind == "sql":
            assert block.lang == "sql"
            found.sql.append(block.text)
        elif kind == "signature":  # a call's signature, not code to compile
            assert not arg
        else:
            raise AssertionError(f"{document.name}:{block.line}: unknown marker {block.marker!r}")
    return found


def project(document: Path, root: Path) -> Path:
    """The document's file samples, written out as a project."""
    root.mkdir(exist_ok=True)
    for name, text in samples(document).files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_every_python_block_compiles_and_every_marker_is_known():
    count = 0
    for document in SAMPLED:
        samples(document)  # unknown markers fail here
        for block in blocks(document):
            if block.lang == "python" and block.marker != "sample: signature":
                compile(block.text, f"{document.name}:{block.line}", "exec")
                count += 1
    assert count >= 10
    assert len(samples(API).runs) >= 4 and len(samples(TESTING).files) >= 5


def api_runs() -> list[Block]:
    return samples(API).runs if API.exists() else []


@pytest.mark.parametrize("block", api_runs(), ids=lambda b: f"api.md:{b.line}")
def test_api_sample_runs(block, dsn, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", block.text],
        cwd=project(API, tmp_path / "project"),
        env=isolated_env(WFCTL_DSN=dsn),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # `print(...)  # text`: the comment says what the line prints
    for said in re.findall(r"^\s*print\(.*\)\s+#\s*(.+)$", block.text, re.M):
        assert said in result.stdout, f"{said!r} not printed: {result.stdout}"


def test_exception_table_matches_the_exit_codes():
    table = {}
    for line in API.read_text().splitlines():
        match = re.match(r"^\| `wfctl\.(\w+)` \| ([^|]+) \| [^|]+ \| (\d+) \|$", line)
        if match:
            table[match.group(1)] = (match.group(2).strip(), int(match.group(3)))
    exported = {
        name
        for name in wfctl.__all__
        if isinstance(getattr(wfctl, name), type) and issubclass(getattr(wfctl, name), BaseException)
    }
    # PermanentError is the workflow's own verdict, not an error wfctl reports: documented with
    # the decorator, not in this table; ChildFailed (a PermanentError, raised inside a workflow)
    # has a row without an exit code
    verdicts = {name for name in exported if issubclass(getattr(wfctl, name), wfctl.PermanentError)}
    assert set(table) == exported - {"WfctlError"} - verdicts
    assert "`wfctl.PermanentError`" in API.read_text()
    assert "| `wfctl.ChildFailed` | `PermanentError` |" in API.read_text()
    for name, (parents, code) in table.items():
        cls = getattr(wfctl, name)
        assert exits.code_for(cls.__new__(cls)) == code, name  # code_for reads only the class
        assert [p.strip("` ").removeprefix("wfctl.") for p in parents.split(",")] == [
            b.__name__ for b in cls.__bases__
        ], name


# -- the testing guide's project, run with pytest as it says --------------------------------------


PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def run_guide_suite(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PYTEST, "--basetemp", str(root.parent / "basetemp"), "tests"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def guide_test_count() -> int:
    return sum(
        len(re.findall(r"^def test_", text, re.M))
        for name, text in samples(TESTING).files.items()
        if Path(name).name.startswith("test_")
    )


def test_testing_guide_suite_passes_against_a_server(pg_server, tmp_path):
    root = project(TESTING, tmp_path / "shop")
    result = run_guide_suite(root, isolated_env(TEST_ADMIN_DSN=pg_server.admin_dsn))
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(rf"\b{guide_test_count()} passed\b", summary) and "skipped" not in summary, summary


@pytest.fixture
def outside_basetemp() -> Iterator[Path]:
    """A directory outside pytest's own temporary tree: a pytest session starting meanwhile sets
    that tree to 0700, and an embedded server running as another user (as root: wfctlpg) would
    lose its data directory (as tests/conftest.py says of the suite's own server)."""
    home = Path(tempfile.mkdtemp(prefix="wfctl-docs-"))
    home.chmod(0o755)
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.slow
def test_testing_guide_suite_passes_on_the_embedded_server(outside_basetemp):
    """Without TEST_ADMIN_DSN the guide's conftest starts an embedded PostgreSQL and stops it."""
    root = project(TESTING, outside_basetemp / "shop")
    result = run_guide_suite(root, isolated_env())
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(rf"\b{guide_test_count()} passed\b", summary), summary
    running = [p for p in Path("/proc").glob("[0-9]*") if _cwd_under(p, outside_basetemp)]
    assert running == [], "the embedded server was left running"


def _cwd_under(proc: Path, root: Path) -> bool:
    try:
        return Path(os.readlink(proc / "cwd")).is_relative_to(root)
    except OSError:
        return False


# -- operations.md: cancel with the step in flight, then retry ----------------------------------


def test_cancel_in_flight_then_retry_runs_the_step_again_once_in_effect(dsn, tmp_path):
    guide = samples(OPERATIONS)
    root = project(OPERATIONS, tmp_path / "shop")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in guide.sql:
            conn.execute(statement)
    wid = wfctl.submit(dsn, "payment", {"order_id": "o-1", "amount": 5})
    key = f"{wid}:charge"
    env = isolated_env(WFCTL_DSN=dsn, SHOP_DSN=dsn)
    # hold the step inside its INSERT: an uncommitted row with its key makes it wait
    blocker = psycopg.connect(dsn)
    blocker.execute(
        "INSERT INTO payments (idempotency_key, order_id, amount) VALUES (%s, 'o-1', 5)", (key,)
    )
    log = tmp_path / "worker.log"
    args = ["worker", "--app", "shop.payments", "--poll", "100ms", "--heartbeat", "200ms"]
    args += ["--log-format", "plain"]
    proc = wfctl_process(args, env=env, log_path=log, cwd=root)
    try:
        wait_for(
            lambda: rows(
                dsn,
                "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO payments%%'",
            ),
            what="the step to wait inside its INSERT",
        )
        cancelled = wfctl_command("cancel", wid.hex, "--json", env=env, cwd=root)
        assert cancelled.exit_code == 0 and json.loads(cancelled.stdout)["previous_status"] == "running"
        blocker.rollback()  # the step's INSERT goes ahead and commits; the step returns
        wait_for(lambda: "lease lost" in log.read_text(), what="the checkpoint to be refused")
        assert rows(dsn, "SELECT status FROM workflows WHERE id = %s", wid) == [("cancelled",)]
        assert rows(dsn, "SELECT count(*) FROM workflow_steps WHERE workflow_id = %s", wid) == [(0,)]
        assert rows(dsn, "SELECT count(*) FROM payments") == [(1,)]  # the step's effect happened

        assert wfctl_command("retry", str(wid), env=env, cwd=root).exit_code == 0
        wait_for(
            lambda: rows(dsn, "SELECT status FROM workflows WHERE id = %s", wid) == [("completed",)],
            what="the retried run to complete",
        )
    finally:
        blocker.close()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0, log.read_text()
    ((payment_id, count),) = rows(dsn, "SELECT min(id), count(*) FROM payments")
    assert count == 1  # the step ran twice; its write happened once
    ((epoch, output),) = rows(dsn, "SELECT lease_epoch, output_data FROM workflows WHERE id = %s", wid)
    assert output == {"payment_id": payment_id}
    # the checkpoint is the second execution's: claim 1, cancel 2, retry 3, claim 4
    assert rows(dsn, "SELECT step_name, lease_epoch FROM workflow_steps WHERE workflow_id = %s", wid) == [
        ("charge", epoch)
    ]
    assert epoch == 4
    assert log.read_text().count(f"started   {wid}") == 2
