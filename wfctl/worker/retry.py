"""Retry backoff: exponential in the attempt number, capped, with jitter."""

from __future__ import annotations

import random
from datetime import timedelta


def backoff(attempt: int, base: timedelta, cap: timedelta, rng: random.Random | None = None) -> float:
    """Seconds to wait before attempt ``attempt + 1``, after attempt ``attempt`` failed.

    ``base * 2**(attempt-1)``, at most ``cap``, then "equal jitter": a uniform draw between half
    of that and all of it, so retries of many workflows that failed together spread out.
    """
    exponent = max(0, attempt - 1)
    ceiling = min(cap.total_seconds(), base.total_seconds() * (2.0 ** min(exponent, 62)))
    draw = (rng or random).random()
    return ceiling / 2.0 + draw * ceiling / 2.0
