"""What tests/db/test_config_trust.py and tests/process/test_config_trust_processes.py share."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to another user")


def nobody() -> tuple[int, int]:
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def shared_dir(parent: Path, mode: int = 0o1777) -> Path:
    """A directory every user may write to (sticky by default, as /tmp)."""
    shared = parent / "shared"
    shared.mkdir()
    shared.chmod(mode)
    return shared


def refusal(path: Path, reason: str) -> str:
    return (
        f"wfctl: error: refusing {path}, found by searching: {reason} (to use it anyway, name it: "
        f"--config {path} or WFCTL_CONFIG={path})\n"
    )
