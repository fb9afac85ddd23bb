"""Sidebar sign-in and saving of learner progress (the UI over the ``progress`` package's store).

The app calls :func:`sidebar_signin` once per run (it fills ``st.session_state["progress"]``) and
:func:`persist` after a page changes progress. Both work with no database: progress then lives in the
session only and the sidebar says so. The store (a SQLAlchemy engine, thread-safe) is the only shared
object; each learner's progress and identity live in their own ``st.session_state``.

Signing in takes a name, a class code and a passphrase: the first sign-in of a name in a class sets the
passphrase, later ones must give it (progress/auth.py: the hash, and the wait after repeated failures).
Failures are counted for this session and its network address (:func:`client`), so a classmate's wrong tries
slow the classmate, not the learner whose name they try.

With single sign-on configured (ui/sso.py) the box also offers the school's provider; a learner it signs in is
kept under ``SSO_KEY`` and saved under their provider's subject (``learner_key``), not under the name shown.
KVLAB_OIDC_ONLY hides the passphrase form. :func:`signed_in_as` is the one place that says who saves.

Saving is synchronous: a signed-in learner's change is committed to the database inside the script run
that makes it, before the sidebar draws the tick or score, so what a learner sees saved survives the loss
of the server (replica) that showed it; signing in again on any replica loads it back. A save stamps what
changed since the last save and merges it into the stored row (progress/store.py), so two tabs or devices
of one learner never undo each other; the session then shows the merged result: the other tab's answers
are in its progress dict at once, and the radios and prediction inputs already on screen follow on the next
run (until then an outdated radio value is not recorded as a new answer: :func:`is_outdated_widget`).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import Mapping
from typing import Any

import streamlit as st

from kvlab.settings import SettingsError
from lessons.predictions import saved_value
from progress import (
    NullStore,
    ProgressStore,
    ProgressStoreError,
    SignedOut,
    SignIn,
    SignInError,
    Store,
    database_url,
    empty_progress,
    merge_progress,
    normalize_progress,
    stamp_changes,
    stamp_missing,
    validate_name,
)
from progress.auth import Client, client_address
from progress.records import ID_PARTS, STAMPS
from progress.sso import SsoClaimsError, SsoLearner
from ui import metrics, sso
from ui.inert import inert_md, prose_md
from ui.logs import event, learner_id

PROGRESS_KEY = "progress"  # st.session_state key of the progress dict (its shape: ui/progress.py)
LEARNER_KEY = "progress_learner"  # (class_code, learner) once signed in, as typed (NFKC)
FALLBACK_KEY = "progress_fallback"  # message once this session's saves failed
SAVED_KEY = "progress_saved_json"  # progress as last saved or loaded (JSON), so unchanged reruns do not write
NOTICE_KEY = "progress_notice"  # a message for the sidebar's next run (after st.rerun)
VERSION_KEY = "progress_auth_version"  # SignIn.version: a save after a passphrase reset signs this session out
BOX_KEY = "progress_box_open"  # whether the "Save my progress" expander is open (its contents are made only then)
SYNC_KEY = "progress_widget_sync"  # {widget key: (value on screen, value to show)} after another session's save
SSO_REFUSED_KEY = "progress_sso_refused"  # the last refusal of the provider's claims this session logged
CLIENT_KEY = "progress_client_id"  # a random id of this browser session: its wrong tries are counted on it
PASSPHRASE_LABEL = "Passphrase (8+ characters; your first sign-in sets it)"


@st.cache_resource(show_spinner=False)
def _shared_store(url: str) -> ProgressStore:
    """One store per database URL for the whole server (engines pool connections and are thread-safe).

    A database that cannot be opened raises, and Streamlit caches no exception: a replica that started
    while PostgreSQL was still down saves again for the next session once it is up."""
    return ProgressStore(url)


def get_store() -> Store:
    """The progress store for this session (a NullStore after a failure in this session)."""
    if st.session_state.get(FALLBACK_KEY):
        return NullStore(st.session_state[FALLBACK_KEY])
    try:
        return _shared_store(database_url())
    except OSError as exc:
        return NullStore(f"Cannot create the progress folder ({exc}); set KVLAB_DATA_DIR. Progress is not saved.")
    except SettingsError as exc:  # KVLAB_DATABASE_URL_FILE checked at start, unreadable since
        return NullStore(f"{exc} Progress is kept for this session only.")
    except ProgressStoreError as exc:  # this session says why and stays session-only; the next one retries
        _fail(exc)
        return NullStore(st.session_state[FALLBACK_KEY])


def _fail(exc: ProgressStoreError) -> None:
    """Switch this session to no persistence and say why."""
    st.session_state[FALLBACK_KEY] = f"{exc} Progress is kept for this session only."


def _now_us() -> int:
    return time.time_ns() // 1000


def _adopt(progress: dict[str, Any], merged: Mapping[str, Any]) -> None:
    """Make the session's dict equal to ``merged`` in place: pages hold references to it and its parts."""
    if isinstance(progress.get("visited"), list):
        progress["visited"][:] = merged["visited"]
    else:
        progress["visited"] = list(merged["visited"])
    for part in (*ID_PARTS, STAMPS):
        if isinstance(progress.get(part), dict):
            progress[part].clear()
            progress[part].update(merged[part])
        else:
            progress[part] = dict(merged[part])


