"""One-shot latches that a batch opens in turn: the threads of a group commit are woken one
after another, not all at once.

A workflow thread that sent a write blocks on its latch until the database loop has committed
the batch holding it. Opening the 24 latches of a batch at once wakes 24 threads that all want
the one interpreter lock: most of them wake only to go back to sleep on it, which cost more CPU
than the steps themselves (docs/decisions/2026-12-07-wake-ups-in-turn.md). So the loop opens
the first latch whose thread is waiting and queues the rest; each thread that wakes from a latch
opens the next one before anything else, so the wake-ups follow one another as fast as threads
can take the lock, without a thread that is never woken.

Why no latch is left closed: a thread opens the next latch in the ``finally`` right after its
own opened, before any code of the workflow runs (a workflow that then blocks for an hour holds
nobody up). A latch whose thread is not waiting yet is opened on the spot and the opener goes on
to the next, since no thread will wake from it to carry on. A thread that starts waiting just as
it is opened is woken as well and opens one more: two chains instead of one, never none.

The queue is one per process, as the interpreter lock is.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable


class Latch:
    """Closed from creation; ``wait`` blocks until it is opened, by ``open`` or in its turn by
    ``open_in_turn``. Waited on by one thread, opened once."""

    __slots__ = ("_lock", "_waiting")

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held from creation, released once opened (cheaper than an Event)
        self._lock.acquire()
        self._waiting = False

    def wait(self) -> None:
        self._waiting = True
        try:
            self._lock.acquire()
        finally:
            open_next()

    @property
    def waiting(self) -> bool:
        """A thread has started waiting (it may be woken already)."""
        return self._waiting

    def open(self) -> None:
        """Open now, out of turn (an error every waiter must see at once)."""
        self._lock.release()


_turns: deque[Latch] = deque()


def open_in_turn(latches: Iterable[Latch]) -> None:
    """Queue ``latches`` to be opened in order, and open the first (and those before it whose
    threads are not waiting yet)."""
    _turns.extend(latches)
    open_next()


def open_next() -> None:
    """Open queued latches up to and including the first whose thread waits on it: that thread
    opens the next when it wakes."""
    while True:
        try:
            latch = _turns.popleft()
        except IndexError:
            return
        waiting = latch._waiting
        latch._lock.release()
        if waiting:
            return


def queued() -> int:
    """Latches queued and not opened yet (0 once every woken thread has taken its turn)."""
    return len(_turns)
