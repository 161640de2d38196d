"""The benchmarks' shared harness (bench/harness.py): the claim's parameters it passes are the
worker's, the source trees of an A/B, the frame every entry point's main runs in, and the
interleaving of the rounds. The benchmarks themselves run in tests/process/test_bench_*.py."""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

import pytest
from helpers import REPO

from wfctl.queries import q

# bench/ is not part of the installed package: it is imported from the source tree (as
# `python -m bench.NAME` run from there does), whichever tests ran before
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
harness = importlib.import_module("bench.harness")


def test_the_claim_parameters_are_those_of_the_workers_claim():
    params = harness.claim_params(["a"], [3], [None], [None], 4, "owner", room=4)
    wanted = set(re.findall(r"%\((\w+)\)s", q("worker.claim")))
    assert set(params) == wanted


def test_what_is_not_code_is_refused(tmp_path: Path):
    with pytest.raises(harness.BenchError, match="neither a directory nor a commit"):
        harness.resolve_code("no-such-commit-or-directory", tmp_path)
    with pytest.raises(harness.BenchError, match="is not a wfctl source tree"):
        harness.resolve_code(str(tmp_path), tmp_path)


def test_two_sides_of_one_name_are_refused(tmp_path: Path):
    with pytest.raises(harness.BenchError, match="two sides have the same name"):
        harness.tree_sides([str(REPO), str(REPO)], tmp_path)


def test_every_side_takes_every_place_over_the_rounds():
    orders = [harness.rotated("abc", r) for r in range(3)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert [harness.rotated("ab", r) for r in range(3)] == [["a", "b"], ["b", "a"], ["a", "b"]]


@pytest.fixture
def no_sigterm_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    """frame() installs a SIGTERM handler: not in the test's own process."""
    monkeypatch.setattr(harness.signal, "signal", lambda *_args: None)


def run_frame(body, keep: bool = False) -> tuple[int, Path]:
    seen: list[Path] = []

    def wrapped(workdir: Path) -> int:
        seen.append(workdir)
        return body(workdir)

    return harness.frame("wfctl-test-frame-", keep, wrapped), seen[0]


@pytest.mark.usefixtures("no_sigterm_handler")
def test_a_run_that_succeeds_leaves_no_work_directory(capsys):
    status, workdir = run_frame(lambda d: (d / "w-1.log").write_text("ok") and 0)
    assert status == 0 and not workdir.exists()
    assert capsys.readouterr().err == ""


@pytest.mark.usefixtures("no_sigterm_handler")
def test_a_failed_run_keeps_its_worker_logs_and_says_where(capsys):
    def body(workdir: Path) -> int:
        (workdir / "w-1.log").write_text("boom")
        raise harness.BenchError("a worker exited")

    status, workdir = run_frame(body)
    try:
        assert status == 1 and (workdir / "w-1.log").read_text() == "boom"
        err = capsys.readouterr().err.splitlines()
        assert err == ["bench: error: a worker exited", f"bench: worker logs kept in {workdir}"]
    finally:
        harness.shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.usefixtures("no_sigterm_handler")
def test_a_database_error_is_one_line_and_nothing_is_left_behind(capsys):
    def body(_workdir: Path) -> int:
        raise harness.psycopg.OperationalError("connection refused\nIs the server running?")

    status, workdir = run_frame(body)
    assert status == 1 and not workdir.exists()
    assert capsys.readouterr().err == "bench: error: OperationalError: connection refused\n"


def test_the_code_option_collects_every_tree_and_names_the_client():
    parser = argparse.ArgumentParser()
    harness.add_code(parser, "the workers", "the submitter")
    assert parser.parse_args([]).code == []
    assert parser.parse_args(["--code", "HEAD", "--code", "../other"]).code == ["HEAD", "../other"]
    assert "the submitter is always this tree's" in " ".join(parser.format_help().split())
    alone = argparse.ArgumentParser()
    harness.add_code(alone)
    assert "always this tree's" not in alone.format_help()


def test_counts_are_sorted_without_repeats_and_at_least_one():
    parse = harness.counts("--workers")
    assert parse("16,1, 4,16") == [1, 4, 16]
    for bad, why in (("0,4", "each at least 1"), ("", "each at least 1"), ("1,x", "comma-separated whole")):
        with pytest.raises(argparse.ArgumentTypeError, match=why):
            parse(bad)
