"""The connection target (docs/explanation/trust.md): which database a command uses (a Target),
and the DSN and the connection for it (starting the embedded server when that is the target).
Finding and reading wfctl.toml is wfctl.config_file's (its names are importable from here
too); opening a connection for a DSN is wfctl.connection's, below this module.

Precedence, first match wins: ``--dsn``, ``WFCTL_DSN``, the config file's ``[database]`` table,
libpq's own ``PG*`` environment, the embedded PostgreSQL. With no config file found, the
embedded server lives in ``./.wfctl``, never inside a Python package. ``[database] schema``
puts wfctl's objects in a schema of its own: every DSN wfctl hands out then sets that
``search_path``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import tomli_w
from psycopg import pq
from psycopg.conninfo import make_conninfo

from wfctl.config_file import (
    CEILING_ENV,
    DEFAULT_CONFIG_NAME,
    DEFAULT_DATA_DIR,
    FOUND_ABOVE,
    FOUND_HERE,
    FROM_ENV,
    FROM_OPTION,
    LIST_ITEMS,
    MAX_CONFIG_BYTES,
    NOT_FOUND,
    SCHEMA,
    SECRET_KEYS,
    Config,
    ConfigRefused,
    ceilings,
    check_schema_name,
    config_path,
    describe_origin,
    discover,
    load_config,
    package_around,
    package_refusal,
    search_dirs,
)
from wfctl.connection import connect, has_secret, is_secret, mask_dsn, scrub, with_search_path
from wfctl.errors import ConfigError, InvalidInput

__all__ = [  # its own names and those of wfctl.config_file, importable from here as well
    "CEILING_ENV",
    "DATA_DIR_BESIDE_CONFIG",
    "DATA_DIR_FROM_CONFIG",
    "DATA_DIR_FROM_ENV",
    "DATA_DIR_HERE",
    "DEFAULT_CONFIG_NAME",
    "DEFAULT_DATA_DIR",
    "FOUND_ABOVE",
    "FOUND_HERE",
    "FROM_ENV",
    "FROM_OPTION",
    "LIBPQ_ENV",
    "LIST_ITEMS",
    "MAX_CONFIG_BYTES",
    "NOT_FOUND",
    "PG_ENVIRONMENT",
    "SCHEMA",
    "SECRET_KEYS",
    "Config",
    "ConfigRefused",
    "Notice",
    "Target",
    "ceilings",
    "check_schema_name",
    "config_path",
    "describe_data_dir_origin",
    "describe_origin",
    "discover",
    "dsn_from_libpq_env",
    "embedded_data_dir",
    "embedded_home",
    "load_config",
    "open_target",
    "package_around",
    "package_refusal",
    "printable_dsn",
    "recorded_dsn",
    "resolve_reports_target",
    "resolve_target",
    "search_dirs",
    "target_dsn",
    "unrecorded_libpq_env",
    "write_config",
]

#: libpq environment variables that, when set, mean "the user configured a server through libpq".
LIBPQ_ENV = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")
#: Target.source when libpq's environment names the server.
PG_ENVIRONMENT = "PG* environment"

#: Where the embedded server's home came from (Target.data_dir_from).
DATA_DIR_FROM_CONFIG = "[database] data_dir"
DATA_DIR_FROM_ENV = "WFCTL_DATA_DIR"
DATA_DIR_BESIDE_CONFIG = "beside the config file"
DATA_DIR_HERE = "current directory"


@dataclass(frozen=True)
class Target:
    """Where to connect: a DSN, or the embedded server living in ``data_dir`` (chosen for the
    reason ``data_dir_from``); ``schema`` is wfctl's own schema, None for the default."""

    dsn: str | None
    source: str
    data_dir: Path | None = None
    data_dir_from: str | None = None
    schema: str | None = None

    @property
    def embedded(self) -> bool:
        return self.dsn is None


def embedded_home(config: Config) -> tuple[Path, str]:
    """Home of the embedded server and why: ``[database] data_dir`` (relative to the config
    file), else ``WFCTL_DATA_DIR``, else ``.wfctl`` beside the config file (with no config file
    found: in the current directory)."""
    configured = config.get("database", "data_dir")
    if configured:
        return (config.directory / Path(configured).expanduser()).absolute(), DATA_DIR_FROM_CONFIG
    env = os.environ.get("WFCTL_DATA_DIR")
    if env:
        return Path(env).expanduser().absolute(), DATA_DIR_FROM_ENV
    beside = DATA_DIR_BESIDE_CONFIG if config.exists or config.explicit else DATA_DIR_HERE
    return config.directory / DEFAULT_DATA_DIR, beside


def embedded_data_dir(config: Config) -> Path:
    """Home of the embedded server (``embedded_home`` without the reason)."""
    return embedded_home(config)[0]


