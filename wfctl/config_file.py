"""Finding and reading ``wfctl.toml``: where it is looked for, whether a file found may be
used, and what it may hold.

The config file is ``--config``, else ``WFCTL_CONFIG``, else the nearest ``wfctl.toml`` in the
current directory or its parents (``search_dirs``: not above ``$HOME``, a
``WFCTL_CONFIG_CEILING`` directory or a directory every user may write to, not across a
filesystem boundary), used only if no other user could have put it there
(``wfctl.config_trust``). Every table and key it holds is checked against ``SCHEMA``: anything
else is a typo and an error. What the file says about the database is wfctl.config's.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wfctl import config_trust
from wfctl.connection import has_secret
from wfctl.errors import ConfigError, InvalidInput

DEFAULT_CONFIG_NAME = "wfctl.toml"
DEFAULT_DATA_DIR = ".wfctl"
#: A config file is a few lines; anything bigger is the wrong file (or /dev/zero).
MAX_CONFIG_BYTES = 1_000_000

#: Where the config file came from (Config.origin).
FROM_OPTION = "--config"
FROM_ENV = "WFCTL_CONFIG"
FOUND_HERE = "current directory"
FOUND_ABOVE = "parent directory"
NOT_FOUND = "not found"

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
            # a key with LIST_ITEMS is a list in SCHEMA, so value is one here (isinstance tells mypy)
            if item is not None and isinstance(value, list) and not all(isinstance(v, item) for v in value):
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
