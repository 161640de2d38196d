"""One try of a step function, within its timeout (``@wfctl.step(timeout=...)``).

- A synchronous function without a timeout runs in the calling thread, as any step does.
- With a timeout it runs in a thread of its own while the caller waits at most that long. A
  thread cannot be stopped: past the timeout the call is *abandoned*. It runs on to its end
  (its side effects happen; its result or exception is dropped, never stored), and the try
  counts as failed with ``StepTimeout``. ``Caller.abandoned`` counts the calls still running
  so; the worker stops claiming runs while ``Caller.full`` (``MAX_ABANDONED`` of them).
- An ``async def`` function runs on an event loop the caller owns (one loop thread, started at
  the first such call); with a timeout it is cancelled there (``asyncio.timeout``), so nothing
  is left behind unless the coroutine ignores its cancellation. Without one it is awaited to its
  end. A coroutine that blocks (synchronous I/O, ``time.sleep``) holds up the loop, and with it
  every other ``async`` step of the worker.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from wfctl.errors import StepTimeout
from wfctl.steps import StepOptions

#: Abandoned calls a worker keeps running before it stops claiming runs.
MAX_ABANDONED = 8


class Caller:
    """Runs the tries of steps for one worker (or one ``MemoryJournal``). ``changed`` is called
    (from the thread of the call) when the number of abandoned calls changes."""

    def __init__(self, limit: int = MAX_ABANDONED, changed: Callable[[int], None] | None = None) -> None:
        self.limit = limit
        self._changed = changed
        self._lock = threading.Lock()
        self._abandoned = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None

    @property
    def abandoned(self) -> int:
        """Calls that outlived their timeout and still run."""
        return self._abandoned

    @property
    def full(self) -> bool:
        """As many abandoned calls as the worker keeps: it takes no new run until one ends."""
        return self._abandoned >= self.limit

    def call(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        options: StepOptions,
    ) -> Any:
        """``fn(*args, **kwargs)``, within ``options.timeout``: its result, or its exception, or
        ``StepTimeout`` once the timeout has passed."""
        timeout = options.timeout
        if timeout is None:  # every step without a timeout: called here, at no cost
            result = fn(*args, **kwargs)
            if inspect.iscoroutine(result):  # an ``async def`` function, or one returning a coroutine
                return self._await(result, None, name, options)
            return result
        if inspect.iscoroutinefunction(fn):
            return self._await(fn(*args, **kwargs), timeout, name, options)
        return self._in_thread(name, fn, args, kwargs, timeout, options)

    def _in_thread(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        timeout: float,
        options: StepOptions,
    ) -> Any:
        finished = threading.Event()
        outcome: list[tuple[bool, Any]] = []  # (returned, its result or exception), once ended
        abandoned = False

        def run() -> None:
            try:
                ended: tuple[bool, Any] = (True, fn(*args, **kwargs))
            except BaseException as exc:  # handed to the caller (or dropped, once abandoned)
                ended = (False, exc)
            with self._lock:
                outcome.append(ended)
                dropped = abandoned
                if dropped:
                    self._abandoned -= 1
                left = self._abandoned
            finished.set()
            if dropped:
                self._tell(left)

        threading.Thread(target=run, name=f"wfctl-step {name[:40]}", daemon=True).start()
        if not finished.wait(timeout):
            with self._lock:
                abandoned = not outcome  # (it may end just as the wait does: then take it)
                if abandoned:
                    self._abandoned += 1
                left = self._abandoned
            if abandoned:
                self._tell(left)
                raise StepTimeout(options.timed_out(name))
        returned, result = outcome[0]
        if not returned:
            raise result
        if inspect.iscoroutine(result):
            result.close()
            raise TypeError(f"step {name!r}: the function returned a coroutine; declare it async def")
        return result

    def _await(
        self, coroutine: Coroutine[Any, Any, Any], timeout: float | None, name: str, options: StepOptions
    ) -> Any:
        async def bounded() -> Any:
            if timeout is None:
                return await coroutine
            scope = asyncio.timeout(timeout)  # cancels the coroutine at the timeout (wait_for's rule)
            try:
                async with scope:
                    return await coroutine
            except TimeoutError:
                if scope.expired():
                    raise StepTimeout(options.timed_out(name)) from None
                raise  # the coroutine's own TimeoutError

        return asyncio.run_coroutine_threadsafe(bounded(), self._event_loop()).result()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="wfctl-async-steps", daemon=True)
                thread.start()
                self._loop, self._loop_thread = loop, thread
            return self._loop

    def _tell(self, abandoned: int) -> None:
        if self._changed is not None:
            self._changed(abandoned)

    def close(self) -> None:
        """Stop the event loop (the worker is stopping; calls still on it are dropped)."""
        with self._lock:
            loop, thread = self._loop, self._loop_thread
            self._loop = self._loop_thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=1.0)
            if not thread.is_alive():
                loop.close()
