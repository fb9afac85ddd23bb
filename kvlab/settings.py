"""Every KVLAB_* setting, parsed and checked once when the server starts.

`load_settings(environ)` reads the environment into one frozen `Settings`, or raises `SettingsError` naming
the setting, the value (a secret's value never: "(hidden)") and the fix. `kvlab serve` and `./run.sh` call it
before anything else, so a bad value stops the server at start with that one message instead of failing
when a learner opens the page that reads it.

Secrets (the teacher key, the database URL, the Streamlit cookie secret) may come from a file instead:
NAME_FILE names a file whose content, stripped of surrounding whitespace, is the value (Docker and
Kubernetes secrets mount such files). Setting both NAME and NAME_FILE is an error; an empty NAME counts as
unset. `read_secret` is that rule for any secret, the single sign-on client secret included.

This module imports only the standard library (the sqlalchemy URL check is imported when it runs), so
every layer may use its parse functions: one parse per setting, the same at start and where it is read.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DATA_DIR = "KVLAB_DATA_DIR"
DATABASE_URL = "KVLAB_DATABASE_URL"
TEACHER_KEY = "KVLAB_TEACHER_KEY"
COOKIE_SECRET = "KVLAB_COOKIE_SECRET"
MODEL_DIRS = "KVLAB_MODEL_DIRS"
MAX_MODEL_BYTES = "KVLAB_MAX_MODEL_BYTES"
PLAYGROUND_KV_BYTES = "KVLAB_PLAYGROUND_KV_BYTES"
PLAYGROUND_IDLE_S = "KVLAB_PLAYGROUND_IDLE_S"
ALLOWED_HOSTS = "KVLAB_ALLOWED_HOSTS"
TRUSTED_PROXIES = "KVLAB_TRUSTED_PROXIES"
FRAME_ANCESTORS = "KVLAB_FRAME_ANCESTORS"
WARM = "KVLAB_WARM"
DB_AUTO_UPGRADE = "KVLAB_DB_AUTO_UPGRADE"
LOG_LEVEL = "KVLAB_LOG_LEVEL"
METRICS_PORT = "KVLAB_METRICS_PORT"
METRICS_ADDRESS = "KVLAB_METRICS_ADDRESS"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOOPBACK = "127.0.0.1"
# Single sign-on's settings (KVLAB_OIDC_*) are parsed in progress/sso/settings.py with this module's read_secret
# and switch: a wrong one turns single sign-on off with a message instead of stopping the server. Its secrets:
OIDC_CLIENT_SECRET = "KVLAB_OIDC_CLIENT_SECRET"
OIDC_COOKIE_SECRET = "KVLAB_OIDC_COOKIE_SECRET"
SECRETS = (TEACHER_KEY, DATABASE_URL, COOKIE_SECRET, OIDC_CLIENT_SECRET, OIDC_COOKIE_SECRET)
FILE_SUFFIX = "_FILE"
MAX_SECRET_FILE_BYTES = 64 * 1024  # a key or a URL; a larger file is the wrong file
LOOPBACK_PROXIES = "127.0.0.1/8, ::1"  # KVLAB_TRUSTED_PROXIES unset: a proxy on this machine
FIX = "the operator fixes it in the server's environment and restarts it"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class SettingsError(ValueError):
    """A setting the server cannot start with: `setting` is its name; the message names the value (or
    "(hidden)" for a secret) and the fix."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting


def shown(name: str, raw: str) -> str:
    """A value as an error message may show it: a secret's never, others quoted and cut to 80 characters."""
    if name.removesuffix(FILE_SUFFIX) in SECRETS:
        return "(hidden)"
    return repr(raw if len(raw) <= 80 else raw[:77] + "...")


def read_secret(environ: Mapping[str, str], name: str) -> str | None:
    """The secret `name` from `name` itself or from the file `name`_FILE names (content stripped); None when
    neither is set. SettingsError when both are set, or the file cannot be read or is empty."""
    value, file_name = environ.get(name, ""), environ.get(name + FILE_SUFFIX, "")
    if value and file_name:
        raise SettingsError(name, f"{name} and {name}{FILE_SUFFIX} are both set; set one of them ({FIX})")
    if not file_name:
        return value.strip() or None
    path = Path(file_name).expanduser()
    what = f"{name}{FILE_SUFFIX}={file_name!r}"
    try:
        with path.open("rb") as f:
            data = f.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise SettingsError(name, f"{what} cannot be read ({reason}); point it at a readable file ({FIX})") from exc
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise SettingsError(name, f"{what} is larger than {MAX_SECRET_FILE_BYTES} bytes; is it the right file?")
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise SettingsError(name, f"{what} is not UTF-8 text; write the secret as text ({FIX})") from exc
    if not text:
        raise SettingsError(name, f"{what} is empty; write the secret into it ({FIX})")
    return text


