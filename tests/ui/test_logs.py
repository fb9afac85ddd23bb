"""ui/logs.py: one JSON object a line, stable event names, no forged lines, no secrets, never a broken page."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest
import sqlalchemy as sa

from progress import ProgressStore, ProgressStoreError
from ui import logs

PLANTED = "planted-Secret-4e1f"  # a secret no log line may hold


@pytest.fixture
def captured():
    """The app's logger configured as the server does, writing into a buffer; restored afterwards."""
    logger = logging.getLogger(logs.LOGGER)
    saved = (list(logger.handlers), logger.level, logger.propagate)
    stream = io.StringIO()
    logs.configure({}, stream)
    yield stream
    logger.handlers[:], logger.level, logger.propagate = saved


def lines(stream: io.StringIO) -> list[dict]:
    text = stream.getvalue()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]  # every line is one whole JSON object


def test_an_event_is_one_json_line_with_time_level_event_and_fields(captured):
    logs.event("signin", class_code="Physics 1", learner_id="0123456789ab", status="ok", retry_after_s=None)
    logging.getLogger("kvlab.progress").warning("plain", extra={"event": "db_error", "fields": {"where": "x"}})
    logging.getLogger("kvlab").info("no event name")
    first, second, third = lines(captured)
    assert first["event"] == "signin" and first["level"] == "INFO" and first["logger"] == "kvlab"
    assert first["fields"] == {
        "class_code": "Physics 1",
        "learner_id": "0123456789ab",
        "status": "ok",
        "retry_after_s": None,
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", first["time"])  # UTC, milliseconds
    assert second["event"] == "db_error" and second["level"] == "WARNING" and second["logger"] == "kvlab.progress"
    assert third["event"] == "log" and third["fields"] == {}


def test_user_text_cannot_forge_a_line_or_a_field(captured):
    forged = 'x"}\n{"time":"2020-01-01","level":"INFO","event":"teacher_unlocked","fields":{}}\r\u2028\u0000\x1b[2J'
    logs.event("signin_refused", class_code=forged, reason=forged)
    [line] = lines(captured)  # one event, one line, whatever the text held
    assert line["event"] == "signin_refused"
    assert line["fields"]["class_code"] == forged and set(line["fields"]) == {"class_code", "reason"}
    assert captured.getvalue().isascii()  # escaped: no raw line separator or escape sequence reaches the log


def test_long_text_is_clipped_and_structures_keep_their_shape(captured):
    logs.event("server_start", settings={"KVLAB_X": "a" * 1000}, failed=["b" * 500])
    [line] = lines(captured)
    assert len(line["fields"]["settings"]["KVLAB_X"]) == logs.FIELD_LIMIT + 1
    assert len(line["fields"]["failed"][0]) == logs.FIELD_LIMIT + 1


def test_an_exception_is_logged_with_its_traceback(captured):
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("kvlab").exception("page %r failed", "probe", extra={"event": "page_failed"})
    [line] = lines(captured)
    assert line["event"] == "page_failed" and line["level"] == "ERROR" and line["message"] == "page 'probe' failed"
    assert "RuntimeError: boom" in line["exception"]


def test_a_failing_handler_never_breaks_the_caller(captured):
    class Broken(logging.Handler):
        def emit(self, record):
            raise OSError("disk full")

    class BrokenStream(io.StringIO):
        def write(self, text):
            raise OSError("pipe closed")

    logger = logging.getLogger(logs.LOGGER)
    broken = Broken()
    logger.addHandler(broken)
    logs.event("progress_saved", class_code="c")  # no exception reaches the page, whichever handler fails
    logger.removeHandler(broken)
    logs.configure({}, BrokenStream())  # the app's own handler failing to write: dropped, also on direct calls
    logs.event("progress_saved", class_code="c")
    logging.getLogger("kvlab").warning("direct call")
    logs.event("odd", value=object())  # a value JSON cannot hold is logged as its text


def test_the_level_setting_is_checked_and_applied(captured):
    assert logs.log_level({}) == logging.INFO and logs.log_level({"KVLAB_LOG_LEVEL": " warning "}) == logging.WARNING
    with pytest.raises(ValueError, match="KVLAB_LOG_LEVEL='LOUD'.*DEBUG, INFO, WARNING, ERROR"):
        logs.log_level({"KVLAB_LOG_LEVEL": "loud"})
    stream = io.StringIO()
    logs.configure({"KVLAB_LOG_LEVEL": "WARNING"}, stream)
    logs.event("progress_saved")
    logs.event("signin_failed", logging.WARNING)
    assert [line["event"] for line in lines(stream)] == ["signin_failed"]
    assert len(logging.getLogger(logs.LOGGER).handlers) == len([h for h in logging.getLogger("kvlab").handlers])
    assert sum(isinstance(h, logs.JsonHandler) for h in logging.getLogger(logs.LOGGER).handlers) == 1


def test_start_up_settings_are_logged_without_secrets(captured):
    env = {
        "KVLAB_TEACHER_KEY": PLANTED,
        "KVLAB_DATABASE_URL": f"postgresql+psycopg://kvlab:{PLANTED}@db:5432/kvlab",
        "STREAMLIT_SERVER_COOKIE_SECRET": PLANTED,
        "KVLAB_OIDC_CLIENT_SECRET": PLANTED,
        "KVLAB_API_TOKEN": PLANTED,
        "KVLAB_TEACHER_KEY_FILE": "/run/secrets/teacher_key",
        "KVLAB_MODEL_DIRS": "/models",
        "HOME": "/root",
    }
    logs.event("server_start", settings=logs.settings_fields(env))
    assert PLANTED not in captured.getvalue()
    [line] = lines(captured)
    settings = line["fields"]["settings"]
    assert "HOME" not in settings and settings["KVLAB_MODEL_DIRS"] == "/models"
    assert settings["KVLAB_TEACHER_KEY"] == settings["KVLAB_OIDC_CLIENT_SECRET"] == logs.REDACTED
    assert settings["STREAMLIT_SERVER_COOKIE_SECRET"] == settings["KVLAB_API_TOKEN"] == logs.REDACTED
    assert settings["KVLAB_DATABASE_URL"] == "postgresql+psycopg://kvlab:***@db:5432/kvlab"
    assert settings["KVLAB_TEACHER_KEY_FILE"] == "/run/secrets/teacher_key"  # a path, not the secret
    assert logs.redact("KVLAB_DATABASE_URL", f"not a url {PLANTED}") == logs.REDACTED


def test_a_database_failure_is_a_db_error_event_without_the_password(captured, tmp_path):
    bad = tmp_path / "progress.sqlite3"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ProgressStoreError):
        ProgressStore(sa.URL.create("sqlite", database=str(bad)).render_as_string())
    with pytest.raises(ProgressStoreError):  # nothing listens on port 9 of loopback
        ProgressStore(f"postgresql+psycopg://kvlab:{PLANTED}@127.0.0.1:9/kvlab")
    events = [line for line in lines(captured) if line["event"] == "db_error"]
    assert [e["fields"]["where"] for e in events] == [f"the file {bad}", "the postgresql database 'kvlab' on 127.0.0.1"]
    assert events[0]["fields"]["error"] == "DatabaseError" and "not a database" in events[0]["fields"]["detail"]
    assert PLANTED not in captured.getvalue()


def test_a_learner_is_named_by_a_stable_pseudonym():
    same = {
        logs.learner_id("Physics 1", "Ana"),
        logs.learner_id(" PHYSICS  1", "ana "),
        logs.learner_id("Ｐｈｙｓｉｃｓ 1", "ＡＮＡ"),
    }
    assert len(same) == 1
    [pseudonym] = same
    assert re.fullmatch(r"[0-9a-f]{12}", pseudonym) and "ana" not in pseudonym
    assert logs.learner_id("Physics 1", "Anna") != pseudonym and logs.learner_id("Physics 2", "Ana") != pseudonym
    # Independent reference: SHA-256 of the compared forms joined by NUL.
    import hashlib

    assert pseudonym == hashlib.sha256(b"physics 1\0ana").hexdigest()[:12]
