"""The worker's options, defined once: their defaults, their limits, and how flags and the
``[worker]`` table of wfctl.toml combine (a flag wins over the config, the config over the
default). The CLI's help texts quote these defaults; nothing else repeats them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wfctl.durations import MIN_STALE_SECONDS, parse_duration
from wfctl.errors import InvalidInput

LOG_FORMATS = ("auto", "rich", "plain", "json")
MAX_CONCURRENCY = 1000
#: How many heartbeats a worker may miss before it counts as dead (``--missed-beats``): at
#: least 2, since a worker between two beats is one beat late at most.
MIN_MISSED_BEATS, MAX_MISSED_BEATS = 2, 100
#: The longest ``--burst-wait``: a burst run waits for work due soon, not for tomorrow's.
MAX_BURST_WAIT = 3600.0


@dataclass(frozen=True)
class WorkerOptions:
    concurrency: int = 64  # workflows run at once (threads); docs/decisions/2026-12-08-64-threads.md
    types: list[str] | None = None  # only these types (None: every type the app registers)
    heartbeat: float = 10.0  # seconds between heartbeats
    grace: float = 30.0  # seconds running steps get after SIGTERM
    poll: float = 1.0  # seconds between polls for work (the fallback to LISTEN)
    listen: bool = True  # LISTEN for wake-ups
    burst: bool = False  # exit once nothing runnable is left...
    burst_wait: float = 10.0  # ...within this many seconds (retries, short sleeps)
    missed_beats: int = 3  # silent for this many heartbeats: dead (its runs are requeued)
    sweep: bool = True  # requeue the runs of dead workers (the stale sweep)
    health_port: int | None = None  # serve the readiness check over HTTP on this port
    health_host: str = "127.0.0.1"
    health_file: str | None = None  # touched at each successful heartbeat, removed on exit
    prepare: bool = True  # server-side prepared statements
    max_batch: int = 256  # writes in one group commit
    log_format: str = "auto"

    def __post_init__(self) -> None:
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise InvalidInput(f"--concurrency must be between 1 and {MAX_CONCURRENCY}")
        if self.log_format not in LOG_FORMATS:
            raise InvalidInput(f"--log-format {self.log_format!r}: use auto, rich, plain or json")
        if not MIN_MISSED_BEATS <= self.missed_beats <= MAX_MISSED_BEATS:
            raise InvalidInput(f"--missed-beats must be between {MIN_MISSED_BEATS} and {MAX_MISSED_BEATS}")
        if self.burst_wait > MAX_BURST_WAIT:
            raise InvalidInput(f"--burst-wait must be at most {MAX_BURST_WAIT / 60:g}m")
        if self.health_port is not None and not 1 <= self.health_port <= 65535:
            raise InvalidInput("--health-port must be between 1 and 65535")

    @property
    def dead_after(self) -> float:
        """Seconds of silence after which this worker counts as dead: its heartbeat interval
        times the beats it may miss, and never under a second (a shorter threshold would call
        a worker dead between two of its beats). Recorded in its row, so that every worker, and
        every report, judges it by its own rule."""
        return max(self.heartbeat * self.missed_beats, MIN_STALE_SECONDS)


DEFAULTS = WorkerOptions()


def default_text(name: str) -> str:
    """A default as the help texts show it (``10s``, ``8``)."""
    value = getattr(DEFAULTS, name)
    if name in ("heartbeat", "grace", "poll", "burst_wait"):
        return f"{value:g}s"
    return str(value)


def _duration(flag: str | None, configured: Any, name: str, *, allow_zero: bool = False) -> float:
    text = flag or configured
    if not text:
        return float(getattr(DEFAULTS, name))
    option = "--" + name.replace("_", "-")
    return parse_duration(str(text), what=option, allow_zero=allow_zero).total_seconds()


def resolve(
    config: Mapping[str, Any],
    *,
    concurrency: int | None = None,
    types: list[str] | None = None,
    heartbeat: str | None = None,
    grace: str | None = None,
    poll: str | None = None,
    no_listen: bool = False,
    burst: bool = False,
    burst_wait: str | None = None,
    missed_beats: int | None = None,
    no_sweep: bool = False,
    health_port: int | None = None,
    health_host: str | None = None,
    health_file: str | None = None,
    log_format: str | None = None,
) -> WorkerOptions:
    """Options from the command line's flags over ``config`` (the ``[worker]`` table) over the
    defaults."""
    listen = not no_listen and bool(config.get("listen", DEFAULTS.listen))
    port = health_port if health_port is not None else config.get("health_port")
    return WorkerOptions(
        concurrency=concurrency
        if concurrency is not None
        else int(config.get("concurrency", DEFAULTS.concurrency)),
        types=types or config.get("types") or None,
        heartbeat=_duration(heartbeat, config.get("heartbeat"), "heartbeat"),
        grace=_duration(grace, config.get("grace"), "grace", allow_zero=True),
        poll=_duration(poll, config.get("poll"), "poll"),
        listen=listen,
        burst=burst,
        burst_wait=_duration(burst_wait, config.get("burst_wait"), "burst_wait", allow_zero=True),
        missed_beats=missed_beats
        if missed_beats is not None
        else int(config.get("missed_beats", DEFAULTS.missed_beats)),
        sweep=not no_sweep and bool(config.get("sweep", DEFAULTS.sweep)),
        health_port=int(port) if port is not None else None,
        health_host=health_host or str(config.get("health_host", DEFAULTS.health_host)),
        health_file=health_file or config.get("health_file") or None,
        prepare=listen,
        log_format=log_format or str(config.get("log_format", DEFAULTS.log_format)),
    )
