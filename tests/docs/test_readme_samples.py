"""The samples of the README and the documentation site that run on the shop application
(``tests/site_samples.py`` says how a block is marked): every ``run`` sample on a real worker
that runs every file sample under ``shop/``, every console sample's ``wfctl`` commands against
wfctl's own command line, the message sent from SQL, and the ``ctx.patched`` walk-through
deployed in turn to a worker.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from helpers import isolated_env, rows, wait_for, wfctl_command, wfctl_process
from markdown_blocks import Block
from site_samples import README, every, name, pages, samples, shop_files, write

import wfctl

APP = "shop_app"  # the module that imports every file sample, for one worker to run them all

pytestmark = pytest.mark.skipif(not README.exists(), reason="needs the source tree")


def project(root: Path) -> Path:
    """The shop written out as a project, with the module a worker runs it from."""
    files = shop_files()
    write(root, {"shop/__init__.py": "", **files})
    modules = ", ".join(Path(path).stem for path in sorted(files) if path.count("/") == 1)
    (root / f"{APP}.py").write_text(f"from shop import {modules}  # noqa: F401\n")
    return root


def deploys() -> dict[int, tuple[str, str]]:
    (found,) = [samples(page).deploys for page in pages() if samples(page).deploys]
    return found


def start_worker(root: Path, dsn: str, app: str, log: Path) -> subprocess.Popen[bytes]:
    args = ["worker", "--app", app, "--heartbeat", "200ms", "--poll", "100ms", "--log-format", "plain"]
    # a module rewritten within the same second must not be read from a stale bytecode file
    env = isolated_env(WFCTL_DSN=dsn, PYTHONDONTWRITEBYTECODE="1")
    proc = wfctl_process(args, env=env, log_path=log, cwd=root)
    wait_for(lambda: " ready " in log.read_text() or proc.poll() is not None, what="the worker to start")
    assert proc.poll() is None, log.read_text()
    return proc


def stop_worker(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, log.read_text()


def test_every_sample_is_known_and_compiles():
    texts = [(name(page), b.text) for page, b in [*every("runs"), *every("scripts")]]
    texts += [("shop", text) for text in shop_files().values()]
    texts += [("deploy", text) for _, text in deploys().values()]
    for where, text in texts:
        compile(text, where, "exec")
    assert set(shop_files()) >= {
        "shop/orders.py",
        "shop/approvals.py",
        "shop/checkout.py",
        "shop/reports.py",
        "shop/parcels.py",
        "shop/quotas.py",
    }
    assert len(samples(README).runs) >= 1 and samples(README).consoles
    assert len(every("runs")) >= 8 and sorted(deploys()) == [0, 1, 2] and len(every("consoles")) >= 10


@pytest.mark.parametrize(
    "page, block", [pytest.param(p, b, id=f"{name(p)}:{b.line}") for p, b in every("runs")]
)
def test_run_sample(page: Path, block: Block, dsn, tmp_path):
    root = project(tmp_path / "project")
    log = tmp_path / "worker.log"
    worker = start_worker(root, dsn, APP, log)
    try:
        result = subprocess.run(
            [sys.executable, "-c", block.text],
            cwd=root,
            env=isolated_env(WFCTL_DSN=dsn),
            capture_output=True,
            text=True,
            timeout=90,
            stdin=subprocess.DEVNULL,
        )
    finally:
        stop_worker(worker, log)
    assert result.returncode == 0, result.stdout + result.stderr + log.read_text()
    said = re.findall(r"^\s*print\(.*\)\s+#\s*(.+)$", block.text, re.M)
    assert said, "a run sample says what it prints"
    for text in said:
        assert text in result.stdout, f"{text!r} not printed: {result.stdout}"


def test_sql_sample_sends_a_message(dsn, conn):
    (statement,) = [sql for page in pages() for sql in samples(page).sql if "wfctl_send(" in sql]
    (wid,) = re.findall(r"'([0-9a-f-]{36})'", statement)
    conn.execute("INSERT INTO workflows (id, workflow_type) VALUES (%s, 'refund')", (wid,))
    first = conn.execute(statement).fetchone()
    again = conn.execute(statement).fetchone()  # the same key: the same message
    assert first == again and isinstance(first[0], int)
    assert rows(dsn, "SELECT topic, payload, idempotency_key FROM workflow_messages") == [
        ("approval", {"approved": True, "by": "ada"}, "approval-A-23")
    ]


def _wfctl_commands(line: str) -> list[list[str]]:
    """The wfctl command lines in one shell line of a console sample, shell variables made
    concrete."""
    line = line.replace('"$id"', "$id").replace("$id", "3fbcba76-b3d4-4e45-a793-9e48f74a7549")
    line = line.replace("$status", "pending")
    found = []
    for match in re.finditer(r"(?:^|[;(|]\s*|\bdo\s+)wfctl\s+([^;|)]*)", line):
        found.append(shlex.split(match.group(1)))
    return found


def _parse(args: list[str]) -> None:
    """Parse ``wfctl ARGS`` with wfctl's own command line, running nothing."""
    import typer

    from wfctl.cli.app import app

    group = typer.main.get_command(app)
    ctx = group.make_context("wfctl", list(args))
    rest = list(ctx.args)
    name = args[len(args) - len(rest) - 1]
    command = group.commands[name]  # type: ignore[attr-defined]
    command.make_context(name, rest, parent=ctx)


def test_console_samples_use_real_commands():
    count = 0
    for _, block in every("consoles"):
        for line in block.text.splitlines():
            if line.startswith("$ "):
                for args in _wfctl_commands(line[2:]):
                    _parse(args)
                    count += 1
    assert count >= 30


