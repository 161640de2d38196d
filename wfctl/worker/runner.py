"""The worker process: a database loop on the main thread, workflows on a pool of threads.

The main thread owns the one database connection. It claims runnable workflows (batched,
SKIP LOCKED), hands them to worker threads, group-commits the writes those threads ask for,
heartbeats, listens for wake-ups (while it holds its pool's listening duty, listening.py), and
handles signals. What it claims beyond its free threads
waits in its backlog, claimed ahead (marked so in the database until it starts: a worker's
death then charges it nothing); what found no thread within ``CLAIM_AHEAD_HOLD`` is handed back
for an idle worker, and the worker claims nothing ahead again until a thread of its frees.
Signals:

- SIGTERM / first SIGINT: stop claiming; let running steps finish, releasing each workflow at
  its next step boundary; after ``grace``, release whatever still runs and exit.
- second SIGINT: exit at once (the leases expire; ``wfctl recover`` requeues the runs).

(The handlers and the watchdog that bounds shutdown are wfctl/worker/stopping.py.)

The connection is the loop's session (wfctl/worker/session.py): when it drops, the loop
reconnects with backoff and re-sends the writes that were in flight; they are idempotent under
the same lease epoch. Each heartbeat's answer is reconciled with the executions the worker
holds (wfctl/worker/reconcile.py).

Besides its own work, a live worker has duties (wfctl/worker/duties.py), each in its module: it
sweeps, requeuing the runs of workers that missed their heartbeats (sweep.py), fails runs past
their deadline (deadlines.py), fires schedules (ticks.py), keeps partitions ahead
(partitioning.py); and it can report its readiness over HTTP or in a file (health.py).
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import select
import threading
import time
from collections import deque
from typing import Any

import psycopg

from wfctl import limits, schema, tracing
from wfctl.caller import Caller
from wfctl.connection import connection_lost
from wfctl.queries import q
from wfctl.registry import Registry, WorkflowType
from wfctl.worker import burst, claims, heartbeat, poollog, reconcile, ticks
from wfctl.worker.calls import Call, execute
from wfctl.worker.checkpoints import ENDING, Request, flush, merge
from wfctl.worker.deadlines import DeadlineDuty
from wfctl.worker.duties import Alarmed, Duties, Duty, Poll
from wfctl.worker.execution import Execution
from wfctl.worker.health import HealthFile, HealthServer
from wfctl.worker.lease import Leases
from wfctl.worker.listening import Listening
from wfctl.worker.log import WorkerLog
from wfctl.worker.options import WorkerOptions
from wfctl.worker.partitioning import PartitionDuty
from wfctl.worker.policy import (
    CLAIM_AHEAD_HOLD,
    COALESCE_GAP,
    COALESCE_MAX,
    Coalesce,
    complete_at,
    flush_now,
    free_slots,
    should_claim,
)
from wfctl.worker.reconcile import Key
from wfctl.worker.rollups import RollupDuty
from wfctl.worker.session import REFUSED, GaveUp, Session
from wfctl.worker.stopping import Stopper
from wfctl.worker.sweep import SweepDuty, sweep_once
from wfctl.worker.targets import PartitionTargets
from wfctl.worker.transactions import TransactionPool

__all__ = ["GaveUp", "Worker", "WorkerOptions"]

TIMER_BEATS = 2  # the pool's timer looks this many heartbeats ahead for parked runs falling due
ALARM_SLACK = 0.01  # seconds after a parked or backing-off run's due time that the worker claims


class Worker:
    def __init__(self, dsn: str, registry: Registry, options: WorkerOptions, log: WorkerLog) -> None:
        self.dsn = dsn
        self.options = options
        self.log = log
        self.me = heartbeat.Identity.new()
        names = options.types or registry.names()
        self.types: dict[str, WorkflowType] = {}
        for name in names:
            workflow = registry.get(name)
            if workflow is not None:
                self.types[name] = workflow
        self.policies = {
            name: claims.Policy(wt.max_retries, wt.timeout, wt.timeout_error)
            for name, wt in self.types.items()
        }
        # of a pool's idle workers one LISTENs (wfctl/worker/listening.py); --burst workers all do
        self.listening = None if options.burst else Listening(self.types, self.me.id)
        # the loop's one connection: connect, reconnect, and the guard for refused statements
        self.session = Session(
            dsn,
            options,
            log,
            self.me.id,
            deadline=lambda: self.stopper.deadline,
            reconnected=self._reconnected,
            listen_at_connect=self.listening is None,
        )
        # how often a worker that waits for the listening duty polls (its holder polls for it);
        # as a fallback for a holder that froze, once per dead-after (_pace_pool_duties)
        self._waiter_poll = max(options.poll, options.dead_after)
        self._duty_tried = float("-inf")  # when the worker last asked for the duty without waiting
        # the duty came with a burst due and was passed on at once (listening.py): the claim
        # that follows says whether to pass it on again (a full claim) or to keep it next time
        self._passed = False
        self._may_pass = True
        self.requests: deque[Request] = deque()
        self.calls: deque[Call] = deque()  # coordination steps, run one at a time
        # ctx.transaction's connections: a small pool, opened by the first transactional step
        self.transactions = TransactionPool(dsn, min(options.concurrency, 4), options.dead_after)
        # every try of a step function with a timeout or an async one (wfctl/caller.py); past
        # MAX_ABANDONED calls that outlived their timeout, the worker claims nothing new
        self.caller = Caller(changed=self._abandoned_changed)
        self._claims_held = False  # stopped claiming for abandoned calls (logged once each way)
        self.finished: deque[Execution] = deque()
        # every execution this worker holds, by (id, epoch): after a cancel + retry or a
        # recovery, one worker may hold a lost old execution and the new one of the same id
        self.running: dict[Key, Execution] = {}
        # executions that ended here without a committed final write (or whose last write was
        # turned down): while the database still shows one as running here under its epoch,
        # the loop ends its attempt itself, counted like any failure (never a silent requeue)
        self.unsettled: dict[Key, Execution] = {}
        self._abandon_due = 0.0  # re-send refused abandon writes no more than once a beat
        self.backlog: deque[Execution] = deque()  # held, waiting for a free thread
        # claim ahead of the free threads; off from a hand-back of runs claimed ahead that found
        # no thread in time until a thread frees (else the worker would claim them back)
        self._ahead = True
        # the ahead_seq the next claim gives its first run claimed ahead (1, 2, ...: above the
        # workers row's started_seq, 0, until this worker starts them in that order)
        self._ahead_seq = 1
        # executions whose last write committed, not yet harvested: their threads are about to
        # be free, so a claim in between counts them as free (what it takes for them is not
        # claimed ahead, and needs no start recorded)
        self._ending: set[Key] = set()
        self.active = 0  # executions on threads
        # SIGTERM/SIGINT and the watchdog that bounds shutdown (wfctl/worker/stopping.py)
        self.stopper = Stopper(
            options.grace,
            log,
            wake=self._wake,
            in_statement=lambda: self.session.in_statement,
            cancel=self.session.cancel_statement,
            held=lambda: len(self.running) + len(self.unsettled),
            before_exit=self._remove_health_file,
        )
        self.stopping = self.stopper.event
        self.exit_status = 0
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._work: queue.SimpleQueue[Execution | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._wakeups = 0
        self._idle = False  # the last claim marked this worker idle in the database (workers.idle)
        self._sleeping = False  # the loop is (about to be) asleep in select: threads must wake it
        # the loop gathers a group commit (_coalesce): it looks for new writes at least every
        # COALESCE_GAP by itself; a thread wakes it only for the write that completes the batch
        self._complete_at: int | None = None
        # periodic duties, in the order they run when several are due: the heartbeat first
        # (after a pause, a reconnect or a fenced write, learn which leases are gone before a
        # claimed-ahead workflow is handed to a thread); polling for work is decided by the
        # claim policy, and only wakes the loop while there is room to claim
        self.duties = Duties(time.monotonic)
        self.heartbeat = self.duties.add(Duty("heartbeat", options.heartbeat, self._beat))
        # hand back the runs claimed ahead that found no free thread within CLAIM_AHEAD_HOLD
        # (an alarm at each one's time, and every CLAIM_AHEAD_HOLD while any waits)
        self.hand_back = self.duties.add(
            Alarmed(
                "hand back",
                CLAIM_AHEAD_HOLD,
                self._hand_back,
                active=lambda: any(e.ahead for e in self.backlog),
            )
        )
        # how old each lease's last confirmation is (wfctl/worker/lease.py): a run or a step
        # starts only on one younger than two thirds of the dead-after, else after a heartbeat
        self.leases = Leases(options.dead_after, self._request_beat)
        self._beat_asked = False  # _start_ready asked for a heartbeat that has not succeeded yet
        self.poll = Poll(
            "poll",
            options.poll,
            lambda: None,
            active=lambda: not self.stopping.is_set() and self._free_slots() > 0,
        )
        self.duties.add_timer(self.poll)
        # where the last claim stopped in the runnable index; a scan from the head at least
        # once a second (or poll interval, if shorter) finds what landed behind it
        # (claims.Frontier): a claim after a second of quiet scans from the head anyway
        self.frontier = claims.Frontier(full_every=min(options.poll, claims.FULL_SCAN_EVERY))
        # the partitioned layout: the partitions the group commit writes in (claims carry them)
        self.targets = PartitionTargets()
        # the stale sweep: requeue the runs of workers that missed their heartbeats (after the
        # heartbeat when both are due; off while stopping, and with --no-sweep)
        self.sweep: SweepDuty | None = None
        if options.sweep:
            self.sweep = self.duties.add(
                SweepDuty(
                    options.heartbeat,
                    options.dead_after,
                    sweep_once(self.session, found=lambda: setattr(self, "_more", True)),
                    log,
                    start=time.monotonic(),
                    enabled=lambda: not self.stopping.is_set(),
                )
            )
        # deadlines: fail the runs whose deadline passed, pending (queued, parked, requeued) or
        # running; every beat, also with --no-sweep, and at the deadline of each run claimed here
        self.deadlines = self.duties.add(
            DeadlineDuty(
                options.heartbeat,
                self.session,
                log,
                lambda: self.running.values(),
                enabled=lambda: not self.stopping.is_set(),
            )
        )
        # schedules: fire the ticks that are due, at the earliest tick and at least every beat
        self.ticks = self.duties.add(
            ticks.TickDuty(
                options.heartbeat,
                ticks.guarded_fire(self.session, options.dead_after),
                log,
                clock=time.monotonic,
                fired=lambda: setattr(self, "_more", True),
                enabled=lambda: not self.stopping.is_set(),
            )
        )
        # the rollups of finished runs the reports read (wfctl/worker/rollups.py): looked at every
        # minute, refreshed in a thread of their own; not by --burst workers (they soon exit)
        self.rollups: RollupDuty | None = None
        if not options.burst:
            self.rollups = self.duties.add(
                RollupDuty(dsn, self.session, log, enabled=lambda: not self.stopping.is_set())
            )
        # the pool's duties, which the worker holding the listening duty runs every beat for its
        # pool; a worker waiting for it runs them once per dead-after (_pace_pool_duties)
        self._pool_duties: list[Duty] = [
            d for d in (self.sweep, self.deadlines, self.ticks, self.rollups) if d is not None
        ]
        self._paced = False
        # the partitioned layout (wfctl/partitions.py): partitions ahead of time, looked for at the
        # start and every minute (one catalog lookup when they exist; nothing when unpartitioned)
        self.duties.add(
            PartitionDuty(self.session, log, self.frontier, enabled=lambda: not self.stopping.is_set())
        )
        # readiness (--health-port, --health-file): connected, and the last beat recent
        self.last_beat_ok: float | None = None  # monotonic time of the last successful beat
        self.health_server = (
            HealthServer(options.health_host, options.health_port, self.health)
            if options.health_port is not None
            else None
        )
        self.health_file = HealthFile(options.health_file) if options.health_file else None
        self._more = True

    # -- threads -> loop ----------------------------------------------------------------------

    def _request_beat(self) -> None:
        """Any thread: have the loop send a heartbeat at its next turn."""
        self.heartbeat.soon()
        self._wake()

    def _abandoned_changed(self, count: int) -> None:
        """Any thread: an abandoned call started or ended; the loop may claim again."""
        if not self.caller.full:
            self._more = True
            if self._sleeping:
                self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # a full pipe: the loop is awake anyway
            os.write(self._wake_w, b"x")

    def send(self, request: Request | Call) -> None:
        # Append first, then look at the flag; the loop sets the flag first, then looks at the
        # queue before it sleeps: so either it sees this request or it is woken by the pipe.
        if isinstance(request, Call):
            self.calls.append(request)
        else:
            self.requests.append(request)
            complete_at = self._complete_at
            if complete_at is not None and len(self.requests) < complete_at:
                return  # gathering: the loop comes back for it within COALESCE_GAP
        if self._sleeping:
            self._wake()

    def _select(self, watch: list[int], timeout: float) -> list[int]:
        """Sleep until a thread wakes us, the connection has input, or ``timeout``."""
        self._sleeping = True
        try:
            if self.requests or self.finished or self.calls:
                return []
            self.log.drain()  # nothing gathered waits while the loop sleeps
            try:
                ready, _, _ = select.select(watch, [], [], timeout)
            except (OSError, ValueError):
                return []
        finally:
            self._sleeping = False
        if self._wake_r in ready:
            self._drain_wake_pipe()
        return ready

    def _thread_main(self) -> None:
        while True:
            execution = self._work.get()
            if execution is None:
                return
            try:
                execution.run()
            except BaseException as exc:  # never lose a slot to a bug
                self.log.error(f"{execution.id} internal error: {type(exc).__name__}: {exc}")
            finally:
                self.finished.append(execution)
                if self._sleeping:
                    self._wake()

    def _remove_health_file(self) -> None:
        if self.health_file is not None:
            self.health_file.remove()

    # -- database -----------------------------------------------------------------------------

    def _reconnected(self) -> None:
        """After a reconnect: a heartbeat at once; no sweep for a while (the others were
        probably cut off too: let them beat); and a claim."""
        if self.listening is not None:
            self.listening.lost()  # the old session's lock and LISTEN went with it
            self._duty_tried = float("-inf")
        self.heartbeat.soon()
        if self.sweep is not None:
            self.sweep.postpone(time.monotonic())
        self._more = True

    def _declare(self) -> None:
        """At start: the schedules and the limits (``@wfctl.workflow(concurrency=, rate=,
        key_concurrency=)``) this worker's code declares go to the database, where every worker's
        ticks and claims use them. Both lock rows that other workers' claims and ticks need: a
        worker frozen while it declares loses its transaction after --dead-after (the server
        ends its session), and declares again on a new connection when it wakes."""
        hold = self.options.dead_after
        self.session.run(
            "schedule declaration", lambda conn: ticks.declare(conn, self.types, self.log, hold=hold)
        )
        declared = [(name, wt.limits) for name, wt in self.types.items()]
        self.session.run("limit declaration", lambda conn: limits.declare(conn, declared, hold=hold))

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> int:
        if self.health_server is not None:
            self.health_server.start()  # a port in use fails here, before anything is claimed
        self.stopper.install()
        self._pool_log = poollog.route(self.log, self.dsn)
        tracing.tracer()  # tracing configured by the environment: a bad exporter fails here, at start
        schema.check(self.session.open())
        self._declare()
        if self.listening is not None and self.session.listening():
            # the pool's first worker listens from its first claim on; the others wait for it
            self.session.guarded("listening", self.listening.try_take)
        for index in range(self.options.concurrency):
            thread = threading.Thread(target=self._thread_main, name=f"wfctl-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self.heartbeat.run(time.monotonic())
        if not self.session.listening():
            mode = "poll only"
        else:
            mode = "listen+poll" if self.listening is None else "listen (one idle worker per pool)+poll"
        self.log.info(
            f"worker {self.me.id} ready",
            types=",".join(self.types),
            concurrency=self.options.concurrency,
            wakeup=mode,
            dead_after=f"{self.options.dead_after:g}s",
            sweep="on" if self.sweep is not None else "off",
            health=self.health_server.url if self.health_server is not None else None,
        )
        try:
            self._loop()
        except GaveUp as exc:
            self.log.error(f"gave up reconnecting while stopping ({exc})")
        finally:
            try:
                self._shutdown()
            finally:
                self.log.drain()
                self.stopper.exited.set()
        return self.exit_status

    def _loop(self) -> None:
        while True:
            self.log.drain()  # the runs' routine lines of the last turn, in one write
            self._pace_pool_duties()
            self.duties.run_due()
            self._harvest()
            if self.calls:
                self._run_calls()
                continue
            if self.requests:
                self._coalesce()
                self._flush()
                continue
            now = time.monotonic()
            if self.stopping.is_set():
                self._leave_duty()
                if self.backlog:
                    self._release_backlog()
                if not self.running and not self.unsettled:
                    return
                if self.stopper.deadline is not None and now >= self.stopper.deadline:
                    self._release_remaining()
                    return
            elif self._should_claim(now):
                got = self._claim()
                if (
                    got == 0
                    and self.options.burst
                    and not self.running
                    and not self.requests
                    and not self.unsettled
                    and burst.finished(
                        self.session, list(self.types), self.options.burst_wait, self.poll, self.log
                    )
                ):
                    return
                continue
            self._wait()

    def _coalesce(self) -> None:
        """Group commit: before flushing, give the other running workflows a moment to reach
        their next write, so that one commit carries as many checkpoints as possible (when to
        stop waiting is ``policy.flush_now``)."""
        started = last = time.monotonic()
        seen = len(self.requests)
        while True:
            self._harvest()
            if self.calls:  # a coordination step waits: do not hold it for the batch
                return
            now = time.monotonic()
            if len(self.requests) != seen:
                seen, last = len(self.requests), now
            state = Coalesce(seen, self.active, self.options.max_batch, started, last)
            if flush_now(state, now):
                return
            wait = min(COALESCE_GAP - (now - last), COALESCE_MAX - (now - started))
            # woken early only by the write that completes the batch (or a coordination step)
            self._complete_at = complete_at(self.active, self.options.max_batch)
            self._sleeping = True
            try:
                if len(self.requests) == seen:
                    ready, _, _ = select.select([self._wake_r], [], [], max(0.0, wait))
                    if ready:
                        self._drain_wake_pipe()
            finally:
                self._sleeping = False
                self._complete_at = None

    def _drain_wake_pipe(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _threads_free(self) -> int:
        """Threads without a run (claimed ahead or running); those whose run just ended count
        as free."""
        return self.options.concurrency - len(self.running) + len(self._ending)

    def _free_slots(self) -> int:
        return free_slots(self.options.concurrency, len(self.running), self._ahead)

    def _should_claim(self, now: float) -> bool:
        if self._abandoned_full():
            return False
        return should_claim(
            concurrency=self.options.concurrency,
            held=len(self.running),
            backlog=len(self.backlog),
            more=self._more,
            wakeups=self._wakeups,
            poll_due=self.poll.due_every(now, self._waiter_poll)
            if self._waits_for_duty()
            else self.poll.is_due(now),
            ahead=self._ahead,
        )

    def _abandoned_full(self) -> bool:
        """Step calls that outlived their timeout still run, as many as the worker keeps: claim
        nothing until one ends (said once when it starts, once when it ends)."""
        full = self.caller.full
        if full != self._claims_held:
            self._claims_held = full
            if full:
                self.log.warning(
                    f"stopped claiming: {self.caller.abandoned} step calls that outlived their timeout "
                    f"still run (at most {self.caller.limit} are kept); claiming again when one ends"
                )
            else:
                self.log.info("claiming again: an abandoned step call ended")
        return full

    def _start_ready(self) -> None:
        if self.stopping.is_set():
            return  # after SIGTERM nothing new starts here: the backlog is handed back
        stalled = False
        while not stalled and self.backlog and self._busy() < self.options.concurrency:
            ahead: list[Execution] = []  # claimed ahead: their mark is cleared before they start
            while self.backlog and self._busy() + len(ahead) < self.options.concurrency:
                execution = self.backlog.popleft()
                if execution.lost:  # its lease went while it waited: it never runs here
                    self._not_started(execution)
                    continue
                if not execution.lease_fresh():
                    # claimed longer ago than the lease allows (the worker was paused, its
                    # heartbeats failed): a heartbeat first says whether it is still ours
                    self.backlog.appendleft(execution)
                    if not self._beat_asked:
                        self._beat_asked = True
                        self.heartbeat.soon()
                    stalled = True
                    break
                if execution.ahead:
                    ahead.append(execution)
                    continue
                self.active += 1
                self._work.put(execution)
            if ahead:
                self._start_ahead(ahead)

    def _busy(self) -> int:
        """Threads taken: the executions on threads or queued for one, less those whose ending
        committed (their threads are about to take what is queued, without sleeping first)."""
        return self.active - len(self._ending)

    def _not_started(self, execution: Execution) -> None:
        self.running.pop(execution.key, None)
        self.log.warning(f"{execution.id} lease lost before it started: not run here")

    def _start_ahead(self, ahead: list[Execution]) -> None:
        """Runs claimed ahead that now have a thread, with no group commit to record their
        start: one statement records it (workers.started_seq), and commits, before any of their
        code runs, so that a run that kills its worker is charged for it."""
        seq = max(e.claimed.ahead_seq or 0 for e in ahead)
        if self.session.guarded("start", claims.start_ahead, self.me.id, seq, otherwise=REFUSED) is REFUSED:
            # none starts: hand them back (what this misses, the heartbeat finds as orphans)
            for execution in ahead:
                self.running.pop(execution.key, None)
            self._release([e.key for e in ahead])
            return
        for execution in ahead:
            execution.ahead = False
            if execution.lost:
                self._not_started(execution)
                continue
            self.active += 1
            self._work.put(execution)

    def _hand_back(self) -> None:
        """The hand-back duty: the runs claimed ahead that found no free thread within
        CLAIM_AHEAD_HOLD go back to pending, uncounted (none of their code ran), and a
        wake-up tells idle workers; this one claims nothing ahead until a thread of its frees."""
        if self.stopping.is_set():
            return  # the stop hands the whole backlog back
        now = time.monotonic()
        # (not a run whose start committed with the ending of a thread's run: it takes that thread)
        due = [e for e in self.backlog if e.ahead and now - e.claimed.claimed_at >= CLAIM_AHEAD_HOLD]
        if not due:
            return
        for execution in due:
            self.backlog.remove(execution)
            self.running.pop(execution.key, None)
        self._ahead = False
        handed = self.session.guarded("hand back", reconcile.release, self.me.id, [e.key for e in due])
        if handed is None:
            return  # what it holds still, the heartbeat finds as orphans
        released = set(handed)
        for execution in due:
            if execution.claimed.id not in released:  # recovered, cancelled, timed out meanwhile
                self.log.warning(f"{execution.id} lease lost before it started: not run here")
        if released:
            self.log.info(
                f"handed back {len(released)} workflow(s) claimed ahead: no thread was free for "
                f"{CLAIM_AHEAD_HOLD:g}s"
            )

    def _release_backlog(self) -> None:
        """Stopping: workflows claimed ahead never started here; hand them back at once."""
        waiting = list(self.backlog)
        self.backlog.clear()
        for execution in waiting:
            self.running.pop(execution.key, None)
        self._release([e.key for e in waiting])

    def _claim(self) -> int:
        limit = self._free_slots()
        room = self._threads_free()
        # the wake-ups counted so far are for rows this claim's snapshot sees; one that comes
        # during the statement is read with its reply and counted by the next wait (_wait), so
        # a wake-up that raced the claim leads to another claim
        self._wakeups = 0
        self.poll.ran(time.monotonic())
        ahead_from = self._ahead_seq
        self._ahead_seq += limit  # never the same place twice, even for a claim sent again
        batch = self.session.guarded(
            "claim",
            functools.partial(
                claims.claim,
                addressable=self._addressable(),
                room=room,
                ahead_from=ahead_from,
            ),
            self.me.id,
            self.policies,
            limit,
            self.frontier,
        )
        passed, self._passed = self._passed, False
        if batch is None:
            self._more = False
            return 0
        self._more = len(batch.claimed) == limit
        if len(batch.claimed) >= room:
            self._may_pass = True
        elif passed:
            # the duty was passed on for a burst this claim did not find: ask for it again
            # now, and keep it the next time it comes
            self._may_pass = False
            self._duty_tried = float("-inf")
        self._idle = batch.idle
        if not batch.idle:
            self._leave_duty()  # its threads are taken: the next idle worker of the pool listens
        if batch.retry_in is not None:
            # a rate limit held runnable work back: claim again when it lets the next start go
            self.poll.alarm(time.monotonic() + batch.retry_in)
        # the runs for the free threads first: they start now; those claimed ahead wait
        for claimed in sorted(batch.claimed, key=lambda c: c.ahead):
            execution = Execution(
                claimed,
                self.types[claimed.workflow_type],
                self.send,
                self.stopping,
                self.log,
                self.transactions,
                self.leases,
                self.caller,
            )
            self.running[execution.key] = execution
            self.backlog.append(execution)
            if claimed.ahead:
                self.hand_back.alarm(claimed.claimed_at + CLAIM_AHEAD_HOLD + ALARM_SLACK)
            if claimed.deadline_at is not None:
                # fail it at its deadline, whatever its step is doing (a step does not return)
                left = (claimed.deadline_at - claimed.db_now).total_seconds()
                self.deadlines.alarm(claimed.claimed_at + max(0.0, left) + ALARM_SLACK)
        self._start_ready()
        return len(batch.claimed)

    def _flush(self) -> None:
        batch: list[Request] = []
        while self.requests and len(batch) < self.options.max_batch:
            batch.append(self.requests.popleft())
        starts = self._starts_for(batch)
        started = (self.me.id, max(e.claimed.ahead_seq or 0 for e in starts)) if starts else None
        try:
            self.session.run("flush", flush, batch, self.targets, started)
            for execution in starts:  # recorded started: each takes a thread its batch frees
                execution.ahead = False
            for request in batch:
                if request.ok and request.kind in ENDING and request.key in self.running:
                    self._ending.add(request.key)
        except GaveUp as exc:
            for request in batch:
                request.abort(exc)
            raise
        except psycopg.Error as exc:
            # Something in one request the database refuses: write them one execution at a
            # time, so that only the culprit fails; once one of an execution's writes fails,
            # its later writes in this batch fail with it (a completion never commits without
            # the checkpoint before it). Its attempt is then ended by the loop, counted.
            self.session.refused("write", exc)
            self._flush_one_by_one(batch)
        if any(not r.ok for r in batch):
            self.heartbeat.soon()  # a fenced write: other leases of ours may be gone too
        # the runs that take the ending threads, queued while those wake one by one: a thread
        # leaving its run finds the next one there instead of sleeping until the next harvest
        self._start_ready()

    def _starts_for(self, batch: list[Request]) -> list[Execution]:
        """A thread whose run ends in ``batch`` is free once that commits: the next runs
        claimed ahead (in the order of their ahead_seq, the backlog's) take those threads, one
        per ending, recorded started in the same commit, without a statement of their own."""
        if self.stopping.is_set():
            return []
        # (not an abandon the loop sends for an execution whose thread is free already)
        free = sum(1 for r in batch if r.kind in ENDING and r.key in self.running)
        starts: list[Execution] = []
        for execution in self.backlog:
            if len(starts) >= free:
                break
            if execution.ahead and not execution.lost:
                starts.append(execution)
        return starts

    def _run_calls(self) -> None:
        """Run the coordination steps waiting (each its own transaction; wfctl/worker/calls.py).
        A refused one fails its execution's attempt, like a refused write."""
        while self.calls:
            call = self.calls.popleft()
            try:
                self.session.run(call.op, execute, call)
            except GaveUp as exc:
                call.abort(exc)
                for rest in self.calls:
                    rest.abort(exc)
                self.calls.clear()
                raise
            except psycopg.Error as exc:
                self.session.refused(call.op, exc)
                call.abort(exc)

    def _flush_one_by_one(self, batch: list[Request]) -> None:
        failed: dict[Key, BaseException] = {}
        for group in merge(batch):
            key = group[0].key
            if key in failed:
                for request in group:
                    request.abort(failed[key])
                continue
            try:
                self.session.run("flush", flush, list(group), self.targets)
            except GaveUp as exc:
                for request in group:
                    request.abort(exc)
                raise
            except psycopg.Error as exc:
                failed[key] = exc
                for request in group:
                    request.abort(exc)

    def _keeps_timer(self) -> bool:
        """Whether this worker is its pool's timer: it listens for the pool (or hears no
        wake-ups, as a --burst worker or one behind a transaction pooler), so its beats look
        for parked runs falling due that an alarm of their own may no longer announce."""
        duty = self.listening
        return duty is None or duty.held or not self.session.listening()

    def _beat_once(self, conn: psycopg.Connection[Any]) -> heartbeat.Beat:
        return heartbeat.beat(
            conn,
            self.me,
            self.options.concurrency,
            list(self.types),
            interval=self.options.heartbeat,
            dead_after=self.options.dead_after,
            addressable=self.session.listening(),
            abandoned=self.caller.abandoned,
            horizon=TIMER_BEATS * self.options.heartbeat if self._keeps_timer() else 0.0,
            in_flight=[
                (e.claimed.id, e.claimed.epoch, *e.in_flight)
                for e in self.running.values()
                if e.in_flight is not None
            ],
        )

    def _beat(self) -> None:
        """The heartbeat duty: beat, then reconcile what the database says this worker runs
        with what it holds (wfctl/worker/reconcile.py)."""
        sent = time.monotonic()
        beat = self.session.guarded("heartbeat", self._beat_once)
        if beat is None:
            self.leases.beat_finished(sent, ok=False)
            return
        owned = beat.owned
        if beat.next_due_in is not None:
            # a run parked until a time that falls due before the next beats: the worker that
            # parked it set an alarm, unless it stopped or died since; claim when it is due
            self.poll.alarm(sent + beat.next_due_in + ALARM_SLACK)
        self.last_beat_ok = time.monotonic()
        if self.health_file is not None:
            problem = self.health_file.touch()
            if problem:
                self.log.warning(problem)
        for execution in reconcile.lost(owned, self.running.values()):
            execution.lost = True
            self.log.warning(
                f"{execution.id} lease lost: another worker or `wfctl recover` / "
                "`wfctl cancel` took it; this worker stops it at its next step"
            )
        self.leases.beat_finished(sent, ok=True)
        self._beat_asked = False
        self._start_ready()  # what waited in the backlog for this confirmation
        # ended here without a final write: end the attempt (again, if the last try was refused)
        due = time.monotonic() >= self._abandon_due
        done, still = reconcile.settled(owned, self.unsettled)
        for key in done:
            del self.unsettled[key]  # its attempt ended, or the run was taken elsewhere
        if due:
            for key in still:
                self._abandon(self.unsettled[key])
        orphans = reconcile.orphans(owned, [*self.running, *self.unsettled])
        if orphans:  # claimed by a statement whose reply never arrived
            released = self._release(orphans)
            if released:
                self.log.info(f"released {released} workflow(s) claimed during a connection loss")

    def health(self) -> tuple[bool, str]:
        """Readiness, for --health-port (called on the endpoint's thread: reads only): stopping
        or not connected means not ready; so does a last successful heartbeat older than the
        silence after which other workers would count this one as dead."""
        if self.stopping.is_set():
            return False, "stopping"
        if not self.session.connected():
            return False, "not connected to the database"
        last = self.last_beat_ok
        if last is None:
            return False, "no heartbeat yet"
        age = time.monotonic() - last
        if age > self.options.dead_after:
            return False, f"last successful heartbeat {age:.1f}s ago"
        return True, f"ok: last heartbeat {age:.1f}s ago"

    def _harvest(self) -> None:
        while self.finished:
            execution = self.finished.popleft()
            self.running.pop(execution.key, None)
            self._ending.discard(execution.key)
            self.active -= 1
            self._ahead = True  # a thread is free: claiming ahead of it is worth it again
            if not execution.settled:
                self._abandon(execution)
            elif execution.outcome == "lost":
                # normally the run went elsewhere; the next beat checks that it really did
                self.unsettled[execution.key] = execution
                self.heartbeat.soon()
            else:
                if not self._idle or execution.claimed.limited or self.options.burst:
                    # a thread is free: claim, unless the database knows this worker idle and
                    # wakes it for the next arrival (migration 0014). Claim anyway when a
                    # concurrency limit may let the next run of its type go now (nothing
                    # announces that), and with --burst, to see whether anything is left
                    self._more = True
                if execution.due_in is not None:
                    # parked until a time, or backing off: nothing will announce it when due
                    self.poll.alarm(time.monotonic() + execution.due_in + ALARM_SLACK)
        self._start_ready()

    def _abandon(self, execution: Execution) -> None:
        """An execution ended while its row is still running under this worker (a write the
        database refused, an internal error): end the attempt as a failure, counted against
        the retries, so the run backs off and finally fails instead of coming straight back."""
        request = execution.abandon_request()
        self.log.event(
            "error",
            f"{execution.id} {request.error}",
            level="error",
            type=execution.claimed.workflow_type,
            attempt=execution.claimed.attempt,
        )
        self.unsettled[execution.key] = execution
        self.requests.append(request)
        self._abandon_due = time.monotonic() + self.options.heartbeat

    # -- the listening duty (wfctl/worker/listening.py) ------------------------------------------

    def _addressable(self) -> bool:
        """Whether this worker hears wake-ups addressed to it now (its claims may mark it idle)."""
        return self.session.listening() and (self.listening is None or self.listening.held)

    def _waits_for_duty(self) -> bool:
        """Nothing to do but wait for the listening duty: no run, write or stop in hand."""
        duty = self.listening
        return (
            not self.running
            and duty is not None
            and not duty.held
            and self.session.listening()
            and self.session.connected()
            and not self.stopping.is_set()
            and not self.unsettled
            and not self.requests
            and not self.calls
            and not self.finished
            and not self.caller.full
        )

    def _pace_pool_duties(self) -> None:
        """While the worker only waits for the listening duty, run the pool's duties (sweep,
        deadlines, ticks; polls, in _should_claim) once per dead-after instead of every beat:
        the worker holding the duty runs them every beat for the pool, and a waiting one covers
        for a holder that froze until the server ends its session (idle_session_timeout) and a
        waiting worker takes the duty over. Every beat as before once it has work or the duty."""
        paced = self._waits_for_duty()
        if paced:
            for duty in self._pool_duties:
                duty.defer(self.options.dead_after)
        elif self._paced:
            for duty in self._pool_duties:
                duty.undefer()
        self._paced = paced

    def _wait_for_duty(self) -> None:
        """Sleep until the listening duty comes (then LISTEN and claim), the next heartbeat or an
        alarm of a run this worker parked; the lock wait ends on the server at that time, or is
        cancelled for a stop. The other duties (sweep, deadlines, ticks, polls) wait for the
        heartbeat's turn here, each wake-up being a transaction, and come once per dead-after
        (_pace_pool_duties): the worker that listens does them on time for the pool."""
        duty, conn = self.listening, self.session.conn
        assert duty is not None and conn is not None
        if any(d.urgent and d.active() for d in self.duties.items):
            return  # asked for at once: the loop runs it first
        wake_at = min(self.heartbeat.due_at(), self.poll.next_alarm())
        timeout = wake_at - time.monotonic()
        if timeout < 0.005:
            return  # a duty is due: the loop runs it first
        try:
            duty.send_wait(conn, timeout, self._threads_free() if self._may_pass else 0)
            ready = self._select([self._wake_r, conn.fileno()], timeout + 0.05)
            wait = duty.finish_wait(conn, cancel=conn.fileno() not in ready)
            if wait.got and not wait.passed:
                duty.take(conn)
        except psycopg.Error as exc:
            if connection_lost(conn, exc):
                self.session.reconnect(exc, "listening wait")  # (and the duty is lost with it)
            else:
                self.session.refused("listening wait", exc)
            return
        if wait.got:
            # deaf until now (or still, having passed the duty on): look from the head
            self.frontier.rescan()
            self._more = True
            self._passed = wait.passed

    def _try_duty(self) -> bool:
        """Before sleeping with runs in hand and threads free (a worker with no run waits for
        the duty instead): take the listening duty if no worker of the pool holds it, at most
        once per poll interval; whether it did (then claim first: it was deaf until now)."""
        duty = self.listening
        now = time.monotonic()
        if (
            duty is None
            or duty.held
            or self.stopping.is_set()
            or not self.session.listening()
            or now - self._duty_tried < self.options.poll
            or self._threads_free() <= 0
            or self.caller.full
        ):
            return False
        self._duty_tried = now
        if not self.session.guarded("listening", duty.try_take):
            return False
        self.frontier.rescan()  # deaf until now: look from the head
        self._more = True
        return True

    def _leave_duty(self) -> None:
        """Stop listening and let the next idle worker of the pool take the duty (a claim filled
        this worker's threads, or it stops)."""
        duty = self.listening
        if duty is None or not duty.held:
            return
        if self.session.guarded("listening release", duty.release, otherwise=REFUSED) is REFUSED:
            duty.lost()  # a refused UNLISTEN or unlock: a new session is the sure way out
            self.session.drop()

    def _wait(self) -> None:
        if self._waits_for_duty():
            self._wait_for_duty()
            return
        if self._try_duty():
            return
        watch = [self._wake_r]
        if self._addressable():
            # A NOTIFY that arrived during the last statement (a claim, a flush, a heartbeat)
            # was read off the socket with its reply and waits in the connection's backlog: the
            # socket has nothing more to say. Count those first, and never sleep holding one.
            before = self.session.conn
            if self._drain_notifications() or self.session.conn is not before:
                return  # a wake-up to act on, or a new connection (the loop claims at once)
            if before is not None and not before.closed:
                watch.append(before.fileno())
        wake_at = self.duties.next_due()
        if self.stopper.deadline is not None:
            wake_at = min(wake_at, self.stopper.deadline)
        self._select(watch, max(0.0, wake_at - time.monotonic()))
        if self._addressable():
            self._drain_notifications()

    def _drain_notifications(self) -> int:
        """Count the wake-ups received (during earlier statements or waiting on the socket now)
        towards the next claim; how many there were."""
        try:
            found: claims.Wakeups = self.session.run("listen", claims.drain_notifications)
        except psycopg.Error:
            return 0
        if found.behind or any(self.frontier.passed(a) for a in found.announced):
            self.frontier.rescan()
        self._wakeups += found.count
        return found.count

    # -- stopping -----------------------------------------------------------------------------

    def _release(self, keys: list[Key]) -> int:
        """Hand back executions this worker still holds; how many were handed back."""
        if not keys:
            return 0
        return len(self.session.guarded("release", reconcile.release, self.me.id, keys, otherwise=[]))

    def _release_remaining(self, reason: str = "grace period over") -> None:
        """Hand back every workflow still held (the statement only touches those still running
        under this worker with the same epoch, so one whose final write did commit is left
        alone)."""
        keys = list(self.running)
        for execution in self.running.values():
            execution.lost = True  # whatever it writes from now on is fenced by the status check
        released = self._release(keys)
        if released:
            self.log.warning(
                f"{reason}: released {released} workflow(s) still running; other "
                "workers resume them from their last checkpoint"
            )

    def _shutdown(self) -> None:
        try:
            if self.session.connected():
                if self.running:
                    self._release_remaining("stopping")
                conn = self.session.conn  # a new one, if the release reconnected
                assert conn is not None  # (one that gave up reconnecting raised GaveUp)
                heartbeat.stopped(conn, self.me)
                conn.execute(q("worker.notify"))
                conn.close()
        except (psycopg.Error, GaveUp) as exc:
            self.log.warning(f"could not mark the worker stopped: {self.session.one_line(exc)}")
        for _ in self._threads:
            self._work.put(None)
        self.transactions.close()
        self.caller.close()
        poollog.unroute(self._pool_log)
        self.stopper.uninstall()
        if self.health_server is not None:
            self.health_server.close()
        self._remove_health_file()
        self.log.info(f"worker {self.me.id} stopped")
