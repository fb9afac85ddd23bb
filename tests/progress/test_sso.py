"""Single sign-on without a browser: the KVLAB_OIDC_* settings (each mistake named), the learner an ID token's
claims name (the key from issuer + subject, never the name), the provider probe against a real HTTP server on
loopback, and Streamlit's [auth] file (TOML Streamlit can read, mode 0600)."""

from __future__ import annotations

import hashlib
import http.server
import json
import stat
import threading

import pytest
import tomllib

from bench.app_server import HOST, free_port
from kvlab.settings import SettingsError
from progress.sso import (
    SsoClaimsError,
    SsoSettingsError,
    auth_toml,
    is_sso_key,
    learner_from_claims,
    provider_problem,
    sso_settings,
    write_auth_file,
)

ISSUER = "https://login.school.example/realms/class"
SECRET = 'client secret with a "quote" and a \\ backslash'
COOKIE = "k" * 32


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """A complete, valid configuration (the client secret in a file, as compose mounts it)."""
    path = tmp_path / "client_secret"
    path.write_text(SECRET + "\n")
    return {
        "KVLAB_OIDC_ISSUER": ISSUER,
        "KVLAB_OIDC_CLIENT_ID": "kvlab",
        "KVLAB_OIDC_CLIENT_SECRET_FILE": str(path),
        "KVLAB_OIDC_REDIRECT_URI": "https://kvlab.school.example/oauth2callback",
        "KVLAB_OIDC_COOKIE_SECRET": COOKIE,
        "KVLAB_OIDC_CLASS": "Room 7",
    }


def test_off_unless_an_issuer_is_set():
    assert sso_settings({}) is None
    assert sso_settings({"KVLAB_TEACHER_KEY": "x"}) is None
    with pytest.raises(SsoSettingsError, match="KVLAB_OIDC_CLIENT_ID is set but KVLAB_OIDC_ISSUER is not"):
        sso_settings({"KVLAB_OIDC_CLIENT_ID": "kvlab"})


def test_a_complete_configuration(env):
    s = sso_settings(env)
    assert (s.issuer, s.client_id, s.client_secret, s.cookie_secret) == (ISSUER, "kvlab", SECRET, COOKIE)
    assert s.server_metadata_url == ISSUER + "/.well-known/openid-configuration"
    assert (s.key_claim, s.name_claims, s.class_code, s.teacher_claim) == (
        "sub",
        ("name", "preferred_username"),
        "Room 7",
        None,
    )
    assert (s.scopes, s.prompt, s.only) == ("openid profile email", "select_account", False)
    shown = json.dumps(s.redacted())
    assert SECRET not in shown and COOKIE not in shown and "kvlab" in shown


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"KVLAB_OIDC_ISSUER": "login.school.example"}, "KVLAB_OIDC_ISSUER 'login.school.example' is not an absolute"),
        ({"KVLAB_OIDC_ISSUER": "http://login.school.example"}, "uses http on a network host"),
        ({"KVLAB_OIDC_CLIENT_ID": " "}, "KVLAB_OIDC_CLIENT_ID is not set"),
        (
            {"KVLAB_OIDC_CLIENT_SECRET_FILE": "/nonexistent/secret"},
            "KVLAB_OIDC_CLIENT_SECRET_FILE='/nonexistent/secret' cannot be read",
        ),
        (
            {"KVLAB_OIDC_CLIENT_SECRET": "both"},
            "KVLAB_OIDC_CLIENT_SECRET and KVLAB_OIDC_CLIENT_SECRET_FILE are both set",
        ),
        ({"KVLAB_OIDC_REDIRECT_URI": "https://kvlab.school.example/"}, "must end with /oauth2callback"),
        ({"KVLAB_OIDC_REDIRECT_URI": ""}, "KVLAB_OIDC_REDIRECT_URI is not set"),
        ({"KVLAB_OIDC_COOKIE_SECRET": "short"}, "32 or more random characters"),
        ({"KVLAB_OIDC_CLASS": ""}, "KVLAB_OIDC_CLASS .* or KVLAB_OIDC_CLASS_CLAIM"),
        ({"KVLAB_OIDC_CLASS": "<b>"}, "KVLAB_OIDC_CLASS: class code may use letters"),
        ({"KVLAB_OIDC_CLASS_CLAIM": "class"}, "KVLAB_OIDC_CLASS and KVLAB_OIDC_CLASS_CLAIM are both set"),
        ({"KVLAB_OIDC_TEACHER_VALUE": "teachers"}, "KVLAB_OIDC_TEACHER_CLAIM is not"),
        ({"KVLAB_OIDC_TEACHER_CLAIM": "groups; drop"}, "KVLAB_OIDC_TEACHER_CLAIM 'groups; drop' is not a claim name"),
        ({"KVLAB_OIDC_NAME_CLAIMS": "name, given name"}, "KVLAB_OIDC_NAME_CLAIMS 'given name' is not a claim name"),
        ({"KVLAB_OIDC_SCOPES": "profile email"}, "lacks openid"),
        ({"KVLAB_OIDC_PROMPT": "always"}, "KVLAB_OIDC_PROMPT 'always' is not one of"),
        ({"KVLAB_OIDC_ONLY": "maybe"}, "KVLAB_OIDC_ONLY='maybe' is not a yes/no value; set it to 1 or 0"),
        (
            {"KVLAB_OIDC_CLIENT_SECRET_FILE": "", "KVLAB_OIDC_CLIENT_SECRET": "a\tb"},
            "CLIENT_SECRET \\(hidden\\) holds control",
        ),
    ],
)
def test_each_mistake_names_its_setting(env, change, named):
    with pytest.raises(SsoSettingsError, match=named) as err:
        sso_settings({**env, **change})
    assert isinstance(err.value, SettingsError)  # the server's settings error, naming the setting
    assert err.value.setting in {k.removesuffix("_FILE") for k in change} | {"KVLAB_OIDC_CLASS"}


