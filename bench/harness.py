"""The benchmark harness: what every ``bench/`` entry point runs its measurements with.

- the frame of a run (``frame``): SIGTERM unwinds, a work directory holds the worker logs, an
  error is one line and exit status 1, the work directory is kept when the run failed or
  ``--keep`` asks for it;
- where the databases live: the server (``server_dsn``: ``--server-dsn``, else ``$WFCTL_DSN``,
  else a durable embedded server), what it is (``describe_server``, ``warn_if_not_durable``), a
  fresh database per phase (``fresh_database``, ``tree_database``) or one given database shared by
  the run (``shared_database``);
- the source trees an A/B runs (``Code``, ``working_tree``, ``resolve_code``, ``Trees``: the
  ``--code REV|DIR`` and ``--before`` options);
- worker processes (``Workers``, their environment ``isolated_env``, ``wait_ready``,
  ``wait_for``), their memory (``RssSampler``) and CPU (``process_ticks``, ``cpu_seconds``);
- interleaved rounds (``rotated``) and the database's own figures (``xact_commits``,
  ``wal_flushes``, ``pgbench``);
- the report (``table``, ``num``, ``ratio``, ``median``, ``spread``, ``server_line``,
  ``loads_line``).

It imports nothing else of ``bench/``. ``bench/run.py`` also runs as a script (``python
bench/run.py``): it puts the tree's root on ``sys.path`` before importing this module.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from wfctl.errors import WfctlError
from wfctl.queries import parse_blocks

SQL = parse_blocks(Path(__file__).with_suffix(".sql").read_text(encoding="utf-8"))
REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
JOB = BENCH / "limits_job.py"  # a tree's schema, submits and limits, run with that tree's wfctl
READY = re.compile(r"\bready\b")  # a worker's "worker ID ready" line, whatever its log format
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

T = TypeVar("T")


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


class BenchError(Exception):
    """A run that cannot go on: one line in the log, exit status 1."""


# -- the frame of a run ----------------------------------------------------------------------------


def stop(signum: int, _frame: object) -> None:
    """SIGTERM (a timeout, a CI job cancelled): unwind, so that the workers are killed and the
    databases dropped on the way out."""
    raise SystemExit(128 + signum)


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(exc).strip()
    first = text.splitlines()[0].strip() if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def frame(prefix: str, keep: bool, body: Callable[[Path], int]) -> int:
    """A benchmark's main around ``body(workdir)``, which returns the exit status: SIGTERM
    unwinds; ``workdir`` is a fresh temporary directory (the worker logs); a BenchError, a
    database error or a wfctl error is logged as one line and exits 1, an interrupt exits 130;
    at the end the work directory is removed, or kept and named when the run failed and left logs
    in it, or when ``keep``."""
    signal.signal(signal.SIGTERM, stop)
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    status = 1
    try:
        status = body(workdir)
    except BenchError as exc:
        log(f"error: {exc}")
    except (psycopg.Error, WfctlError) as exc:
        log(f"error: {one_line(exc)}")
    except KeyboardInterrupt:
        log("interrupted: the workers were stopped and the databases dropped")
        status = 130
    finally:
        clean_up(workdir, status != 0, keep)
    return status


def clean_up(workdir: Path, failed: bool, keep: bool) -> None:
    """The work directory kept (and named) when ``keep``, or when the run failed and left worker
    logs to read; else removed."""
    if keep or (failed and any(workdir.glob("*.log"))):
        log(f"worker logs kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def empty_config(workdir: Path, who: str) -> Path:
    """An empty config file for the workers (their WFCTL_CONFIG): no wfctl.toml found around the
    tree they run in, nor one WFCTL_CONFIG names in this environment, changes their options."""
    path = workdir / "worker-config.toml"
    path.write_text(f"# {who}: the workers' options are their defaults and the command line's\n", "utf-8")
    return path


# -- where the databases live ----------------------------------------------------------------------


SERVER_HELP = "create the databases on this server (default: $WFCTL_DSN, else a durable embedded server)"


def add_server_dsn(
    parser: argparse.ArgumentParser, server_help: str = SERVER_HELP, dsn_help: str | None = None
) -> None:
    """The option ``--server-dsn`` (which server_dsn reads); with ``dsn_help`` also ``--dsn``, one
    existing database for the whole run, the two exclusive."""
    if dsn_help is None:
        parser.add_argument("--server-dsn", help=server_help)
        return
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--dsn", help=dsn_help)
    where.add_argument("--server-dsn", help=server_help)


def add_code(parser: argparse.ArgumentParser, who: str = "the worker", client: str | None = None) -> None:
    """The option ``--code REV|DIR`` (repeatable), a list of trees for ``tree_sides``: ``who``
    runs from each as side wfctl@REV; ``client``, if given, is always this tree's."""
    also = f"; {client} is always this tree's" if client else ""
    parser.add_argument(
        "--code",
        action="append",
        default=[],
        metavar="REV|DIR",
        help=f"also run {who} from this commit (git archive) or source tree, as side wfctl@REV "
        f"(repeatable){also}",
    )