def test_patched_deploy_walkthrough(dsn, tmp_path):
    """The three versions of shop/shipments.py deployed in turn under unfinished runs, as the
    README's steps say: a run from before deploy 1 finishes on its old steps, a run that took the
    patch finishes after deploy 2 (its marker skipped), the check of step 2 names the run that is
    not safe, and that run fails under deploy 2."""
    versions = deploys()
    root = tmp_path / "project"
    (root / "shop").mkdir(parents=True)
    (root / "shop" / "__init__.py").write_text("")
    log = tmp_path / "worker.log"
    env = isolated_env(WFCTL_DSN=dsn)

    def deploy(number: int) -> subprocess.Popen[bytes]:
        path, text = versions[number]
        (root / path).write_text(text)
        return start_worker(root, dsn, "shop.shipments", log)

    def parked(wid: object) -> bool:
        return rows(dsn, "SELECT wait_kind FROM workflows WHERE id = %s", wid) == [("message",)]

    def steps(wid: object) -> list[str]:
        return [
            name
            for (name,) in rows(
                dsn, "SELECT step_name FROM workflow_steps WHERE workflow_id = %s ORDER BY step_number", wid
            )
        ]

    worker = deploy(0)
    old = wfctl.submit(dsn, "shipment", {"order": "A-1"})  # finishes on deploy 1
    unsafe = wfctl.submit(dsn, "shipment", {"order": "C-1"})  # still unfinished at deploy 2
    wait_for(lambda: parked(old) and parked(unsafe), what="the old runs to wait for 'delivered'")
    stop_worker(worker, log)

    worker = deploy(1)
    deployed = datetime.now().astimezone()
    patched = wfctl.submit(dsn, "shipment", {"order": "B-1"})
    wait_for(lambda: parked(patched), what="the new run to wait for 'delivered'")
    wfctl.send(dsn, old, "delivered")
    assert wfctl.result(dsn, old, timeout=30) == {"label": "DHL-A-1"}
    assert steps(old) == ["label", "recv:delivered", "review"]
    stop_worker(worker, log)

    # step 2's check: the oldest unfinished run was created before the deploy, so not yet
    if shutil.which("jq"):
        (block,) = [b for _, b in every("consoles") if "jq" in b.text]
        (command,) = [line[2:] for line in block.text.splitlines() if line.startswith("$ ")]
        check = subprocess.run(
            ["bash", "-c", command.replace("wfctl ", f"{sys.executable} -m wfctl ")],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert check.returncode == 0, check.stderr
        pending, running = check.stdout.split()
        assert running == "none" and datetime.fromisoformat(pending) < deployed, check.stdout
        assert rows(dsn, "SELECT id FROM workflows WHERE created_at = %s", pending) == [(unsafe,)]

    worker = deploy(2)
    try:
        wfctl.send(dsn, patched, "delivered")
        assert wfctl.result(dsn, patched, timeout=30) == {"label": "UPS-B-1"}
        assert steps(patched) == [
            "patch:ups-with-customs",
            "customs",
            "label_ups",
            "recv:delivered",
            "review",
        ]
        wfctl.send(dsn, unsafe, "delivered")
        with pytest.raises(wfctl.WorkflowFailed) as failed:
            wfctl.result(dsn, unsafe, timeout=30)
        assert "workflow code changed under a running workflow" in str(failed.value.error)
    finally:
        stop_worker(worker, log)
    shown = wfctl_command("show", str(patched), "--json", env=env, cwd=root)
    assert shown.exit_code == 0 and json.loads(shown.stdout)["workflow"]["status"] == "completed"


def test_patched_is_true_on_new_runs_false_on_replays_of_old_ones():
    """The walk-through's rules over a journal in memory: deploy 1 on a run that recorded the
    old step 1, on a fresh run, and deploy 2 on a run that recorded the marker."""
    from wfctl.context import Context, MemoryJournal
    from wfctl.registry import Registry

    modules = {}
    for number, (_, text) in deploys().items():
        registry = Registry()  # each version in a registry of its own
        private = text.replace(
            '@wfctl.workflow("shipment")', '@wfctl.workflow("shipment", registry=registry)'
        )
        assert private != text
        exec(compile(private, f"deploy {number}", "exec"), {"registry": registry})
        entry = registry.get("shipment")
        assert entry is not None
        modules[number] = entry.fn

    def run(number: int, journal: MemoryJournal) -> object:
        return modules[number](Context("s-1", "shipment", {"order": "X"}, 1, journal), {"order": "X"})

    old = MemoryJournal()
    old.messages["delivered"] = [None]
    run(0, old)  # the old code, to the end
    old_steps = dict(old.steps)
    replay = MemoryJournal(old_steps)
    assert run(1, replay) == {"label": "DHL-X"}  # patched() was False: the old branch replayed

    fresh = MemoryJournal()
    fresh.messages["delivered"] = [None]
    assert run(1, fresh) == {"label": "UPS-X"}
    assert fresh.steps[1].name == "patch:ups-with-customs"
    assert run(2, MemoryJournal(dict(fresh.steps))) == {"label": "UPS-X"}  # the marker is skipped


def test_the_coordination_guide_shows_every_wait_exit_code():
    text = (README.parent / "docs" / "guides" / "coordination.md").read_text()
    for code, meaning in ((0, "completed"), (11, "failed"), (12, "cancelled"), (13, "passed first")):
        assert re.search(rf"^\| {code} \| [^|]*{meaning}", text, re.M), code
