"""wfctl: durable workflow execution on PostgreSQL.

The public API: ``@wfctl.workflow`` registers a workflow type, ``wfctl.Context`` is what a
workflow function receives, ``wfctl.submit`` enqueues one from an application. Every error the
library raises is a ``wfctl.WfctlError`` (see ``wfctl/errors.py``).
"""

__version__ = "0.1.0"

from wfctl.client import submit
from wfctl.context import Context
from wfctl.errors import (
    AppError,
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
    WfctlError,
)
from wfctl.registry import workflow

__all__ = [
    "AppError",
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
    "WfctlError",
    "__version__",
    "submit",
    "workflow",
]
