"""kvlab/settings.py: every KVLAB_* setting checked once, secrets from files, messages that name the setting,
the value (never a secret's) and the fix."""

from __future__ import annotations

import ipaddress
import os

import pytest

from kvlab import settings
from kvlab.settings import Settings, SettingsError, load_settings, read_secret


def test_an_empty_environment_gives_the_defaults():
    got = load_settings({})
    assert got == Settings()
    assert got.database_url is None and got.teacher_key is None and got.warm is True
    assert got.frame_ancestors == "'self'"


def test_the_default_reads_the_process_environment(monkeypatch):
    monkeypatch.setenv("KVLAB_MAX_MODEL_BYTES", "1234")
    assert load_settings().max_model_bytes == 1234


def test_values_are_parsed():
    env = {
        "KVLAB_DATA_DIR": "/srv/kvlab",
        "KVLAB_DATABASE_URL": "postgresql+psycopg://kvlab:pw@db:5432/kvlab",
        "KVLAB_TEACHER_KEY": "  key  ",
        "KVLAB_MODEL_DIRS": os.pathsep.join(["/models", " ", "/models", "/more"]),
        "KVLAB_MAX_MODEL_BYTES": "2048",
        "KVLAB_PLAYGROUND_KV_BYTES": "4096",
        "KVLAB_PLAYGROUND_IDLE_S": "60",
        "KVLAB_ALLOWED_HOSTS": "KVLab.School.Example, 10.0.0.5",
        "KVLAB_TRUSTED_PROXIES": "10.0.0.0/24",
        "KVLAB_FRAME_ANCESTORS": "'self' https://course.example.org",
        "KVLAB_WARM": "off",
        "KVLAB_DB_AUTO_UPGRADE": "yes",
    }
    got = load_settings(env)
    assert str(got.data_dir) == "/srv/kvlab"
    assert got.database_url == env["KVLAB_DATABASE_URL"]
    assert got.teacher_key == "key"
    assert got.model_dirs == ("/models", "/more")
    assert (got.max_model_bytes, got.playground_kv_bytes, got.playground_idle_s) == (2048, 4096, 60)
    assert got.allowed_hosts == {"kvlab.school.example", "10.0.0.5"}
    assert got.trusted_proxies == "10.0.0.0/24"
    assert got.frame_ancestors == "'self' https://course.example.org"
    assert got.warm is False and got.db_auto_upgrade is True


def test_model_dirs_set_but_empty_means_no_folders():
    assert load_settings({"KVLAB_MODEL_DIRS": ""}).model_dirs == ()
    assert load_settings({}).model_dirs is None


@pytest.mark.parametrize("bad", ["a lot", "-1", "0", "2_000", "١٢", "1e9", "12.5"])
@pytest.mark.parametrize("name", ["KVLAB_MAX_MODEL_BYTES", "KVLAB_PLAYGROUND_KV_BYTES", "KVLAB_PLAYGROUND_IDLE_S"])
def test_a_bad_number_names_the_setting_the_value_and_the_fix(name, bad):
    with pytest.raises(SettingsError) as caught:
        load_settings({name: bad})
    assert caught.value.setting == name
    assert f"{name}={bad!r} must be a whole number" in str(caught.value)
    assert "restarts it" in str(caught.value)


def test_a_bad_proxy_entry_is_named():
    with pytest.raises(SettingsError, match="KVLAB_TRUSTED_PROXIES entry 'proxy.local'") as caught:
        load_settings({"KVLAB_TRUSTED_PROXIES": "10.0.0.1, proxy.local"})
    assert caught.value.setting == "KVLAB_TRUSTED_PROXIES"


