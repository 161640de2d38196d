"""The production examples in examples/ work as written, as far as this
machine can run them: the deployment guide quotes them unchanged; each cron line runs under cron's own
environment (``PATH=/usr/bin:/bin``, no WFCTL_* or PG*, from ``/``) against a test database,
with the example's paths replaced by this checkout's; the systemd unit passes ``systemd-analyze
verify`` (where it is installed), its keys say what the deployment guide says, its ExecStart runs a worker
and the exit codes it refuses to restart on are the ones wfctl gives for those failures; the
Kubernetes manifests parse, their commands parse with wfctl's own command line, and the jobs run
with the ConfigMap's wfctl.toml and the password in PGPASSWORD, as the pods would."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import APPS, HERE, free_port, rows, wait_for, wfctl_process, with_db
from markdown_blocks import blocks
from psycopg import sql
from report_rows import db_now, worker, workflow

from wfctl import exits
from wfctl.config import load_config
from wfctl.prometheus import GENERATED
from wfctl.queries import composed

ROOT = HERE.parent
EXAMPLES = ROOT / "examples"
CRON = EXAMPLES / "cron" / "wfctl.cron"
UNIT = EXAMPLES / "systemd" / "wfctl-worker@.service"
K8S = EXAMPLES / "kubernetes"
QUOTING = [ROOT / "docs" / "guides" / "deploy.md"]  # the documents that quote the examples

pytestmark = pytest.mark.skipif(not EXAMPLES.is_dir(), reason="needs the source tree")

# The example's paths, and what stands in for each here (longest first: /srv/shop/.venv/bin/wfctl
# before /srv/shop).
VENV_WFCTL = "/srv/shop/.venv/bin/wfctl"
PROJECT = "/srv/shop"
CONFIG = "/etc/wfctl/wfctl.toml"
TEXTFILE_DIR = "/var/lib/node_exporter/textfile"
K8S_WFCTL = "/app/.venv/bin/wfctl"


def wfctl_script() -> Path:
    """The ``wfctl`` console script of the virtualenv running the tests."""
    script = Path(sys.executable).parent / "wfctl"
    if not script.exists():
        pytest.skip(f"no wfctl console script beside {sys.executable} (install the package)")
    return script


def cron_env(home: Path) -> dict[str, str]:
    """What cron gives a job: nothing of the caller's environment."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "SHELL": "/bin/sh", "LOGNAME": "shop"}


def write_config(path: Path, dsn: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"[database]\ndsn = {json.dumps(dsn)}\n")  # a JSON string is a TOML one
    return path


# -- the deployment guide quotes the files --------------------------------------------------------------


def example_files() -> list[Path]:
    return sorted(p for p in EXAMPLES.rglob("*") if p.is_file())


def quoted_examples() -> dict[str, list[str]]:
    """example path -> the texts of the blocks that quote it (a block whose first line is a
    comment naming the file: ``# examples/...:``)."""
    found: dict[str, list[str]] = {}
    for document in QUOTING:
        for block in blocks(document):
            first = block.text.split("\n", 1)[0]
            match = re.match(r"^# (examples/\S+?):", first)
            if match:
                found.setdefault(match.group(1), []).append(block.text)
    return found


def test_every_example_names_itself_and_is_quoted_unchanged():
    files = example_files()
    assert {p.relative_to(EXAMPLES).as_posix() for p in files} >= {
        "cron/wfctl.cron",
        "systemd/wfctl-worker@.service",
        "kubernetes/worker-deployment.yaml",
        "kubernetes/cronjobs.yaml",
    }
    quoted = quoted_examples()
    for path in files:
        name = path.relative_to(ROOT).as_posix()
        text = path.read_text()
        assert text.startswith(f"# {name}:"), f"{name} must start with a comment naming itself"
        assert name in quoted, f"{name} is not quoted in the deployment guide"
        for block in quoted[name]:
            assert block == text, f"the deployment guide's copy of {name} differs from the file"
    assert set(quoted) <= {p.relative_to(ROOT).as_posix() for p in files}, "a quoted file is missing"


# -- cron ---------------------------------------------------------------------------------------

