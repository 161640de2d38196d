"""``@wfctl.workflow``: registering workflow types by name."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from wfctl import cron
from wfctl.durations import retry_delay, timeout_message, timeout_seconds
from wfctl.errors import AppError, InvalidInput
from wfctl.limits import Limits, declared

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_MAX_RETRIES = 3
DEFAULT_RETRY_BASE = timedelta(seconds=1)
DEFAULT_RETRY_CAP = timedelta(minutes=10)
MAX_TYPE_LENGTH = 100  # workflows.workflow_type is varchar(100)


@dataclass(frozen=True)
class WorkflowType:
    """A registered workflow: its function and its retry policy."""

    name: str
    fn: Callable[..., Any]
    max_retries: int = DEFAULT_MAX_RETRIES
    retry_base: timedelta = DEFAULT_RETRY_BASE
    retry_cap: timedelta = DEFAULT_RETRY_CAP
    dont_retry: tuple[type[BaseException], ...] = ()  # errors that fail the run at once
    timeout: float | None = None  # seconds from the submit to the run's deadline
    timeout_error: str | None = None  # what a run fails with at that deadline
    limits: Limits = field(default_factory=Limits)  # enforced by the claim (migration 0007)
    schedule: str | None = None  # a cron expression: the worker keeps a schedule of this name
    timezone: str | None = None  # the schedule's time zone (None: UTC)


@dataclass
class Registry:
    """Workflow types by name. ``@wfctl.workflow`` adds to the default one, which ``wfctl worker
    --app`` fills by importing the module; a test can pass its own (``registry=``)."""

    types: dict[str, WorkflowType] = field(default_factory=dict)

    def add(self, workflow_type: WorkflowType) -> None:
        existing = self.types.get(workflow_type.name)
        if existing is not None and existing.fn is not workflow_type.fn:
            qual = getattr(existing.fn, "__qualname__", existing.fn)
            raise InvalidInput(f"workflow type {workflow_type.name!r} is already registered by {qual}")
        self.types[workflow_type.name] = workflow_type

    def get(self, name: str) -> WorkflowType | None:
        return self.types.get(name)

    def names(self) -> list[str]:
        return sorted(self.types)


#: The registry ``@workflow`` adds to; ``wfctl worker --app`` imports a module to fill it.
default_registry = Registry()


def _error_classes(value: object) -> tuple[type[BaseException], ...]:
    """``dont_retry`` as a tuple of exception classes: one class or a tuple/list of them."""
    items = tuple(value) if isinstance(value, tuple | list) else (value,)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise InvalidInput(f"dont_retry takes exception classes, not {item!r}")
    return items


def workflow(
    name: str,
    *,
    max_retries: int = DEFAULT_MAX_RETRIES,
    retry_base: str | float | timedelta = DEFAULT_RETRY_BASE,
    retry_cap: str | float | timedelta = DEFAULT_RETRY_CAP,
    dont_retry: type[BaseException] | tuple[type[BaseException], ...] = (),
    timeout: str | float | timedelta | None = None,
    concurrency: int | None = None,
    key_concurrency: int | None = None,
    rate: str | None = None,
    schedule: str | None = None,
    timezone: str | None = None,
    registry: Registry | None = None,
) -> Callable[[F], F]:
    """Register ``fn(ctx, data)`` as the workflow type ``name``.

    ``max_retries`` counts attempts after the first; a failed attempt is retried after
    ``retry_base * 2**(attempt-1)`` (capped at ``retry_cap``) with jitter.
    An error that is an instance of a class in ``dont_retry`` (or a ``wfctl.PermanentError``)
    fails the run at once, without retries.
    ``timeout`` ("1h") gives each run a deadline counted from its submit (unless the submit set
    its own): past it the run fails with "timed out after 1h", wherever it is.
    ``concurrency`` (at most N runs of the type hold a lease at once, across all workers),
    ``rate`` ("100/1m": at most that many executions start per window, evenly spread) and
    ``key_concurrency`` (at most K running per ``concurrency_key``, claims rotating across keys)
    are stored in the database when a worker starts; ``wfctl limit`` overrides them.
    ``schedule`` ("0 * * * *", or six fields with seconds first) with ``timezone``
    ("Europe/Berlin", default UTC) submits a run at every tick (a schedule named after the type).
    """
    if not name or len(name) > MAX_TYPE_LENGTH:
        raise InvalidInput(f"a workflow type name must have 1 to {MAX_TYPE_LENGTH} characters")
    if max_retries < 0:
        raise InvalidInput("max_retries must be >= 0")

    base = retry_delay(retry_base, "retry_base")
    cap = retry_delay(retry_cap, "retry_cap")
    permanent = _error_classes(dont_retry)
    seconds = timeout_seconds(timeout, "timeout")
    if seconds is not None and seconds <= 0:
        raise InvalidInput("timeout must be positive")
    message = timeout_message(timeout, seconds)
    limits = declared(concurrency, key_concurrency, rate)
    if timezone is not None and schedule is None:
        raise InvalidInput("timezone is only meaningful with schedule")
    cron.check(schedule, timezone)  # a malformed expression, an unknown zone: InvalidInput now

    def decorate(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):
            raise InvalidInput(
                f"workflow {name!r} is an async def function; a workflow function is a plain def "
                "(its steps may be async def: ctx.step awaits them on the worker's event loop)"
            )
        (registry or default_registry).add(
            WorkflowType(
                name=name,
                fn=fn,
                max_retries=max_retries,
                retry_base=base,
                retry_cap=cap,
                dont_retry=permanent,
                timeout=seconds,
                timeout_error=message,
                limits=limits,
                schedule=schedule,
                timezone=timezone,
            )
        )
        fn.__wfctl_type__ = name  # type: ignore[attr-defined]  # Callable declares none; a function takes any
        return fn

    return decorate


def load_app(module: str, registry: Registry | None = None) -> Registry:
    """Import the application module that registers workflows (a dotted path importable from
    the current directory) and return the registry it filled."""
    import importlib
    import os
    import sys

    target = registry or default_registry
    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise AppError(f"--app {module!r} is not a dotted module path such as myapp.workflows")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise AppError(
            f"cannot import --app {module}: {exc} (run from the directory that "
            "holds the package, or set PYTHONPATH)"
        ) from None
    except Exception as exc:
        raise AppError(f"importing --app {module} failed: {type(exc).__name__}: {exc}") from None
    if not target.types:
        raise AppError(
            f'--app {module} registers no workflow: decorate workflow functions with @wfctl.workflow("name")'
        )
    return target
