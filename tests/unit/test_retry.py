"""Backoff: exponential in the attempt, capped, jittered within [half, all]."""

from __future__ import annotations

import random
from datetime import timedelta

from wfctl.worker.retry import backoff

BASE = timedelta(seconds=1)
CAP = timedelta(seconds=30)


def test_backoff_grows_exponentially_within_jitter_bounds():
    rng = random.Random(7)
    for attempt, ceiling in [(1, 1), (2, 2), (3, 4), (4, 8), (5, 16)]:
        for _ in range(50):
            value = backoff(attempt, BASE, CAP, rng)
            assert ceiling / 2 <= value <= ceiling


def test_backoff_is_capped():
    rng = random.Random(1)
    assert all(15 <= backoff(40, BASE, CAP, rng) <= 30 for _ in range(50))


def test_backoff_is_jittered():
    rng = random.Random(3)
    assert len({round(backoff(3, BASE, CAP, rng), 6) for _ in range(20)}) > 10