def _widget_values(progress: Mapping[str, Any]) -> dict[str, Any]:
    """What the lesson widgets show for this progress: quiz radios (ui/quiz.py), prediction inputs (ui/predict.py)."""
    values: dict[str, Any] = {}
    for qid, entry in progress["quiz"].items():
        values[f"quiz_{qid}"] = entry.get("answer") if isinstance(entry, Mapping) else None
    for pid, entry in progress["predict"].items():
        values[f"predict_{pid}"] = saved_value(entry)
    return values


def _queue_widget_sync(before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    """Widgets on screen that show an answer another session replaced: set them on the next run, before they
    are drawn (Streamlit refuses to change a widget already drawn in this run)."""
    old, new = _widget_values(before), _widget_values(after)
    pending = dict(st.session_state.get(SYNC_KEY) or {})
    for key in set(old) | set(new):
        if old.get(key) != new.get(key) and key in st.session_state and st.session_state[key] != new.get(key):
            pending[key] = (st.session_state[key], new.get(key))
    if pending:
        st.session_state[SYNC_KEY] = pending


def _apply_widget_sync() -> None:
    """Show the merged answers in widgets that still hold the outdated value (a new choice there is kept)."""
    for key, (shown, value) in (st.session_state.pop(SYNC_KEY, None) or {}).items():
        if key in st.session_state and st.session_state[key] == shown:
            st.session_state[key] = value


def is_outdated_widget(key: str, value: Any) -> bool:
    """True when widget ``key`` still shows ``value``, which a newer answer from another session replaced in
    this run (so recording it again would undo that answer)."""
    pending = st.session_state.get(SYNC_KEY) or {}
    return key in pending and pending[key][0] == value


def client() -> Client:
    """This session as the store's throttle counts it: a random id kept in the session, and the address the
    connection comes from (a proxy's ``X-Forwarded-For`` only from KVLAB_TRUSTED_PROXIES, default loopback)."""
    session = st.session_state.setdefault(CLIENT_KEY, secrets.token_hex(16))
    peer, forwarded = st.context.ip_address, st.context.headers.get("X-Forwarded-For")
    try:  # (a test harness without a connection may hand back other objects: no address then, loopback)
        address = client_address(
            peer if isinstance(peer, str) else None,
            forwarded if isinstance(forwarded, str) else None,
            os.environ.get("KVLAB_TRUSTED_PROXIES"),
        )
    except ValueError as exc:  # a bad setting: say so, and count on the session alone rather than a wrong address
        st.warning(prose_md(exc))
        address = None
    return Client(session, address)


def _who() -> dict[str, str]:
    """The signed-in learner as the log names them: class code and pseudonym (ui/logs.py), never the name (a
    single sign-on learner: the pseudonym of their key); empty when the session holds no identity (a log field
    never breaks a save)."""
    try:
        code, learner, _version, key = signed_in_as()
        return {"class_code": code, "learner_id": learner_id(code, key if key is not None else learner)}
    except Exception:  # no identity, or one of another shape
        return {}


def _signin_failed(code: str, learner: str, exc: SignInError) -> None:
    """Log and count a refused sign-in (the class code and pseudonym as typed; never the passphrase)."""
    metrics.signin_failed("learner")
    try:
        address = client().address
    except Exception:  # the log line must not cost the learner their error message
        address = None
    fields = {"class_code": code, "learner_id": learner_id(code, learner), "address": address}
    event("signin_failed", logging.WARNING, **fields, reason=str(exc), retry_after_s=exc.retry_after_s)


def teacher_event(name: str, **fields: Any) -> None:
    """Log a teacher action (the teacher view's unlock, listing, CSV, reset) with this session's address; a
    refused teacher key (an event ending in ``_failed``) is a warning and counts as a failed sign-in."""
    failed = name.endswith("_failed")
    if failed:
        metrics.signin_failed("teacher")
    try:
        address = client().address
    except Exception:  # the log line must not break the teacher view
        address = None
    event(name, logging.WARNING if failed else logging.INFO, **fields, address=address)


def sign_out_stale() -> None:
    """Sign this session out after a reset (its saves and answers are refused) and tell the learner why."""
    code, learner = st.session_state[LEARNER_KEY]
    for key in (LEARNER_KEY, VERSION_KEY, SAVED_KEY, SYNC_KEY):
        st.session_state.pop(key, None)
    st.warning(
        f"Signed out: the passphrase of {inert_md(learner)} in class {inert_md(code)} was reset or set again "
        "since you signed in. This change was not saved; sign in again to keep saving."
    )


def signed_in_as() -> tuple[str, str, int | None, str | None] | None:
    """Who this session saves as: (class code, name shown, passphrase version, SSO learner key), or None.

    A learner signed in by the provider saves under their key (the version is None: no passphrase); one signed
    in by passphrase under their typed name (key None)."""
    learner = st.session_state.get(sso.SSO_KEY)
    if isinstance(learner, SsoLearner):
        return learner.class_code, learner.display, None, learner.learner_key
    if LEARNER_KEY in st.session_state:
        code, name = st.session_state[LEARNER_KEY]
        return code, name, st.session_state.get(VERSION_KEY), None
    return None


def _forget_identity() -> None:
    """Sign this session out (passphrase or provider) and start its progress afresh."""
    for key in (LEARNER_KEY, VERSION_KEY, SAVED_KEY, SYNC_KEY, sso.SSO_KEY):
        st.session_state.pop(key, None)
    st.session_state[PROGRESS_KEY] = empty_progress()


def sync_sso(store: Store) -> str | None:
    """Follow ``st.user`` each run: load the progress of a learner the provider just signed in (leaving any
    passphrase identity), sign out one who signed out of the provider. Returns why the provider's sign-in
    cannot be used, if so (shown in the sign-in box)."""
    state = sso.sso_state()
    held = st.session_state.get(sso.SSO_KEY)
    if state.settings is None:
        if held is not None:
            _forget_identity()
        return state.problem
    try:
        learner = sso.signed_on(state.settings)
    except SsoClaimsError as exc:
        learner, problem = None, str(exc)
        if st.session_state.get(SSO_REFUSED_KEY) != problem:  # logged once a session, not on every run
            st.session_state[SSO_REFUSED_KEY] = problem
            sso.log_refused(problem)
    else:
        problem = None
    if learner == held:
        return problem
    if held is not None or LEARNER_KEY in st.session_state:
        _forget_identity()  # another identity's saved progress never flows into this one
    if learner is not None:
        st.session_state[sso.SSO_KEY] = learner
        sso.log_signed_on(learner)
        who = f"{inert_md(learner.display)} in class {inert_md(learner.class_code)}"
        st.session_state[NOTICE_KEY] = f"Signed in by your school as {who}: your progress is saved to your account."
        try:
            _load_into_session(store, learner.class_code, learner.display, learner.learner_key)
        except ProgressStoreError as exc:
            _fail(exc)
    return problem


def _load_into_session(store: Store, class_code: str, learner: str, learner_key: str | None = None) -> None:
    """Load the learner's saved progress, merge what this session already did, and save the union."""
    saved = store.load(class_code, learner, learner_key)
    progress = st.session_state.get(PROGRESS_KEY)
    if not isinstance(progress, dict):
        progress = st.session_state[PROGRESS_KEY] = empty_progress()
    mine = stamp_missing(progress, _now_us())  # what this session did before signing in counts as written now
    merged = merge_progress(saved, mine)
    _adopt(progress, merged)
    for key, value in _widget_values(merged).items():  # widgets already on screen show the loaded answers too
        if key in st.session_state and value is not None:  # (this runs in the sidebar, before the page draws them)
            st.session_state[key] = value
    st.session_state.pop(SYNC_KEY, None)
    st.session_state.pop(SAVED_KEY, None)
    persist(progress)


def _sign_in(store: Store, class_code: str, learner: str, passphrase: str) -> SignIn:
    """Check the passphrase, load saved progress, merge what this session already did, and save the union."""
    who = client()
    result = store.sign_in(class_code, learner, passphrase, who)
    fields = {"class_code": result.class_code, "learner_id": learner_id(result.class_code, result.learner)}
    event("signin", **fields, status=result.status, address=who.address)
    st.session_state[LEARNER_KEY] = (result.class_code, result.learner)
    st.session_state[VERSION_KEY] = result.version if result.status != "unsaved" else None
    _load_into_session(store, result.class_code, result.learner)
    return result


def _welcome(result: SignIn) -> str:
    """What the sidebar says after a sign-in."""
    who = f"{inert_md(result.learner)} in class {inert_md(result.class_code)}"
    if result.status == "new":
        return f"Passphrase set for {who}. Sign in with the same name, class code and passphrase on any device."
    if result.status == "set":
        return f"Passphrase set for {who}; your saved progress is kept. Use this passphrase from now on."
    return ""


def sidebar_signin() -> dict[str, Any]:
    """Sidebar form (name, class code, passphrase) that loads saved progress; returns the session's progress dict."""
    if PROGRESS_KEY not in st.session_state:
        st.session_state[PROGRESS_KEY] = empty_progress()
    _apply_widget_sync()
    store = get_store()
    sso_problem = sync_sso(store)
    if st.session_state.get(NOTICE_KEY):
        st.session_state[BOX_KEY] = True  # open, to show the notice
    box = st.sidebar.expander("Save my progress", key=BOX_KEY, on_change="rerun")
    if not box.open:
        # A full run of every page draws the sidebar; most runs never use the form (three inputs and a button).
        return st.session_state[PROGRESS_KEY]
    with box:
        if notice := st.session_state.pop(NOTICE_KEY, None):
            st.success(notice)
        held = st.session_state.get(sso.SSO_KEY)
        if isinstance(held, SsoLearner):
            role = " · teacher" if held.teacher else ""
            st.caption(
                f"Signed in by your school as {inert_md(held.display)} · class {inert_md(held.class_code)}{role}"
            )
            sso.logout_button()
        elif LEARNER_KEY in st.session_state:
            code, learner = st.session_state[LEARNER_KEY]
            st.caption(f"Signed in as {inert_md(learner)} · class {inert_md(code)}")
            if st.button("Sign out", key="progress_signout"):
                for key in (LEARNER_KEY, VERSION_KEY, SAVED_KEY, SYNC_KEY):
                    st.session_state.pop(key, None)
                st.session_state[PROGRESS_KEY] = empty_progress()
                st.rerun()
        elif _sso_box(sso_problem):
            with st.form("progress_signin", border=False):
                learner = st.text_input("Your name", key="progress_name", max_chars=40)
                code = st.text_input("Class code", key="progress_class", max_chars=40)
                passphrase = st.text_input(PASSPHRASE_LABEL, type="password", key="progress_pass", max_chars=128)
                submitted = st.form_submit_button("Sign in")
            if submitted:
                try:
                    result = _sign_in(store, validate_name(code, "class code"), validate_name(learner), passphrase)
                    if welcome := _welcome(result):
                        st.session_state[NOTICE_KEY] = welcome
                    st.rerun()
                except SignInError as exc:
                    _signin_failed(code, learner, exc)
                    who = f"{inert_md(learner.strip())} in class {inert_md(code.strip())}"
                    st.error(f"Not signed in as {who}: {prose_md(exc)}.")
                except ValueError as exc:  # a name or class code that is refused: the message names the fix
                    event("signin_refused", logging.INFO, class_code=code, reason=str(exc))
                    st.error(f"Not signed in: {prose_md(exc)}.")
                except ProgressStoreError as exc:
                    _fail(exc)
                    st.rerun()
        if not store.persistent:
            st.caption(inert_md(store.message, limit=400))
    return st.session_state[PROGRESS_KEY]


def _sso_box(problem: str | None) -> bool:
    """The provider's sign-in button, or why it is unavailable; whether the passphrase form is offered too."""
    state = sso.sso_state()
    if state.settings is not None and problem is None:
        problem = sso.provider_problem_now(state.settings)
        if problem is None:
            sso.login_button()
            if state.settings.only:
                return False
            st.caption("Or, with a name, class code and passphrase:")
            return True
    if problem is not None:
        only = state.settings is not None and state.settings.only
        fallback = "; progress is kept for this session only" if only else "; sign in with a passphrase below"
        st.warning(f"Single sign-on is unavailable: {prose_md(problem)}{fallback}.")
        return not only
    return True


def persist(progress: dict[str, Any]) -> None:
    """Store ``progress`` in the session and, when signed in, merge it into the database (only if it
    changed); the session's dict then holds the merged result (other sessions' saved answers too)."""
    try:
        clean = normalize_progress(progress)
    except ValueError as exc:
        st.error(f"Progress not saved: {prose_md(exc)}")
        return
    if st.session_state.get(PROGRESS_KEY) is not progress:
        # Pages mutate the session's dict in place and hold references to it: keep that object, never a copy.
        st.session_state[PROGRESS_KEY] = progress
    who = signed_in_as()
    if who is None:
        return
    base = st.session_state.get(SAVED_KEY)
    if base == json.dumps(clean, sort_keys=True):
        return
    stamped = stamp_changes(clean, json.loads(base) if base else None, _now_us())
    store = get_store()
    try:
        code, learner, version, learner_key = who
        merged = store.save(code, learner, stamped, version, learner_key=learner_key)
    except SignedOut:
        event("progress_save_refused", **_who(), reason="the passphrase changed since this session signed in")
        sign_out_stale()
        return
    except ProgressStoreError as exc:
        event("progress_save_failed", logging.WARNING, **_who(), reason=str(exc))
        _fail(exc)
        st.warning(prose_md(st.session_state[FALLBACK_KEY]))
        return
    event("progress_saved", **_who(), visited=len(merged["visited"]))
    _queue_widget_sync(clean, merged)
    _adopt(progress, merged)
    st.session_state[SAVED_KEY] = json.dumps(merged, sort_keys=True)