_CRON_RANGES = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]
_CRON_ITEM = re.compile(r"^(\*|(\d+)(?:-(\d+))?)(?:/(\d+))?$")


def check_cron_field(field: str, low: int, high: int) -> None:
    for item in field.split(","):
        match = _CRON_ITEM.match(item)
        assert match, f"bad cron field {field!r}"
        _, first, last, step = match.groups()
        for number in (first, last):
            assert number is None or low <= int(number) <= high, f"{field!r} outside {low}-{high}"
        assert step is None or int(step) >= 1


def cron_jobs(path: Path) -> list[tuple[list[str], str, str]]:
    """(schedule fields, user, command) of each job line of a /etc/cron.d fragment."""
    jobs = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        assert not re.match(r"^[A-Za-z_][A-Za-z0-9_]*\s*=", line), "the jobs must not rely on variables"
        parts = line.split(None, 6)
        assert len(parts) == 7, f"not a cron.d line (5 fields, user, command): {line!r}"
        jobs.append((parts[:5], parts[5], parts[6]))
    return jobs


def test_cron_lines_are_well_formed():
    jobs = cron_jobs(CRON)
    assert [shlex.split(command)[6] for _, _, command in jobs] == ["recover", "prune", "metrics", "tick"]
    for fields, user, command in jobs:
        for field, (low, high) in zip(fields, _CRON_RANGES, strict=True):
            check_cron_field(field, low, high)
        assert user != "root"
        assert "%" not in command  # cron would turn it into a line break
        words = shlex.split(command)
        assert words[:3] == ["cd", PROJECT, "&&"], "each job runs from the project directory"
        assert words[3] == VENV_WFCTL and words[4:6] == ["--config", CONFIG]
        assert all(w.startswith("/") for w in words if "/" in w), f"a relative path in {command!r}"


class CronScene:
    """A machine as cron sees it: the example's paths made real in a temporary directory."""

    def __init__(self, tmp: Path, dsn: str) -> None:
        self.home = tmp / "home"
        self.project = tmp / "srv-shop"
        self.textfile = tmp / "textfile"
        for directory in (self.home, self.project, self.textfile):
            directory.mkdir()
        self.config = write_config(tmp / "etc-wfctl" / "wfctl.toml", dsn)
        self.script = wfctl_script()

    def command(self, text: str) -> str:
        for example, here in (
            (VENV_WFCTL, self.script),
            (CONFIG, self.config),
            (TEXTFILE_DIR, self.textfile),
            (PROJECT, self.project),
        ):
            text = text.replace(example, str(here))
        for root in ("/srv/", "/etc/wfctl", "/var/lib/"):
            assert f" {root}" not in text, f"a path left unreplaced: {text}"
        return text

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        """As cron runs a job: ``/bin/sh -c COMMAND`` from ``/`` with cron's environment."""
        return subprocess.run(
            ["/bin/sh", "-c", self.command(command)],
            cwd="/",
            env=cron_env(self.home),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )


