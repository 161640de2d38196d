"""Releases for the tests: build a wfctl source tree (this one, or a tagged release's) into a
wheel and an sdist, and install a wheel in a virtualenv of its own.

The build runs without isolation (the backend, hatchling, is a test dependency), so it needs no
package index. The virtualenv gets the wheel's wfctl and nothing else; its dependencies (typer,
psycopg, ...) are read from this interpreter's site-packages through a .pth file, which Python
puts after the virtualenv's own: the wfctl imported there is always the installed wheel's.
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from helpers import REPO

_TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")
_VERSION = re.compile(r'^__version__ = "([^"]+)"$', re.MULTILINE)
#: A release's heading in CHANGELOG.md and the line under it that names its commit.
_RELEASED = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - .*\n\nTag `v\1`, commit ([0-9a-f]{7,40})\.$", re.MULTILINE)


def build(source: Path, out: Path, *, sdist: bool = False) -> Path:
    """Build ``source`` into ``out`` (the sdist too with ``sdist``, the wheel then built from it);
    the wheel's path."""
    kinds = ["--sdist", "--wheel"] if sdist else ["--wheel"]
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", *kinds, "--outdir", str(out), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("wfctl-*.whl")
    return wheel


@dataclass(frozen=True)
class Installed:
    """A virtualenv with one wfctl wheel installed."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def wfctl(self) -> Path:
        return self.root / "bin" / "wfctl"


def install(wheel: Path, root: Path) -> Installed:
    """A new virtualenv at ``root`` with ``wheel`` installed (its console script included), and
    this interpreter's packages for its dependencies."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(root / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    installed = Installed(root)
    site = subprocess.run(
        [str(installed.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # written after the install, so pip never saw this interpreter's wfctl as installed there
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site) / "_wfctl_test_dependencies.pth").write_text(
        "\n".join(sorted(paths)) + "\n", encoding="utf-8"
    )
    return installed


def version_here() -> str:
    """This tree's version (wfctl/__init__.py)."""
    found = _VERSION.search((REPO / "wfctl" / "__init__.py").read_text(encoding="utf-8"))
    assert found is not None
    return found.group(1)


def _release_key(version: str) -> tuple[int, int, int, int]:
    """Order a version: 0.3.0.dev0 comes after 0.2.0 and before 0.3.0."""
    found = re.match(r"^(\d+)\.(\d+)\.(\d+)(\.dev\d+)?$", version)
    assert found is not None, f"not a version this suite understands: {version}"
    major, minor, patch, dev = found.groups()
    return int(major), int(minor), int(patch), 0 if dev else 1


def previous_release() -> tuple[str, str] | None:
    """The newest release before this tree's version, and the git revision to build it from:
    its tag vX.Y.Z, or in a clone without tags the commit CHANGELOG.md names for it. None:
    there is no release before this one."""
    tags = subprocess.run(
        ["git", "-C", str(REPO), "tag", "--list", "v*"], check=True, capture_output=True, text=True
    ).stdout.split()
    here = _release_key(version_here())
    found = {t[1:]: t for t in tags if _TAG.match(t)}
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    for version, commit in _RELEASED.findall(changelog):
        found.setdefault(version, commit)
    older = [v for v in found if _release_key(v) < here]
    if not older:
        return None
    newest = max(older, key=_release_key)
    return newest, found[newest]


def export(revision: str, out: Path) -> Path:
    """The tree of ``revision`` (as `git archive` gives it) in ``out``."""
    out.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", revision],
        check=True,
        capture_output=True,
        timeout=120,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True, timeout=120)
    return out
