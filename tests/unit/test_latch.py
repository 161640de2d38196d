"""Latches opened in turn: a batch wakes its threads one after another, and never leaves one
closed, whatever the woken threads do next."""

from __future__ import annotations

import queue
import threading

from tests.helpers import wait_for
from wfctl.worker import latch
from wfctl.worker.latch import Latch, open_in_turn


def _waiter(item: Latch, woken: list[int], index: int) -> threading.Thread:
    def run() -> None:
        item.wait()
        woken.append(index)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_latches_nobody_waits_on_yet_are_opened_at_once() -> None:
    items = [Latch() for _ in range(3)]
    open_in_turn(items)
    assert latch.queued() == 0
    for item in items:
        item.wait()  # opened already: returns at once
    assert latch.queued() == 0


def test_the_woken_thread_opens_the_next_latch() -> None:
    first, second, third = Latch(), Latch(), Latch()
    woken: list[int] = []
    thread = _waiter(first, woken, 1)
    wait_for(lambda: first.waiting, timeout=10, what="the first thread to wait")
    open_in_turn([first, second, third])
    thread.join(10)
    assert woken == [1]
    # the first thread, once woken, opened the second; nobody waits on it, so the third as well
    assert latch.queued() == 0
    second.wait()
    third.wait()


class _Awaited(Latch):
    """A latch marked as a thread marks it when it starts waiting, with no thread to wake: what
    the opener does then is seen before anything else can open the next."""

    def __init__(self) -> None:
        super().__init__()
        self._waiting = True


def test_the_opener_stops_at_the_first_latch_a_thread_waits_on() -> None:
    before, awaited, after = Latch(), _Awaited(), Latch()
    open_in_turn([before, awaited, after])
    # the one before was opened on the way (nobody waited on it); the one after waits for the
    # awaited latch's thread to wake
    assert latch.queued() == 1
    awaited.wait()  # the "woken" thread opens the next before its own code runs
    assert latch.queued() == 0
    before.wait()
    after.wait()


def test_every_thread_of_a_batch_is_woken_in_the_end() -> None:
    """Threads waiting on every latch of a batch: the opener wakes the first, and the others
    follow as each woken thread opens the next."""
    items = [Latch() for _ in range(8)]
    woken: list[int] = []
    threads = [_waiter(item, woken, i) for i, item in enumerate(items)]
    wait_for(lambda: all(item.waiting for item in items), timeout=10, what="every thread to wait")
    open_in_turn(items)
    for thread in threads:
        thread.join(10)
    assert sorted(woken) == list(range(8))
    assert latch.queued() == 0


def test_a_woken_thread_that_blocks_holds_nobody_up() -> None:
    """The next latch is opened before the woken thread's own code runs: a workflow that blocks
    after its checkpoint (here until the end of the test) does not keep the rest asleep."""
    release = threading.Event()
    blocked, other = Latch(), Latch()
    other_woken = threading.Event()

    def blocks() -> None:
        blocked.wait()
        release.wait(60)

    def wakes() -> None:
        other.wait()
        other_woken.set()

    threads = [threading.Thread(target=blocks, daemon=True), threading.Thread(target=wakes, daemon=True)]
    for thread in threads:
        thread.start()
    wait_for(lambda: blocked.waiting and other.waiting, timeout=10, what="both threads to wait")
    open_in_turn([blocked, other])
    try:
        assert other_woken.wait(10), "the second thread was never woken"
    finally:
        release.set()
        for thread in threads:
            thread.join(10)


def test_many_threads_and_batches_never_lose_a_wake_up() -> None:
    """32 threads each send a write and wait, a loop thread opens what it gathered in turn, for
    a few thousand writes: every write's thread wakes (a lost wake-up hangs the test until its
    timeout)."""
    writes: queue.SimpleQueue[Latch] = queue.SimpleQueue()
    rounds = 150
    finished = threading.Barrier(33)

    def workflow() -> None:
        for _ in range(rounds):
            item = Latch()
            writes.put(item)
            item.wait()
        finished.wait(30)

    threads = [threading.Thread(target=workflow, daemon=True) for _ in range(32)]
    for thread in threads:
        thread.start()
    opened = 0
    while opened < 32 * rounds:
        batch = [writes.get(timeout=30)]  # queue.Empty if every thread is asleep
        while not writes.empty() and len(batch) < 24:
            batch.append(writes.get())
        opened += len(batch)
        open_in_turn(batch)
    finished.wait(30)  # BrokenBarrierError if a thread is still asleep
    assert latch.queued() == 0