def counts(option: str) -> Callable[[str], list[int]]:
    """An argparse type for ``option``: comma-separated whole numbers, each at least 1, sorted
    and without repeats ("1,3", "1,4,16,64")."""

    def parse(text: str) -> list[int]:
        try:
            values = sorted({int(part) for part in text.split(",") if part.strip()})
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"invalid {option} {text!r}: comma-separated whole numbers"
            ) from None
        if not values or values[0] < 1:
            raise argparse.ArgumentTypeError(f"invalid {option} {text!r}: each at least 1")
        return values

    return parse


@contextlib.contextmanager
def server_dsn(given: str | None, workdir: Path, fresh: str = "fresh databases") -> Iterator[tuple[str, str]]:
    """(the server's DSN, its description): ``given`` (--server-dsn), else $WFCTL_DSN, else a
    durable embedded server in ``workdir``, stopped on the way out. ``fresh`` says which databases
    the run makes there."""
    given = given or os.environ.get("WFCTL_DSN")
    if given:
        yield given, f"{fresh} on --server-dsn/WFCTL_DSN's server"
        return
    with embedded_server(workdir) as dsn:
        yield dsn, f"embedded, {fresh}"


@contextlib.contextmanager
def embedded_server(workdir: Path) -> Iterator[str]:
    """A durable embedded PostgreSQL (fsync and synchronous_commit on, max_connections 200) in
    ``workdir``: its ``postgres`` database's DSN; stopped and deleted on the way out."""
    from wfctl.embedded import EmbeddedServer

    server = EmbeddedServer(workdir / "server", settings={"max_connections": "200"})
    log(f"starting a durable embedded PostgreSQL in {server.home}")
    server.ensure_running()
    try:
        yield server.dsn("postgres")
    finally:
        server.stop()
        shutil.rmtree(server.home, ignore_errors=True)


@dataclass
class Server:
    description: str
    version: str
    fsync: str
    synchronous_commit: str


def describe_server(dsn: str, description: str) -> Server:
    with psycopg.connect(dsn, autocommit=True) as conn:
        values = [
            str(value(conn, SQL["setting"], {"name": name}))
            for name in ("server_version", "fsync", "synchronous_commit")
        ]
    return Server(description, *values)


def warn_if_not_durable(server: Server) -> None:
    """A warning in the log when the server does not flush its commits (fsync off, or
    synchronous_commit off or local): commits cost less there than on a durable one."""
    if server.fsync != "on" or server.synchronous_commit not in ("on", "remote_apply", "remote_write"):
        log(
            f"WARNING: the server is not durable (fsync={server.fsync}, "
            f"synchronous_commit={server.synchronous_commit}); commits cost less than they would"
        )


def install_schema(dsn: str) -> None:
    """This tree's schema (wfctl.schema.migrate)."""
    from wfctl import schema

    with psycopg.connect(dsn) as conn:
        schema.migrate(conn)