def resolve_target(dsn_option: str | None, config: Config, *, schema: str | None = None) -> Target:
    """Apply the precedence (docs/explanation/trust.md) and say where the answer came from. Something that
    names a database but is empty (``--dsn ""``, ``WFCTL_DSN=``, ``dsn = ""``) is an error, as
    is ``embedded = false`` with nothing else configured: none of them falls back to the
    embedded server. With no config file found, the embedded server's default home is
    ``./.wfctl``, refused inside a Python package (``package_refusal``). ``schema`` (``wfctl
    init --schema``) stands for ``[database] schema``."""
    schema = schema if schema is not None else config.get("database", "schema")
    if dsn_option is not None:
        if not dsn_option.strip():
            raise InvalidInput(
                "--dsn is empty: give a DSN (such as 'host=db1 dbname=app'), or leave --dsn out"
            )
        return Target(dsn=dsn_option, source="--dsn", schema=schema)
    env = os.environ.get("WFCTL_DSN")
    if env is not None:
        if not env.strip():
            raise ConfigError("WFCTL_DSN is set but empty: set it to a DSN, or unset it (`unset WFCTL_DSN`)")
        return Target(dsn=env, source="WFCTL_DSN", schema=schema)
    database = config.data.get("database", {})
    dsn = database.get("dsn")
    if dsn is not None:
        if not dsn.strip():
            raise ConfigError(f"{config.path}: [database] dsn is empty: set it to a DSN, or remove the line")
        if database.get("embedded"):
            raise ConfigError(f"{config.path}: [database] sets both dsn and embedded = true")
        return Target(dsn=dsn, source=str(config.path), schema=schema)
    if database.get("embedded"):
        home, why = embedded_home(config)
        return Target(dsn=None, source=str(config.path), data_dir=home, data_dir_from=why, schema=schema)
    if any(os.environ.get(name) for name in LIBPQ_ENV):
        return Target(dsn="", source=PG_ENVIRONMENT, schema=schema)
    if database.get("embedded") is False:
        raise ConfigError(
            f"{config.path}: [database] embedded = false, and no database is configured "
            "(no dsn there, no --dsn, WFCTL_DSN or PG* variables): say which one to use"
        )
    home, why = embedded_home(config)
    if why == DATA_DIR_HERE:
        refusal = package_refusal(config)
        if refusal is not None:
            raise refusal
    return Target(dsn=None, source="embedded default", data_dir=home, data_dir_from=why, schema=schema)


def resolve_reports_target(replica_option: str | None, config: Config, primary: Target) -> Target | None:
    """Where the read-only reports read: ``--replica``, then ``[reports] dsn``; None: the primary
    (``primary``, whose schema the standby shares)."""
    if replica_option is not None:
        if not replica_option.strip():
            raise InvalidInput("--replica is empty: give the standby's DSN, or leave --replica out")
        return Target(dsn=replica_option, source="--replica", schema=primary.schema)
    dsn = config.data.get("reports", {}).get("dsn")
    if dsn is None:
        return None
    if not dsn.strip():
        raise ConfigError(
            f"{config.path}: [reports] dsn is empty: set it to the standby's DSN, or remove the line"
        )
    return Target(dsn=dsn, source=f"[reports] dsn in {config.path}", schema=primary.schema)


def describe_data_dir_origin(target: Target, config: Config) -> str | None:
    """Why the embedded server lives where it does, in words (None: not the embedded server)."""
    why = target.data_dir_from
    if why == DATA_DIR_FROM_CONFIG:
        return f"[database] data_dir in {config.path}"
    if why == DATA_DIR_FROM_ENV:
        return "WFCTL_DATA_DIR"
    if why == DATA_DIR_BESIDE_CONFIG:
        return f"the default, beside {config.path}"
    if why == DATA_DIR_HERE:
        return f"the default in the current directory: no {DEFAULT_CONFIG_NAME} was found"
    return None


Notice = Callable[[str], None]


def target_dsn(target: Target, *, notice: Notice | None = None) -> str:
    """The DSN to use for ``target``; for the embedded server, start it if it is not running.
    With a schema of its own, the DSN sets that ``search_path`` (``connection.with_search_path``)."""
    if not target.embedded:
        assert target.dsn is not None
        return with_search_path(target.dsn, target.schema)
    from wfctl.embedded import EmbeddedServer  # loaded only for the embedded server

    assert target.data_dir is not None
    server = EmbeddedServer(target.data_dir, notice=notice)
    started = server.ensure_running()
    if started and notice is not None:
        notice(
            f"started the embedded PostgreSQL {server.version()}; its data lives in {server.pgdata}"
            " (stop it with `wfctl db stop`)"
        )
    return with_search_path(server.dsn(), target.schema)


