"""The worker's log: the runs' routine lines are gathered and written by the loop in one write;
every other line is written at once, after the gathered ones, so the order holds."""

from __future__ import annotations

import io
import json
import threading
from datetime import UTC, datetime

import pytest

from wfctl.worker.log import MAX_GATHERED, WorkerLog, utc_stamp


class CountingStream(io.StringIO):
    """A text stream that counts its writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def events(stream: CountingStream) -> list[str]:
    return [line.split()[2] for line in stream.getvalue().splitlines()]


@pytest.mark.parametrize("fmt", ["plain", "json"])
def test_routine_lines_wait_for_the_drain_and_go_in_one_write(fmt):
    stream = CountingStream()
    log = WorkerLog(fmt, stream)
    log.event("started", "run-1", type="t", attempt=1)
    log.event("completed", "run-1", type="t", attempt=1, duration="0.002s")
    log.event("parked", "run-2", type="t", attempt=1)
    assert stream.getvalue() == "" and stream.writes == 0
    log.drain()
    assert stream.writes == 1
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    if fmt == "json":
        assert [json.loads(line)["event"] for line in lines] == ["started", "completed", "parked"]
        assert json.loads(lines[1])["duration"] == "0.002s"
    else:
        assert events(stream) == ["started", "completed", "parked"]
    log.drain()  # nothing left: nothing written
    assert stream.writes == 1


def test_any_other_line_is_written_at_once_after_the_gathered_ones():
    stream = CountingStream()
    log = WorkerLog("plain", stream)
    log.event("started", "run-1", type="t", attempt=1)
    log.warning("a warning")
    assert events(stream) == ["started", "warning"]
    log.event("failed", "run-1 ValueError: x", level="error", type="t")
    log.info("worker stopped")
    assert events(stream) == ["started", "warning", "failed", "worker"]


def test_a_full_gathering_is_written_by_the_thread_that_fills_it():
    stream = CountingStream()
    log = WorkerLog("plain", stream)
    for i in range(MAX_GATHERED - 1):
        log.event("completed", f"run-{i}")
    assert stream.writes == 0
    log.event("completed", "the last one")
    assert stream.writes == 1 and len(stream.getvalue().splitlines()) == MAX_GATHERED


def test_quiet_drops_the_routine_lines_only():
    stream = CountingStream()
    log = WorkerLog("plain", stream, quiet=True)
    log.event("started", "run-1")
    log.event("retry", "run-1 boom", level="warning")
    log.drain()
    assert events(stream) == ["retry"]


def test_a_rich_terminal_gets_every_line_at_once():
    stream = CountingStream()
    log = WorkerLog("rich", stream)
    log.event("started", "run-1", type="t")
    assert "started" in stream.getvalue() and "run-1" in stream.getvalue()


def test_no_line_is_lost_while_threads_add_and_the_loop_drains():
    stream = CountingStream()
    log = WorkerLog("plain", stream)
    done = threading.Event()

    def add(k: int) -> None:
        for i in range(2000):
            log.event("completed", f"run-{k}-{i}")

    def loop() -> None:
        while not done.is_set():
            log.drain()
        log.drain()

    drainer = threading.Thread(target=loop)
    drainer.start()
    adders = [threading.Thread(target=add, args=(k,)) for k in range(8)]
    for thread in adders:
        thread.start()
    for thread in adders:
        thread.join()
    done.set()
    drainer.join()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 8 * 2000 and len(set(lines)) == len(lines)
    for k in range(8):  # each thread's lines in its order
        own = [line.split()[3] for line in lines if line.split()[3].startswith(f"run-{k}-")]
        assert own == [f"run-{k}-{i}" for i in range(2000)]


def test_the_stamp_is_what_isoformat_writes_to_the_millisecond() -> None:
    """The date and time of day are formatted once a second and kept: every instant, across
    second, day and year boundaries and in any order, still gets its own second's text."""
    instants = [1_798_761_599.9996, 1_798_761_600.0, 1_798_761_600.0004, 1_798_761_599.001, 0.5]
    instants += [1_765_000_000 + k * 0.137 for k in range(30)]  # floats just under a millisecond
    for now in instants:
        expected = datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds")
        assert utc_stamp(now) + "+00:00" == expected, now
