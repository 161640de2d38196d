"""The wheel a user installs carries the SQL files and the console script."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest
from helpers import REPO

from wfctl.queries import sql_root
from wfctl.schema import migrations


@pytest.mark.skipif(not (REPO / "pyproject.toml").exists(), reason="needs the source tree")
def test_wheel_holds_sql_and_entry_point(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("wfctl-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        for migration in migrations():
            assert f"wfctl/sql/migrations/{migration.path.name}" in names
        for query_file in (sql_root() / "queries").glob("*.sql"):
            assert f"wfctl/sql/queries/{query_file.name}" in names
        (entry_points,) = [n for n in names if n.endswith("entry_points.txt")]
        assert "wfctl = wfctl.cli.app:main" in archive.read(entry_points).decode()