def test_the_cookie_secret_defaults_to_the_apps(env, tmp_path):
    del env["KVLAB_OIDC_COOKIE_SECRET"]
    (tmp_path / "cookie").write_text("f" * 64 + "\n")
    compose = {"KVLAB_COOKIE_SECRET_FILE": str(tmp_path / "cookie")}  # compose's secret file, every replica
    assert sso_settings({**env, **compose}).cookie_secret == "f" * 64
    replicas = "r" * 64  # or Streamlit's own setting
    assert sso_settings({**env, "STREAMLIT_SERVER_COOKIE_SECRET": replicas}).cookie_secret == replicas
    with pytest.raises(SsoSettingsError, match="KVLAB_OIDC_COOKIE_SECRET_FILE"):
        sso_settings(env)


def test_loopback_may_use_http_for_tests(env):
    s = sso_settings(
        {
            **env,
            "KVLAB_OIDC_ISSUER": "http://127.0.0.1:9",
            "KVLAB_OIDC_REDIRECT_URI": "http://localhost:{port}/oauth2callback",
        }
    )
    assert s.issuer == "http://127.0.0.1:9"


# --- who the claims name --------------------------------------------------------------------------------


def key_of(issuer: str, subject: str) -> str:
    """docs/SECURITY.md's promise, computed here: "sso:" + 36 hex digits of SHA-256(issuer, newline, subject)."""
    return "sso:" + hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()[:36]


def test_the_learner_is_the_issuers_subject_not_the_name(env):
    s = sso_settings(env)
    a = learner_from_claims({"iss": ISSUER, "sub": "u-1", "name": "Ana"}, s)
    b = learner_from_claims({"iss": ISSUER, "sub": "u-2", "name": "Ana"}, s)
    assert a.learner_key == key_of(ISSUER, "u-1") and b.learner_key == key_of(ISSUER, "u-2")
    assert a.display == b.display == "Ana" and a.learner_key != b.learner_key
    assert len(a.learner_key) == 40 and is_sso_key(a.learner_key)
    renamed = learner_from_claims({"iss": ISSUER, "sub": "u-1", "name": "Someone Else"}, s)
    assert renamed.learner_key == a.learner_key  # a new display name is the same learner
    other_issuer = sso_settings({**env, "KVLAB_OIDC_ISSUER": ISSUER + "2"})
    assert learner_from_claims({"iss": ISSUER + "2", "sub": "u-1"}, other_issuer).learner_key != a.learner_key
    oid = sso_settings({**env, "KVLAB_OIDC_KEY_CLAIM": "oid"})
    assert learner_from_claims({"iss": ISSUER, "sub": "x", "oid": "o-9"}, oid).learner_key == key_of(ISSUER, "o-9")


def test_claims_that_name_nobody_are_refused(env):
    s = sso_settings(env)
    with pytest.raises(SsoClaimsError, match="issuer"):
        learner_from_claims({"iss": "https://evil.example", "sub": "u-1"}, s)
    for sub in (None, "", 5.5, ["u"], "x" * 256):
        with pytest.raises(SsoClaimsError, match="'sub' claim"):
            learner_from_claims({"iss": ISSUER, "sub": sub}, s)


def test_the_name_shown_is_cleaned_text(env):
    s = sso_settings(env)
    got = learner_from_claims({"iss": ISSUER, "sub": "u", "name": " Ana\u200b  <b>\tX</b> " + "y" * 60}, s)
    assert got.display.startswith("Ana <b> X</b> y") and len(got.display) == 40  # markup kept as text, cut
    fallback = learner_from_claims({"iss": ISSUER, "sub": "u", "name": "\u200b", "preferred_username": "ana.o"}, s)
    assert fallback.display == "ana.o"
    anonymous = learner_from_claims({"iss": ISSUER, "sub": "u"}, s)
    assert anonymous.display == "learner " + key_of(ISSUER, "u")[4:10]