@contextlib.contextmanager
def fresh_database(server: str, label: str, keep: bool, install: bool = True) -> Iterator[str]:
    """A database ``wfctl_bench_<label>_<random>`` created on the server (with this tree's schema
    when ``install``): its DSN; dropped on the way out unless ``keep``."""
    name = f"wfctl_bench_{label}_{secrets.token_hex(4)}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL(SQL["create_database"]).format(name=sql.Identifier(name)))  # type: ignore[arg-type]
    dsn = make_conninfo(server, dbname=name)
    try:
        if install:
            install_schema(dsn)
        yield dsn
    finally:
        if keep:
            log(f"kept database {name}")
        else:
            with psycopg.connect(server, autocommit=True) as admin:
                admin.execute(sql.SQL(SQL["drop_database"]).format(name=sql.Identifier(name)))  # type: ignore[arg-type]


@contextlib.contextmanager
def shared_database(dsn: str, types: list[str], keep: bool) -> Iterator[str]:
    """``--dsn``: one existing database for the whole run, the benchmark's rows kept apart by
    their workflow types. The schema is installed if missing; the run is refused when rows of
    those types exist, and its rows are deleted on the way out unless ``keep``."""
    install_schema(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = value(conn, SQL["type_count"], {"types": types})
    if found:
        raise BenchError(
            f"the database already holds {found} workflows of type {' or '.join(types)}; "
            "use a fresh database, or --server-dsn to let the benchmark create its own"
        )
    try:
        yield dsn
    finally:
        if not keep:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(SQL["delete_steps"], {"types": types})
                conn.execute(SQL["delete_workflows"], {"types": types})


def value(conn: psycopg.Connection[Any], query: str, params: Mapping[str, Any] | None = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


# -- the source trees of an A/B --------------------------------------------------------------------


@dataclass(frozen=True)
class Code:
    """A wfctl source tree: its wfctl package, sql/ and bench/noop_app.py."""

    label: str
    root: Path

    def env(self) -> dict[str, str]:
        """This environment with the tree on PYTHONPATH: ``-m wfctl`` runs its wfctl."""
        return {**os.environ, "PYTHONPATH": str(self.root)}


class Chores:
    """bench/limits_job.py running with one tree's wfctl, for the whole run: one command per
    line, one reply per line."""

    def __init__(self, code: Code, workdir: Path) -> None:
        self.code = code
        self.errors = workdir / f"chores-{code.root.name}.log"
        with open(self.errors, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(JOB)],
                cwd=code.root,
                env=code.env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )

    def __call__(self, do: str, **command: Any) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps({"do": do, **command}) + "\n")
            self.proc.stdin.flush()
            reply = self.proc.stdout.readline().strip()
        except OSError as exc:
            reply = f"error: {exc}"
        if reply != "ok":
            tail = self.errors.read_text("utf-8", errors="replace").strip()[-2000:]
            raise BenchError(f"{JOB.name} {do} with {self.code.label}: {reply or 'no reply'}\n{tail}".strip())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Trees:
    """The chores of every tree a run uses, one process per tree, started at its first use and
    closed with the run's ExitStack."""

    def __init__(self, workdir: Path, stack: contextlib.ExitStack) -> None:
        self.workdir = workdir
        self.stack = stack
        self.chores: dict[Path, Chores] = {}

    def __call__(self, code: Code) -> Chores:
        if code.root not in self.chores:
            self.chores[code.root] = Chores(code, self.workdir)
            self.stack.callback(self.chores[code.root].close)
        return self.chores[code.root]


@contextlib.contextmanager
def tree_database(server: str, label: str, keep: bool, code: Code | None, trees: Trees) -> Iterator[str]:
    """A fresh database with a tree's schema: this tree's (``code`` None), or a --code tree's."""
    with fresh_database(server, label, keep, install=code is None) as dsn:
        if code is not None:
            trees(code)("migrate", dsn=dsn)
        yield dsn


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, stdin=subprocess.DEVNULL)


