"""The documentation's scripts run and do what the text says (``tests/site_samples.py`` says how a
block is marked): every ``script`` sample of every page, in its page's project, against a scratch
database with no worker; the testing guide's project, run with pytest as the guide says to; the
cancel-then-retry scenario of the guide on steps that run twice; and the facts the pages state
about the code (the exception table, the schema version, the keys of ``wfctl workers --json``).
Every other Python block must at least compile.
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
from pathlib import Path

import psycopg
import pytest
from helpers import isolated_env, rows, wait_for, wfctl_command, wfctl_process
from markdown_blocks import Block, blocks
from site_samples import DOCS, README, every, page_files, pages, samples, shop_files, write
from site_samples import name as page_name

import wfctl
from wfctl import exits, schema

GUIDES, REFERENCE = DOCS / "guides", DOCS / "reference"
TESTING, TWICE = GUIDES / "testing.md", GUIDES / "idempotent-steps.md"
EXIT_CODES = REFERENCE / "exit-codes.md"

pytestmark = pytest.mark.skipif(not README.exists(), reason="needs the source tree")


def project(document: Path, root: Path) -> Path:
    """The page's own project: its file samples outside the shop, written out."""
    root.mkdir(exist_ok=True)
    return write(root, page_files(document))


def test_every_python_block_compiles_and_every_marker_is_known():
    count = 0
    for document in pages():
        samples(document)  # unknown markers fail here
        for block in blocks(document):
            if block.lang == "python" and block.marker != "sample: signature":
                compile(block.text, f"{page_name(document)}:{block.line}", "exec")
                count += 1
    assert count >= 35
    assert len(every("scripts")) >= 6 and len(samples(TESTING).files) >= 5


@pytest.mark.parametrize(
    "page, block", [pytest.param(p, b, id=f"{page_name(p)}:{b.line}") for p, b in every("scripts")]
)
def test_script_sample_runs(page: Path, block: Block, dsn, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", block.text],
        cwd=project(page, tmp_path / "project"),
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


def test_every_schema_version_named_is_the_latest():
    """A page that shows the schema version `wfctl init` reports shows the real one."""
    latest = schema.latest_version()
    named = [
        (page_name(page), int(number))
        for page in pages()
        for number in re.findall(r"schema version (\d+)", page.read_text())
    ]
    assert [(page, number) for page, number in named if number != latest] == []


def test_the_workers_json_keys_are_the_documented_ones(dsn, tmp_path):
    """Every key of `wfctl workers --json` is named where the operations guide describes it,
    with the heartbeat's age and interval told apart."""
    guide = (GUIDES / "operate.md").read_text()
    paragraph = guide[guide.index("`--json` gives each worker") :].split("\n\n")[0]
    log = tmp_path / "worker.log"
    args = ["worker", "--app", "testflows", "--heartbeat", "200ms", "--log-format", "plain"]
    proc = wfctl_process(args, env=isolated_env(WFCTL_DSN=dsn), log_path=log)
    try:
        wait_for(lambda: " ready " in log.read_text() or proc.poll() is not None, what="the worker")
        shown = wfctl_command("workers", "--json", env=isolated_env(WFCTL_DSN=dsn))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert shown.exit_code == 0, shown.stderr
    (worker,) = json.loads(shown.stdout)
    assert [key for key in worker if f"`{key}`" not in paragraph] == []
    assert (
        "`heartbeat_age_seconds` (the age" in paragraph and "`heartbeat_seconds` (the interval" in paragraph
    )


def test_exception_table_matches_the_exit_codes():
    table = {}
    for line in EXIT_CODES.read_text().splitlines():
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
    # and StepError (raised inside a workflow, to the workflow) has one too
    verdicts = {name for name in exported if issubclass(getattr(wfctl, name), wfctl.PermanentError)}
    assert set(table) == exported - {"WfctlError", "StepError"} - verdicts
    assert "`wfctl.PermanentError`" in EXIT_CODES.read_text()
    assert "| `wfctl.ChildFailed` | `PermanentError` |" in EXIT_CODES.read_text()
    assert "| `wfctl.StepError` | `Exception` |" in EXIT_CODES.read_text()
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


# -- the guide on steps that run twice: cancel with the step in flight, then retry ------------


def test_cancel_in_flight_then_retry_runs_the_step_again_once_in_effect(dsn, tmp_path):
    guide = samples(TWICE)
    root = write(tmp_path / "shop", {"shop/__init__.py": "", **shop_files()})
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in guide.sql:
            conn.execute(statement)
    wid = wfctl.submit(dsn, "payment", {"order_id": "o-1", "amount": 5})
    key = f"{wid}:charge"
    env = isolated_env(WFCTL_DSN=dsn, SHOP_DSN=dsn)
    # hold the step inside its INSERT: an uncommitted row with its key makes it wait
    blocker = psycopg.connect(dsn)
    blocker.execute("INSERT INTO payments (idempotency_key, order_id, amount) VALUES (%s, 'o-1', 5)", (key,))
    log = tmp_path / "worker.log"
    args = ["worker", "--app", "shop.charges", "--poll", "100ms", "--heartbeat", "200ms"]
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
