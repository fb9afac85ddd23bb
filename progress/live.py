"""Live classroom rounds: the teacher opens a round on one lesson, the class's answers gather in the database.

A teacher opens a *live round* for a class code on one lesson (a page id). Learners of that class see the
round (``current``), follow the teacher's view (``settings``: the teacher's query parameters, a deep link),
and each learner's checked prediction on that lesson joins the round's answers (``answer``: one per learner,
a later one replaces it) while the round is open and not revealed. ``reveal`` ends the answering; a new
``open_round`` (same lesson or another) starts round + 1 and forgets the older rounds' answers; ``close``
ends the live session. No Streamlit here; ``ui/live.py`` and ``pages/teacher.py`` are the UI.

Ballot stuffing: anyone with the class code can sign in under made-up names and answer. A live session
remembers when it started (``kvlab_live_gate``), and a name whose first sign-in in the class came after that
(progress/store.py: ``kvlab_class_member``) is *new this session*; ``LiveRound.new_answers`` counts the
round's answers from such names, for the projector. The teacher can close the class to new names
(``set_closed``): their answers are then kept but not counted (``LiveRound.waiting``) until the teacher
admits the name (``admit``; ``waiting_names`` lists them, for the teacher only). ``close`` forgets all of it.

The database is the only shared state, so any number of app replicas serve one class. Its tables are part of
the versioned schema (progress/migrate.py; a board also creates one that is missing): ``kvlab_live_session``
(one row per class code: lesson, round, revealed, settings), ``kvlab_live_answer`` (one row per (class code,
learner): round, value, answer time), ``kvlab_live_gate`` and ``kvlab_live_admit`` (below). Keys are
``name_key`` forms (progress/names.py), so "Room 7" and "room 7" are one class.

Contract:
- ``answer`` is atomic against ``reveal``, ``open_round`` and ``close``: an answer is either counted
  (committed while its round was open, before the reveal) or refused (None, nothing stored), never accepted
  and then missing, never added after the reveal. On PostgreSQL the answer locks the class's session row
  (FOR UPDATE) and the teacher's writes update it, so each waits for the other in flight, in arrival order
  (a shared lock would let a stream of answers starve the reveal); on SQLite each write is one statement
  that checks the round in the database itself.
- ``current(code, max_age_s)`` is one query (the round and its answer count); with ``max_age_s > 0`` it may
  answer from this board's own cache (per class code, thread-safe, at most that old by ``store.clock``;
  every write through this board clears it), so a class polling one replica costs one query a second.
- Every bad argument is a ValueError naming the value and the fix; database failures are ProgressStoreError.
"""

from __future__ import annotations

import json
import math
import random
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from numbers import Real
from types import MappingProxyType
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from progress.names import NAME_MAX_LEN, name_key, validate_name
from progress.sso.identity import is_sso_key
from progress.store import ProgressStore, ProgressStoreError, SignedOut, auth_table, explain_failure, member_table

LESSON_ID = re.compile(r"[a-z][a-z_]{0,39}")  # a page id
MAX_SETTINGS, MAX_SETTING_LEN = 16, 200  # the teacher's deep-link query: name -> value
MAX_ANSWER = 1e12  # a prediction is finite, 0 <= v <= MAX_ANSWER
WRITE_ATTEMPTS = 20  # rounds of a write that raced another one (a first insert, a round opened meanwhile)
CACHE_MAX = 1024  # class codes a board remembers; the oldest entry goes first
NO_SETTINGS: Mapping[str, str] = MappingProxyType({})

live_metadata = sa.MetaData()
session_table = sa.Table(
    "kvlab_live_session",
    live_metadata,
    sa.Column("class_code", sa.String(NAME_MAX_LEN), primary_key=True),  # name_key of the class code
    sa.Column("display", sa.String(NAME_MAX_LEN), nullable=False),  # as the teacher typed it (validate_name)
    sa.Column("lesson", sa.String(40), nullable=False),  # page id
    sa.Column("round", sa.Integer, nullable=False),  # 1, 2, ...: +1 for every open_round
    sa.Column("revealed", sa.Boolean, nullable=False),
    sa.Column("settings", sa.Text, nullable=False),  # JSON list of [name, value] pairs, in the order given
    sa.Column("opened_at", sa.Float, nullable=False),  # store.clock() seconds when this round opened
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)
answer_table = sa.Table(
    "kvlab_live_answer",
    live_metadata,
    sa.Column("class_code", sa.String(NAME_MAX_LEN), primary_key=True),  # name_key of the class code
    sa.Column("learner_key", sa.String(NAME_MAX_LEN), primary_key=True),  # name_key of the learner name
    sa.Column("round", sa.Integer, nullable=False),  # the round this answer counts in
    sa.Column("value", sa.Float, nullable=False),
    sa.Column("answered_at", sa.Float, nullable=False),  # store.clock() seconds; the answers' order
)