def working_tree() -> Code:
    """This source tree, labelled with its HEAD and whether it has uncommitted changes."""
    head = _git("rev-parse", "--short", "HEAD")
    if head.returncode != 0:
        return Code(f"the source tree {REPO}", REPO)
    dirty = _git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    changes = " + uncommitted changes" if dirty else ""
    return Code(f"the working tree (HEAD {head.stdout.decode().strip()}{changes})", REPO)


def resolve_code(spec: str, workdir: Path) -> Code:
    """A directory holding a source tree, or a commit of this repository (``git archive``d into
    the work directory)."""
    path = Path(spec)
    if path.is_dir():
        root = path.resolve()
        label = str(root)
    else:
        rev = _git("rev-parse", "--verify", "--short", f"{spec}^{{commit}}")
        if rev.returncode != 0:
            raise BenchError(f"{spec!r} is neither a directory nor a commit of {REPO}")
        short = rev.stdout.decode().strip()
        root = workdir / f"code-{short}"
        if not root.is_dir():
            archive = _git("archive", "--format=tar", short)
            if archive.returncode != 0:
                raise BenchError(f"git archive {short} failed: {archive.stderr.decode().strip()}")
            root.mkdir(parents=True)
            with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
                tar.extractall(root, filter="data")
        label = f"commit {short}"
    for needed in ("wfctl/__init__.py", "sql/migrations", "bench/noop_app.py"):
        if not (root / needed).exists():
            raise BenchError(f"{root} is not a wfctl source tree: {needed} is missing")
    return Code(label, root)


@dataclass(frozen=True)
class TreeSide:
    """A side whose workers run one source tree: this one (``own``) or a --code tree."""

    name: str
    code: Code
    own: bool

    @property
    def schema_code(self) -> Code | None:
        """The tree whose schema its databases get (tree_database): None for this tree."""
        return None if self.own else self.code


def tree_sides(specs: list[str], workdir: Path) -> list[TreeSide]:
    """Side ``wfctl`` (this working tree), then one ``wfctl@NAME`` per --code REV|DIR."""
    sides = [TreeSide("wfctl", working_tree(), own=True)]
    sides += [TreeSide(code_side_name(spec), resolve_code(spec, workdir), own=False) for spec in specs]
    check_unique([s.name for s in sides])
    return sides


def code_side_name(spec: str) -> str:
    """The side that runs the tree of ``--code SPEC``: ``wfctl@NAME``."""
    return f"wfctl@{Path(spec).name or spec}"


def check_unique(names: Sequence[str]) -> None:
    if len(set(names)) != len(names):
        raise BenchError("two sides have the same name: give the --code trees different names")


def rotated(items: Sequence[T], by: int) -> list[T]:
    """The items rotated left by ``by``: round r runs ``rotated(sides, r - 1)``, so that every
    side takes every place in the order and they share the machine's noise."""
    shift = by % len(items)
    return [*items[shift:], *items[:shift]]


# -- worker processes ------------------------------------------------------------------------------


def wfctl_command() -> list[str]:
    return [sys.executable, "-m", "wfctl"]


def isolated_env(env: Mapping[str, str], dsn: str, config: Path) -> dict[str, str]:
    """A worker's environment: ``env`` without its WFCTL_* variables, the database in WFCTL_DSN and
    the config file ``config`` (an empty one: empty_config) in WFCTL_CONFIG."""
    out = {k: v for k, v in env.items() if not k.startswith("WFCTL_")}
    out.update(WFCTL_DSN=dsn, WFCTL_CONFIG=str(config))
    return out


