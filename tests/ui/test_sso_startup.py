"""What ``python -m ui.serve`` hands Streamlit for single sign-on (ui/sso.py: startup_args): the [auth] file
in the data folder, or nothing and a log line naming the setting when single sign-on cannot be set up."""

from __future__ import annotations

import logging
import stat

from ui.sso import startup_args

VALID = {
    "KVLAB_OIDC_ISSUER": "https://idp.example",
    "KVLAB_OIDC_CLIENT_ID": "kvlab",
    "KVLAB_OIDC_CLIENT_SECRET": "the client secret",
    "KVLAB_OIDC_COOKIE_SECRET": "c" * 32,
    "KVLAB_OIDC_REDIRECT_URI": "https://kvlab.example/oauth2callback",
    "KVLAB_OIDC_CLASS": "Room 7",
}


def test_off_without_an_issuer(tmp_path):
    assert startup_args({"KVLAB_DATA_DIR": str(tmp_path)}) == []
    assert list(tmp_path.iterdir()) == []


def test_the_auth_file_goes_to_the_data_folder(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="kvlab.sso")
    args = startup_args({**VALID, "KVLAB_DATA_DIR": str(tmp_path / "data")})
    path = tmp_path / "data" / "streamlit-auth.toml"
    assert args == ["--secrets.files", str(path)]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and 'client_secret = "the client secret"' in path.read_text()
    assert "https://idp.example" in caplog.text and "the client secret" not in caplog.text  # secrets redacted


def test_a_wrong_setting_is_logged_and_nothing_is_written(tmp_path, caplog):
    args = startup_args({**VALID, "KVLAB_OIDC_REDIRECT_URI": "https://kvlab.example/", "KVLAB_DATA_DIR": str(tmp_path)})
    assert args == [] and list(tmp_path.iterdir()) == []
    assert "single sign-on is off" in caplog.text and "KVLAB_OIDC_REDIRECT_URI" in caplog.text


def test_an_unwritable_data_folder_is_logged(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert startup_args({**VALID, "KVLAB_DATA_DIR": str(blocker)}) == []
    assert "cannot write its settings" in caplog.text and "KVLAB_DATA_DIR" in caplog.text