def test_cron_lines_run_in_crons_environment(dsn, conn, tmp_path):
    scene = CronScene(tmp_path, dsn)
    now = db_now(conn)
    worker(conn, now, "gone:1:dead00", silent=timedelta(minutes=30))
    stuck = workflow(conn, now, status="running", lease_owner="gone:1:dead00", age=timedelta(hours=1))
    old = workflow(conn, now, status="completed", age=timedelta(days=40))
    kept = workflow(conn, now, status="completed", age=timedelta(days=2))
    jobs = {shlex.split(command)[6]: command for _, _, command in cron_jobs(CRON)}

    recover = scene.run(jobs["recover"])
    assert recover.returncode == 0, recover.stderr
    assert recover.stdout.startswith(f"requeued {stuck} ") and recover.stderr == ""
    assert rows(dsn, "SELECT status FROM workflows WHERE id = %s", stuck) == [("pending",)]
    again = scene.run(jobs["recover"])
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")  # nothing to mail

    prune = scene.run(jobs["prune"])
    assert prune.returncode == 0, prune.stderr
    assert prune.stdout.startswith("removed 1 workflow(s)") and prune.stderr == ""
    assert rows(dsn, "SELECT id FROM workflows WHERE id IN (%s, %s)", old, kept) == [(kept,)]

    metrics = scene.run(jobs["metrics"])
    assert (metrics.returncode, metrics.stdout, metrics.stderr) == (0, "", "")
    prom = scene.textfile / "wfctl.prom"
    parser = pytest.importorskip("prometheus_client.parser")
    names = {f.name for f in parser.text_string_to_metric_families(prom.read_text())}
    assert {"wfctl_workflows", GENERATED} <= names
    assert [p.name for p in scene.textfile.iterdir()] == ["wfctl.prom"]

    tick = scene.run(jobs["tick"])  # no schedule due: nothing to mail
    assert (tick.returncode, tick.stdout, tick.stderr) == (0, "", "")
    conn.execute(
        "INSERT INTO workflow_schedules (name, workflow_type, cron, next_tick_at)"
        " VALUES ('minutely', 'report', '* * * * *', date_trunc('minute', now()))"
    )
    tick = scene.run(jobs["tick"])
    assert (tick.returncode, tick.stdout, tick.stderr) == (0, "", "")  # --quiet: routine, not mailed
    assert rows(dsn, "SELECT count(*) FROM workflows WHERE workflow_type = 'report'") == [(1,)]


def test_cron_lines_with_the_database_down(dsn, tmp_path):
    """Each job exits 4 with one line (what cron mails); the metrics file keeps its last good
    content, so its generation gauge grows old."""
    scene = CronScene(tmp_path, dsn)
    jobs = {shlex.split(command)[6]: command for _, _, command in cron_jobs(CRON)}
    assert scene.run(jobs["metrics"]).returncode == 0
    prom = scene.textfile / "wfctl.prom"
    good = prom.read_bytes()
    write_config(scene.config, f"host=127.0.0.1 port={free_port()} dbname=shop connect_timeout=3")
    for name, command in jobs.items():
        result = scene.run(command)
        assert result.returncode == exits.CONNECTION, (name, result.stderr)
        assert result.stdout == "" and len(result.stderr.splitlines()) == 1, (name, result.stderr)
        assert result.stderr.startswith("wfctl: error: cannot connect"), result.stderr
    assert prom.read_bytes() == good
    assert [p.name for p in scene.textfile.iterdir()] == ["wfctl.prom"]


# -- systemd ------------------------------------------------------------------------------------


