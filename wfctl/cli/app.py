"""The ``wfctl`` application: global options, the command groups, and the one place where
errors become a single line on stderr and an exit code."""

from __future__ import annotations

import gc
import os
import re
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import psycopg
import typer
from typer.core import TyperGroup

from wfctl import __version__, exits, schema
from wfctl.cli import (
    candidates,
    completion,
    coordination,
    demo,
    inspect,
    manage,
    render,
    setup,
    submit,
    top,
    worker,
)
from wfctl.cli import db as db_commands
from wfctl.cli import limits as limit_commands
from wfctl.cli import schedules as schedule_commands
from wfctl.cli.clicompat import Context, HelpFormatter, UsageError
from wfctl.cli.common import ConfigOpt, DsnOpt, GlobalOptions
from wfctl.connection import scrub, translate
from wfctl.errors import WfctlError


def _debug_enabled(args: Sequence[str]) -> bool:
    return "--debug" in args or os.environ.get("WFCTL_DEBUG", "") not in ("", "0")


def _json_requested(args: Sequence[str]) -> bool:
    """``--json`` among the options (before a ``--``): every message on stderr is then a JSON
    object too (render.json_stderr)."""
    for arg in args:
        if arg == "--":
            return False
        if arg == "--json":
            return True
    return False


def _secrets_in(args: Sequence[str]) -> list[str]:
    found = [a for a in args if "=" in a or "://" in a]
    if os.environ.get("WFCTL_DSN"):
        found.append(os.environ["WFCTL_DSN"])
    return found


def first_sentence(text: str) -> str:
    """The first sentence of a command's help, whole, on one line: what the overview shows."""
    flat = " ".join(text.split())
    found = re.match(r"(.+?[.!?])(?:\s|$)", flat)
    return found.group(1) if found else flat


class WfctlGroup(TyperGroup):
    """Runs a command and turns every failure into ``wfctl: error: ...`` and an exit code."""

    def list_commands(self, ctx: Context) -> list[str]:
        """Registration order, but a command sits just before its plural (``schedule`` before
        ``schedules``, as ``limit`` before ``limits``)."""
        names = super().list_commands(ctx)
        ordered: list[str] = []
        for name in names:
            if name in ordered:
                continue
            single = name[:-1]
            if name.endswith("s") and single in names and single not in ordered:
                ordered.append(single)
            ordered.append(name)
        return ordered

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        """The commands with the first sentence of each one's help, whole (not cut at the width)."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            rows.append((name, first_sentence(command.help or command.short_help or "")))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        debug = _debug_enabled(argv)
        render.json_stderr(_json_requested(argv))
        code: int
        message: str | None = None
        try:
            rv = super().main(
                argv,
                prog_name or "wfctl",
                complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
            code = rv if isinstance(rv, int) else 0
        except typer.Exit as exc:
            code = exc.exit_code
        except UsageError as exc:
            hint = ""
            if exc.ctx is not None:
                hint = f" (see `{exc.ctx.command_path} --help`)"
            message = scrub(exc.format_message(), *_secrets_in(argv)) + hint
            code = exc.exit_code
        except (typer.Abort, KeyboardInterrupt):
            message = "interrupted"
            code = exits.INTERRUPTED
        except WfctlError as exc:
            if debug:
                traceback.print_exc()
            message = scrub(str(exc), *_secrets_in(argv))
            code = exits.code_for(exc)
        except psycopg.Error as exc:
            if debug:
                traceback.print_exc()
            wrapped = translate(exc)
            message = scrub(str(wrapped), *_secrets_in(argv))
            code = exits.code_for(wrapped)
        except UnicodeError as exc:
            # a string from the command line or the environment holding bytes that are not UTF-8
            # (Python hands them over as surrogate escapes) met a place that needs UTF-8
            if debug:
                traceback.print_exc()
            where = ""
            if isinstance(exc, UnicodeEncodeError):
                where = f" ({exc.object[exc.start : exc.end]!r} at character {exc.start})"
            message = f"an argument or environment variable is not valid UTF-8{where}"
            code = exits.USAGE
        except Exception as exc:
            if debug:
                traceback.print_exc()
            message = (
                f"internal error: {type(exc).__name__}: {scrub(str(exc), *_secrets_in(argv))}"
                " (run with --debug for a traceback, and please report it)"
            )
            code = exits.INTERNAL
        if message is not None:
            render.failure(message, code)
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    cls=WfctlGroup,
    name="wfctl",
    help="Durable workflows on PostgreSQL: install the schema, submit, run workers, recover, inspect.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        render.line(f"wfctl {__version__} (schema version {schema.latest_version()})")
        raise typer.Exit()


@app.callback()
def _global(
    ctx: typer.Context,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="JSON on stdout, for every command that reports; messages on stderr as JSON objects too.",
        ),
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks (also WFCTL_DEBUG=1).")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Durable workflows on PostgreSQL."""
    ctx.obj = GlobalOptions(
        dsn=dsn,
        config=Path(config) if config is not None else None,
        json=json,
        debug=debug or os.environ.get("WFCTL_DEBUG", "") not in ("", "0"),
    )


setup.register(app)
submit.register(app)
worker.register(app)
manage.register(app)
coordination.register(app)
limit_commands.register(app)
schedule_commands.register(app)
inspect.register(app)
top.register(app)
demo.register(app)
completion.register(app)
candidates.register(app)
app.add_typer(db_commands.app, name="db")


def main() -> None:
    """Console-script entry point."""
    try:
        typer.main.get_command(app).main(prog_name="wfctl")
    finally:
        # The process ends here: nothing it holds needs collecting, and the interpreter's last
        # collections over every loaded module's objects made each command's exit take 0.1 s.
        gc.freeze()
