"""The Click that Typer (>= 0.29) vendors as ``typer._click``: wfctl needs its usage-error type
and the current context, nothing else. Kept in one place so a Typer upgrade touches one file."""

from __future__ import annotations

from typer._click.exceptions import UsageError
from typer._click.globals import get_current_context

__all__ = ["UsageError", "get_current_context"]
