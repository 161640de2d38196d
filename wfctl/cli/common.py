"""What every command shares: the global options, and a Session that resolves the config file
and the connection target once, connects, and checks the schema version. A config file found in
a parent directory is named once on stderr; with no config file found, the first use of the
embedded default says so, once. Only the commands that set ``may_create`` (``init``, ``demo``,
``worker``) may create the embedded server; every other one refuses, in one line, where there
is none yet (and starts an existing, stopped one)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

import psycopg
import typer

from wfctl import keys, replica, schema, words
from wfctl.cli import render
from wfctl.cli.clicompat import get_current_context
from wfctl.config import (
    DATA_DIR_HERE,
    FOUND_ABOVE,
    Config,
    Target,
    load_config,
    open_target,
    resolve_reports_target,
    resolve_target,
    target_dsn,
)
from wfctl.errors import ConfigError, SchemaError

DsnOpt = Annotated[
    str | None,
    typer.Option(
        "--dsn",
        help="PostgreSQL DSN or URL; overrides WFCTL_DSN, wfctl.toml and PG* variables.",
        show_default=False,
    ),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="Config file (default: $WFCTL_CONFIG, else the nearest wfctl.toml here or above).",
        show_default=False,
        dir_okay=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout instead of tables.")]
ReplicaOpt = Annotated[
    str | None,
    typer.Option(
        "--replica",
        help="Read from this streaming standby instead of the primary (default: [reports] dsn in "
        "wfctl.toml, else the primary); says how far behind it is, on stderr.",
        show_default=False,
    ),
]


IdOrKeyArg = Annotated[
    str | None,
    typer.Argument(metavar="ID", help="The workflow's id (a UUID); or name it by --key.", show_default=False),
]
KeyOpt = Annotated[
    str | None,
    typer.Option(
        "--key",
        help="The workflow's idempotency key (the one given to submit --key), instead of its ID.",
        show_default=False,
    ),
]


def workflow_named(workflow_id: str | None, key: str | None, *, key_option: str = "--key") -> UUID | None:
    """The workflow ID argument parsed, or None when the workflow is named by its key; exactly
    one of the two must be given (a one-line error, exit 2, otherwise)."""
    keys.check_one(workflow_id, key, id_name="its ID", key_name=key_option)
    return None if workflow_id is None else words.parse_id(workflow_id)


@dataclass
class GlobalOptions:
    dsn: str | None = None
    config: Path | None = None
    json: bool = False
    debug: bool = False


def global_options() -> GlobalOptions:
    ctx = get_current_context(silent=True)
    root = ctx.find_root() if ctx else None
    if root is not None and isinstance(root.obj, GlobalOptions):
        return root.obj
    return GlobalOptions(debug=os.environ.get("WFCTL_DEBUG", "") not in ("", "0"))


@dataclass
class Session:
    """The resolved settings of one command run."""

    dsn_option: str | None = None
    config_option: Path | None = None
    json: bool = False
    schema_option: str | None = None  # `wfctl init --schema`, standing for [database] schema
    announce: bool = True  # say which database wfctl chose when no config file was found
    name_config: bool = True  # say which config file is used when it was found in a parent directory
    quiet: bool = False  # a command's --quiet: neither of the two above
    may_create: bool = False  # may create (initdb) the embedded server: init, demo, worker
    _config: Config | None = field(default=None, repr=False)
    _target: Target | None = field(default=None, repr=False)
    _announced: bool = field(default=False, repr=False)
    replica_status: replica.ReplicaStatus | None = field(default=None, repr=False)

    @classmethod
    def create(cls, dsn: str | None = None, config: Path | None = None, json: bool = False) -> Session:
        """Command options win over the same options given before the command name (an empty
        one too: ``--dsn ""`` is an error, not "no --dsn")."""
        glob = global_options()
        return cls(
            dsn_option=dsn if dsn is not None else glob.dsn,
            config_option=config if config is not None else glob.config,
            json=json or glob.json,
        )

    def config(self, *, must_exist: bool = True) -> Config:
        if self._config is None:
            self._config = load_config(self.config_option, must_exist=must_exist)
            for warning in self._config.warnings:
                render.warn(warning)
            if self._config.origin == FOUND_ABOVE and self.name_config and not self.quiet:
                render.notice(f"using {self._config.path} (found in a parent directory)")
        return self._config

    def target(self) -> Target:
        if self._target is None:
            self._target = resolve_target(self.dsn_option, self.config(), schema=self.schema_option)
        return self._target

    def _announce(self) -> None:
        """Once per command: no config file was found, so the embedded server's default home
        (``./.wfctl``) is used; say which, and how to make it the project's."""
        target = self.target()
        config = self.config()
        if self._announced or not self.announce or self.quiet or not target.embedded:
            return
        if config.exists or config.explicit:
            return
        self._announced = True
        render.notice(
            f"no wfctl.toml in {config.start} or its parent directories: using the embedded PostgreSQL "
            f"in {target.data_dir} (`wfctl init` writes a wfctl.toml here)"
        )

    def _check_may_start(self) -> None:
        """A command that may not create the embedded server (all but ``init``, ``demo`` and
        ``worker``) refuses, before anything is made or started, where it does not exist yet;
        an existing one, stopped, it starts."""
        target = self.target()
        if self.may_create or not target.embedded:
            return
        from wfctl.embedded import EmbeddedServer  # loaded only for the embedded server

        assert target.data_dir is not None
        server = EmbeddedServer(target.data_dir)
        if server.initialised():
            return
        config = self.config()
        if target.data_dir_from == DATA_DIR_HERE:
            raise ConfigError(
                f"no wfctl project here: no wfctl.toml in {config.start} or its parent directories, "
                "and no database configured",
                "`wfctl init` makes one here; or name a database with --dsn, WFCTL_DSN or --config",
            )
        raise SchemaError(
            f"the embedded PostgreSQL of this project has not been created yet (no cluster in "
            f"{server.pgdata})",
            "`wfctl init` creates it and installs the schema",
        )

    def dsn(self) -> str:
        self._check_may_start()
        self._announce()
        return target_dsn(self.target(), notice=render.notice)

    def connect_reports(self, replica_option: str | None, *, quiet: bool = False) -> psycopg.Connection[Any]:
        """A connection for a read-only report: to the standby named by ``--replica`` or
        ``[reports] dsn`` (saying on stderr how current its data is: with ``quiet``, as for
        --json and metrics run from cron, only when replay is paused or not streaming), else to
        the primary. The standby's status is kept in ``replica_status``."""
        target = resolve_reports_target(replica_option, self.config(), self.target())
        if target is None:
            return self.connect()
        conn = open_target(target, notice=render.notice)
        try:
            schema.check(conn)
            found = replica.status(conn)
        except BaseException:
            conn.close()
            raise
        self.replica_status = found
        where = conn.info.host if conn.info.host.startswith("/") else f"{conn.info.host}:{conn.info.port}"
        if found.worrying:
            render.warn(found.describe(where))
        elif not quiet:
            render.notice(found.describe(where))
        return conn

    def connect(self, *, check_schema: bool = True, **kwargs: Any) -> psycopg.Connection[Any]:
        self._check_may_start()
        self._announce()
        conn = open_target(self.target(), notice=render.notice, **kwargs)
        if check_schema:
            try:
                schema.check(conn)
            except BaseException:
                conn.close()
                raise
        return conn