gate_table = sa.Table(
    "kvlab_live_gate",
    live_metadata,
    sa.Column("class_code", sa.String(NAME_MAX_LEN), primary_key=True),
    sa.Column("started_at", sa.Float, nullable=False),  # store.clock() when this live session's first round opened
    sa.Column("closed", sa.Boolean, nullable=False),  # closed to new names: their answers wait for the teacher
)
admit_table = sa.Table(
    "kvlab_live_admit",
    live_metadata,
    sa.Column("class_code", sa.String(NAME_MAX_LEN), primary_key=True),
    sa.Column("learner_key", sa.String(NAME_MAX_LEN), primary_key=True),  # a new name the teacher let in
)


@dataclass(frozen=True)
class LiveRound:
    """The open round of a class, as the database had it (``answers``: how many so far)."""

    class_code: str  # display form (as the teacher typed it, validate_name'd)
    lesson: str  # page id
    round: int  # 1, 2, ...: +1 for every open_round of this class (new lesson or new round)
    revealed: bool
    settings: tuple[tuple[str, str], ...]  # the teacher's view (query parameters), in the order given
    opened_at: float  # store.clock() seconds when this round opened
    answers: int  # answers in this round so far that count (not those waiting for the teacher)
    closed: bool = False  # the class is closed to names new this session
    new_answers: int = 0  # of ``answers``, those from names new this session
    waiting: int = 0  # answers from new names not counted until the teacher admits them (closed class)


@dataclass(frozen=True)
class _Cached:
    fetched_at: float  # store.clock() before the query ran
    value: LiveRound | None