class RssSampler(threading.Thread):
    """Peak VmRSS (kB) of watched processes, each counted with its descendants."""

    def __init__(self, interval: float = 0.025) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.peaks: dict[int, int] = {}
        self._done = threading.Event()
        self._lock = threading.Lock()

    def watch(self, pid: int) -> None:
        with self._lock:
            self.peaks.setdefault(pid, 0)

    def sample(self) -> None:
        with self._lock:
            pids = list(self.peaks)
        if not pids:
            return
        children = children_map()
        for pid in pids:
            total = sum(_rss_kb(p) for p in tree(pid, children))
            with self._lock:
                self.peaks[pid] = max(self.peaks[pid], total)

    def run(self) -> None:
        while not self._done.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._done.set()
        self.join()


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command's name (None: the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def children_map() -> dict[int, list[int]]:
    """Every process's children, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(int(entry))
            if fields:
                children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def tree(pid: int, children: dict[int, list[int]]) -> Iterator[int]:
    """A process and its descendants."""
    yield pid
    for child in children.get(pid, ()):
        yield from tree(child, children)


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def process_ticks(pid: int) -> int | None:
    """utime + stime of a process (all its threads), in clock ticks."""
    fields = stat_fields(pid)
    return int(fields[11]) + int(fields[12]) if fields else None


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads) and cutime + cstime (its reaped children);
    0 for a process that is gone."""
    fields = stat_fields(pid)
    if not fields:
        return 0.0
    return sum(int(v) for v in fields[11:15]) / CLOCK_TICKS


def postmaster_of(admin: psycopg.Connection[Any]) -> int | None:
    """The postmaster's pid when the server runs on this machine (the parent of our session)."""
    fields = stat_fields(int(value(admin, SQL["backend_pid"])))
    return int(fields[1]) if fields else None


