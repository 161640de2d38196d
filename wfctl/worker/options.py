"""The worker's options, defined once: their defaults, their limits, and how flags and the
``[worker]`` table of wfctl.toml combine (a flag wins over the config, the config over the
default). The CLI's help texts quote these defaults; nothing else repeats them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wfctl.durations import parse_duration
from wfctl.errors import InvalidInput

LOG_FORMATS = ("auto", "rich", "plain", "json")
MAX_CONCURRENCY = 1000


@dataclass(frozen=True)
class WorkerOptions:
    concurrency: int = 8  # workflows run at once (threads)
    types: list[str] | None = None  # only these types (None: every type the app registers)
    heartbeat: float = 10.0  # seconds between heartbeats
    grace: float = 30.0  # seconds running steps get after SIGTERM
    poll: float = 1.0  # seconds between polls for work (the fallback to LISTEN)
    listen: bool = True  # LISTEN for wake-ups
    burst: bool = False  # exit once nothing runnable is left
    prepare: bool = True  # server-side prepared statements
    max_batch: int = 256  # writes in one group commit
    log_format: str = "auto"

    def __post_init__(self) -> None:
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise InvalidInput(f"--concurrency must be between 1 and {MAX_CONCURRENCY}")
        if self.log_format not in LOG_FORMATS:
            raise InvalidInput(f"--log-format {self.log_format!r}: use auto, rich, plain or json")


DEFAULTS = WorkerOptions()


def default_text(name: str) -> str:
    """A default as the help texts show it (``10s``, ``8``)."""
    value = getattr(DEFAULTS, name)
    if name in ("heartbeat", "grace", "poll"):
        return f"{value:g}s"
    return str(value)


def _duration(flag: str | None, configured: Any, name: str, *, allow_zero: bool = False) -> float:
    text = flag or configured
    if not text:
        return float(getattr(DEFAULTS, name))
    return parse_duration(str(text), what=f"--{name}", allow_zero=allow_zero).total_seconds()


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
    log_format: str | None = None,
) -> WorkerOptions:
    """Options from the command line's flags over ``config`` (the ``[worker]`` table) over the
    defaults."""
    listen = not no_listen and bool(config.get("listen", DEFAULTS.listen))
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
        prepare=listen,
        log_format=log_format or str(config.get("log_format", DEFAULTS.log_format)),
    )