def whole_number(environ: Mapping[str, str], name: str, what: str) -> int | None:
    """A whole number >= 1 (ASCII digits only: int() also reads "2_000" and other scripts' digits); None when
    unset or empty. `what` says what it counts, e.g. "bytes >= 1, e.g. 2147483648 (2 GiB)"."""
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    value = int(raw) if raw.isascii() and raw.isdigit() else 0
    if value < 1:
        raise SettingsError(name, f"{name}={raw!r} must be a whole number of {what}; {FIX}")
    return value


def host_names(raw: str) -> frozenset[str]:
    """KVLAB_ALLOWED_HOSTS: host names or addresses separated by spaces or commas, lower-cased (empty: none)."""
    return frozenset(name.lower() for name in re.split(r"[\s,]+", raw) if name)


def proxy_networks(raw: str | None) -> tuple[Network, ...]:
    """KVLAB_TRUSTED_PROXIES: addresses or networks separated by commas (None: loopback; "" or "none": no
    proxy). SettingsError naming a bad entry."""
    text = LOOPBACK_PROXIES if raw is None else raw
    if text.strip().lower() in ("", "none"):
        return ()
    networks = []
    for part in (p.strip() for p in text.split(",")):
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError as exc:
            raise SettingsError(
                TRUSTED_PROXIES,
                f"{TRUSTED_PROXIES} entry {part[:60]!r} is not an address or network ({exc}); "
                "list the proxy's addresses, e.g. 127.0.0.1, 10.0.0.0/24, or none",
            ) from exc
    return tuple(networks)


def model_dirs(environ: Mapping[str, str]) -> tuple[str, ...] | None:
    """KVLAB_MODEL_DIRS as the operator wrote its entries (separated by os.pathsep); None when unset (the
    project's models/), () when set but empty (no folders: the demo model only)."""
    if MODEL_DIRS not in environ:
        return None
    return tuple(dict.fromkeys(e.strip() for e in environ[MODEL_DIRS].split(os.pathsep) if e.strip()))


def frame_ancestors(environ: Mapping[str, str]) -> str:
    """KVLAB_FRAME_ANCESTORS, a CSP frame-ancestors source list for nginx (default 'self'); a value that
    would end the header's directive or the header itself is refused."""
    raw = environ.get(FRAME_ANCESTORS, "").strip() or "'self'"
    if any(c in raw for c in ';,"\r\n\\') or not raw.isprintable():
        raise SettingsError(
            FRAME_ANCESTORS,
            f"{FRAME_ANCESTORS}={shown(FRAME_ANCESTORS, raw)} must be a space-separated list of sources such as "
            f"'self' https://course.example.org, without ; , \" or line breaks; {FIX}",
        )
    return raw


def checked_database_url(url: str) -> str:
    """A SQLAlchemy database URL the server can open, else SettingsError (the URL is hidden: it may hold
    a password)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise SettingsError(
            DATABASE_URL,
            f"{DATABASE_URL} (hidden) is not a database URL; write it as "
            f"postgresql+psycopg://USER:PASSWORD@HOST:5432/NAME or sqlite:////path/to/file.sqlite3 ({FIX})",
        ) from exc
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise SettingsError(
            DATABASE_URL,
            f"{DATABASE_URL} names the database {parsed.get_backend_name()!r}; KV Lab keeps progress in sqlite "
            f"or postgresql ({FIX})",
        )
    return url


def switch(environ: Mapping[str, str], name: str, default: bool) -> bool:
    """An on/off setting: 1/true/yes/on or 0/false/no/off (any case); `default` when unset or empty."""
    raw = environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise SettingsError(
        name, f"{name}={shown(name, raw)} is not a yes/no value; set it to 1 or 0 (true/false, yes/no, on/off)"
    )


def log_level(environ: Mapping[str, str]) -> str:
    """KVLAB_LOG_LEVEL, the JSON log's level: DEBUG, INFO, WARNING or ERROR (any case; unset or empty: INFO)."""
    raw = environ.get(LOG_LEVEL, "").strip().upper()
    if not raw:
        return "INFO"
    if raw not in LOG_LEVELS:
        raise SettingsError(
            LOG_LEVEL,
            f"{LOG_LEVEL}={shown(LOG_LEVEL, raw)} is not a log level; use one of {', '.join(LOG_LEVELS)} ({FIX})",
        )
    return raw