def test_proxy_networks_match_ipaddress():
    assert settings.proxy_networks("10.0.0.1, 2001:db8::/32") == (
        ipaddress.ip_network("10.0.0.1/32"),
        ipaddress.ip_network("2001:db8::/32"),
    )
    assert settings.proxy_networks(None) == (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
    assert settings.proxy_networks("none") == () == settings.proxy_networks(" ")


@pytest.mark.parametrize("bad", ["'self'; script-src *", "https://a.example, https://b.example", "'self'\nX: y"])
def test_frame_ancestors_cannot_break_out_of_its_header(bad):
    with pytest.raises(SettingsError, match="KVLAB_FRAME_ANCESTORS="):
        load_settings({"KVLAB_FRAME_ANCESTORS": bad})


@pytest.mark.parametrize("bad", ["maybe", "2"])
def test_a_bad_switch_is_named(bad):
    for name in ("KVLAB_WARM", "KVLAB_DB_AUTO_UPGRADE"):
        with pytest.raises(SettingsError, match=f"{name}='{bad}' is not a yes/no value; set it to 1 or 0"):
            load_settings({name: bad})


@pytest.mark.parametrize(
    ("url", "why"), [("not a url", "is not a database URL"), ("mysql://u:hunter2@h/db", "names the database 'mysql'")]
)
def test_a_bad_database_url_is_refused_without_showing_it(url, why):
    with pytest.raises(SettingsError, match=why) as caught:
        load_settings({"KVLAB_DATABASE_URL": url})
    assert caught.value.setting == "KVLAB_DATABASE_URL"
    assert url not in str(caught.value) and "hunter2" not in str(caught.value)


def test_sqlite_urls_are_accepted():
    assert load_settings({"KVLAB_DATABASE_URL": "sqlite:////tmp/x.sqlite3"}).database_url == "sqlite:////tmp/x.sqlite3"


# Secrets from files


def test_a_secret_from_a_file_is_its_stripped_content(tmp_path):
    key = tmp_path / "teacher_key"
    key.write_text("  s3cret key\n")
    assert read_secret({"KVLAB_TEACHER_KEY_FILE": str(key)}, "KVLAB_TEACHER_KEY") == "s3cret key"
    url = tmp_path / "url"
    url.write_text("postgresql+psycopg://kvlab:pw@db/kvlab\n")
    got = load_settings({"KVLAB_TEACHER_KEY_FILE": str(key), "KVLAB_DATABASE_URL_FILE": str(url)})
    assert got.teacher_key == "s3cret key"
    assert got.database_url == "postgresql+psycopg://kvlab:pw@db/kvlab"


def test_a_secret_from_the_variable_and_unset():
    assert read_secret({"KVLAB_TEACHER_KEY": " k "}, "KVLAB_TEACHER_KEY") == "k"
    assert read_secret({}, "KVLAB_TEACHER_KEY") is None
    assert read_secret({"KVLAB_TEACHER_KEY": "  "}, "KVLAB_TEACHER_KEY") is None


def test_both_set_is_an_error_that_shows_neither(tmp_path):
    key = tmp_path / "k"
    key.write_text("from-file")
    env = {"KVLAB_TEACHER_KEY": "from-env", "KVLAB_TEACHER_KEY_FILE": str(key)}
    with pytest.raises(SettingsError, match="KVLAB_TEACHER_KEY and KVLAB_TEACHER_KEY_FILE are both set") as caught:
        load_settings(env)
    assert "from-env" not in str(caught.value) and "from-file" not in str(caught.value)


def test_an_empty_variable_beside_a_file_counts_as_unset(tmp_path):
    key = tmp_path / "k"
    key.write_text("from-file")
    assert (
        read_secret({"KVLAB_TEACHER_KEY": "", "KVLAB_TEACHER_KEY_FILE": str(key)}, "KVLAB_TEACHER_KEY") == "from-file"
    )


def test_a_missing_file_is_a_clear_error(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(SettingsError, match=r"KVLAB_TEACHER_KEY_FILE='.*nope' cannot be read \(No such file") as caught:
        load_settings({"KVLAB_TEACHER_KEY_FILE": str(missing)})
    assert caught.value.setting == "KVLAB_TEACHER_KEY"


def test_a_folder_an_empty_file_and_a_huge_file_are_refused(tmp_path):
    with pytest.raises(SettingsError, match="cannot be read"):
        read_secret({"KVLAB_COOKIE_SECRET_FILE": str(tmp_path)}, "KVLAB_COOKIE_SECRET")
    empty = tmp_path / "empty"
    empty.write_text(" \n")
    with pytest.raises(SettingsError, match="is empty"):
        read_secret({"KVLAB_COOKIE_SECRET_FILE": str(empty)}, "KVLAB_COOKIE_SECRET")
    huge = tmp_path / "huge"
    huge.write_bytes(b"x" * (settings.MAX_SECRET_FILE_BYTES + 1))
    with pytest.raises(SettingsError, match="is larger than"):
        read_secret({"KVLAB_COOKIE_SECRET_FILE": str(huge)}, "KVLAB_COOKIE_SECRET")


def test_a_binary_file_is_refused(tmp_path):
    blob = tmp_path / "blob"
    blob.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SettingsError, match="is not UTF-8 text"):
        read_secret({"KVLAB_TEACHER_KEY_FILE": str(blob)}, "KVLAB_TEACHER_KEY")


def test_secrets_never_show_in_repr_or_the_redacted_view():
    got = load_settings(
        {"KVLAB_TEACHER_KEY": "tk-123", "KVLAB_DATABASE_URL": "sqlite:////x/pw-456", "KVLAB_COOKIE_SECRET": "c-789"}
    )
    text = repr(got) + str(got) + repr(got.redacted())
    for secret in ("tk-123", "pw-456", "c-789"):
        assert secret not in text
    assert got.redacted()["teacher_key"] == "(set)" and got.redacted()["max_model_bytes"] is None


def test_settings_are_frozen():
    with pytest.raises(AttributeError):
        Settings().teacher_key = "x"  # type: ignore[misc]


def test_every_setting_the_server_reads_is_checked_here():
    """Each KVLAB_* name in the server's code (its strings: names read, messages naming them) is one of
    kvlab.settings' settings, so the start checks it; a new setting is added there, where it is parsed."""
    import ast
    import re
    from pathlib import Path

    root = Path(settings.__file__).resolve().parents[1]
    known = {v for k, v in vars(settings).items() if k.isupper() and isinstance(v, str) and v.startswith("KVLAB_")}
    nginx_only = {"KVLAB_SERVER_NAME"}  # deploy/nginx.conf's site name; the app's own check is KVLAB_ALLOWED_HOSTS
    # Single sign-on's settings have a parser of their own (with read_secret and switch from here): a wrong one
    # turns single sign-on off with a message rather than stopping the server.
    own_parser = ("KVLAB_OIDC",)
    found: dict[str, str] = {}
    for folder in ("kvlab", "ui", "pages", "lessons", "progress", "engine", "kernels"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    for name in re.findall(r"KVLAB_[A-Z0-9_]*[A-Z0-9]", node.value):
                        found.setdefault(name.removesuffix("_FILE"), str(path.relative_to(root)))
    unchecked = {
        name: where
        for name, where in found.items()
        if name not in known | nginx_only and not name.startswith(own_parser)
    }
    assert not unchecked, f"settings read but not checked at start (add them to kvlab/settings.py): {unchecked}"
