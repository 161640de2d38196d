"""The Click that Typer (>= 0.29) vendors as ``typer._click``: wfctl needs its usage-error type,
the current context, the help formatter, and (for the generated CLI reference) its command,
context and parameter types. Kept in one place so a Typer upgrade touches one file."""

from __future__ import annotations

from typer._click.core import Command, Context, Parameter
from typer._click.exceptions import UsageError
from typer._click.formatting import HelpFormatter
from typer._click.globals import get_current_context

__all__ = ["Command", "Context", "HelpFormatter", "Parameter", "UsageError", "get_current_context"]