class LiveBoard:
    """Live rounds of every class in the progress database; one per app process (it keeps a small cache)."""

    def __init__(self, store: ProgressStore) -> None:
        """Use ``store``'s database and clock; create the two tables if missing. ProgressStoreError if the
        store has no database or the tables cannot be created."""
        if not getattr(store, "persistent", False) or not hasattr(store, "engine"):
            message = getattr(store, "message", "")
            raise ProgressStoreError(f"live rounds need the progress database; {message}".strip())
        self.engine: sa.Engine = store.engine
        self.clock = store.clock
        self._where = store.describe()
        self._lock = threading.Lock()
        self._cache: dict[str, _Cached] = {}
        self._writes = 0  # bumped by every write: a read that raced one does not fill the cache
        try:
            create_tables(self.engine)
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self._where, "Live round")) from exc

    # --- the teacher ------------------------------------------------------------------------------------

    def open_round(self, class_code: str, lesson: str, settings: Mapping[str, str] = NO_SETTINGS) -> LiveRound:
        """Start a new round (round + 1, not revealed; round 1 for a class without one) on ``lesson`` with
        ``settings``; the older rounds' answers are forgotten."""
        display = validate_name(class_code, "class code")
        code, page, pairs = name_key(display), check_lesson(lesson), check_settings(settings)
        now = self.clock()
        values = {
            "display": display,
            "lesson": page,
            "revealed": False,
            "settings": json.dumps(pairs),
            "opened_at": now,
            "updated_at": datetime.now(timezone.utc),
        }
        mine = session_table.c.class_code == code
        try:
            for attempt in range(WRITE_ATTEMPTS):
                try:
                    with self.engine.begin() as conn:
                        bump = session_table.update().where(mine).values(round=session_table.c.round + 1, **values)
                        if conn.execute(bump).rowcount == 0:  # a new live session: it starts now
                            conn.execute(session_table.insert().values(class_code=code, round=1, **values))
                            for table in (gate_table, admit_table):
                                conn.execute(table.delete().where(table.c.class_code == code))
                            conn.execute(gate_table.insert().values(class_code=code, started_at=now, closed=False))
                        found = _read(conn, code)  # the row is ours (locked) until commit
                        assert found is not None
                        conn.execute(
                            answer_table.delete().where(
                                (answer_table.c.class_code == code) & (answer_table.c.round != found.round)
                            )
                        )
                    self._forget(code)  # after the commit: a read racing this write cannot cache the old row
                    return found
                except IntegrityError:  # another replica opened this class's first round meanwhile
                    _pause(attempt)
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self._where, "Live round")) from exc
        raise ProgressStoreError("could not open the round: other writes kept changing it; try again")

    def show(self, class_code: str, round: int, settings: Mapping[str, str]) -> LiveRound | None:
        """The teacher's new view (``settings``) of the same round; None if ``round`` is no longer current."""
        code, number, pairs = _code(class_code), check_round(round), check_settings(settings)
        change = {"settings": json.dumps(pairs), "updated_at": datetime.now(timezone.utc)}
        return self._update_round(code, number, change)

    def reveal(self, class_code: str, round: int) -> LiveRound | None:
        """End the answering of ``round`` (answers from now on are refused); None if it is not the current
        round. Idempotent: revealing a revealed round returns it again."""
        code, number = _code(class_code), check_round(round)
        return self._update_round(code, number, {"revealed": True, "updated_at": datetime.now(timezone.utc)})

    def _update_round(self, code: str, number: int, change: dict[str, Any]) -> LiveRound | None:
        this = (session_table.c.class_code == code) & (session_table.c.round == number)
        try:
            with self.engine.begin() as conn:  # PostgreSQL: the UPDATE locks the row, answers in flight finish first
                if conn.execute(session_table.update().where(this).values(**change)).rowcount == 0:
                    return None
                found = _read(conn, code)
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self._where, "Live round")) from exc
        self._forget(code)
        return found

    def close(self, class_code: str) -> bool:
        """End the live session of the class (its row and every answer deleted); False if none was open."""
        code = _code(class_code)
        try:
            with self.engine.begin() as conn:  # the session row first, as every write here: no deadlock
                gone = conn.execute(session_table.delete().where(session_table.c.class_code == code)).rowcount
                for table in (answer_table, gate_table, admit_table):
                    conn.execute(table.delete().where(table.c.class_code == code))
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self._where, "Live round")) from exc
        self._forget(code)
        return gone == 1

    def set_closed(self, class_code: str, closed: bool) -> LiveRound | None:
        """Close the class's live session to names new this session (their answers wait for ``admit``), or
        open it again; None when no live session is on."""
        code = _code(class_code)
        if not isinstance(closed, bool):
            raise ValueError(f"closed must be True or False, got {closed!r}")
        try:
            with self.engine.begin() as conn:
                gate = gate_table.update().where(gate_table.c.class_code == code).values(closed=closed)
                if conn.execute(gate).rowcount == 0:
                    if _read(conn, code) is None:
                        return None
                    # a session opened before the gate existed: it starts now, every name so far counts as seen
                    conn.execute(gate_table.insert().values(class_code=code, started_at=self.clock(), closed=closed))
                found = _read(conn, code)
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self._where, "Live round")) from exc
        self._forget(code)
        return found

    def admit(self, class_code: str, learner: str) -> bool:
        """Let a name new this session count in a closed class (its answers join the counts); False if no
        live session is on."""
        code, name = _code(class_code), name_key(validate_name(learner))
        try:
            with self.engine.begin() as conn:
                if not conn.execute(sa.select(gate_table.c.class_code).where(gate_table.c.class_code == code)).first():
                    return False
                known = (admit_table.c.class_code == code) & (admit_table.c.learner_key == name)
                if conn.execute(sa.select(admit_table.c.learner_key).where(known)).first() is None:
                    conn.execute(admit_table.insert().values(class_code=code, learner_key=name))
        except IntegrityError:
            pass  # admitted twice at once: admitted
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self._where, "Live round")) from exc
        self._forget(code)
        return True

    def waiting_names(self, class_code: str) -> list[str]:
        """Names (as they signed in) whose answers in the current round wait for the teacher, sorted."""
        code = _code(class_code)
        shown = sa.select(auth_table.c.learner).where(
            (auth_table.c.class_code == answer_table.c.class_code)
            & (auth_table.c.learner_key == answer_table.c.learner_key)
        )
        query = (
            sa.select(answer_table.c.learner_key, shown.scalar_subquery())
            .select_from(answer_table.join(session_table, session_table.c.class_code == answer_table.c.class_code))
            .where((answer_table.c.class_code == code) & (answer_table.c.round == session_table.c.round) & _held())
            .order_by(answer_table.c.learner_key)
        )
        try:
            with self.engine.connect() as conn:
                return [display or key for key, display in conn.execute(query)]
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self._where, "Live round")) from exc

    # --- everyone ---------------------------------------------------------------------------------------

    def current(self, class_code: str, max_age_s: float = 0.0) -> LiveRound | None:
        """The class's round (open or revealed) with its answer count, or None when no live session is on.

        ``max_age_s > 0`` may answer from this board's cache, read at most that many seconds ago (by the
        store's clock); 0 always asks the database."""
        code = _code(class_code)
        if not isinstance(max_age_s, Real) or isinstance(max_age_s, bool) or not 0 <= max_age_s < math.inf:
            raise ValueError(f"max_age_s must be a finite number of seconds >= 0, got {max_age_s!r}; pass e.g. 1.0")
        now = self.clock()
        with self._lock:
            cached = self._cache.get(code)
            if max_age_s > 0 and cached is not None and 0 <= now - cached.fetched_at <= max_age_s:
                return cached.value
            writes = self._writes
        try:
            with self.engine.connect() as conn:
                found = _read(conn, code)
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self._where, "Live round")) from exc
        with self._lock:
            if writes == self._writes:  # no write through this board meanwhile: the answer is not older than one
                if code not in self._cache and len(self._cache) >= CACHE_MAX:
                    del self._cache[min(self._cache, key=lambda k: self._cache[k].fetched_at)]
                self._cache[code] = _Cached(now, found)
        return found

    def answer(
        self,
        class_code: str,
        learner: str,
        lesson: str,
        value: float,
        auth_version: int | None = None,
        learner_key: str | None = None,
    ) -> int | None:
        """Store ``learner``'s checked prediction ``value`` on ``lesson`` (one per learner: a later one
        replaces it) and return the round number, iff the class's round is open on that lesson and not
        revealed; else None and nothing is stored. Atomic against reveal (see the module docstring).

        With ``auth_version`` (the session's ``SignIn.version``) an answer after a reset or a new passphrase
        of the name raises SignedOut and stores nothing: an old tab cannot replace the owner's answer. A single
        sign-on learner answers under ``learner_key`` (progress/sso/identity.py), not under the name shown."""
        code, name = _code(class_code), _learner(learner, learner_key)
        page, number = check_lesson(lesson), check_value(value)
        same_sign_in = sa.true()
        if auth_version is not None:  # checked inside each write too (SQLite: a reset may commit in between)
            same_sign_in = sa.exists().where(
                (auth_table.c.class_code == code)
                & (auth_table.c.learner_key == name)
                & (auth_table.c.version == auth_version)
            )
        try:
            for attempt in range(WRITE_ATTEMPTS):
                try:
                    with self.engine.begin() as conn:
                        state = conn.execute(
                            sa.select(session_table.c.lesson, session_table.c.round, session_table.c.revealed)
                            .where(session_table.c.class_code == code)
                            .with_for_update()  # PostgreSQL: the row is ours until commit; the teacher's writes queue
                        ).first()
                        if auth_version is not None and not conn.execute(sa.select(same_sign_in)).scalar():
                            raise SignedOut("the passphrase of this name in this class changed since you signed in")
                        if state is None or state.lesson != page or state.revealed:
                            return None
                        open_now = (  # checked again inside each write: SQLite's read above locks nothing
                            (session_table.c.class_code == code)
                            & (session_table.c.lesson == page)
                            & (session_table.c.round == state.round)
                            & session_table.c.revealed.is_(False)
                            & same_sign_in
                        )
                        values = {"round": state.round, "value": number, "answered_at": self.clock()}
                        mine = (answer_table.c.class_code == code) & (answer_table.c.learner_key == name)
                        update = answer_table.update().where(mine & sa.exists().where(open_now)).values(**values)
                        stored = conn.execute(update).rowcount == 1
                        if not stored:  # no answer of this learner yet (or the round moved on)
                            source = sa.select(
                                session_table.c.class_code,
                                sa.literal(name, sa.String),
                                session_table.c.round,
                                sa.literal(number, sa.Float),
                                sa.literal(values["answered_at"], sa.Float),
                            ).where(open_now)
                            cols = ["class_code", "learner_key", "round", "value", "answered_at"]
                            insert = answer_table.insert().from_select(cols, source)
                            # RETURNING, not rowcount: psycopg reports -1 for INSERT ... SELECT, which read as
                            # "not stored" retried an answer already written and, with a reveal in between,
                            # told the learner it was refused while it counted
                            inserted = insert.returning(answer_table.c.learner_key)
                            stored = conn.execute(inserted).first() is not None
                    if stored:
                        self._forget(code)  # after the commit
                        return state.round
                    # the round changed between the read and the write (SQLite): read it again
                except IntegrityError:  # this learner's first answer came in twice at once: update it
                    pass
                _pause(attempt)
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self._where, "Live round")) from exc
        raise ProgressStoreError("could not store the answer: the round kept changing; try again")

    def answers(self, class_code: str, round: int) -> tuple[float, ...]:
        """The values of ``round``'s answers that count (no names; not those waiting for the teacher), in
        the order they came (a replaced one counts as new); () for a round that is gone."""
        code, number = _code(class_code), check_round(round)
        query = (
            sa.select(answer_table.c.value)
            .where((answer_table.c.class_code == code) & (answer_table.c.round == number) & ~_held())
            .order_by(answer_table.c.answered_at, answer_table.c.learner_key)
        )
        try:
            with self.engine.connect() as conn:
                return tuple(float(v) for v in conn.execute(query).scalars())
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self._where, "Live round")) from exc

    def my_answer(self, class_code: str, learner: str, round: int, learner_key: str | None = None) -> float | None:
        """``learner``'s (or the single sign-on learner ``learner_key``'s) answer in ``round``, or None."""
        code, name, number = _code(class_code), _learner(learner, learner_key), check_round(round)
        mine = (answer_table.c.class_code == code) & (answer_table.c.learner_key == name)
        query = sa.select(answer_table.c.value).where(mine & (answer_table.c.round == number))
        try:
            with self.engine.connect() as conn:
                found = conn.execute(query).scalar_one_or_none()
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self._where, "Live round")) from exc
        return None if found is None else float(found)

    def _forget(self, code: str) -> None:
        """A write through this board: the next ``current`` of the class asks the database."""
        with self._lock:
            self._writes += 1
            self._cache.pop(code, None)


