"""The app's structured log: one JSON object a line on standard error, configured once when the server starts.

Every line has ``time`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``, ``event`` (a stable name an
operator filters on: docs/OPERATIONS.md lists them), ``message`` and the event's own ``fields``; a traceback,
when there is one, is the ``exception`` field. ``json.dumps`` escapes every control character and quote, so
text a learner typed (a class code, an error message quoting it) stays inside its string: it cannot end the
line or add a field. Records without an ``event`` (Streamlit's, a library's) come out as ``event: "log"``.

Call sites use :func:`event` (``event("signin_failed", class_code=..., reason=...)``). Logging never breaks a
page: :func:`event` swallows its own errors, and the handler's ``handleError`` writes nothing to the learner.
No secret is ever a field: passphrases and keys are never passed here, the database URL is logged without its
password and secret settings as ``<redacted>`` (:func:`settings_fields`). Learner names are logged as
:func:`learner_id`, a pseudonym that ties one learner's events together without spelling the name.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from kvlab import settings
from progress import name_key

LOGGER = "kvlab"
LEVEL_ENV = settings.LOG_LEVEL
# Settings whose value is a secret (by a word in the name); their value is never logged.
SECRET_WORDS = ("KEY", "SECRET", "PASSWORD", "TOKEN", "PASSPHRASE")
URL_SETTINGS = ("KVLAB_DATABASE_URL",)
REDACTED = "<redacted>"
FIELD_LIMIT = 200  # characters of one text field: a long paste does not fill the log


class JsonFormatter(logging.Formatter):
    """A LogRecord as one line of JSON: time, level, logger, event, message, fields (and exception)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "event": str(getattr(record, "event", "log")),
            "message": record.getMessage(),
            "fields": getattr(record, "fields", {}),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=True, default=str, separators=(",", ":"))


class JsonHandler(logging.StreamHandler):
    """The app's handler: JSON lines; a failure to write one is dropped silently (never a page's problem)."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


def log_level(env: Mapping[str, str] | None = None) -> int:
    """KVLAB_LOG_LEVEL as a logging level (kvlab.settings.log_level: DEBUG, INFO, WARNING or ERROR; unset: INFO);
    SettingsError (a ValueError) names a bad one."""
    return int(getattr(logging, settings.log_level(os.environ if env is None else env)))


def configure(env: Mapping[str, str] | None = None, stream: TextIO | None = None) -> logging.Logger:
    """Send the ``kvlab`` logger's records to ``stream`` (standard error) as JSON lines, at KVLAB_LOG_LEVEL.

    Idempotent: a second call replaces the handler instead of adding one (each line is written once). The
    logger itself passes everything from INFO up, so counters fed by events (ui/metrics.py) see them whatever
    the output level."""
    logger = logging.getLogger(LOGGER)
    for old in [h for h in logger.handlers if isinstance(h, JsonHandler)]:
        logger.removeHandler(old)
    handler = JsonHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter())
    handler.setLevel(log_level(env))
    logger.addHandler(handler)
    logger.setLevel(min(logging.INFO, handler.level))
    logger.propagate = False  # Streamlit's root handler would print each line a second time, unformatted
    return logger


def clip(value: Any) -> Any:
    """A field's value as it is logged: text cut to FIELD_LIMIT characters, numbers and None as they are,
    mappings and lists field by field."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, Mapping):
        return {str(k): clip(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clip(v) for v in value]
    text = str(value)
    return text if len(text) <= FIELD_LIMIT else text[:FIELD_LIMIT] + "…"


def event(name: str, level: int = logging.INFO, message: str = "", **fields: Any) -> None:
    """Log event ``name`` with ``fields`` on the app's logger; never raises (a page keeps running)."""
    try:
        logger = logging.getLogger(LOGGER)
        if logger.isEnabledFor(level):
            extra = {"event": name, "fields": {k: clip(v) for k, v in fields.items()}}
            logger.log(level, message or name.replace("_", " "), extra=extra)
    except Exception:  # a broken handler or an odd value: the log loses a line, the learner loses nothing
        pass


def learner_id(class_code: str, learner: str) -> str:
    """A learner's pseudonym in the log: 12 hex digits of SHA-256 over the class code and the name in the form
    the store compares them (progress.name_key: NFKC, case-folded; spaces collapsed). The same learner has
    the same id in every event; it hides the name from whoever reads the log, though anyone holding the class's
    list of names can recompute it (it is a pseudonym, not anonymity)."""
    text = "\0".join(name_key(" ".join(part.split())) for part in (class_code, learner))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def secret_setting(name: str) -> bool:
    """Whether a setting's value is a secret (its name holds KEY, SECRET, PASSWORD, TOKEN or PASSPHRASE)."""
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS) and not upper.endswith("_FILE")


def redact(name: str, value: str) -> str:
    """A setting's value as the start-up event logs it: secrets as <redacted>, a URL without its password."""
    if secret_setting(name):
        return REDACTED
    if name in URL_SETTINGS:
        try:
            import sqlalchemy as sa

            return sa.make_url(value).render_as_string(hide_password=True)
        except Exception:  # not a URL: it may still hold a password, so none of it is logged
            return REDACTED
    return value


def settings_fields(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every KVLAB_* setting (and Streamlit's cookie secret, redacted) as the start-up event logs it."""
    env = os.environ if env is None else env
    names = sorted(n for n in env if n.startswith("KVLAB_") or n == "STREAMLIT_SERVER_COOKIE_SECRET")
    return {name: clip(redact(name, env[name])) for name in names}


__all__ = [
    "LEVEL_ENV",
    "LOGGER",
    "REDACTED",
    "JsonFormatter",
    "JsonHandler",
    "configure",
    "event",
    "learner_id",
    "log_level",
    "redact",
    "secret_setting",
    "settings_fields",
]
