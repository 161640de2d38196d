"""wfctl: durable workflow execution on PostgreSQL.

The public API: ``@wfctl.workflow`` registers a workflow type, ``wfctl.Context`` is what a
workflow function receives, ``wfctl.submit`` enqueues one from an application, ``wfctl.send``
signals a running one, ``wfctl.get_event`` reads what it published and ``wfctl.result`` waits
for its output; ``wfctl.aio`` has the same four calls for asyncio applications. Every error the
library raises is a ``wfctl.WfctlError`` (see ``wfctl/errors.py``).
"""

__version__ = "0.1.0"

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
from wfctl.registry import workflow

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
    "SchemaError",
    "ServerError",
    "StepError",
    "WaitTimeout",
    "WfctlError",
    "WorkflowCancelled",
    "WorkflowFailed",
    "__version__",
    "aio",
    "get_event",
    "result",
    "send",
    "submit",
    "workflow",
]