def create_tables(engine: sa.Engine) -> None:
    """Create the live tables that are missing (never alter one). Replicas starting at once may race to
    create a table: the loser sees it exists on the next round."""
    for attempt in range(3):
        try:
            live_metadata.create_all(engine)
            return
        except (IntegrityError, sa.exc.ProgrammingError):
            if attempt == 2:
                raise
            time.sleep(0.05 * (attempt + 1))


# --- arguments --------------------------------------------------------------------------------------------


def check_lesson(lesson: object) -> str:
    """``lesson`` if it is a page id, else ValueError."""
    if not isinstance(lesson, str) or not LESSON_ID.fullmatch(lesson):
        raise ValueError(
            f"lesson {lesson!r} is not a page id (a lowercase letter, then lowercase letters or '_', "
            "at most 40); pass a page id of lessons.predictions.PAGES"
        )
    return lesson


def check_settings(settings: object) -> list[tuple[str, str]]:
    """The teacher's view as (name, value) pairs in the order given, else ValueError: at most
    MAX_SETTINGS, names 1–MAX_SETTING_LEN and values 0–MAX_SETTING_LEN printable characters."""
    if not isinstance(settings, Mapping):
        raise ValueError(f"settings must be a mapping of name -> value, got {type(settings).__name__}")
    if len(settings) > MAX_SETTINGS:
        raise ValueError(f"settings has {len(settings)} entries, at most {MAX_SETTINGS} fit; send fewer")
    pairs = []
    for name, value in settings.items():
        for what, text, least in (("name", name, 1), ("value", value, 0)):
            if not isinstance(text, str):
                raise ValueError(f"setting {name!r}: the {what} must be text, got {type(text).__name__}")
            if not least <= len(text) <= MAX_SETTING_LEN or not text.isprintable():
                raise ValueError(
                    f"setting {name!r}: the {what} {text[:40]!r} must be {least}–{MAX_SETTING_LEN} printable "
                    "characters; shorten it or leave it out"
                )
        pairs.append((name, value))
    return pairs


