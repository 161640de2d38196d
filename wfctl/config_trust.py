"""Whether wfctl may use a config file it found by searching (``config.discover``), and where
that search must stop.

A ``wfctl.toml`` found in the current directory or a parent is used only when no other user
could have put it there or could swap it: the file names the database (and its password file),
the worker's application module, the health file the worker removes on exit and the embedded
server's data directory, so a stranger's file would run root's work for them. The rule, as
git's ``safe.directory``:

- the file (and, for a symbolic link, the link itself) belongs to the user wfctl runs as, or
  to root, and no other user may write to it (mode o+w);
- the directory it is in belongs to that user or to root;
- neither that directory nor any directory above it is writable by every user (o+w) without
  the sticky bit: in such a directory anyone may rename what another user made, and so swap
  the whole path. A sticky one (``/tmp``) keeps entries to their owners, so a file there is
  used when it is yours (or root's), and refused otherwise by the first rule.

The search itself never goes above a directory writable by every user (sticky or not): that
directory is looked in, its parents are not (``climb_stops_at``).

A file named with ``--config`` or ``WFCTL_CONFIG`` is the user's choice and is used; wfctl
only warns when other users may write to it (``named_file_warning``).
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

#: How to use a refused file anyway, for the error's hint.
HOW_TO_TRUST = "to use it anyway, name it: --config {path} or WFCTL_CONFIG={path}"


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _trusted_owner(uid: int) -> bool:
    return uid in (0, os.geteuid())


def _who() -> str:
    me = os.geteuid()
    return "root" if me == 0 else f"{_user(me)!r} or root"


def open_to_all(st: os.stat_result) -> bool:
    """A directory every user may write to (sticky or not)."""
    return stat.S_ISDIR(st.st_mode) and bool(st.st_mode & stat.S_IWOTH)


def climb_stops_at(directory: Path) -> bool:
    """Whether the config search must not look above ``directory``: every user may write to it."""
    try:
        return open_to_all(os.stat(directory))
    except OSError:
        return True


def _chain(directory: Path) -> list[Path]:
    return [directory, *directory.parents]


def refusal(path: Path, opened: os.stat_result) -> str | None:
    """Why the discovered config file ``path`` (opened, ``opened`` its fstat) must not be used,
    in words; None when it may be."""
    try:
        link = os.lstat(path)
    except OSError as exc:
        return f"it cannot be checked ({exc.strerror})"
    owners = [("it", opened)]
    directories = [path.parent]
    if stat.S_ISLNK(link.st_mode):
        owners.insert(0, ("the symbolic link", link))
        directories.append(Path(os.path.realpath(path)).parent)
    for what, st in owners:
        if not _trusted_owner(st.st_uid):
            return f"{what} belongs to {_user(st.st_uid)!r}, not to {_who()}"
    if opened.st_mode & stat.S_IWOTH:
        return f"every user may write to it (mode {stat.S_IMODE(opened.st_mode):04o})"
    for home in directories:
        try:
            st = os.stat(home)
        except OSError as exc:
            return f"its directory {home} cannot be checked ({exc.strerror})"
        if not _trusted_owner(st.st_uid):
            return f"its directory {home} belongs to {_user(st.st_uid)!r}, not to {_who()}"
        for directory in _chain(home):
            try:
                st = os.stat(directory)
            except OSError as exc:
                return f"the directory {directory} cannot be checked ({exc.strerror})"
            if open_to_all(st) and not st.st_mode & stat.S_ISVTX:
                mode = stat.S_IMODE(st.st_mode)
                where = "its directory" if directory == home else "a directory above it"
                return (
                    f"every user may write to {directory} ({where}, mode {mode:04o}, no sticky bit) "
                    "and so replace it"
                )
    return None


def named_file_warning(path: Path, opened: os.stat_result) -> str | None:
    """A warning for a config file the user named that other users may write to."""
    mode = stat.S_IMODE(opened.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "every user" if mode & stat.S_IWOTH else "its group"
        return f"{path} may be changed by {who} (mode {mode:04o}): run `chmod go-w {path}`"
    return None
