"""`wfctl metrics --output PATH`: the file node_exporter's textfile collector reads is replaced
atomically, never half-written, and left as it was (its age showing) when the database is down."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest
from helpers import free_port

from wfctl import exits
from wfctl.prometheus import GENERATED

parser = pytest.importorskip("prometheus_client.parser")


def samples(text: str) -> dict[str, float]:
    """Unlabelled samples by name, read with the reference parser (which fails on a bad file)."""
    return {
        sample.name: sample.value
        for family in parser.text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


def leftovers(directory: Path, keep: str = "wfctl.prom") -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != keep)


@pytest.fixture
def textfile(tmp_path) -> Path:
    """The collector's directory (tmp_path also holds the cli fixture's project directory)."""
    directory = tmp_path / "textfile"
    directory.mkdir()
    return directory


def down_dsn() -> str:
    """A server that is not there: nothing listens on this port."""
    return f"host=127.0.0.1 port={free_port()} dbname=wfctl connect_timeout=3"


def test_output_writes_a_parseable_file_with_its_generation_time(cli, dsn, conn, textfile):
    conn.execute("INSERT INTO workflows (workflow_type, input_data) VALUES ('order', '{}')")
    out = textfile / "wfctl.prom"
    before = time.time()
    result = cli("metrics", "--dsn", dsn, "--output", str(out))
    after = time.time()
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and result.stderr == ""  # silent for cron
    values = samples(out.read_text())
    assert values["wfctl_workflows_runnable"] == 1
    assert before - 1 <= values[GENERATED] <= after + 1
    assert stat.S_IMODE(out.stat().st_mode) == 0o644  # node_exporter's own user reads it
    assert leftovers(out.parent) == []
    # stdout carries the same gauge, and so does --json, into the file too
    printed = cli("metrics", "--dsn", dsn)
    assert GENERATED in samples(printed.stdout)
    assert cli("metrics", "--dsn", dsn, "--json", "-o", str(out)).exit_code == 0
    assert json.loads(out.read_text())[-1]["name"] == GENERATED


def test_each_run_replaces_the_file_in_one_step(cli, dsn, textfile):
    out = textfile / "wfctl.prom"
    out.write_text("# the previous run's content\n")
    out.chmod(0o640)  # a mode the operator chose is kept
    first = out.stat().st_ino
    assert cli("metrics", "--dsn", dsn, "--output", str(out)).exit_code == 0
    second = out.stat()
    assert second.st_ino != first  # a new file renamed over the old one, not rewritten in place
    assert stat.S_IMODE(second.st_mode) == 0o640
    assert "previous run" not in out.read_text()
    assert cli("metrics", "--dsn", dsn, "--output", str(out)).exit_code == 0
    assert out.stat().st_ino != second.st_ino
    assert leftovers(textfile) == []


def test_a_reader_never_sees_a_partial_file(cli, dsn, textfile):
    out = textfile / "wfctl.prom"
    assert cli("metrics", "--dsn", dsn, "--output", str(out)).exit_code == 0
    complete = out.read_text()
    seen: list[str] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.append(out.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(8):
            assert cli("metrics", "--dsn", dsn, "--output", str(out)).exit_code == 0
    finally:
        done.set()
        reader.join()
    assert seen
    body = complete[: complete.rindex(GENERATED)]  # all but the time, which changes each run
    for text in seen:  # every read is a whole file: the same lines, ending with the time
        assert text.startswith(body) and text.endswith("\n")
        assert GENERATED in samples(text)
    assert leftovers(textfile) == []


def test_database_down_leaves_the_file_as_it_was(cli, dsn, textfile):
    out = textfile / "wfctl.prom"
    assert cli("metrics", "--dsn", dsn, "--output", str(out)).exit_code == 0
    good = out.read_bytes()
    old = time.time() - 3600
    os.utime(out, (old, old))  # an hour-old file: the collector's mtime says so
    inode = out.stat().st_ino
    result = cli("metrics", "--dsn", down_dsn(), "--output", str(out))
    assert result.exit_code == exits.CONNECTION
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "cannot connect" in result.stderr
    assert "Traceback" not in result.stderr
    assert out.read_bytes() == good  # byte for byte
    assert out.stat().st_ino == inode and out.stat().st_mtime == pytest.approx(old)
    assert leftovers(textfile) == []
    # the gauge in the file still says when it was made: its age is what an alert looks at
    assert time.time() - samples(good.decode())[GENERATED] < 600


def test_schema_missing_leaves_the_file_as_it_was(cli, empty_dsn, textfile):
    out = textfile / "wfctl.prom"
    out.write_text("# last good\n")
    result = cli("metrics", "--dsn", empty_dsn, "--output", str(out))
    assert result.exit_code == exits.SCHEMA
    assert out.read_text() == "# last good\n"
    assert leftovers(textfile) == []


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: tmp, "is a directory: name the file"),
        (lambda tmp: tmp / "missing" / "wfctl.prom", "there is no directory"),
        (lambda tmp: tmp / ("x" * 300), "File name too long"),
    ],
    ids=["directory", "no-directory", "name-too-long"],
)
def test_bad_output_is_refused_before_the_database_is_asked(cli, textfile, make, message):
    # the database is down: an exit of 2, not 4, shows the path was checked first
    result = cli("metrics", "--dsn", down_dsn(), "--output", str(make(textfile)))
    assert result.exit_code == exits.USAGE, result.output
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr
    assert "missing" not in {p.name for p in textfile.iterdir()}


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write in any directory")
def test_unwritable_directory_is_refused(cli, textfile):
    locked = textfile / "locked"
    locked.mkdir(mode=0o555)
    result = cli("metrics", "--dsn", down_dsn(), "--output", str(locked / "wfctl.prom"))
    assert result.exit_code == exits.USAGE
    assert "cannot create files in" in result.stderr


def test_a_failed_write_is_one_line_and_leaves_nothing(cli, dsn, textfile):
    # a name the directory takes, but not with the temporary file's prefix and suffix added
    out = textfile / ("m" * 250)
    result = cli("metrics", "--dsn", dsn, "--output", str(out))
    assert result.exit_code == exits.USAGE, result.output
    assert len(result.stderr.strip().splitlines()) == 1
    assert "cannot write --output" in result.stderr and "keeps its previous content" in result.stderr
    assert list(textfile.iterdir()) == []
