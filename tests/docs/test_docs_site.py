"""The documentation site builds with ``mkdocs build --strict`` (what CI runs), and the build
fails on what the site must not have: a page left out of the navigation, a link to a page that
does not exist, a link to a heading that does not exist. About 3 seconds a build; skipped
without the docs extra (``pip install '.[docs]'``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

import wfctl

CONFIG = REPO / "mkdocs.yml"
pytestmark = pytest.mark.skipif(not CONFIG.exists(), reason="needs the source tree")


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason="the docs extra is not installed (pip install '.[docs]')")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(config),
            "--site-dir",
            str(site),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )


def test_the_site_builds_strictly(tmp_path):
    out = build(CONFIG, tmp_path / "site")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "worker" / "index.html").exists()
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    public = [name for name in wfctl.__all__ if not name.startswith("_")]
    undocumented = [n for n in public if f'id="wfctl.{n}"' not in api and f'id="wfctl.errors.{n}"' not in api]
    assert not undocumented, f"docs/reference/api.md lacks {undocumented} of wfctl.__all__"
    assert 'id="wfctl.testing.MemoryJournal"' in api


def test_a_page_outside_the_nav_or_a_broken_link_fails_the_build(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "docs", docs)
    (docs / "stray.md").write_text("# A page no one can find\n")
    with (docs / "reference" / "cli" / "index.md").open("a", encoding="utf-8") as page:
        page.write("\n[gone](gone.md) and [no such heading](worker.md#no-such-heading)\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"INHERIT: {CONFIG}\ndocs_dir: {docs}\n", encoding="utf-8")
    out = build(config, tmp_path / "site")
    assert out.returncode != 0
    found = warnings(out.stderr)
    for what in ("stray.md", "gone.md", "no-such-heading"):
        assert any(what in w for w in found), f"no warning names {what}: {out.stderr}"


def warnings(log: str) -> list[str]:
    """MkDocs' WARNING records (a record's continuation lines included); INFO ones do not fail."""
    records = re.split(r"\n(?=[A-Z]+ +-  )", log)
    return [r for r in records if r.startswith("WARNING")]