def test_teacher_only_by_the_configured_claim(env):
    groups = sso_settings({**env, "KVLAB_OIDC_TEACHER_CLAIM": "groups", "KVLAB_OIDC_TEACHER_VALUE": "teachers"})
    claims = {"iss": ISSUER, "sub": "t"}
    assert learner_from_claims({**claims, "groups": ["x", "teachers"]}, groups).teacher
    assert learner_from_claims({**claims, "groups": "teachers"}, groups).teacher
    for no in (["teachers-2"], ["Teachers"], "x teachers", None, {"teachers": 1}, True):
        assert not learner_from_claims({**claims, "groups": no}, groups).teacher
    flag = sso_settings({**env, "KVLAB_OIDC_TEACHER_CLAIM": "is_teacher"})
    assert learner_from_claims({**claims, "is_teacher": True}, flag).teacher
    assert not learner_from_claims({**claims, "is_teacher": "yes"}, flag).teacher
    assert not learner_from_claims({**claims, "groups": ["teachers"], "is_teacher": True}, sso_settings(env)).teacher


def test_class_from_a_claim(env):
    del env["KVLAB_OIDC_CLASS"]
    s = sso_settings({**env, "KVLAB_OIDC_CLASS_CLAIM": "class_code"})
    assert learner_from_claims({"iss": ISSUER, "sub": "u", "class_code": "Room 8"}, s).class_code == "Room 8"
    for bad in (None, "", "<script>", ["Room 8"]):
        with pytest.raises(SsoClaimsError, match="'class_code' claim"):
            learner_from_claims({"iss": ISSUER, "sub": "u", "class_code": bad}, s)


# --- the provider's discovery document ------------------------------------------------------------------


@pytest.fixture
def provider():
    """A loopback HTTP server whose discovery answer the test sets: (issuer, set_answer)."""
    answer = {"status": 200, "body": b""}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(answer["status"])
            self.end_headers()
            self.wfile.write(answer["body"])

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    issuer = f"http://{HOST}:{server.server_address[1]}"

    def set_answer(status: int, body: object) -> None:
        answer["status"], answer["body"] = status, body if isinstance(body, bytes) else json.dumps(body).encode()

    yield issuer, set_answer
    server.shutdown()
    server.server_close()


def test_the_probe_says_what_is_wrong(env, provider):
    issuer, set_answer = provider
    s = sso_settings({**env, "KVLAB_OIDC_ISSUER": issuer})
    good = {"issuer": issuer, "authorization_endpoint": "a", "token_endpoint": "t", "jwks_uri": "j"}
    set_answer(200, good)
    assert provider_problem(s) is None
    set_answer(200, {**good, "issuer": issuer + "/"})
    assert "not 'http" in provider_problem(s) and "trailing slash" in provider_problem(s)
    set_answer(404, b"no")
    assert "answered 404" in provider_problem(s) and "KVLAB_OIDC_ISSUER" in provider_problem(s)
    set_answer(200, b"<html>")
    assert "not JSON" in provider_problem(s)
    set_answer(200, {"issuer": issuer})
    assert "lacks authorization_endpoint, token_endpoint, jwks_uri" in provider_problem(s)
    down = sso_settings({**env, "KVLAB_OIDC_ISSUER": f"http://{HOST}:{free_port()}"})
    assert "cannot be reached" in provider_problem(down, timeout_s=2)


# --- Streamlit's [auth] file ----------------------------------------------------------------------------


def test_the_auth_file_is_what_streamlit_reads(env, tmp_path):
    s = sso_settings({**env, "KVLAB_OIDC_PROMPT": "login", "KVLAB_OIDC_SCOPES": "openid  profile groups"})
    path = write_auth_file(s, tmp_path / "data")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # secrets: the server's user only
    auth = tomllib.loads(path.read_text("utf-8"))["auth"]
    assert auth == {
        "redirect_uri": "https://kvlab.school.example/oauth2callback",
        "cookie_secret": COOKIE,
        "client_id": "kvlab",
        "client_secret": SECRET,
        "server_metadata_url": ISSUER + "/.well-known/openid-configuration",
        "client_kwargs": {"scope": "openid profile groups", "prompt": "login"},
    }
    write_auth_file(s, tmp_path / "data")  # a restart replaces it and leaves no temporary file behind
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["streamlit-auth.toml"]
    assert tomllib.loads(auth_toml(sso_settings({**env, "KVLAB_OIDC_CLIENT_ID": "ünï"})))["auth"]["client_id"] == "ünï"
