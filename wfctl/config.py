"""wfctl.toml and the connection precedence (docs/explanation/trust.md): which database a command uses
(a Target), and the DSN and the connection for it (starting the embedded server when that is
the target). Opening a connection for a DSN is wfctl.connection's, below this module.

Precedence, first match wins: ``--dsn``, ``WFCTL_DSN``, the config file's ``[database]`` table,
libpq's own ``PG*`` environment, the embedded PostgreSQL. The config file is ``--config``, else
``WFCTL_CONFIG``, else the nearest ``wfctl.toml`` in the current directory or its parents
(``search_dirs``: not above ``$HOME``, a ``WFCTL_CONFIG_CEILING`` directory or a directory every
user may write to, not across a filesystem boundary), used only if no other user could have put
it there (``wfctl.config_trust``). With none found, the embedded server lives in ``./.wfctl``, never
inside a Python package. ``[database] schema``
puts wfctl's objects in a schema of its own: every DSN wfctl hands out then sets that
``search_path``.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import tomli_w
from psycopg import pq
from psycopg.conninfo import make_conninfo

from wfctl import config_trust
from wfctl.connection import connect, has_secret, is_secret, mask_dsn, scrub, with_search_path
from wfctl.errors import ConfigError, InvalidInput

DEFAULT_CONFIG_NAME = "wfctl.toml"
DEFAULT_DATA_DIR = ".wfctl"
#: A config file is a few lines; anything bigger is the wrong file (or /dev/zero).
MAX_CONFIG_BYTES = 1_000_000

#: libpq environment variables that, when set, mean "the user configured a server through libpq".
LIBPQ_ENV = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")
#: Target.source when libpq's environment names the server.
PG_ENVIRONMENT = "PG* environment"

#: Where the config file came from (Config.origin).
FROM_OPTION = "--config"
FROM_ENV = "WFCTL_CONFIG"
FOUND_HERE = "current directory"
FOUND_ABOVE = "parent directory"
NOT_FOUND = "not found"

#: Where the embedded server's home came from (Target.data_dir_from).
DATA_DIR_FROM_CONFIG = "[database] data_dir"
DATA_DIR_FROM_ENV = "WFCTL_DATA_DIR"
DATA_DIR_BESIDE_CONFIG = "beside the config file"
DATA_DIR_HERE = "current directory"

#: A schema name wfctl accepts: an unquoted PostgreSQL identifier in lower case (so it reads the
#: same in SQL, in a search_path and in a NOTIFY channel), at most 63 bytes (NAMEDATALEN - 1).
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

#: Every key wfctl.toml may hold, with its type; anything else is a typo and an error.
SCHEMA: dict[str, dict[str, type | tuple[type, ...]]] = {
    "database": {"dsn": str, "embedded": bool, "data_dir": str, "schema": str},
    "reports": {"dsn": str},
    "worker": {
        "app": str,
        "concurrency": int,
        "types": list,
        "heartbeat": str,
        "grace": str,
        "poll": str,
        "listen": bool,
        "log_format": str,
        "missed_beats": int,
        "sweep": bool,
        "burst_wait": str,
        "health_port": int,
        "health_host": str,
        "health_file": str,
    },
}


#: The type of the items of each list key.
LIST_ITEMS: dict[tuple[str, str], type] = {("worker", "types"): str}

#: Keys whose value may hold a password: an error about them never shows the value.
SECRET_KEYS = (("database", "dsn"), ("reports", "dsn"))

#: Directories (separated by ``os.pathsep``) the config search does not go above.
CEILING_ENV = "WFCTL_CONFIG_CEILING"

_KINDS = {str: "a string", int: "an integer", bool: "true or false", list: "a list"}
_FOUND_KINDS = {**_KINDS, bool: "a boolean", dict: "a table", float: "a number"}


class ConfigRefused(ConfigError):
    """A config file found by searching that wfctl will not use (``wfctl.config_trust``): ``path``, and
    ``reason`` in words."""

    def __init__(self, path: Path, reason: str, origin: str) -> None:
        super().__init__(
            f"refusing {path}, found by searching: {reason}",
            config_trust.HOW_TO_TRUST.format(path=path),
        )
        self.path = path
        self.reason = reason
        self.origin = origin

    def describe(self) -> str:
        """Where it was found, and why it is refused (``wfctl db status``)."""
        return f"{describe_origin(self.origin, Path.cwd())}; refused: {self.reason}"


@dataclass(frozen=True)
class Config:
    """The config file as found: its path, whether it exists, and its validated tables.
    ``origin`` says why this path (FROM_OPTION, FROM_ENV, FOUND_HERE, FOUND_ABOVE, NOT_FOUND);
    ``start`` is the directory the search began in (the current directory)."""

    path: Path
    exists: bool
    explicit: bool
    data: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    origin: str = NOT_FOUND
    start: Path | None = None

    @property
    def directory(self) -> Path:
        return self.path.parent

    def get(self, table: str, key: str, default: Any = None) -> Any:
        return self.data.get(table, {}).get(key, default)

    def describe_origin(self) -> str:
        """Why this config file, in words (``wfctl db status``)."""
        return describe_origin(self.origin, self.start)


def describe_origin(origin: str, start: Path | None) -> str:
    """Why a config file (Config.origin), in words."""
    if origin == FROM_OPTION:
        return "named with --config"
    if origin == FROM_ENV:
        return "named by WFCTL_CONFIG"
    if origin == FOUND_HERE:
        return "found in the current directory"
    if origin == FOUND_ABOVE:
        return f"found in a parent directory of {start}"
    return f"no {DEFAULT_CONFIG_NAME} in {start} or its parent directories"


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


def check_schema_name(name: str, what: str = "--schema") -> str:
    """``name`` if it is a schema name wfctl accepts, else InvalidInput naming ``what``."""
    if not _SCHEMA_NAME.fullmatch(name) or name.startswith("pg_"):
        shown = name if len(name) <= 80 else name[:77] + "..."
        raise InvalidInput(
            f"{what} {shown!r} is not a schema name wfctl accepts: use lower-case letters, digits "
            "and _, starting with a letter or _, at most 63 characters, not starting with pg_"
        )
    return name


def _home() -> Path | None:
    home = os.environ.get("HOME")
    if not home:
        return None
    try:
        return Path(home).resolve()
    except (OSError, RuntimeError):
        return None


def ceilings() -> set[Path]:
    """The directories in ``WFCTL_CONFIG_CEILING`` (absolute paths, ``os.pathsep`` between them;
    relative entries are ignored)."""
    found: set[Path] = set()
    for entry in os.environ.get(CEILING_ENV, "").split(os.pathsep):
        if entry and os.path.isabs(entry):
            try:
                found.add(Path(entry).resolve())
            except (OSError, RuntimeError):
                continue
    return found


def search_dirs(start: Path) -> list[Path]:
    """Where the config file is looked for, nearest first: ``start`` and its parents up to the
    filesystem root, but not above ``$HOME`` when ``start`` is inside it (a home directory's
    parents hold other people's projects, not this one's settings), not above a directory named
    in ``WFCTL_CONFIG_CEILING``, not above a directory every user may write to (``/tmp``: what
    is above it is not this project's), and not across a filesystem boundary (a parent on
    another device), as git does. Each of those stopping directories is itself searched."""
    home = _home()
    stops = ceilings()
    found: list[Path] = []
    current = start
    try:
        device: int | None = current.stat().st_dev
    except OSError:
        device = None
    while True:
        found.append(current)
        parent = current.parent
        if current == home or current in stops or parent == current or config_trust.climb_stops_at(current):
            return found
        try:
            if device is not None and parent.stat().st_dev != device:
                return found
        except OSError:
            return found
        current = parent


def discover(start: Path) -> Path | None:
    """The nearest ``wfctl.toml`` in ``search_dirs(start)``; a symlink counts even when it leads
    nowhere (reading it then says so)."""
    for directory in search_dirs(start):
        candidate = directory / DEFAULT_CONFIG_NAME
        if os.path.lexists(candidate):
            return candidate
    return None


def package_around(start: Path) -> Path | None:
    """The first of ``search_dirs(start)`` that is a Python package (holds ``__init__.py``)."""
    for directory in search_dirs(start):
        if (directory / "__init__.py").is_file():
            return directory
    return None


def package_refusal(config: Config) -> ConfigError | None:
    """Why wfctl will not put a config file or an embedded database in the current directory
    when no config file was found: it is (inside) a Python package, a source tree."""
    if config.exists or config.explicit or config.start is None:
        return None
    package = package_around(config.start)
    if package is None:
        return None
    where = "is" if package == config.start else f"is inside {package}, which is"
    return ConfigError(
        f"no {DEFAULT_CONFIG_NAME} in {config.start} or its parent directories, and {config.start} "
        f"{where} a Python package: wfctl puts no database or config file there",
        "run `wfctl init` in the project's root directory, or pass --config",
    )


def config_path(option: str | os.PathLike[str] | None) -> tuple[Path, bool, str]:
    """The config file to use, whether the user named it, and why (Config.origin): ``--config``,
    else ``WFCTL_CONFIG``, else the nearest ``wfctl.toml`` (``discover``), else
    ``./wfctl.toml``, which does not exist."""
    if option:
        return Path(option).expanduser(), True, FROM_OPTION
    env = os.environ.get("WFCTL_CONFIG")
    if env:
        return Path(env).expanduser(), True, FROM_ENV
    here = Path.cwd()
    found = discover(here)
    if found is None:
        return here / DEFAULT_CONFIG_NAME, False, NOT_FOUND
    return found, False, FOUND_HERE if found.parent == here else FOUND_ABOVE


def load_config(option: str | os.PathLike[str] | None = None, *, must_exist: bool = True) -> Config:
    """Find, read and validate the config file. A file the user named must exist (unless
    ``must_exist`` is false, as for ``wfctl init``, which writes it). A symlink to nothing is not
    "no file": it is an error, as is a file bigger than MAX_CONFIG_BYTES (read no further than
    that)."""
    path, explicit, origin = config_path(option)
    path = path.absolute()
    start = Path.cwd()
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        if path.is_symlink():
            raise ConfigError(
                f"config file {path} is a symlink to {os.readlink(path)}, which does not exist"
            ) from None
        if explicit and must_exist:
            raise ConfigError(f"config file {path} does not exist") from None
        return Config(path=path, exists=False, explicit=explicit, origin=origin, start=start)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    warnings: list[str] = []
    with handle:
        try:
            info = os.fstat(handle.fileno())
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        if explicit:
            named = config_trust.named_file_warning(path, info)
            if named is not None:
                warnings.append(named)
        else:
            reason = config_trust.refusal(path, info)
            if reason is not None:
                raise ConfigRefused(path, reason, origin)
        try:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"config file {path} is bigger than {MAX_CONFIG_BYTES} bytes: is it the right file?"
        )
    try:
        parsed = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not valid UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    data = _validate(parsed, path)
    secret = any(has_secret(data.get(table, {}).get(key) or "") for table, key in SECRET_KEYS)
    if secret and info.st_mode & (stat.S_IRGRP | stat.S_IROTH):
        warnings.append(f"{path} holds a password and is readable by other users: run `chmod 600 {path}`")
    return Config(
        path=path,
        exists=True,
        explicit=explicit,
        data=data,
        warnings=tuple(warnings),
        origin=origin,
        start=start,
    )


def _validate(parsed: dict[str, Any], path: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for table, values in parsed.items():
        if table not in SCHEMA:
            known = ", ".join(f"[{t}]" for t in SCHEMA)
            raise ConfigError(f"{path}: unknown table [{table}] (known: {known})")
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: {table} must be a table, as in [{table}]")
        for key, value in values.items():
            expected = SCHEMA[table].get(key)
            if expected is None:
                known = ", ".join(SCHEMA[table])
                raise ConfigError(f"{path}: unknown key {key!r} in [{table}] (known: {known})")
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                kind = _KINDS.get(expected, "value") if isinstance(expected, type) else "value"
                shown = _found_kind(value) if (table, key) in SECRET_KEYS else repr(value)
                raise ConfigError(f"{path}: [{table}] {key} must be {kind}, not {shown}")
            item = LIST_ITEMS.get((table, key))
            if item is not None and not all(isinstance(v, item) for v in value):
                kind = _KINDS.get(item, "value").split(" ", 1)[-1]
                raise ConfigError(f"{path}: [{table}] {key} must be a list of {kind}s, not {value!r}")
        out[table] = dict(values)
    schema = out.get("database", {}).get("schema")
    if schema is not None:
        try:
            check_schema_name(schema, "[database] schema")
        except InvalidInput as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return out


def _found_kind(value: Any) -> str:
    """What a value is, without the value (which may hold a password)."""
    for kind, words in _FOUND_KINDS.items():
        if type(value) is kind:
            return words
    return f"a {type(value).__name__} value"


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