class Workers:
    """Worker processes of one phase, each with its output in a log file ``LABEL-I.log`` in the
    work directory; watched by ``sampler`` when one is given. Leaving its ``with`` block kills
    those still running."""

    def __init__(
        self,
        workdir: Path,
        label: str,
        sampler: RssSampler | None = None,
        cwd: Path = REPO,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.label = label
        self.sampler = sampler
        self.cwd = cwd
        self.env = env
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.kill()

    def start(self, cmd: list[str], count: int = 1) -> list[subprocess.Popen[bytes]]:
        started = []
        for _ in range(count):
            path = self.workdir / f"{self.label}-{len(self.procs) + 1}.log"
            with open(path, "wb") as out:
                proc = subprocess.Popen(
                    cmd, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
                )
            if self.sampler is not None:
                self.sampler.watch(proc.pid)
            self.procs.append(proc)
            self.logs.append(path)
            started.append(proc)
        return started

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def alive(self) -> int:
        return sum(1 for p in self.procs if p.poll() is None)

    def wait(self, timeout: float) -> list[int | None]:
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        return [p.poll() for p in self.procs]

    def terminate(self, grace: float = 30.0) -> list[int | None]:
        """SIGTERM, and wait up to ``grace`` seconds: the exit statuses (None: still running,
        then killed)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = self.wait(grace)
        self.kill()
        return codes

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def output(self, index: int) -> str:
        return self.logs[index].read_text("utf-8", errors="replace")

    def last_line(self, index: int) -> str:
        lines = [line.strip() for line in self.output(index).splitlines() if line.strip()]
        return lines[-1] if lines else "(no output)"

    def exited(self, index: int) -> str:
        """Why worker ``index`` is gone: its exit status and last line (and its log)."""
        last = self.last_line(index)
        hint = " (raise the server's max_connections)" if "too many clients" in last else ""
        code = self.procs[index].returncode
        return f"worker {index + 1} exited ({code}) while starting: {last}{hint} (log {self.logs[index]})"

    def tails(self, lines: int = 15) -> str:
        out = []
        for path in self.logs:
            text = path.read_text("utf-8", errors="replace").splitlines()[-lines:]
            out.append(f"--- {path}\n" + "\n".join(text))
        return "\n".join(out)


def wait_for(
    check: Callable[[], tuple[bool, str]],
    what: str,
    timeout: float,
    workers: Workers,
    interval: float,
    *,
    burst: bool = False,
) -> int:
    """Poll ``check`` (done, progress) until it says done; how many polls it took. Fails when a
    worker exits (``burst``: when every worker has exited, as burst workers do once idle) or after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    polls = 0
    while True:
        done, progress = check()
        polls += 1
        if done:
            return polls
        alive = workers.alive()
        if alive == 0 or (not burst and alive < len(workers.procs)):
            every = "every" if burst else "a"
            raise BenchError(f"{what}: {every} worker exited with {progress}\n{workers.tails()}")
        if time.monotonic() > deadline:
            raise BenchError(f"{what}: {progress} after {timeout:.0f} s\n{workers.tails()}")
        time.sleep(interval)


def wait_ready(
    workers: Workers,
    what: str,
    timeout: float,
    interval: float,
    registered: Callable[[], int] | None = None,
) -> float:
    """Wait until every worker has logged "ready" (after its LISTEN and its first heartbeat) and,
    with ``registered``, that count (its rows in ``workers``) covers them all; the seconds that
    took."""
    started = time.monotonic()
    waiting = set(range(len(workers.procs)))
    while True:
        for i in sorted(waiting):
            if READY.search(workers.output(i)):
                waiting.discard(i)
            elif workers.procs[i].poll() is not None:
                raise BenchError(f"{what}: {workers.exited(i)}")
        if not waiting and (registered is None or registered() >= len(workers.procs)):
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise BenchError(
                f"{what}: {len(waiting)} of {len(workers.procs)} workers not ready after {timeout:g} s; "
                f"logs in {workers.workdir}\n{workers.tails(5)}"
            )
        time.sleep(interval)


def registered(dsn: str, application_name: str) -> Callable[[], int]:
    """For wait_ready: a count of the running workers' rows in ``dsn``'s ``workers``, each on a
    connection of its own."""

    def count() -> int:
        with psycopg.connect(dsn, autocommit=True, application_name=application_name) as conn:
            return int(value(conn, SQL["registered"]))

    return count


def wait_finished(conn: psycopg.Connection[Any], workflow_id: UUID, timeout: float, workers: Workers) -> None:
    """Poll one run until it has completed; fails when it ended otherwise, when every worker has
    exited, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        status = _status(conn, workflow_id)
        if status == "completed":
            return
        if status in ("failed", "cancelled"):
            raise BenchError(f"latency workflow {workflow_id} ended {status}")
        if workers.alive() == 0:
            raise BenchError(f"the idle worker exited\n{workers.tails()}")
        if time.monotonic() > deadline:
            raise BenchError(f"latency workflow {workflow_id} not completed after {timeout:.0f} s")
        time.sleep(0.005)


def _status(conn: psycopg.Connection[Any], workflow_id: UUID) -> str | None:
    row = conn.execute(SQL["status"], {"id": workflow_id}).fetchone()
    return row[0] if row else None


# -- the database's own figures --------------------------------------------------------------------


def prepare_tables(dsn: str) -> None:
    """Before a timed phase, the same for every side: fresh statistics and a checkpoint."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SQL["vacuum_analyze"])
        with contextlib.suppress(psycopg.Error):
            conn.execute(SQL["checkpoint"])


def xact_commits(conn: psycopg.Connection[Any]) -> int:
    return int(value(conn, SQL["xact_commits"]))


def queue_noop(conn: psycopg.Connection[Any], n: int, steps: int) -> None:
    """N ``noop3`` workflows of ``steps`` no-op steps (bench/noop_app.py) queued in one statement."""
    conn.execute(SQL["queue_noop"], {"n": n, "steps": steps})


def completed(conn: psycopg.Connection[Any]) -> int:
    """The workflows completed so far."""
    return int(value(conn, SQL["completed"]))


def wal_flushes(conn: psycopg.Connection[Any]) -> int | None:
    """WAL fsyncs of the whole server so far: pg_stat_io (18+) or pg_stat_wal (14-17)."""
    version = conn.info.server_version
    if version < 140000:
        return None
    try:
        row = conn.execute(SQL["wal_flushes_18" if version >= 180000 else "wal_flushes_14"]).fetchone()
    except psycopg.Error:
        return None
    return int(row[0]) if row and row[0] is not None else None


def pgbench(dsn: str, seconds: int, clients: int) -> float:
    """The commit ceiling: single-row INSERT transactions per second (bench/pgbench_commit.sql)
    on dsn's server."""
    if shutil.which("pgbench") is None:
        raise BenchError("pgbench is not installed (apt-get install postgresql-client)")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SQL["commit_table"])
    jobs = str(min(2, clients))
    try:
        log(f"pgbench: -c {clients} -j {jobs} -T {seconds}, one single-row INSERT per transaction")
        script = str(BENCH / "pgbench_commit.sql")
        done = subprocess.run(
            ["pgbench", "-n", "-f", script, "-c", str(clients), "-j", jobs, "-T", str(seconds), dsn],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SQL["commit_table_drop"])
    match = re.search(r"^tps = ([0-9.]+)", done.stdout, re.MULTILINE)
    if done.returncode != 0 or match is None:
        raise BenchError(f"pgbench failed (exit {done.returncode}): {done.stderr.strip() or done.stdout}")
    return float(match.group(1))