def metrics_port(environ: Mapping[str, str]) -> int | None:
    """KVLAB_METRICS_PORT, the Prometheus endpoint's side port (1-65535); None when unset or empty (no endpoint)."""
    raw = environ.get(METRICS_PORT, "").strip()
    if not raw:
        return None
    port = int(raw) if raw.isascii() and raw.isdigit() else 0
    if not 1 <= port <= 65535:
        raise SettingsError(
            METRICS_PORT,
            f"{METRICS_PORT}={shown(METRICS_PORT, raw)} must be a TCP port 1-65535, or unset to serve "
            f"no metrics ({FIX})",
        )
    return port


def metrics_address(environ: Mapping[str, str]) -> str:
    """KVLAB_METRICS_ADDRESS, the IP address the metrics endpoint listens on (unset or empty: 127.0.0.1)."""
    raw = environ.get(METRICS_ADDRESS, "").strip()
    if not raw:
        return LOOPBACK
    try:
        ipaddress.ip_address(raw)
    except ValueError:
        raise SettingsError(
            METRICS_ADDRESS,
            f"{METRICS_ADDRESS}={shown(METRICS_ADDRESS, raw)} must be an IP address to listen on (e.g. 127.0.0.1, "
            f"or 0.0.0.0 for every interface); unset it for 127.0.0.1 ({FIX})",
        ) from None
    return raw


@dataclass(frozen=True)
class Settings:
    """The server's settings, checked (see the module docstring); None means unset: the app's default."""

    data_dir: Path | None = None
    database_url: str | None = None
    teacher_key: str | None = None
    cookie_secret: str | None = None
    model_dirs: tuple[str, ...] | None = None
    max_model_bytes: int | None = None
    playground_kv_bytes: int | None = None
    playground_idle_s: int | None = None
    allowed_hosts: frozenset[str] = frozenset()
    trusted_proxies: str | None = None
    frame_ancestors: str = "'self'"
    warm: bool = True
    log_level: str = "INFO"
    metrics_port: int | None = None
    metrics_address: str = LOOPBACK
    db_auto_upgrade: bool = False

    def __repr__(self) -> str:  # secrets never reach a log line through a repr
        fields = {k: ("(hidden)" if v is not None and k in _SECRET_FIELDS else v) for k, v in vars(self).items()}
        return "Settings(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"

    def redacted(self) -> dict[str, object]:
        """The settings as a log line may show them: secrets as "(set)" or None."""
        return {k: ("(set)" if v is not None and k in _SECRET_FIELDS else v) for k, v in vars(self).items()}


_SECRET_FIELDS = frozenset({"database_url", "teacher_key", "cookie_secret"})


def load_settings(environ: Mapping[str, str] = os.environ) -> Settings:
    """Every KVLAB_* setting of `environ`, checked; SettingsError for the first bad one."""
    data_dir = environ.get(DATA_DIR, "").strip()
    database = read_secret(environ, DATABASE_URL)
    proxies = environ.get(TRUSTED_PROXIES)
    proxy_networks(proxies)  # checked now; ui/signin.py parses it again per sign-in through the same function
    return Settings(
        data_dir=Path(data_dir).expanduser() if data_dir else None,
        database_url=checked_database_url(database) if database is not None else None,
        teacher_key=read_secret(environ, TEACHER_KEY),
        cookie_secret=read_secret(environ, COOKIE_SECRET),
        model_dirs=model_dirs(environ),
        max_model_bytes=whole_number(environ, MAX_MODEL_BYTES, "bytes >= 1, e.g. 2147483648 (2 GiB)"),
        playground_kv_bytes=whole_number(environ, PLAYGROUND_KV_BYTES, "bytes >= 1, e.g. 536870912 (512 MiB)"),
        playground_idle_s=whole_number(environ, PLAYGROUND_IDLE_S, "seconds >= 1, e.g. 180"),
        allowed_hosts=host_names(environ.get(ALLOWED_HOSTS, "")),
        trusted_proxies=proxies,
        frame_ancestors=frame_ancestors(environ),
        warm=switch(environ, WARM, True),
        log_level=log_level(environ),
        metrics_port=metrics_port(environ),
        metrics_address=metrics_address(environ),
        db_auto_upgrade=switch(environ, DB_AUTO_UPGRADE, False),
    )


__all__ = [
    "Settings",
    "SettingsError",
    "checked_database_url",
    "frame_ancestors",
    "host_names",
    "load_settings",
    "log_level",
    "metrics_address",
    "metrics_port",
    "model_dirs",
    "proxy_networks",
    "read_secret",
    "shown",
    "switch",
    "whole_number",
]