def check_round(round: object) -> int:
    """``round`` if it is a whole number >= 1, else ValueError."""
    if not isinstance(round, int) or isinstance(round, bool) or round < 1:
        raise ValueError(f"round must be a whole number >= 1, got {round!r}; pass LiveRound.round")
    return round


def check_value(value: object) -> float:
    """``value`` as a float if it is a finite number in 0..MAX_ANSWER, else ValueError."""
    if not isinstance(value, Real) or isinstance(value, bool):
        raise ValueError(f"answer must be a number, got {type(value).__name__}; pass the checked prediction")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"answer must be a finite number, got {number!r}; pass the checked prediction")
    if not 0 <= number <= MAX_ANSWER:
        raise ValueError(f"answer must be between 0 and {MAX_ANSWER:g}, got {number!r}; pass the checked prediction")
    return number


# --- helpers ----------------------------------------------------------------------------------------------


def _code(class_code: str) -> str:
    return name_key(validate_name(class_code, "class code"))


def _learner(learner: str, learner_key: str | None) -> str:
    """The stored key of a typed name, or a single sign-on learner's key (which no typed name can be)."""
    if learner_key is None:
        return name_key(validate_name(learner))
    if not is_sso_key(learner_key) or len(learner_key) > NAME_MAX_LEN:
        raise ValueError(f"learner_key {str(learner_key)[:60]!r} is not a single sign-on learner's key")
    return learner_key


