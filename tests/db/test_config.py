"""wfctl.toml and the DSN precedence of docs/explanation/trust.md, "The config file"."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from wfctl.config import Target, load_config, resolve_target, write_config
from wfctl.connection import mask_dsn, scrub
from wfctl.errors import ConfigError, InvalidInput


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
        "host=h sslpassword=s3cret dbname=d",
        "postgresql://user@h:5432/d?sslpassword=s3cret",
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


# -- nothing that names a database falls back to the embedded one --


@pytest.mark.parametrize("value", ["", "  "])
def test_empty_dsn_option_is_an_error(clean_env, value):
    with pytest.raises(InvalidInput, match="--dsn is empty"):
        resolve_target(value, load_config())


def test_empty_wfctl_dsn_is_an_error(clean_env, monkeypatch):
    monkeypatch.setenv("WFCTL_DSN", "")
    with pytest.raises(ConfigError, match="WFCTL_DSN is set but empty"):
        resolve_target(None, load_config())


def test_empty_dsn_in_the_config_is_an_error(clean_env, monkeypatch):
    (clean_env / "wfctl.toml").write_text('[database]\ndsn = ""\n')
    monkeypatch.setenv("PGHOST", "elsewhere")  # not even libpq's environment is used instead
    with pytest.raises(ConfigError, match=r"\[database\] dsn is empty"):
        resolve_target(None, load_config())


def test_embedded_false_needs_another_database(clean_env, monkeypatch):
    (clean_env / "wfctl.toml").write_text("[database]\nembedded = false\n")
    with pytest.raises(ConfigError, match="embedded = false, and no database is configured"):
        resolve_target(None, load_config())
    monkeypatch.setenv("PGHOST", "db1")
    assert resolve_target(None, load_config()) == Target(dsn="", source="PG* environment")
    assert resolve_target("host=db2", load_config()).dsn == "host=db2"


def test_dangling_config_symlink_is_not_absent(clean_env):
    (clean_env / "wfctl.toml").symlink_to("gone.toml")
    for must_exist in (True, False):
        with pytest.raises(ConfigError, match=r"is a symlink to gone\.toml, which does not exist"):
            load_config(must_exist=must_exist)


def test_config_symlink_loop(clean_env):
    (clean_env / "wfctl.toml").symlink_to("wfctl.toml")
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config()


def test_config_that_never_ends_is_refused(clean_env):
    with pytest.raises(ConfigError, match="bigger than 1000000 bytes"):
        load_config("/dev/zero")


def test_config_read_through_a_pipe(clean_env, tmp_path):
    """`--config <(...)`: a file that is not regular is read (up to the cap) all the same."""
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text, args=('[database]\ndsn = "host=piped"\n',))
    writer.start()
    try:
        assert resolve_target(None, load_config(fifo)).dsn == "host=piped"
    finally:
        writer.join()


@pytest.mark.parametrize("types", ["[1, 2]", '["a", 2]', "[[]]"])
def test_worker_types_must_be_strings(clean_env, types):
    (clean_env / "wfctl.toml").write_text(f"[worker]\ntypes = {types}\n")
    with pytest.raises(ConfigError, match=r"\[worker\] types must be a list of strings"):
        load_config()
