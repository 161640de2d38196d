"""wfctl: durable workflow execution on PostgreSQL."""

__version__ = "0.1.0"
