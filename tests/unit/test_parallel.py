"""The suite on several pytest-xdist workers (tests/parallel.py, conftest.py): the run's lock lets
an ``alone`` test in only when the tests in flight have finished, and keeps new ones out until it
is done; a test that holds it takes it again without waiting; CI runs the README's test command;
the modules the conftest marks ``alone`` exist."""

from __future__ import annotations

import os
import re
import shlex
import threading
from pathlib import Path

from helpers import HERE, wait_for
from parallel import ALONE_MODULES, RunLock

ROOT = HERE.parent
README = ROOT / "README.md"
CI = ROOT / ".ci" / "run"


def waiters(path: Path) -> int:
    """How many flock requests on ``path`` are blocked (the ``->`` lines of /proc/locks)."""
    inode = f":{os.stat(path).st_ino} "
    return sum(1 for line in Path("/proc/locks").read_text().splitlines() if "->" in line and inode in line)


class Holder(threading.Thread):
    """Takes the lock (shared or exclusive), says so, and holds it until told to let go."""

    def __init__(self, lock: RunLock, exclusive: bool, events: list[str], name: str) -> None:
        super().__init__(daemon=True)
        self.lock, self.exclusive, self.events, self.label = lock, exclusive, events, name
        self.inside = threading.Event()
        self.release = threading.Event()

    def run(self) -> None:
        with self.lock.exclusive() if self.exclusive else self.lock.shared():
            self.events.append(f"{self.label} in")
            self.inside.set()
            self.release.wait(30)
            self.events.append(f"{self.label} out")


def test_an_alone_test_waits_for_the_tests_in_flight_and_keeps_new_ones_out(tmp_path):
    lock = RunLock(tmp_path / "locks")
    events: list[str] = []
    first = Holder(lock, False, events, "first")
    second = Holder(lock, False, events, "second")
    alone = Holder(lock, True, events, "alone")
    later = Holder(lock, False, events, "later")
    first.start()
    second.start()
    assert first.inside.wait(30) and second.inside.wait(30)  # shared: both in at once

    alone.start()
    wait_for(lambda: waiters(lock.room) == 1, timeout=30, what="the alone test to wait for the room")
    later.start()
    wait_for(lambda: waiters(lock.gate) == 1, timeout=30, what="the later test to wait at the gate")
    first.release.set()
    first.join(30)
    # one test still in flight: the alone one waits on (an unlock wakes the waiters to try again)
    wait_for(lambda: waiters(lock.room) == 1, timeout=30, what="the alone test to wait again")
    assert not alone.inside.is_set()
    second.release.set()
    assert alone.inside.wait(30)
    assert not later.inside.is_set() and waiters(lock.gate) == 1  # kept out while alone runs
    alone.release.set()
    assert later.inside.wait(30)
    later.release.set()
    for thread in (alone, later):
        thread.join(30)
    assert events.index("alone in") > max(events.index("first out"), events.index("second out"))
    assert events.index("later in") > events.index("alone out")


class Nested(threading.Thread):
    """Takes the lock, waits to be told, then takes it again inside (a template database made
    inside a test's own hold) and lets both go."""

    def __init__(self, lock: RunLock, exclusive: bool) -> None:
        super().__init__(daemon=True)
        self.lock, self.exclusive = lock, exclusive
        self.inside = threading.Event()
        self.go_on = threading.Event()
        self.done = threading.Event()

    def run(self) -> None:
        with self.lock.exclusive() if self.exclusive else self.lock.shared():
            self.inside.set()
            self.go_on.wait(30)
            with self.lock.shared():
                pass
        self.done.set()


def test_a_test_holding_the_lock_takes_it_again_while_an_alone_test_waits(tmp_path):
    lock = RunLock(tmp_path / "locks")
    test = Nested(lock, exclusive=False)
    test.start()
    assert test.inside.wait(30)
    alone = Holder(lock, True, [], "alone")
    alone.start()
    wait_for(lambda: waiters(lock.room) == 1, timeout=30, what="the alone test to wait for the room")
    test.go_on.set()
    assert test.done.wait(30), "the nested hold waited for the alone test, which waited for it"
    assert alone.inside.wait(30)
    alone.release.set()
    alone.join(30)


def test_an_alone_test_takes_the_lock_again_shared_inside_its_own_hold(tmp_path):
    lock = RunLock(tmp_path / "locks")
    alone = Nested(lock, exclusive=True)
    alone.start()
    assert alone.inside.wait(30)
    alone.go_on.set()
    assert alone.done.wait(30), "the alone test waited for itself"
    later = Holder(lock, False, [], "later")
    later.start()
    assert later.inside.wait(30)  # and let both holds go
    later.release.set()
    later.join(30)


def test_ci_runs_the_readmes_test_command():
    readme = re.search(r"\.venv/bin/(pytest [^\n`]*)", README.read_text())
    ci = re.search(r"^\s*(pytest [^|\n]*?)\s*\|\|", CI.read_text(), re.M)
    assert readme is not None and ci is not None
    assert shlex.split(readme.group(1)) == shlex.split(ci.group(1))


def test_the_modules_marked_alone_exist():
    assert ALONE_MODULES
    for name in ALONE_MODULES:
        assert (HERE / name).is_file(), f"parallel.ALONE_MODULES names {name}, which is gone"
