"""Single sign-on in the sidebar: the school's OpenID Provider through Streamlit's ``st.login``.

The operator sets KVLAB_OIDC_* (progress/sso/settings.py); ``python -m ui.serve`` writes Streamlit's ``[auth]``
file from them at start (:func:`startup_args`). Each run, :func:`signed_on` reads ``st.user`` (the ID token's
claims, in a cookie Streamlit signs) into an ``SsoLearner``: the learner is the issuer's subject, never the
name shown (progress/sso/identity.py). What can go wrong says so in the sign-in box and leaves the passphrase
sign-in working: a wrong setting (:func:`sso_state`), a provider that does not answer or is not the one
configured (:func:`provider_problem`, asked at most every ``PROBE_TTL_S``), a token without the claims needed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

import streamlit as st
from streamlit.auth_util import get_secrets_auth_section

from progress.sso import (
    SsoClaimsError,
    SsoLearner,
    SsoSettings,
    SsoSettingsError,
    learner_from_claims,
    provider_problem,
    sso_settings,
    write_auth_file,
)
from progress.store import data_dir
from ui import metrics
from ui.logs import event, learner_id

SSO_KEY = "progress_sso"  # session state: the SsoLearner this session is signed in as by the provider
PROBE_TTL_S = 30  # how long one answer about the provider's health is reused (a down provider is asked again)
BUTTON_LABEL = "Sign in with your school account"
LOG = logging.getLogger("kvlab.sso")


@dataclass(frozen=True)
class SsoState:
    """Single sign-on as this server has it: off (``settings`` None, no ``problem``), on, or broken (why)."""

    settings: SsoSettings | None
    problem: str | None = None


def _oidc_environ(environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    names = ("STREAMLIT_SERVER_COOKIE_SECRET", "KVLAB_COOKIE_SECRET", "KVLAB_COOKIE_SECRET_FILE")
    return tuple(sorted((k, v) for k, v in environ.items() if k.startswith("KVLAB_OIDC_") or k in names))


@st.cache_resource(show_spinner=False)
def _state(environ: tuple[tuple[str, str], ...]) -> SsoState:
    """The settings parsed once per server (the secret file is read once, not on every run)."""
    try:
        return SsoState(sso_settings(dict(environ)))
    except SsoSettingsError as exc:
        return SsoState(None, str(exc))


def sso_state() -> SsoState:
    """This server's single sign-on settings, or why they cannot be used."""
    state = _state(_oidc_environ(os.environ))
    if state.settings is not None and not streamlit_has_auth():
        return SsoState(
            None,
            "the server was started without its sign-on settings for Streamlit (start it with run.sh or "
            "python -m ui.serve, which write them; see the server's log for why they were not written)",
        )
    return state


def streamlit_has_auth() -> bool:
    """Whether Streamlit loaded an ``[auth]`` section (the file ui.serve writes); Streamlit's own check, which
    reads the secrets files quietly (``st.secrets`` would draw an error on the page without one)."""
    return bool(get_secrets_auth_section())


@st.cache_data(ttl=PROBE_TTL_S, show_spinner=False, max_entries=4)
def _probe(issuer: str, _settings: SsoSettings) -> str | None:
    return provider_problem(_settings)


def provider_problem_now(settings: SsoSettings) -> str | None:
    """None when the provider answers as configured; else why single sign-on is unavailable right now."""
    return _probe(settings.issuer, settings)


def signed_on(settings: SsoSettings) -> SsoLearner | None:
    """The learner ``st.user`` names (None when nobody is signed in by the provider); SsoClaimsError when the
    token's claims cannot name one."""
    user = st.user
    if not user.get("is_logged_in"):
        return None
    return learner_from_claims(user.to_dict(), settings)


def teacher_signed_on() -> bool:
    """Whether the provider signed this session in with the teacher claim (KVLAB_OIDC_TEACHER_CLAIM), read from
    ``st.user`` itself, whatever ran before (a page opened on its own has no sidebar run before it)."""
    state = sso_state()
    if state.settings is None:
        return False
    try:
        learner = signed_on(state.settings)
    except SsoClaimsError:
        return False
    return learner is not None and learner.teacher


def log_signed_on(learner: SsoLearner) -> None:
    """The one place a sign-in by the provider is recorded (structured logs hook in here): the stored key, the
    class and the role; never the name shown, a claim's text beyond those, or a token."""
    role = "teacher" if learner.teacher else "learner"
    LOG.info("signed on: %s %s in class %r", role, learner.learner_key, learner.class_code)
    pseudonym = learner_id(learner.class_code, learner.learner_key)
    event("signin", class_code=learner.class_code, learner_id=pseudonym, status="sso", role=role)


def log_refused(reason: str) -> None:
    """The one place a refused sign-in by the provider is recorded (claims that name nobody; once a session)."""
    LOG.warning("single sign-on refused: %s", reason)
    metrics.signin_failed("learner")
    event("signin_failed", logging.WARNING, method="sso", reason=reason)


def login_button() -> None:
    """The button that sends the browser to the provider (Streamlit's /auth/login, then back)."""
    if st.button(BUTTON_LABEL, key="progress_sso_login", type="primary"):
        st.login()


def logout_button() -> None:
    """Sign out of the app (Streamlit clears its identity cookie and may send the browser to the provider)."""
    if st.button("Sign out", key="progress_sso_logout"):
        st.session_state.pop(SSO_KEY, None)
        st.logout()


def startup_args(environ: Mapping[str, str]) -> list[str]:
    """Streamlit options that make ``st.login`` use the KVLAB_OIDC_* settings: the ``[auth]`` file written into
    the data folder (0600), or [] when single sign-on is off or cannot be set up (logged; the app then says
    so in the sign-in box and the passphrase sign-in keeps working)."""
    try:
        settings = sso_settings(environ)
    except SsoSettingsError as exc:
        LOG.warning("single sign-on is off: %s", exc)
        return []
    if settings is None:
        return []
    try:
        path = write_auth_file(settings, data_dir(environ))
    except OSError as exc:
        LOG.warning("single sign-on is off: cannot write its settings for Streamlit (%s); set KVLAB_DATA_DIR", exc)
        return []
    LOG.info("single sign-on through %s (settings %s)", settings.issuer, settings.redacted())
    return ["--secrets.files", str(path)]
