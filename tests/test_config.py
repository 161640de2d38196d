"""wfctl.toml and the DSN precedence of DESIGN.md §5."""

from __future__ import annotations

import os
import stat

import pytest

from wfctl.config import Target, load_config, resolve_target, write_config
from wfctl.connection import mask_dsn, scrub
from wfctl.errors import ConfigError


def test_precedence_dsn_option_first(clean_env, monkeypatch):
    (clean_env / "wfctl.toml").write_text('[database]\ndsn = "host=fromfile"\n')
    monkeypatch.setenv("WFCTL_DSN", "host=fromenv")
    monkeypatch.setenv("PGHOST", "frompg")
    config = load_config()
    assert resolve_target("host=fromoption", config).source == "--dsn"
    assert resolve_target(None, config) == Target(dsn="host=fromenv", source="WFCTL_DSN")
    monkeypatch.delenv("WFCTL_DSN")
    assert resolve_target(None, config).dsn == "host=fromfile"
    (clean_env / "wfctl.toml").unlink()
    target = resolve_target(None, load_config())
    assert (target.dsn, target.source) == ("", "PG* environment")
    monkeypatch.delenv("PGHOST")
    target = resolve_target(None, load_config())
    assert target.embedded and target.data_dir == clean_env / ".wfctl"


def test_config_embedded_beats_pg_environment(clean_env, monkeypatch):
    (clean_env / "wfctl.toml").write_text('[database]\nembedded = true\ndata_dir = "db"\n')
    monkeypatch.setenv("PGHOST", "elsewhere")
    target = resolve_target(None, load_config())
    assert target.embedded and target.data_dir == clean_env / "db"


def test_config_option_and_env(clean_env, monkeypatch, tmp_path):
    other = tmp_path / "other.toml"
    other.write_text('[database]\ndsn = "host=other"\n')
    assert resolve_target(None, load_config(other)).dsn == "host=other"
    monkeypatch.setenv("WFCTL_CONFIG", str(other))
    assert resolve_target(None, load_config()).dsn == "host=other"
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[database\n", "not valid TOML"),
        ('[database]\ndns = "x"\n', "unknown key 'dns' in \\[database\\]"),
        ("[databse]\n", "unknown table \\[databse\\]"),
        ("[database]\nembedded = 1\n", "embedded must be true or false"),
        ('[worker]\nconcurrency = "8"\n', "concurrency must be an integer"),
        ('database = "x"\n', "must be a table"),
    ],
)
def test_invalid_config_is_one_clear_error(clean_env, body, message):
    (clean_env / "wfctl.toml").write_text(body)
    with pytest.raises(ConfigError, match=message):
        load_config()


def test_non_utf8_config(clean_env):
    (clean_env / "wfctl.toml").write_bytes(b'[database]\ndsn = "\xff"\n')
    with pytest.raises(ConfigError, match="not valid UTF-8"):
        load_config()


def test_written_config_with_password_is_private(clean_env):
    config = load_config()
    path = write_config(config, Target(dsn="postgresql://u:s3cret@h/db", source="--dsn"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_config().get("database", "dsn") == "postgresql://u:s3cret@h/db"


def test_written_config_without_password_is_readable(clean_env):
    path = write_config(load_config(), Target(dsn="host=h dbname=d", source="--dsn"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


def test_world_readable_config_with_password_warns(clean_env):
    path = clean_env / "wfctl.toml"
    path.write_text('[database]\ndsn = "host=h password=s3cret"\n')
    path.chmod(0o644)
    assert any("chmod 600" in w for w in load_config().warnings)
    path.chmod(0o600)
    assert load_config().warnings == ()


@pytest.mark.parametrize(
    "dsn",
    [
        "host=h password=s3cret dbname=d",
        "host=h password='s3 cret' dbname=d",
        "postgresql://user:s3cret@h:5432/d",
    ],
)
def test_mask_dsn_hides_password(dsn):
    masked = mask_dsn(dsn)
    assert "s3" not in masked and "cret" not in masked
    assert "***" in masked


def test_scrub_removes_fragments_of_unparsable_passwords():
    dsn = "host=h password=se cret"
    message = 'missing "=" after "cret" in connection info string'
    assert "cret" not in scrub(message, dsn)
