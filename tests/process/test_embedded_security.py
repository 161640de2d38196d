"""The embedded server as root, in any directory: it follows no
symbolic link and uses no file another user owns, no shell ever sees a path, its socket
directory outside the data directory is private, `db stop` signals only this data directory's
server, and a path with a space, a deleted data directory or a full disk each end in one line.

Every refusal is checked to happen before anything is created or started. Server starts are
slow (seconds each), so only the tests that must see a server run one.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from helpers import Result, wait_for

from wfctl import embedded, embedded_fs, embedded_proc
from wfctl.embedded import SERVER_USER, EmbeddedServer
from wfctl.errors import ServerError, WfctlError

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the case under test is root's)")
NOBODY = "nobody"


def server_ids() -> tuple[int, int]:
    """The uid and gid the embedded server runs as on this machine."""
    if os.geteuid() == 0:
        entry = embedded_proc.ensure_user(SERVER_USER)
        return entry.pw_uid, entry.pw_gid
    return os.geteuid(), os.getegid()


def error_line(result: Result, code: int = 10) -> str:
    """The one line the command said (changes announced as root aside), checked to be an error
    with exit ``code`` and no traceback."""
    assert result.exit_code == code, result.output
    lines = [line for line in result.stderr.splitlines() if not line.startswith("wfctl: running as root:")]
    assert len(lines) == 1 and lines[0].startswith("wfctl: error: "), result.stderr
    return lines[0]


def _postgres_under(under: Path) -> dict[int, int]:
    """Running postgres processes, each with its parent, whose working directory (their data
    directory) is (or was, before it was deleted) ``under`` or below it."""
    root = os.path.realpath(under)
    found: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            exe = os.readlink(f"/proc/{entry.name}/exe")
            cwd = os.readlink(f"/proc/{entry.name}/cwd").removesuffix(" (deleted)")
            status = Path(f"/proc/{entry.name}/status").read_text()
        except OSError:
            continue
        if os.path.basename(exe).split(" ")[0] == "postgres" and (cwd == root or cwd.startswith(root + "/")):
            ppid = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:"))
            found[int(entry.name)] = ppid
    return found


def postgres_processes(under: Path) -> list[int]:
    """The postmasters (not their children) of ``_postgres_under``."""
    found = _postgres_under(under)
    return sorted(pid for pid, ppid in found.items() if ppid not in found)


@contextlib.contextmanager
def frozen_server(postmaster: int, under: Path) -> Iterator[None]:
    """The server ``postmaster`` and all its processes stopped (SIGSTOP) until the block ends:
    nothing of it can notice anything meanwhile (the postmaster first, so it forks no more)."""
    os.kill(postmaster, signal.SIGSTOP)
    stopped = [postmaster]
    try:
        for pid, ppid in _postgres_under(under).items():
            if ppid == postmaster:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
        yield
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def quietly_stop(*homes: Path) -> None:
    for home in homes:
        with contextlib.suppress(WfctlError, OSError):
            EmbeddedServer(home).stop()


def kill_postgres_under(path: Path) -> None:
    """Teardown for a test that failed (as before the fixes): nothing of it stays running."""
    for pid in postgres_processes(path):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGQUIT)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path (pytest's are long enough to move the socket to /tmp)."""
    path = Path(tempfile.mkdtemp(prefix="wfs-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def homes(clean_env: Path) -> Iterator[list[Path]]:
    """Homes whose servers the test may have started (only when it fails): stopped afterwards."""
    started: list[Path] = [clean_env / ".wfctl"]
    yield started
    quietly_stop(*started)
    for home in started:
        kill_postgres_under(home)


# -- no symbolic link, no file of another user ---------------------------------------------


def test_a_symlinked_home_is_refused(cli, clean_env, tmp_path, homes):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (clean_env / ".wfctl").symlink_to(elsewhere)
    homes.append(elsewhere)
    line = error_line(cli("db", "start"))
    assert f"{clean_env / '.wfctl'} is a symbolic link" in line
    assert list(elsewhere.iterdir()) == []


def test_a_symlinked_data_directory_is_refused(cli, clean_env, tmp_path, homes):
    """As root this chowned the link's target, and everything in it, to the server's user."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "secret").write_text("mine")
    home = clean_env / ".wfctl"
    home.mkdir()
    (home / "pgdata").symlink_to(victim)
    before = [(p.name, p.stat().st_uid) for p in (victim, victim / "secret")]
    line = error_line(cli("db", "start"))
    assert f"{home / 'pgdata'} is a symbolic link" in line
    assert [(p.name, p.stat().st_uid) for p in (victim, victim / "secret")] == before
    assert sorted(p.name for p in victim.iterdir()) == ["secret"]


@pytest.mark.parametrize("dangling", [True, False])
def test_a_symlinked_lock_file_is_refused(cli, clean_env, tmp_path, homes, dangling):
    """As root this created (or opened for writing) the link's target."""
    target = tmp_path / "target-of-the-lock"
    if not dangling:
        target.write_text("keep")
    home = clean_env / ".wfctl"
    home.mkdir()
    (home / ".server.lock").symlink_to(target)
    line = error_line(cli("db", "start"))
    assert f"{home / '.server.lock'} is a symbolic link" in line
    assert target.exists() is not dangling
    assert dangling or target.read_text() == "keep"
    assert not (home / "pgdata").exists()


@as_root
@pytest.mark.parametrize("what", ["home", "pgdata", "lock"])
def test_files_of_another_user_are_refused(cli, clean_env, homes, what):
    """A home, data directory or lock file owned by a user other than root (or, for the data
    directory, the server's own user) is refused: that user could swap what is in it for a
    link while root works there."""
    nobody = pwd.getpwnam(NOBODY)
    home = clean_env / ".wfctl"
    home.mkdir()
    path = {"home": home, "pgdata": home / "pgdata", "lock": home / ".server.lock"}[what]
    if what == "pgdata":
        path.mkdir(mode=0o700)
        (path / "PG_VERSION").write_text("18\n")
    elif what == "lock":
        path.write_text("")
    os.chown(path, nobody.pw_uid, nobody.pw_gid)
    line = error_line(cli("db", "start"))
    assert f"{path} belongs to {NOBODY!r}" in line
    assert path.stat().st_uid == nobody.pw_uid  # not taken over
    assert postgres_processes(home) == []


@as_root
def test_a_hard_link_in_the_data_directory_is_not_given_away(cli, clean_env, tmp_path, homes):
    """As root, the data directory is given to the server's user: a hard link in it to a file
    of root's (which that user may make where the kernel allows: fs.protected_hardlinks=0)
    gave root's file away too."""
    victim = tmp_path / "root-only"
    victim.write_text("root's")
    victim.chmod(0o600)
    pgdata = clean_env / ".wfctl" / "pgdata"
    (pgdata / "base").mkdir(parents=True, mode=0o700)
    pgdata.chmod(0o700)
    (pgdata / "PG_VERSION").write_text("18\n")
    os.link(victim, pgdata / "base" / "linked")
    line = error_line(cli("db", "start"))
    assert f"{pgdata / 'base' / 'linked'} has other hard links" in line
    assert (victim.stat().st_uid, victim.stat().st_gid) == (0, 0)
    assert postgres_processes(clean_env) == []


def test_a_data_directory_that_is_not_a_cluster_is_left_alone(cli, clean_env, homes):
    """An existing, non-empty directory that holds no cluster (``data_dir`` pointed at the wrong
    place): as root it was given, with everything in it, to the server's user before initdb
    refused it."""
    pgdata = clean_env / ".wfctl" / "pgdata"
    pgdata.mkdir(parents=True, mode=0o700)
    (pgdata / "notes.txt").write_text("mine")
    before = [(p.name, p.stat().st_uid, p.stat().st_gid) for p in (pgdata, pgdata / "notes.txt")]
    line = error_line(cli("db", "start"))
    assert f"{pgdata} is not empty and is not a PostgreSQL data directory" in line
    assert [(p.name, p.stat().st_uid, p.stat().st_gid) for p in (pgdata, pgdata / "notes.txt")] == before
    assert sorted(p.name for p in pgdata.iterdir()) == ["notes.txt"]


def test_a_world_writable_home_is_refused(cli, clean_env, homes):
    home = clean_env / ".wfctl"
    home.mkdir()
    home.chmod(0o777)
    line = error_line(cli("db", "start"))
    assert f"{home} is writable by every user" in line
    assert not (home / "pgdata").exists()


# -- no shell sees a path; the private socket directory, used -----------------------


def test_shell_metacharacters_in_the_path_run_nothing(run_wfctl, tmp_path, clean_env):
    """pg_ctl started the server through ``/bin/sh -c`` with the path in double quotes, so
    ``$(...)`` and backticks in a project's path ran. This path is also too long for a socket
    and has a comma (libpq's host list separator), so the socket lives in /tmp/wfctl-<hash>:
    created by wfctl, owned by the server's user, mode 0700."""
    tag = uuid.uuid4().hex[:10]
    dollar, backtick = Path(f"/tmp/pwned-{tag}-dollar"), Path(f"/tmp/pwned-{tag}-backtick")
    project = tmp_path / f"a $(touch {dollar}) `touch {backtick}` b,c"
    project.mkdir(parents=True)
    server = EmbeddedServer(project / ".wfctl")
    try:
        init = run_wfctl("init", cwd=project)
        assert not dollar.exists() and not backtick.exists(), "a shell ran a command from the path"
        assert init.exit_code == 0, init.output
        assert server.socket_dir != server.pgdata
        st = os.lstat(server.socket_dir)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
        assert (st.st_uid, st.st_gid) == server_ids()
        status = run_wfctl("db", "status", "--json", cwd=project)
        assert status.exit_code == 0, status.output
        assert json.loads(status.stdout)["running"] is True
        stop = run_wfctl("db", "stop", cwd=project)
        assert stop.exit_code == 0 and "stopped" in stop.stderr, stop.output
        assert postgres_processes(project) == []
    finally:
        for path in (dollar, backtick):
            path.unlink(missing_ok=True)
        quietly_stop(server.home)
        kill_postgres_under(project)


# -- a socket directory someone else made is refused -------------------------------------


@pytest.mark.parametrize("kind", ["foreign-0777", "symlink", "ours-0755", "file"])
def test_a_socket_directory_made_by_someone_else_is_refused(cli, clean_env, tmp_path, homes, kind):
    """/tmp/wfctl-<hash> is predictable: another local user could make it first and then reach
    the server's socket (trust authentication) as the database superuser."""
    project = clean_env / ("long-" * 20)
    project.mkdir()
    home = project / ".wfctl"
    homes.append(home)
    server = EmbeddedServer(home)
    socket_dir = server.socket_dir
    assert socket_dir != server.pgdata
    other = tmp_path / "other"
    other.mkdir()
    try:
        if kind == "foreign-0777":
            if os.geteuid() != 0:
                pytest.skip("making a directory of another user needs root")
            socket_dir.mkdir()
            socket_dir.chmod(0o777)
            nobody = pwd.getpwnam(NOBODY)
            os.chown(socket_dir, nobody.pw_uid, nobody.pw_gid)
        elif kind == "symlink":
            socket_dir.symlink_to(other)
        elif kind == "ours-0755":
            socket_dir.mkdir()
            socket_dir.chmod(0o755)
            os.chown(socket_dir, *server_ids())
        else:
            socket_dir.write_text("")
        result = cli("db", "start", env={"WFCTL_DATA_DIR": str(home)})
        line = error_line(result)
        assert str(socket_dir) in line
        assert not (server.pgdata / "PG_VERSION").exists()  # refused before initdb
        assert postgres_processes(project) == []
        assert list(other.iterdir()) == []
    finally:
        quietly_stop(home)
        kill_postgres_under(project)
        if socket_dir.is_symlink() or socket_dir.is_file():
            socket_dir.unlink()
        elif socket_dir.exists():
            shutil.rmtree(socket_dir)


# -- a stale postmaster.pid --------------------------------------------------------------


def test_stop_never_signals_a_process_named_by_a_stale_pid_file(run_wfctl, clean_env):
    """After a reboot the pid in postmaster.pid may be another process of the same user (as
    root: another project's server). `db stop` must leave it alone and say "not running"."""
    uid, gid = server_ids()
    identity = {"user": uid, "group": gid, "extra_groups": []} if os.geteuid() == 0 else {}
    other = subprocess.Popen(["sleep", "120"], start_new_session=True, **identity)  # type: ignore[arg-type]
    home = clean_env / ".wfctl"
    pgdata = home / "pgdata"
    try:
        home.mkdir()
        pgdata.mkdir(mode=0o700)
        (pgdata / "PG_VERSION").write_text("18\n")
        (pgdata / "postmaster.pid").write_text(f"{other.pid}\n{pgdata}\n1700000000\n5432\n{pgdata}\n\n")
        for path in (pgdata, pgdata / "PG_VERSION", pgdata / "postmaster.pid"):
            os.chown(path, uid, gid)
        if os.geteuid() == 0:  # as an earlier start would have: the server's user reaches pgdata
            embedded_fs.allow_traversal(pgdata, SERVER_USER)
        stop = run_wfctl("db", "stop")
        assert other.poll() is None, "db stop signalled a process that is not this data directory's server"
        assert stop.exit_code == 0, stop.output
        assert "not running" in stop.stderr
        assert f"process {other.pid}" in stop.stderr
        assert not (pgdata / "postmaster.pid").exists()  # stale: removed, so the next start works
    finally:
        other.kill()
        other.wait()


def test_a_pid_file_naming_a_dead_process_is_not_running(cli, clean_env):
    home = clean_env / ".wfctl"
    pgdata = home / "pgdata"
    home.mkdir()
    pgdata.mkdir(mode=0o700)
    proc = subprocess.Popen(["true"])
    proc.wait()
    (pgdata / "PG_VERSION").write_text("18\n")
    (pgdata / "postmaster.pid").write_text(f"{proc.pid}\n")
    os.chown(pgdata, *server_ids())
    if os.geteuid() == 0:
        embedded_fs.allow_traversal(pgdata, SERVER_USER)
    stop = cli("db", "stop")
    assert stop.exit_code == 0 and "not running" in stop.stderr, stop.output


# -- a space in the path, a deleted data directory, a full disk --------------------------


def test_a_project_path_with_a_space_and_a_quote_works(run_wfctl, short_dir, clean_env):
    project = short_dir / "my project's dir"
    project.mkdir()
    server = EmbeddedServer(project / ".wfctl")
    assert server.socket_dir == server.pgdata  # short enough: the socket is in the data directory
    try:
        init = run_wfctl("init", cwd=project)
        assert init.exit_code == 0, init.output
        url = run_wfctl("db", "url", cwd=project)
        assert url.exit_code == 0, url.output
        with psycopg.connect(url.stdout.strip()) as conn:
            assert conn.execute("SELECT count(*) FROM wfctl_schema_migrations").fetchone()[0] >= 1
        listing = run_wfctl("list", cwd=project)
        assert listing.exit_code == 0, listing.output
        stop = run_wfctl("db", "stop", cwd=project)
        assert stop.exit_code == 0 and "stopped" in stop.stderr, stop.output
        assert postgres_processes(project) == []
    finally:
        quietly_stop(server.home)
        kill_postgres_under(project)


@pytest.mark.parametrize("socket", ["in-pgdata", "in-tmp"])
def test_a_deleted_data_directory_is_not_silently_replaced(run_wfctl, short_dir, clean_env, socket):
    """Deleting pgdata under a running server: the next command must not create a new, empty
    cluster beside the server that still runs (nor keep talking to it); it says what happened,
    in one line, and `db stop` stops that server.

    A server whose files are deleted may die at any moment once it notices (a child fails to
    write, the postmaster re-reads its lock file): the test freezes it (SIGSTOP) from before the
    delete until wfctl has looked, so the server wfctl must find is certainly there."""
    project = short_dir / ("p" if socket == "in-pgdata" else "long-" * 20)
    project.mkdir()
    server = EmbeddedServer(project / ".wfctl")
    assert (server.socket_dir == server.pgdata) is (socket == "in-pgdata")
    try:
        init = run_wfctl("init", cwd=project)
        assert init.exit_code == 0, init.output
        pid = int((server.pgdata / "postmaster.pid").read_text().split("\n")[0])
        with frozen_server(pid, project):
            shutil.rmtree(server.pgdata)
            again = run_wfctl("init", cwd=project)
            assert postgres_processes(project) == [pid]
        line = error_line(again)
        assert f"{server.pgdata} was deleted while its server (pid {pid}) was running" in line
        assert not server.pgdata.exists(), "a new cluster was created"

        stop = run_wfctl("db", "stop", cwd=project)
        assert stop.exit_code == 0, stop.output
        if "is not running" in stop.stderr:
            # thawed, the server may have died of its missing files before `db stop` looked:
            # `db stop` must then have found no server, not missed one
            assert pid not in postgres_processes(project), stop.output
        else:
            assert f"stopped the embedded PostgreSQL (pid {pid})" in stop.stderr
        assert postgres_processes(project) == []
        # then the next command starts afresh, with an empty database
        fresh = run_wfctl("init", cwd=project)
        assert fresh.exit_code == 0 and "started" in fresh.stderr, fresh.output
    finally:
        quietly_stop(server.home)
        kill_postgres_under(project)


def test_a_server_that_cannot_start_says_why_and_leaves_nothing_running(tmp_path):
    """The server is started without pg_ctl now: when it exits at once, the reason is read
    from this start's lines of server.log."""
    server = EmbeddedServer(tmp_path / "home", settings={"shared_buffers": "lots"})
    try:
        with pytest.raises(ServerError) as caught:
            server.ensure_running()
        message = str(caught.value)
        assert message.startswith(f"the embedded PostgreSQL did not start (see {server.log_file}): ")
        assert 'invalid value for parameter "shared_buffers": "lots"' in message
        assert "\n" not in message
        assert postgres_processes(tmp_path) == []
    finally:
        kill_postgres_under(tmp_path)


@as_root
def test_disk_full_during_initdb_says_so(run_wfctl, clean_env, tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        result = run_wfctl("init", env={"WFCTL_DATA_DIR": str(mount / ".wfctl")})
        line = error_line(result)
        assert "no space left on device" in line.lower(), line
        assert line.startswith(f"wfctl: error: initdb failed for {mount / '.wfctl' / 'pgdata'}")
        assert postgres_processes(mount) == []
    finally:
        kill_postgres_under(mount)
        wait_for(
            lambda: subprocess.run(["umount", str(mount)], capture_output=True).returncode == 0,
            what="the tmpfs to unmount",
        )


@pytest.mark.parametrize("name", ["my project", "it's", 'say "hi"', "back\\slash", "a,b", " lead"])
def test_the_dsn_names_the_socket_directory_whatever_the_path(tmp_path, name):
    server = EmbeddedServer(tmp_path / name / ".wfctl")
    params = psycopg.conninfo.conninfo_to_dict(server.dsn())
    assert params == {"host": str(server.socket_dir), "port": "5432", "user": "postgres", "dbname": "wfctl"}
    assert "," not in str(server.socket_dir)  # libpq would split the host there


def test_failure_summary_names_a_full_disk():
    """The line chosen from initdb's or the server's output: initdb ends with "removing contents
    of data directory", which said nothing about why."""
    output = (
        'The files belonging to this database system will be owned by user "wfctlpg".\n'
        "creating directory /x/pgdata/pg_wal ... ok\n"
        'initdb: error: could not write to file "/x/pgdata/pg_wal/xlogtemp.12": No space left on device\n'
        'initdb: removing contents of data directory "/x/pgdata"\n'
    )
    assert embedded.failure_summary(output, 1) == (
        'no space left on device (initdb: error: could not write to file "/x/pgdata/pg_wal/xlogtemp.12": '
        "No space left on device)"
    )
    assert embedded.failure_summary("a\nFATAL:  could not open file: Permission denied\nb\n", 1) == (
        "FATAL:  could not open file: Permission denied"
    )
    server = "running bootstrap script ... 2026-12-03 05:26:00.703 UTC [11288] FATAL:  could not write: No"
    assert embedded.failure_summary(f"{server} space left on device\n", 1) == (
        "no space left on device (FATAL:  could not write: No space left on device)"
    )
    assert embedded.failure_summary("only this\n", 1) == "only this"
    assert embedded.failure_summary("", 3) == "exit status 3"
