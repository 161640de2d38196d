"""wfctl: durable workflow execution on PostgreSQL.

The public API: ``@wfctl.workflow`` registers a workflow type, ``@wfctl.step`` gives a step
function retries and a timeout, ``wfctl.Context`` is what a workflow function receives,
``wfctl.submit`` enqueues one from an application, ``wfctl.send`` signals a running one,
``wfctl.get_event`` reads what it published and ``wfctl.result`` waits for its output. The
operator API does what ``wfctl show``, ``list``, ``cancel`` and ``retry`` do: ``wfctl.get`` (a
``wfctl.RunStatus``), ``wfctl.list`` (``wfctl.RunSummary`` rows), ``wfctl.cancel`` and
``wfctl.retry``. A run is named by its id or by ``key=``, the idempotency key it was submitted
with. ``wfctl.aio`` has these calls as coroutines for asyncio applications. Every error the
library raises is a ``wfctl.WfctlError`` (see ``wfctl/errors.py``).
"""

__version__ = "0.3.0.dev0"

from wfctl import aio
from wfctl.client import submit
from wfctl.context import Context
from wfctl.coordination import get_event, result, send
from wfctl.errors import (
    AppError,
    ChildFailed,
    ConfigError,
    ConnectionFailed,
    Fenced,
    InvalidInput,
    InvalidState,
    NotFound,
    PermanentError,
    PermissionDenied,
    SchemaError,
    ServerError,
    StepError,
    WaitTimeout,
    WfctlError,
    WorkflowCancelled,
    WorkflowFailed,
)
from wfctl.operator import RunStatus, RunSummary, WaitStatus, cancel, get, list, retry
from wfctl.registry import workflow
from wfctl.steps import StepOptions, step

__all__ = [
    "AppError",
    "ChildFailed",
    "ConfigError",
    "ConnectionFailed",
    "Context",
    "Fenced",
    "InvalidInput",
    "InvalidState",
    "NotFound",
    "PermanentError",
    "PermissionDenied",
    "RunStatus",
    "RunSummary",
    "SchemaError",
    "ServerError",
    "StepError",
    "StepOptions",
    "WaitStatus",
    "WaitTimeout",
    "WfctlError",
    "WorkflowCancelled",
    "WorkflowFailed",
    "__version__",
    "aio",
    "cancel",
    "get",
    "get_event",
    "list",
    "result",
    "retry",
    "send",
    "step",
    "submit",
    "workflow",
]