def _new_here() -> Any:
    """An answer's learner signed in first after this live session started (correlated to answer_table)."""
    return sa.exists().where(
        (member_table.c.class_code == answer_table.c.class_code)
        & (member_table.c.learner_key == answer_table.c.learner_key)
        & (gate_table.c.class_code == answer_table.c.class_code)
        & (member_table.c.first_seen >= gate_table.c.started_at)
    )


def _held() -> Any:
    """An answer that waits for the teacher: from a name new this session, in a closed class, not admitted."""
    closed = sa.exists().where((gate_table.c.class_code == answer_table.c.class_code) & gate_table.c.closed.is_(True))
    admitted = sa.exists().where(
        (admit_table.c.class_code == answer_table.c.class_code)
        & (admit_table.c.learner_key == answer_table.c.learner_key)
    )
    return closed & _new_here() & ~admitted


def _read(conn: sa.Connection, code: str) -> LiveRound | None:
    """The class's session row and its round's answer counts, in one query."""
    this_round = (answer_table.c.class_code == session_table.c.class_code) & (
        answer_table.c.round == session_table.c.round
    )

    def count(extra: Any) -> Any:
        return sa.select(sa.func.count()).select_from(answer_table).where(this_round & extra).scalar_subquery()

    held = _held()
    closed = sa.select(gate_table.c.closed).where(gate_table.c.class_code == session_table.c.class_code)
    row = conn.execute(
        sa.select(
            session_table,
            count(~held).label("answers"),
            count(~held & _new_here()).label("new_answers"),
            count(held).label("waiting"),
            closed.scalar_subquery().label("closed"),
        ).where(session_table.c.class_code == code)
    ).first()
    if row is None:
        return None
    return LiveRound(
        class_code=row.display,
        lesson=row.lesson,
        round=row.round,
        revealed=bool(row.revealed),
        settings=_settings(row.settings),
        opened_at=float(row.opened_at),
        answers=int(row.answers),
        closed=bool(row.closed),
        new_answers=int(row.new_answers),
        waiting=int(row.waiting),
    )


def _settings(text: str) -> tuple[tuple[str, str], ...]:
    """Stored settings; () for a hand-edited row that is not a list of [name, value] text pairs."""
    try:
        pairs = tuple((name, value) for name, value in json.loads(text))
    except (ValueError, TypeError):
        return ()
    return pairs if all(isinstance(p, str) for pair in pairs for p in pair) else ()


def _pause(attempt: int) -> None:
    time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))  # a few ms: let the other writer finish
