"""wfctl: durable workflow execution on PostgreSQL.

The public API: ``@wfctl.workflow`` registers a workflow type, ``wfctl.Context`` is what a
workflow function receives, ``wfctl.submit`` enqueues one from an application.
"""

__version__ = "0.1.0"

from wfctl.client import submit
from wfctl.context import Context
from wfctl.registry import workflow

__all__ = ["Context", "__version__", "submit", "workflow"]