def unit_keys(text: str) -> dict[str, dict[str, list[str]]]:
    """section -> key -> values, as systemd reads a unit (keys may repeat; # and ; comment)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        header = re.match(r"^\[(\w+)\]$", line)
        if header:
            current = sections.setdefault(header.group(1), {})
            continue
        assert current is not None, f"a key outside a section: {line!r}"
        key, sep, value = line.partition("=")
        assert sep and key.strip() == key and re.match(r"^[A-Za-z]+$", key), f"bad line {line!r}"
        current.setdefault(key, []).append(value.strip())
    return sections


def seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)(ms|s|min|m)?", duration)
    assert match, duration
    scale = {"ms": 0.001, "s": 1, None: 1, "min": 60, "m": 60}[match.group(2)]
    return int(match.group(1)) * scale


def flag(words: list[str], name: str) -> str:
    assert name in words, f"{name} missing from {words}"
    return words[words.index(name) + 1]


def test_systemd_unit_keys():
    unit = unit_keys(UNIT.read_text())
    service, after = unit["Service"], unit["Unit"]
    assert service["User"][0] not in ("", "root")
    assert "postgresql.service" in " ".join(after["After"]).split()
    assert after["StartLimitIntervalSec"] == ["0"]  # a long database outage does not stop it
    prevent = {int(code) for code in " ".join(service["RestartPreventExitStatus"]).split()}
    assert prevent == {exits.USAGE, exits.CONFIG, exits.SCHEMA, exits.PERMISSION, exits.APP}
    assert exits.CONNECTION not in prevent and exits.INTERNAL not in prevent
    assert service["Restart"] == ["on-failure"]
    assert Path(service["WorkingDirectory"][0]).is_absolute()
    (exec_start,) = service["ExecStart"]
    words = shlex.split(exec_start)
    assert words[0] == VENV_WFCTL and Path(words[0]).is_absolute()
    assert flag(words, "--config") == CONFIG and "worker" in words
    grace = seconds(flag(words, "--grace"))
    assert seconds(service["TimeoutStopSec"][0]) > grace + 5  # the grace, then 5 s at most


def test_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    unit = tmp_path / "wfctl-worker@1.service"  # an instance of the template
    unit.write_text(UNIT.read_text().replace(VENV_WFCTL, str(wfctl_script())))
    result = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    complaints = [line for line in (result.stdout + result.stderr).splitlines() if unit.name in line]
    assert result.returncode == 0 and complaints == [], result.stdout + result.stderr


def exec_start(config: Path) -> list[str]:
    """The unit's ExecStart with this checkout's wfctl, config and test application."""
    (line,) = unit_keys(UNIT.read_text())["Service"]["ExecStart"]
    words = shlex.split(line.replace(VENV_WFCTL, str(wfctl_script())).replace(CONFIG, str(config)))
    return [("testflows" if w == "shop.workflows" else w) for w in words]


def systemd_run(words: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    """As systemd starts the service: its small environment, from WorkingDirectory."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp), "LANG": "C.UTF-8"}
    return subprocess.run(
        words, cwd=APPS, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def test_systemd_exec_start_runs_a_worker(dsn, conn, tmp_path):
    config = write_config(tmp_path / "wfctl.toml", dsn)
    wid = conn.execute(
        "INSERT INTO workflows (workflow_type, input_data) VALUES ('three', '{}') RETURNING id"
    ).fetchone()[0]
    words = [*exec_start(config), "--burst", "--poll", "100ms", "--heartbeat", "200ms"]
    result = systemd_run(words, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert rows(dsn, "SELECT status FROM workflows WHERE id = %s", wid) == [("completed",)]


@pytest.fixture
def schemaless_dsn(pg_server) -> Iterator[str]:
    """A database without the wfctl schema (the ``dsn`` fixture's is ``empty_dsn`` migrated)."""
    name = f"wfctl_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        conn.execute(composed("admin.create_database", name=name))
    try:
        yield with_db(pg_server.admin_dsn, name)
    finally:
        with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
            conn.execute(composed("admin.drop_database", name=name))


def test_systemd_restart_prevention_matches_what_wfctl_exits_with(dsn, schemaless_dsn, tmp_path):
    """A bad config, an --app that does not import and a missing schema give codes the unit
    will not restart on; a database that is down gives one it restarts on."""
    listed = unit_keys(UNIT.read_text())["Service"]["RestartPreventExitStatus"]
    prevent = {int(code) for code in " ".join(listed).split()}
    good = write_config(tmp_path / "good.toml", dsn)
    bad = tmp_path / "bad.toml"
    bad.write_text("[database]\ndsn = 'x'\nbogus = 1\n")
    no_schema = write_config(tmp_path / "empty.toml", schemaless_dsn)
    down = write_config(tmp_path / "down.toml", f"host=127.0.0.1 port={free_port()} connect_timeout=3")
    cases = [
        (exec_start(bad), exits.CONFIG),
        ([w.replace("testflows", "no_such_app") for w in exec_start(good)], exits.APP),
        ([*exec_start(good), "--concurrency", "0"], exits.USAGE),
        (exec_start(no_schema), exits.SCHEMA),
        (exec_start(down), exits.CONNECTION),
    ]
    for words, expected in cases:
        result = systemd_run([*words, "--burst"], tmp_path)  # --burst: a run that starts ends
        assert result.returncode == expected, (words, result.stderr)
        assert (result.returncode in prevent) == (expected != exits.CONNECTION)


# -- Kubernetes ---------------------------------------------------------------------------------


def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    yaml = pytest.importorskip("yaml")
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            assert document["apiVersion"] and document["metadata"]["name"]
            found[(document["kind"], document["metadata"]["name"])] = document
    return found


def config_map() -> dict[str, Any]:
    (cm,) = [doc for (kind, _), doc in manifests().items() if kind == "ConfigMap"]
    return cm


def pod_spec(document: dict[str, Any]) -> dict[str, Any]:
    if document["kind"] == "CronJob":
        return document["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return document["spec"]["template"]["spec"]


def check_container(spec: dict[str, Any], container: dict[str, Any]) -> list[str]:
    """The common shape of every wfctl container; returns its command."""
    command = container["command"]
    assert command[0] == K8S_WFCTL and command[1] == "--config"
    config = Path(command[2])
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volume = mounts[str(config.parent)]
    (source,) = [v for v in spec["volumes"] if v["name"] == volume]
    assert source["configMap"]["name"] == config_map()["metadata"]["name"]
    assert config.name in config_map()["data"]
    (password,) = [e for e in container["env"] if e["name"] == "PGPASSWORD"]
    assert "secretKeyRef" in password["valueFrom"]
    assert all(isinstance(word, str) for word in command), "a number must be quoted in YAML"
    return command


def parse_command_line(args: list[str]) -> None:
    """Parse ``wfctl ARGS`` with wfctl's own command line, running nothing: an unknown option or
    a bad value raises."""
    import typer

    from wfctl.cli.app import app

    group = typer.main.get_command(app)
    ctx = group.make_context("wfctl", list(args))  # the global options, before the command
    rest = list(ctx.args)
    name = args[len(args) - len(rest) - 1]
    command = group.commands[name]  # type: ignore[attr-defined]
    command.make_context(name, rest, parent=ctx)


def worker_option_names() -> set[str]:
    import typer

    from wfctl.cli.app import app

    worker = typer.main.get_command(app).commands["worker"]  # type: ignore[attr-defined]
    return {opt for param in worker.params for opt in param.opts}


def test_kubernetes_worker_deployment():
    found = manifests()
    (deployment,) = [doc for (kind, _), doc in found.items() if kind == "Deployment"]
    spec = pod_spec(deployment)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (container,) = spec["containers"]
    command = check_container(spec, container)
    assert command[3] == "worker"
    port = int(flag(command, "--health-port"))
    probe = container["readinessProbe"]["httpGet"]
    assert probe["path"] == "/healthz"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports.get(probe["port"], probe["port"]) == port
    assert spec["terminationGracePeriodSeconds"] > seconds(flag(command, "--grace")) + 5
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    without_health = command[1:]
    for option in ("--health-port", "--health-host"):
        index = without_health.index(option)
        del without_health[index : index + 2]
    parse_command_line(without_health)
    if "--health-port" not in worker_option_names():
        pytest.skip("wfctl worker has no --health-port yet: the rest of the Deployment checked")
    assert flag(command, "--health-host") == "0.0.0.0"  # the kubelet probes the pod's address
    parse_command_line(command[1:])


def test_kubernetes_cronjobs():
    jobs = {name: doc for (kind, name), doc in manifests().items() if kind == "CronJob"}
    commands = {}
    for document in jobs.values():
        fields = document["spec"]["schedule"].split()
        assert len(fields) == 5
        for field, (low, high) in zip(fields, _CRON_RANGES, strict=True):
            check_cron_field(field, low, high)
        assert document["spec"]["concurrencyPolicy"] == "Forbid"
        spec = pod_spec(document)
        assert spec["restartPolicy"] == "Never"  # a bad config is not retried in a loop
        (container,) = spec["containers"]
        command = check_container(spec, container)
        parse_command_line(command[1:])
        commands[command[3]] = (document["spec"]["schedule"], command)
    assert set(commands) == {"prune", "recover"}
    assert commands["prune"][1][4:] == ["--older-than", "30d"]
    assert commands["recover"][0] == "*/5 * * * *"


@pytest.fixture
def password_role(pg_server, empty_dsn) -> Iterator[tuple[str, str, str]]:
    """(dbname, role, password): a login role that owns an empty database and needs its
    password over TCP."""
    if pg_server.tcp_port is None:
        pytest.skip("the test server does not listen on TCP")
    dbname = psycopg.conninfo.conninfo_to_dict(empty_dsn)["dbname"]
    role, password = f"wfctl_k8s_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        create = sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}")
        conn.execute(create.format(sql.Identifier(role), sql.Literal(password)))
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        owner = sql.SQL("ALTER DATABASE {} OWNER TO {}")
        conn.execute(owner.format(sql.Identifier(dbname), sql.Identifier(role)))
    yield dbname, role, password
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO CURRENT_USER").format(sql.Identifier(dbname)))
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def pod_config(tmp: Path, server_port: int, dbname: str, role: str) -> Path:
    """The ConfigMap's wfctl.toml as a pod mounts it, its server replaced by the test server."""
    text = config_map()["data"]["wfctl.toml"]
    dsn = tomllib.loads(text)["database"]["dsn"]
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    assert "password" not in params, "the password belongs in the Secret, not the ConfigMap"
    local = psycopg.conninfo.make_conninfo(
        dsn, host="127.0.0.1", port=str(server_port), dbname=dbname, user=role
    )
    path = tmp / "etc-wfctl" / "wfctl.toml"
    path.parent.mkdir()
    path.write_text(text.replace(dsn, local))
    load_config(path)  # valid keys and types
    return path


def test_kubernetes_jobs_run_with_the_configmap_and_the_secret(pg_server, password_role, tmp_path):
    dbname, role, password = password_role
    config = pod_config(tmp_path, pg_server.tcp_port, dbname, role)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PGPASSWORD": password}

    def run(args: list[str], env: dict[str, str] = env) -> subprocess.CompletedProcess[str]:
        words = [str(wfctl_script()), "--config", str(config), *args]
        return subprocess.run(words, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)

    without = run(["init"], env={k: v for k, v in env.items() if k != "PGPASSWORD"})
    assert without.returncode == exits.CONNECTION  # the password is not in the config file
    assert run(["init"]).returncode == 0
    ran = []
    for (kind, _), document in manifests().items():
        if kind == "CronJob":
            (container,) = pod_spec(document)["containers"]
            result = run(container["command"][3:])  # what follows --config PATH
            assert result.returncode == 0, result.stderr
            ran.append(container["command"][3])
    assert sorted(ran) == ["prune", "recover"]


def test_kubernetes_worker_answers_its_readiness_probe(dsn, tmp_path):
    """The Deployment's worker command, run here: its /healthz answers 200 once it is ready."""
    if "--health-port" not in worker_option_names():
        pytest.skip("wfctl worker has no --health-port yet")
    (deployment,) = [doc for (kind, _), doc in manifests().items() if kind == "Deployment"]
    (container,) = pod_spec(deployment)["containers"]
    command = list(container["command"])
    port = free_port()
    command[command.index("--health-port") + 1] = str(port)
    command[command.index("shop.workflows")] = "testflows"
    config = write_config(tmp_path / "wfctl.toml", dsn)
    args = [*command[1:], "--poll", "100ms", "--heartbeat", "200ms"]
    args[args.index("--config") + 1] = str(config)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = wfctl_process(args, env=env, log_path=tmp_path / "worker.log")
    probe = container["readinessProbe"]["httpGet"]["path"]

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{probe}", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    try:
        wait_for(ready, timeout=30, what="the worker's readiness probe")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0, (tmp_path / "worker.log").read_text()


def test_no_example_mentions_a_path_these_tests_do_not_replace():
    """Every absolute path in the examples is one the tests above stand in for (or a system
    path), so the tests run what the files say."""
    known = (VENV_WFCTL, CONFIG, TEXTFILE_DIR, PROJECT, K8S_WFCTL, "/etc/wfctl", "/app", "/healthz")
    for path in example_files():
        for line in path.read_text().splitlines():
            if line.lstrip().startswith("#"):
                continue
            for found in re.findall(r"(?<![\w.*])/[\w./@-]+", line):
                assert any(found == k or found.startswith(k + "/") for k in known), f"{path.name}: {found}"


def test_examples_use_only_real_flags():
    """Every wfctl command line in the examples parses with wfctl's command line."""
    for _, _, command in cron_jobs(CRON):
        words = shlex.split(command)
        parse_command_line(words[4:])
    parse_command_line(shlex.split(unit_keys(UNIT.read_text())["Service"]["ExecStart"][0])[1:])
    assert os.path.basename(VENV_WFCTL) == "wfctl"