def running_dsn(target: Target) -> str | None:
    """``target_dsn`` without starting anything: None for an embedded server that is not
    running (shell completion asks at every Tab and must not start one)."""
    if not target.embedded:
        return target_dsn(target)
    from wfctl.embedded import EmbeddedServer  # loaded only for the embedded server

    assert target.data_dir is not None
    server = EmbeddedServer(target.data_dir)
    if not server.initialised() or not server.is_running():
        return None
    return with_search_path(server.dsn(), target.schema)


def printable_dsn(target: Target, dsn: str, *, reveal: bool) -> tuple[str, bool]:
    """The DSN ``wfctl db url`` prints for ``target`` (``dsn`` from ``target_dsn``), one that
    works elsewhere: for libpq's environment, every parameter set there, the password too. Its
    secrets are ``***`` unless ``reveal``; the flag says whether any was hidden."""
    if target.source == PG_ENVIRONMENT:
        params = {key: os.environ[env] for env, key, _secret in _libpq_env_keys() if os.environ.get(env)}
        params.update(_conninfo_params(dsn))
        dsn = make_conninfo(**params)
    if reveal:
        return dsn, False
    masked = mask_dsn(dsn)
    return masked, has_secret(dsn) or scrub(dsn, dsn) != dsn


def _conninfo_params(dsn: str) -> dict[str, str]:
    try:
        return {k: str(v) for k, v in psycopg.conninfo.conninfo_to_dict(dsn).items() if v is not None}
    except (psycopg.Error, UnicodeError, ValueError):
        raise ConfigError("invalid DSN: it does not parse") from None


def open_target(target: Target, *, notice: Notice | None = None, **kwargs: Any) -> psycopg.Connection[Any]:
    """Connect to ``target``, starting the embedded server first when that is the target."""
    return connect(target_dsn(target, notice=notice), **kwargs)


def write_config(config: Config, target: Target) -> Path:
    """Write a new wfctl.toml recording ``target``; 0600 when it holds a password or another
    secret."""
    database: dict[str, Any] = {}
    if target.embedded:
        database["embedded"] = True
        assert target.data_dir is not None
        if target.data_dir != config.directory / DEFAULT_DATA_DIR:
            database["data_dir"] = _relative_to(target.data_dir, config.directory)
    else:
        database["dsn"] = recorded_dsn(target)
    if target.schema is not None:
        database["schema"] = target.schema
    body = tomli_w.dumps({"database": database})
    secret = bool(database.get("dsn")) and has_secret(database["dsn"])
    mode = 0o600 if secret else 0o644
    path = config.path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(body)
    os.chmod(path, mode)  # the umask must not widen or narrow what we chose
    return path


def recorded_dsn(target: Target) -> str | None:
    """The DSN ``write_config`` records for ``target`` (None for the embedded server): the DSN
    itself, or for the PG* environment every connection parameter set there."""
    if target.embedded:
        return None
    return target.dsn or dsn_from_libpq_env()


def _relative_to(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def _libpq_env_keys() -> list[tuple[str, str, bool]]:
    """(environment variable, connection key, secret) for every key libpq reads from the
    environment, as this libpq reports them (PGHOST, PGSSLMODE, PGTARGETSESSIONATTRS, ...)."""
    return [
        (o.envvar.decode(), o.keyword.decode(), is_secret(o.keyword.decode()) or o.dispchar == b"*")
        for o in pq.Conninfo.get_defaults()
        if o.envvar
    ]


def dsn_from_libpq_env() -> str:
    """A DSN with every connection parameter set in libpq's PG* variables (so that a cron job
    without that environment connects the same way), except secrets: PGPASSWORD stays in the
    environment (or in a password file), never in wfctl.toml."""
    params = {
        key: os.environ[env] for env, key, secret in _libpq_env_keys() if os.environ.get(env) and not secret
    }
    return make_conninfo(**params)


#: Variables libpq reads that no connection parameter can carry: where services and
#: passwords are looked up, and session defaults it sends at connect time.
_ENV_WITHOUT_KEY = ("PGSERVICEFILE", "PGSYSCONFDIR", "PGTZ", "PGDATESTYLE", "PGGEQO")


def unrecorded_libpq_env() -> list[str]:
    """The PG* variables set now that ``dsn_from_libpq_env`` does not record (secrets, and
    those with no connection parameter): a job without them may connect differently."""
    keys = _libpq_env_keys()
    recorded = {env for env, _key, secret in keys if not secret}
    names = [env for env, _key, _secret in keys if env not in recorded] + list(_ENV_WITHOUT_KEY)
    return [name for name in names if os.environ.get(name)]
