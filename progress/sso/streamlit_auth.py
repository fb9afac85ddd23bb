"""Streamlit's ``[auth]`` settings (what ``st.login`` reads) written from the KVLAB_OIDC_* settings at start.

Streamlit reads its OIDC client from a secrets file (``[auth]``: redirect_uri, cookie_secret, client_id,
client_secret, server_metadata_url, client_kwargs). The operator never writes that file: ``python -m
ui.serve`` (run.sh, the image) writes it into the data folder, readable by the server's user only (0600,
replaced atomically, never into the repository), and points Streamlit's ``secrets.files`` option at it.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from progress.sso.settings import SsoSettings

AUTH_FILE = "streamlit-auth.toml"


def _toml_str(value: str) -> str:
    # A TOML basic string: JSON's escapes are TOML's for '"', '\\' and control characters (the settings refuse
    # controls in secrets anyway); non-ASCII stays as it is (TOML files are UTF-8).
    return json.dumps(value, ensure_ascii=False)


def auth_toml(settings: SsoSettings) -> str:
    """The ``[auth]`` table for ``settings`` as TOML text (the default provider: st.login() with no name)."""
    lines = [
        "# Written by KV Lab at start from the KVLAB_OIDC_* settings; edits are overwritten (docs/SECURITY.md).",
        "[auth]",
        f"redirect_uri = {_toml_str(settings.redirect_uri)}",
        f"cookie_secret = {_toml_str(settings.cookie_secret)}",
        f"client_id = {_toml_str(settings.client_id)}",
        f"client_secret = {_toml_str(settings.client_secret)}",
        f"server_metadata_url = {_toml_str(settings.server_metadata_url)}",
        "",
        "[auth.client_kwargs]",
        f"scope = {_toml_str(settings.scopes)}",
        f"prompt = {_toml_str(settings.prompt)}",
        "",
    ]
    return "\n".join(lines)


def write_auth_file(settings: SsoSettings, folder: Path) -> Path:
    """Write :func:`auth_toml` to ``folder``/streamlit-auth.toml, mode 0600, replacing any old one atomically
    (a reader sees the old file or the new, never half of one); returns its path. OSError if it cannot."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / AUTH_FILE
    fd, tmp = tempfile.mkstemp(prefix=".auth-", suffix=".toml", dir=folder)  # created 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(auth_toml(settings))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
