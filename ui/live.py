"""A live classroom round, seen from one session: the class's board (progress/live.py) and a learner's answer.

The teacher opens a live round for a class code on one lesson (ui/live_screens.py draws the teacher's screen and
both banners); while it is open and not revealed, a learner signed in with that class code who checks a
prediction on that lesson adds it to the class's answers (`join_round`, called by ui/predict.py). PostgreSQL
(any SQLAlchemy database the progress store uses) is the only shared state: every replica reads the round
from it, so a learner on one replica and their teacher on another see the same round, and a replica that dies
takes nothing with it. Without a database (a NullStore) there are no live rounds.

Per-session state (Streamlit serves each learner from its own thread; nothing here is module-level):
- ``st.session_state[LEAD_KEY]``: the class code this teacher session leads live (set by the teacher's screen);
- ``st.session_state[MINE_KEY]``: ``(round id, value)`` of this learner's answer in the current round, so
  their banner can show it after the reveal without asking the database again. A round is named by its class,
  number and opening time (:func:`round_id`): a new live session starts again at round 1, and its round 1 is
  not the old one.
"""

from __future__ import annotations

import streamlit as st

from progress import ProgressStore, ProgressStoreError, SignedOut, name_key
from progress.live import LiveBoard, LiveRound
from ui import signin

LEAD_KEY = "live_lead"  # session state: the class code this teacher session leads live
MINE_KEY = "live_mine"  # session state: (round id, value) of this learner's answer in that round
PAGE_KEY = "live_on_page"  # session state: the URL path of the page this session's last full run showed
TEACHER_POLL_S = 1.0  # the projector screen's refresh: an answer is on it about a second after it is checked
REVEALED_POLL_S = 5.0  # the projector after the reveal: its answers are final, only the session's end can change
LEARNER_POLL_S = 5.0  # a learner's banner: the teacher's move reaches every learner within a few seconds
LEARNER_MAX_AGE_S = 1.0  # a replica answers its learners' polls from one read of the board a second


@st.cache_resource(show_spinner=False)
def _board(url: str, _store: ProgressStore) -> LiveBoard:
    """One board per database for the whole server process (it holds a short read cache, thread-safe)."""
    return LiveBoard(_store)


def live_board() -> LiveBoard | None:
    """The class board of this server's progress database, or None without one (no live rounds then)."""
    store = signin.get_store()
    if not isinstance(store, ProgressStore):
        return None
    return _board(store.url, store)


def signed_in() -> tuple[str, str] | None:
    """(class code, learner name) of the signed-in learner (by passphrase or by the provider), else None."""
    who = signin.signed_in_as()
    return (who[0], who[1]) if who else None


def sso_key() -> str | None:
    """The learner key of a learner the provider signed in (their answers are stored under it), else None."""
    who = signin.signed_in_as()
    return who[3] if who else None


def join_round(page_id: str, value: float) -> LiveRound | None:
    """Add the learner's checked prediction on ``page_id`` to their class's live round, if one is open on this
    lesson and not revealed; the round it joined, else None (no class, no round, another lesson, revealed)."""
    who, board = signin.signed_in_as(), live_board()
    if who is None or board is None:
        return None
    code, learner, version, key = who
    try:
        round_no = board.answer(code, learner, page_id, value, version, learner_key=key)
        if round_no is None:
            return None
        live = board.current(code)
    except SignedOut:  # the name was reset since this tab signed in: it may not answer for its new owner
        signin.sign_out_stale()
        return None
    except ProgressStoreError:
        return None  # a live round is an extra: the learner's own check and saved progress stand without it
    if live is None or live.round != round_no:
        return None
    st.session_state[MINE_KEY] = (round_id(live), float(value))
    return live


def round_id(live: LiveRound) -> tuple[str, int, float]:
    """What names one round for good: its class, number and opening time (a new live session starts again at
    round 1; its round 1 opened later)."""
    return (name_key(live.class_code), live.round, live.opened_at)


def _answered_here(live: LiveRound) -> tuple[tuple[str, int, float], float | None] | None:
    """The session's record of this learner's answer in ``live`` (MINE_KEY), if it is about that round."""
    mine = st.session_state.get(MINE_KEY)
    return mine if mine and mine[0] == round_id(live) else None


def answer_here(live: LiveRound) -> float | None:
    """This learner's answer in ``live`` as this session knows it (no database read)."""
    mine = _answered_here(live)
    return mine[1] if mine else None


def my_answer(board: LiveBoard, live: LiveRound, learner: str) -> float | None:
    """This learner's answer in ``live`` (from the session when they answered here, else the database once)."""
    mine = _answered_here(live)
    if mine:
        return mine[1]
    value = board.my_answer(live.class_code, learner, live.round, learner_key=sso_key())
    st.session_state[MINE_KEY] = (round_id(live), value)
    return value
