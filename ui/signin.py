"""Sidebar sign-in and saving of learner progress (the UI over the ``progress`` package's store).

The app calls :func:`sidebar_signin` once per run (it fills ``st.session_state["progress"]``) and
:func:`persist` after a page changes progress. Both work with no database: progress then lives in the
session only and the sidebar says so. The store (a SQLAlchemy engine, thread-safe) is the only shared
object; each learner's progress and identity live in their own ``st.session_state``.

Saving is synchronous: a signed-in learner's change is committed to the database inside the script run
that makes it, before the sidebar draws the tick or score, so what a learner sees saved survives the loss
of the server (replica) that showed it; signing in again on any replica loads it back.
"""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from progress import (
    NullStore,
    ProgressStore,
    ProgressStoreError,
    Store,
    database_url,
    empty_progress,
    merge_progress,
    normalize_progress,
    validate_name,
)

PROGRESS_KEY = "progress"  # st.session_state key of the progress dict (its shape: ui/progress.py)
LEARNER_KEY = "progress_learner"  # (class_code, learner) once signed in
FALLBACK_KEY = "progress_fallback"  # message once this session's saves failed
SAVED_KEY = "progress_saved_json"  # last JSON written, so unchanged reruns do not write


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
    except ProgressStoreError as exc:  # this session says why and stays session-only; the next one retries
        _fail(exc)
        return NullStore(st.session_state[FALLBACK_KEY])


def _md(text: str) -> str:
    """Escape markdown in user text (names are validated, but '_' and '.' still mean something)."""
    return "".join("\\" + ch if ch in "\\`*_{}[]()#+-.!|<>~" else ch for ch in text)


def _fail(exc: ProgressStoreError) -> None:
    """Switch this session to no persistence and say why."""
    st.session_state[FALLBACK_KEY] = f"{exc} Progress is kept for this session only."


def _sign_in(store: Store, class_code: str, learner: str) -> None:
    """Load saved progress, merge what this session already did, and save the union."""
    saved = store.load(class_code, learner)
    merged = merge_progress(saved, st.session_state.get(PROGRESS_KEY) or empty_progress())
    st.session_state[PROGRESS_KEY] = merged
    st.session_state[LEARNER_KEY] = (class_code, learner)
    for qid, entry in merged["quiz"].items():  # radios already on screen show the loaded answers too
        key = f"quiz_{qid}"  # ui/page.py lesson_check's radio key; off-screen radios read progress instead
        if key in st.session_state and isinstance(entry, dict) and isinstance(entry.get("answer"), str):
            st.session_state[key] = entry["answer"]
    st.session_state.pop(SAVED_KEY, None)
    persist(merged)


def sidebar_signin() -> dict[str, Any]:
    """Sidebar form (name + class code) that loads saved progress; returns ``st.session_state['progress']``."""
    if PROGRESS_KEY not in st.session_state:
        st.session_state[PROGRESS_KEY] = empty_progress()
    store = get_store()
    box = st.sidebar.expander("Save my progress", expanded=False)
    with box:
        if LEARNER_KEY in st.session_state:
            code, learner = st.session_state[LEARNER_KEY]
            st.caption(f"Signed in as **{_md(learner)}** · class **{_md(code)}**")
            if st.button("Sign out", key="progress_signout"):
                for key in (LEARNER_KEY, SAVED_KEY):
                    st.session_state.pop(key, None)
                st.session_state[PROGRESS_KEY] = empty_progress()
                st.rerun()
        else:
            with st.form("progress_signin", border=False):
                learner = st.text_input("Your name", key="progress_name", max_chars=40)
                code = st.text_input("Class code", key="progress_class", max_chars=40)
                submitted = st.form_submit_button("Sign in")
            if submitted:
                try:
                    _sign_in(store, validate_name(code, "class code"), validate_name(learner))
                    st.rerun()
                except ValueError as exc:
                    st.error(str(exc))
                except ProgressStoreError as exc:
                    _fail(exc)
                    st.rerun()
        if not store.persistent:
            st.caption(_md(store.message))
    return st.session_state[PROGRESS_KEY]


def persist(progress: dict[str, Any]) -> None:
    """Store ``progress`` in the session and, when signed in, in the database (only if it changed)."""
    try:
        clean = normalize_progress(progress)
    except ValueError as exc:
        st.error(f"Progress not saved: {exc}")
        return
    if st.session_state.get(PROGRESS_KEY) is not progress:
        # Pages mutate the session's dict in place and hold references to it: keep that object, never a copy.
        st.session_state[PROGRESS_KEY] = progress
    if LEARNER_KEY not in st.session_state:
        return
    text = json.dumps(clean, sort_keys=True)
    if st.session_state.get(SAVED_KEY) == text:
        return
    store = get_store()
    try:
        store.save(*st.session_state[LEARNER_KEY], clean)
    except ProgressStoreError as exc:
        _fail(exc)
        st.warning(st.session_state[FALLBACK_KEY])
        return
    st.session_state[SAVED_KEY] = text