def claim_params(
    types: list[str],
    retries: list[int | None],
    timeouts: list[Any],
    timeout_errors: list[Any],
    limit: int,
    owner: str,
    room: int,
) -> dict[str, Any]:
    """The parameters of worker.claim (sql/queries/worker.sql) as a worker that listens passes
    them at its first claim (wfctl/worker/claims.py claim): from the head of the runnable index,
    every partition, ``room`` threads without a run."""
    return {
        "types": types,
        "retries": retries,
        "timeouts": timeouts,
        "timeout_errors": timeout_errors,
        "limit": limit,
        "owner": owner,
        "after_priority": None,
        "after_run_at": None,
        "after_id": None,
        "floor": None,  # no floor: every partition (the partitioned layout's scans from the head)
        "addressable": True,  # a worker that listens: its claim marks it idle or not
        "room": room,
        "ahead_from": 1,  # the first run it claims ahead is its first
    }


# -- the report ------------------------------------------------------------------------------------


def num(value: float | None, digits: int = 0) -> str:
    """A figure with thousands separators, ``n/a`` when there is none."""
    return "n/a" if value is None else f"{value:,.{digits}f}"


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def median(values: Sequence[float | None]) -> float | None:
    """The median of the values given (None: not measured), None when there is none."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def ratio_text(value: float | None) -> str:
    """A ratio to three decimals, ``n/a`` when there is none."""
    return "n/a" if value is None else f"{value:.3f}"


def spread(values: Sequence[float | None]) -> str:
    """Per-round ratios as their median and range: ``median 0.981, rounds 0.950-1.012``."""
    present = [v for v in values if v is not None]
    if not present:
        return "n/a"
    low, high = ratio_text(min(present)), ratio_text(max(present))
    return f"median {ratio_text(statistics.median(present))}, rounds {low}-{high}"


def table(header: list[str], rows: list[list[str]]) -> None:
    """A Markdown table: the first column left-aligned, the others right-aligned; a blank line after."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("| " + " | ".join(cells) + " |")
    print()


def verdict(title: str, problems: Sequence[str]) -> None:
    """``TITLE: OK``, or ``TITLE: FAILED`` and each problem on a line of its own."""
    print(f"{title}: {'OK' if not problems else 'FAILED'}")
    for problem in problems:
        print(f"  {problem}")


def server_line(server: Server) -> str:
    return (
        f"server: PostgreSQL {server.version}, {server.description}, fsync={server.fsync}, "
        f"synchronous_commit={server.synchronous_commit}"
    )


def loads_line(loads: tuple[Sequence[float], Sequence[float]]) -> str:
    """The load averages at the start and the end of the run."""
    start, end = (" ".join(f"{v:.2f}" for v in values) for values in loads)
    return f"load average (1, 5, 15 min): {start} at the start, {end} at the end"
