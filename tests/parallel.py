"""Running the suite on several pytest-xdist workers (``pytest -n 2``; importable as ``parallel``).

Each xdist worker is a process with its own session: its own embedded server (when
``WFCTL_TEST_DSN`` is not set), its own migrated template, its own databases. What they still
share is ``WFCTL_TEST_DSN``'s server and the machine. A test marked ``alone`` (one that restarts
the suite's server, such as the stateful test's ``restart_database``) must run with no other
test in flight on that server: ``RunLock`` is a readers-writer lock over two files that every
worker of one run opens, held shared by every other test and exclusively by an ``alone`` one.

The lock favours the writer: a test takes ``gate`` only to get into ``room`` and lets it go at
once; an ``alone`` test keeps ``gate`` while it waits for ``room`` and while it runs, so no new
test starts meanwhile and the ones in flight drain. A thread that holds the lock already (a
fixture that makes a template database inside a test) takes it again without locking: flock
locks belong to open files, not to processes, so it would wait for itself, or for an ``alone``
test that waits for it. Nothing here imports pytest.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Test modules (relative to tests/) whose tests run alone under xdist, with why; a module says it
# itself with ``pytestmark = pytest.mark.alone`` (this table is for modules that cannot carry the
# mark yet). tests/conftest.py marks them.
ALONE_MODULES = {
    "process/test_stateful.py": "its restart_database rule restarts the suite's server (pg_ctl restart)",
}


def worker_id() -> str | None:
    """``gw0``, ``gw1``, ... on an xdist worker; None in a plain run (and on the controller)."""
    return os.environ.get("PYTEST_XDIST_WORKER")


class RunLock:
    """A readers-writer lock shared by the workers of one run, in ``directory``."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.gate = directory / "gate.lock"
        self.room = directory / "room.lock"
        for path in (self.gate, self.room):
            path.touch(exist_ok=True)
        self._held = threading.local()  # this thread's depth of holds, shared or exclusive

    def _depth(self) -> int:
        return int(getattr(self._held, "depth", 0))

    @contextmanager
    def _holding(self) -> Iterator[None]:
        self._held.depth = self._depth() + 1
        try:
            yield
        finally:
            self._held.depth -= 1

    @contextmanager
    def shared(self) -> Iterator[None]:
        if self._depth():  # held by this thread already, shared or exclusive
            yield
            return
        with open(self.gate, "rb") as gate, open(self.room, "rb") as room:
            fcntl.flock(gate, fcntl.LOCK_EX)
            try:
                fcntl.flock(room, fcntl.LOCK_SH)
            finally:
                fcntl.flock(gate, fcntl.LOCK_UN)
            try:
                with self._holding():
                    yield
            finally:
                fcntl.flock(room, fcntl.LOCK_UN)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        if self._depth():
            raise RuntimeError("the run's lock is held shared by this thread: it cannot be made exclusive")
        with open(self.gate, "rb") as gate, open(self.room, "rb") as room:
            fcntl.flock(gate, fcntl.LOCK_EX)
            try:
                fcntl.flock(room, fcntl.LOCK_EX)
                try:
                    with self._holding():
                        yield
                finally:
                    fcntl.flock(room, fcntl.LOCK_UN)
            finally:
                fcntl.flock(gate, fcntl.LOCK_UN)
