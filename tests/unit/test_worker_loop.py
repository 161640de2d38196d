"""The worker loop's scheduling decisions, without processes or a database: its periodic
duties on a fake clock, whether it claims, and whether a group commit waits or goes out."""

from __future__ import annotations

import pytest

from wfctl.errors import InvalidInput
from wfctl.worker.duties import ALARM_HORIZON, Alarmed, Duties, Duty, Poll
from wfctl.worker.options import DEFAULTS, WorkerOptions, default_text, resolve
from wfctl.worker.policy import (
    COALESCE_GAP,
    COALESCE_MAX,
    Coalesce,
    complete_at,
    flush_now,
    free_slots,
    should_claim,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_duties_run_when_due_and_the_loop_sleeps_until_the_earliest():
    clock = FakeClock()
    runs: list[str] = []
    duties = Duties(clock)
    beat = duties.add(Duty("heartbeat", 10.0, lambda: runs.append("beat")))
    sweep = duties.add(Duty("sweep", 3.0, lambda: runs.append("sweep")))
    assert duties.run_due() == ["heartbeat", "sweep"]  # everything is due at start
    assert duties.next_due() == clock.now + 3.0
    clock.now += 2.9
    assert duties.run_due() == []
    clock.now += 0.1
    assert duties.run_due() == ["sweep"]
    assert duties.next_due() == clock.now + 3.0
    beat.soon()  # e.g. after a reconnect: at the next turn, whatever the time
    assert duties.next_due() == float("-inf")
    assert duties.run_due() == ["heartbeat"]
    assert beat.next_at == clock.now + 10.0 and sweep.next_at > clock.now
    assert runs == ["beat", "sweep", "sweep", "beat"]


def test_an_inactive_timer_does_not_wake_the_loop():
    clock = FakeClock()
    room = [True]
    duties = Duties(clock)
    duties.add(Duty("heartbeat", 10.0, lambda: None))
    poll = duties.add_timer(Duty("poll", 1.0, lambda: None, active=lambda: room[0]))
    duties.run_due()
    poll.ran(clock.now)
    assert duties.next_due() == clock.now + 1.0
    room[0] = False  # every slot taken: polling is pointless
    assert duties.next_due() == clock.now + 10.0
    assert "poll" not in duties.run_due()  # a timer is acted on by the loop, not run


def test_a_poll_alarm_survives_a_claim_in_between_and_the_polls_resume_after_it():
    clock = FakeClock()
    duties = Duties(clock)
    poll = duties.add_timer(Poll("poll", 30.0, lambda: None))
    poll.ran(clock.now)  # a claim now: the next poll is 30 s away
    poll.alarm(clock.now + 2.0)  # a run this worker parked is due in 2 s
    poll.alarm(clock.now + 5.0)  # another backs off for 5 s
    assert duties.next_due() == clock.now + 2.0
    clock.now += 1.0
    poll.ran(clock.now)  # a claim for a NOTIFY in between keeps both alarms
    assert poll.next_at == clock.now + 1.0
    clock.now += 1.0
    assert poll.is_due(clock.now)
    poll.ran(clock.now)
    assert poll.next_at == clock.now + 3.0
    clock.now += 3.0
    poll.ran(clock.now)
    assert poll.next_at == clock.now + 30.0  # no alarm left: the poll interval again
    poll.alarm(clock.now + 30.0 + ALARM_HORIZON + 1)  # far beyond the polls: left to them
    assert poll.next_at == clock.now + 30.0


def test_a_worker_waiting_for_the_listening_duty_polls_at_its_own_interval_and_at_alarms():
    clock = FakeClock()
    poll = Poll("poll", 1.0, lambda: None)
    poll.ran(clock.now)
    assert poll.next_alarm() == float("inf")
    clock.now += 2.0
    assert poll.is_due(clock.now) and not poll.due_every(clock.now, 10.0)  # the holder polls
    poll.alarm(clock.now + 1.0)  # a run this worker parked is due in 1 s: that, it claims itself
    assert poll.next_alarm() == clock.now + 1.0
    clock.now += 1.0
    assert poll.due_every(clock.now, 10.0)
    poll.ran(clock.now)
    clock.now += 9.0
    assert not poll.due_every(clock.now, 10.0)
    clock.now += 1.0
    assert poll.due_every(clock.now, 10.0)  # once per its own interval (the dead-after)
    poll.ran(clock.now)
    poll.soon()
    assert poll.due_every(clock.now, 10.0)


def test_a_deferred_duty_runs_once_per_its_longer_interval_and_every_beat_again_after():
    clock = FakeClock()
    duties = Duties(clock)
    sweep = duties.add(Duty("sweep", 10.0, lambda: None))
    assert duties.run_due() == ["sweep"]
    for _ in range(2):  # a worker waiting for the listening duty: once per dead-after (30 s)
        clock.now += 10.0
        sweep.defer(30.0)
        assert duties.run_due() == []
    clock.now += 10.0
    sweep.defer(30.0)
    assert duties.run_due() == ["sweep"]
    clock.now += 12.0
    sweep.defer(30.0)
    assert duties.run_due() == []
    sweep.undefer()  # it has work or the duty now: due one interval after its last run
    assert sweep.due_at() == clock.now - 2.0 and duties.run_due() == ["sweep"]
    sweep.next_at = clock.now + 30.0  # postponed for a reason of its own (a reconnect)...
    sweep.defer(30.0)
    sweep.undefer()
    assert sweep.due_at() == clock.now + 30.0  # ...which undoing a deferral leaves in place
    sweep.soon()  # asked for at once (a reconnect): deferring does not hold it back
    sweep.defer(30.0)
    assert duties.run_due() == ["sweep"]


def test_a_deferred_duty_never_ran_and_its_alarms_are_not_held_back():
    clock = FakeClock()
    fresh = Duty("ticks", 10.0, lambda: None)
    fresh.defer(30.0)
    assert fresh.is_due(clock.now)  # nothing to count from: due as it was
    deadlines = Alarmed("deadlines", 10.0, lambda: None)
    deadlines.ran(clock.now)
    deadlines.alarm(clock.now + 4.0)  # a run this worker holds reaches its deadline in 4 s
    deadlines.defer(30.0)
    assert deadlines.due_at() == clock.now + 4.0
    clock.now += 4.0
    deadlines.ran(clock.now)  # the alarm rang; the next regular pass waits for the deferral
    assert deadlines.due_at() == clock.now - 4.0 + 30.0


@pytest.mark.parametrize(
    ("held", "backlog", "more", "wakeups", "poll_due", "expected"),
    [
        (0, 0, False, 0, False, False),  # idle, nothing announced, poll not due: sleep
        (0, 0, False, 0, True, True),  # the poll interval is up
        (0, 0, False, 1, False, True),  # a NOTIFY arrived
        (0, 0, True, 0, False, True),  # the last claim came back full
        (16, 8, True, 5, True, False),  # no room at all (2 x concurrency held)
        (13, 5, True, 0, True, False),  # a backlog still feeds the threads, room for 3 < 4
        (12, 4, True, 0, True, True),  # room for a batch of 4 (concurrency // 2)
        (8, 0, False, 0, True, True),  # threads busy, nothing waiting: claim ahead
    ],
)
def test_claim_or_not(held, backlog, more, wakeups, poll_due, expected):
    decided = should_claim(
        concurrency=8, held=held, backlog=backlog, more=more, wakeups=wakeups, poll_due=poll_due
    )
    assert decided is expected


def test_a_worker_that_handed_back_what_it_claimed_ahead_claims_only_for_free_threads():
    """After a hand-back (``ahead`` false) the worker claims into its free threads only: with
    every thread busy it does not claim back what it gave away, whatever wakes it."""
    busy = {"concurrency": 8, "held": 8, "backlog": 0, "more": True, "wakeups": 3, "poll_due": True}
    assert should_claim(**busy) and free_slots(8, 8) == 8  # claiming ahead: up to 8 more
    assert not should_claim(**busy, ahead=False) and free_slots(8, 8, ahead=False) == 0
    one_free = {**busy, "held": 7}
    assert should_claim(**one_free, ahead=False) and free_slots(8, 7, ahead=False) == 1


def test_coalesce_or_flush():
    t0 = 50.0
    # every running workflow has written: nobody else can come
    assert flush_now(Coalesce(4, 4, 256, t0, t0), t0)
    # the batch is full
    assert flush_now(Coalesce(256, 300, 256, t0, t0), t0)
    # others may still write, one arrived just now: wait
    assert not flush_now(Coalesce(2, 4, 256, t0, t0), t0 + COALESCE_GAP / 2)
    # nobody arrived within the gap (the others are in long steps): go
    assert flush_now(Coalesce(2, 4, 256, t0, t0), t0 + COALESCE_GAP)
    # arrivals keep coming, but the whole wait is capped
    assert not flush_now(Coalesce(3, 8, 256, t0, t0 + 0.0019), t0 + 0.00195)
    assert flush_now(Coalesce(3, 8, 256, t0, t0 + COALESCE_MAX), t0 + COALESCE_MAX)


def test_the_write_that_completes_a_batch_is_the_one_that_wakes_the_gathering_loop():
    # what wakes the loop is what flushes: one write from every running workflow, or a full batch
    assert complete_at(4, 256) == 4 and complete_at(300, 256) == 256 and complete_at(0, 256) == 0
    t0 = 1000.0
    for active, max_batch in [(4, 256), (300, 256), (1, 1)]:
        done = complete_at(active, max_batch)
        assert flush_now(Coalesce(done, active, max_batch, t0, t0), t0)
        if done > 1:
            assert not flush_now(Coalesce(done - 1, active, max_batch, t0, t0), t0)


def test_options_flags_over_config_over_defaults():
    assert resolve({}) == DEFAULTS
    got = resolve({"concurrency": 4, "heartbeat": "5s", "poll": "250ms", "listen": False}, heartbeat="2s")
    assert (got.concurrency, got.heartbeat, got.poll, got.listen, got.prepare) == (4, 2.0, 0.25, False, False)
    assert resolve({"concurrency": 4}, concurrency=2, no_listen=True).concurrency == 2
    assert resolve({}, grace="0s").grace == 0.0
    assert default_text("heartbeat") == "10s" and default_text("concurrency") == "64"
    with pytest.raises(InvalidInput, match="--concurrency"):
        WorkerOptions(concurrency=0)
    with pytest.raises(InvalidInput, match="--log-format"):
        resolve({"log_format": "xml"})


def test_the_help_quotes_the_defaults(cli):
    text = cli("worker", "--help").stdout
    for name, flag in (("concurrency", "--concurrency"), ("heartbeat", "--heartbeat"), ("poll", "--poll")):
        assert f"(default {default_text(name)})" in " ".join(text.split()), flag
