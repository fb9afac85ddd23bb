"""Learner progress that lasts: lessons visited, quiz answers, predictions and diagnoses, per class and learner.

SQLite is the embedded default (a file under the user's data directory, created on first use); a shared
deployment points ``KVLAB_DATABASE_URL`` at PostgreSQL (any SQLAlchemy URL works). Everything goes through
SQLAlchemy Core with bound parameters, so learner names and class codes never become SQL text. Each
write is one transaction. A store that cannot be opened (corrupt file, locked file, bad URL, missing
driver) is replaced by :class:`NullStore`, which keeps the app working without persistence and carries a
message the app shows the learner. No Streamlit here: ``ui/signin.py`` is the UI.

Names and class codes are checked and compared in one normal form (progress/names.py).

Identity (progress/auth.py has the hash and the wait rules): the first sign-in of a name in a class sets its
passphrase (table ``kvlab_learner_auth``: Argon2id hash, salt, parameters, a version bumped by every set and
reset; a session's saves and live answers check it, so after a reset whoever signed in with the old
passphrase is signed out; a scrypt hash of the last release is verified and replaced by an Argon2id one at
the learner's next successful sign-in); failures are counted in ``kvlab_auth_tries`` (per subject, a
(class, learner) name or the teacher key, and per client: a session, an address, and the subject as a whole;
the rules are progress/auth.py's), so the waits hold across replicas. A new name that looks like a
classmate's (progress/names.py: ``looks_alike``) is that classmate's name. ``kvlab_auth_throttle`` (one count
per name, before ``kvlab_auth_tries``) is no longer read or written. A learner whose record has no passphrase
(made before passphrases, or reset) sets one on their next sign-in.

The schema is versioned (progress/migrate.py, Alembic): opening a new database creates its tables at the
newest revision; a database of an older schema (one made by kvlab 0.1 has no ``alembic_version``) is
upgraded only when ``KVLAB_DB_AUTO_UPGRADE`` says so (or ``kvlab db upgrade`` ran), else the store is not
opened and :func:`open_store` returns a NullStore whose message says to run the upgrade.

Saving never loses another session's progress (two tabs, two devices, a reconnect to another replica): a
save merges into the stored row inside one transaction (``merge_progress`` in progress/records.py: visits
are a union, each answer keeps its latest write by the write times in ``written_at_us``; a cleared answer
is a time with no entry, a tombstone) and writes only if the row is still what it read (compare-and-swap on
the row's text, re-read and re-merged on conflict; on PostgreSQL the read also locks the row, so concurrent
saves queue instead).

Settings (environment variables, checked at the server's start by kvlab/settings.py):
  KVLAB_DATABASE_URL     SQLAlchemy URL, e.g. ``postgresql+psycopg://kvlab:secret@db/kvlab``; or
  KVLAB_DATABASE_URL_FILE, a file holding it (a Docker or Kubernetes secret).
  KVLAB_DATA_DIR         folder for the default SQLite file ``progress.sqlite3``.
  KVLAB_DB_AUTO_UPGRADE  1: upgrade an older schema when the store opens it (default 0: refuse it).
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.exc import ArgumentError, IntegrityError, SQLAlchemyError

from kvlab.settings import DATABASE_URL, read_secret
from progress.auth import (
    EVERYONE,
    RULES,
    Client,
    SignInError,
    check_passphrase,
    hash_passphrase,
    lock_seconds,
    needs_rehash,
    normalize_passphrase,
    same_secret,
    verify_passphrase,
    wait_text,
)
from progress.database import SQLITE_BUSY_TIMEOUT_S, describe, make_engine
from progress.migrate import SchemaError, auto_upgrade, ensure
from progress.names import NAME_MAX_LEN, looks_alike, name_key, validate_name
from progress.records import (
    empty_progress,
    merge_progress,
    normalize_progress,
    stamp_missing,
    visible_progress,
)
from progress.sso.identity import display_name, is_sso_key

SQLITE_FILENAME = "progress.sqlite3"
SAVE_ATTEMPTS = 40  # compare-and-swap rounds before a save gives up (each a few ms under contention)
LEARNER_SCOPE, TEACHER_SCOPE = "learner", "teacher"  # throttle rows
ALL_CLIENTS = "*"  # the tries row of a subject as a whole
TRIES_TTL_S = 86_400.0  # a tries row untouched for a day (and not waiting) is dropped: sessions come and go
NO_CLIENT = Client()  # callers that name no client (scripts, tests) share one session

_metadata = sa.MetaData()
progress_table = sa.Table(
    "kvlab_progress",
    _metadata,
    sa.Column("class_code", sa.String(NAME_MAX_LEN), primary_key=True),  # name_key of the class code
    sa.Column("learner_key", sa.String(NAME_MAX_LEN), primary_key=True),  # name_key of the learner name
    sa.Column("learner", sa.String(NAME_MAX_LEN), nullable=False),  # as the learner typed it (NFKC)
    sa.Column("data", sa.Text, nullable=False),  # JSON of the progress dict
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)
auth_table = sa.Table(
    "kvlab_learner_auth",
    _metadata,
    sa.Column("class_code", sa.String(NAME_MAX_LEN), primary_key=True),
    sa.Column("learner_key", sa.String(NAME_MAX_LEN), primary_key=True),
    sa.Column("learner", sa.String(NAME_MAX_LEN), nullable=False),
    sa.Column("pass_hash", sa.String(256)),  # hex scrypt output; NULL: reset, the next sign-in sets one
    sa.Column("salt", sa.String(128)),  # hex, random per learner (and per set)
    sa.Column("params", sa.String(256)),  # JSON {"alg": "scrypt", "n", "r", "p", "dklen"} of this hash
    sa.Column("version", sa.Integer, nullable=False),  # +1 on every set and reset
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)
throttle_table = sa.Table(  # schema 2: one count per name; read and written no more (kvlab_auth_tries)
    "kvlab_auth_throttle",
    _metadata,
    sa.Column("scope", sa.String(16), primary_key=True),  # "learner" or "teacher"
    sa.Column("class_code", sa.String(NAME_MAX_LEN), primary_key=True),  # "" for the teacher key
    sa.Column("learner_key", sa.String(NAME_MAX_LEN), primary_key=True),  # "" for the teacher key
    sa.Column("failures", sa.Integer, nullable=False),  # tries since the last success (counted before checking)
    sa.Column("locked_until", sa.Float),  # seconds since 1970; no try is checked before then
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)
tries_table = sa.Table(
    "kvlab_auth_tries",
    _metadata,
    sa.Column("scope", sa.String(16), primary_key=True),  # "learner" or "teacher"
    sa.Column("subject", sa.String(2 * NAME_MAX_LEN + 1), primary_key=True),  # "class|learner" keys; "" teacher
    sa.Column("client", sa.String(40), primary_key=True),  # "s:"/"a:" + digest of a session / address; "*" all
    sa.Column("failures", sa.Integer, nullable=False),  # tries since this client's last success (counted first)
    sa.Column("locked_until", sa.Float),  # seconds since 1970; this client's tries are refused before then
    sa.Column("last_try", sa.Float, nullable=False),  # seconds since 1970
)


member_table = sa.Table(
    "kvlab_class_member",
    _metadata,
    sa.Column("class_code", sa.String(NAME_MAX_LEN), primary_key=True),
    sa.Column("learner_key", sa.String(NAME_MAX_LEN), primary_key=True),
    # store.clock() seconds of the name's first sign-in in the class; names from before this table have no
    # row: seen before any live session that can ask (progress/live.py: names new this session)
    sa.Column("first_seen", sa.Float, nullable=False),
)


class ProgressStoreError(RuntimeError):
    """The progress database failed; the message says why and what to do."""


@dataclass(frozen=True)
class SignIn:
    """A sign-in that was accepted: ``status`` is "new" (a new learner set a passphrase), "set" (a record
    without a passphrase, from before passphrases or reset by the teacher, got one), "verified" (the
    passphrase matched) or "unsaved" (no database: nothing to protect)."""

    status: str
    class_code: str  # display forms
    learner: str
    version: int = 0  # the passphrase's version (kvlab_learner_auth.version); saves check it, a reset changes it


class SignedOut(RuntimeError):
    """The learner's passphrase was reset or set again since this session signed in: sign in again."""


# --- stores -----------------------------------------------------------------------------------------------


class Store(Protocol):
    """What the UI needs from a progress store; ProgressStore and NullStore both provide it."""

    persistent: bool
    message: str

    def load(self, class_code: str, learner: str, learner_key: str | None = None) -> dict[str, Any]: ...
    def save(
        self,
        class_code: str,
        learner: str,
        progress: Mapping[str, Any],
        auth_version: int | None = None,
        learner_key: str | None = None,
    ) -> dict[str, Any]: ...
    def class_records(self, class_code: str) -> list[dict[str, Any]]: ...
    def sign_in(self, class_code: str, learner: str, passphrase: str, client: Client = NO_CLIENT) -> SignIn: ...
    def reset_passphrase(self, class_code: str, learner: str) -> bool: ...
    def check_teacher_key(self, given: str, expected: str, client: Client = NO_CLIENT) -> None: ...


class NullStore:
    """No persistence: progress lives only in the browser session. ``message`` says why."""

    persistent = False

    def __init__(self, message: str = "Progress is not saved (no database).") -> None:
        self.message = message

    def load(self, class_code: str, learner: str, learner_key: str | None = None) -> dict[str, Any]:
        """Validate the names and return an empty progress dict."""
        _keys(class_code, learner, learner_key)
        return empty_progress()

    def save(
        self,
        class_code: str,
        learner: str,
        progress: Mapping[str, Any],
        auth_version: int | None = None,
        learner_key: str | None = None,
    ) -> dict[str, Any]:
        """Validate and drop the progress; return it as it would be stored."""
        _keys(class_code, learner, learner_key)
        return normalize_progress(progress)

    def class_records(self, class_code: str) -> list[dict[str, Any]]:
        """No learners are known without a database."""
        validate_name(class_code, "class code")
        return []

    def sign_in(self, class_code: str, learner: str, passphrase: str, client: Client = NO_CLIENT) -> SignIn:
        """Validate the names; nothing is saved, so there is no passphrase to check."""
        code, name = validate_name(class_code, "class code"), validate_name(learner)
        normalize_passphrase(passphrase)
        return SignIn("unsaved", code, name)

    def reset_passphrase(self, class_code: str, learner: str) -> bool:
        """Without a database no learner has a passphrase."""
        validate_name(class_code, "class code"), validate_name(learner)
        return False

    def check_teacher_key(self, given: str, expected: str, client: Client = NO_CLIENT) -> None:
        """Constant-time check of the teacher key (no database: no wait after failures, and nothing to list)."""
        if not expected or not same_secret(given, expected):
            raise SignInError("wrong teacher key")


class ProgressStore:
    """Progress rows in a SQL database through SQLAlchemy Core; one transaction per write."""

    persistent = True

    def __init__(self, url: str, clock: Callable[[], float] = time.time, upgrade_older: bool | None = None) -> None:
        """Connect to ``url``, creating the tables of a new database; raise ProgressStoreError if that fails,
        or if the schema is older than this code's and ``upgrade_older`` is False (None: the setting
        ``KVLAB_DB_AUTO_UPGRADE``; progress/migrate.py).

        ``clock`` (seconds since 1970) stamps writes and times waits; tests pass a fake one."""
        self.url = url
        self.clock = clock
        try:
            upgrade_older = auto_upgrade() if upgrade_older is None else upgrade_older
        except ValueError as exc:
            raise ProgressStoreError(f"{exc}.") from exc
        try:
            self.engine = make_engine(url, SQLITE_BUSY_TIMEOUT_S)
            ensure(self.engine, upgrade_older, self.describe())  # also proves the file is a database
            with self.engine.connect() as conn:
                conn.execute(sa.select(sa.func.count()).select_from(progress_table)).scalar_one()
        except SchemaError as exc:
            raise ProgressStoreError(f"{exc}.") from exc
        except (ArgumentError, ValueError) as exc:
            raise ProgressStoreError(  # not quoting the URL, which may hold a password
                f"KVLAB_DATABASE_URL is not a valid database URL ({type(exc).__name__}); fix or unset it"
            ) from exc
        except ImportError as exc:
            raise ProgressStoreError(f"the database driver is not installed ({exc}); pip install it") from exc
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self.describe())) from exc
        self.message = f"Progress is saved in {self.describe()}."

    def describe(self) -> str:
        """Where the data lives, without any password."""
        return describe(self.url)

    def _now_us(self) -> int:
        return int(self.clock() * 1_000_000)

    def load(self, class_code: str, learner: str, learner_key: str | None = None) -> dict[str, Any]:
        """Saved progress of ``learner`` in ``class_code``, or an empty dict if they are new. A single sign-on
        learner is found by ``learner_key`` (progress/sso/identity.py), never by the name shown."""
        code, name = _keys(class_code, learner, learner_key)
        query = sa.select(progress_table.c.data).where(_row(progress_table, code, name))
        try:
            with self.engine.connect() as conn:
                text = conn.execute(query).scalar_one_or_none()
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self.describe())) from exc
        return _parse(text)

    def save(
        self,
        class_code: str,
        learner: str,
        progress: Mapping[str, Any],
        auth_version: int | None = None,
        learner_key: str | None = None,
    ) -> dict[str, Any]:
        """Merge ``progress`` into the stored row in one transaction and return the merged progress.

        Entries without a write time are stamped now (a caller that does not stamp writes "now"). The write
        is a compare-and-swap on the row text: if another session saved in between, re-read and re-merge.
        With ``auth_version`` (``SignIn.version`` of the session) a save after a reset or a new passphrase
        raises SignedOut and writes nothing: whoever signed in with the old passphrase cannot write on.
        A single sign-on learner's row is ``learner_key``'s; ``learner`` is then only the name shown."""
        code, name = _keys(class_code, learner, learner_key)
        display = (display_name(learner) or name) if learner_key is not None else validate_name(learner)
        incoming = stamp_missing(progress, self._now_us())
        key = _row(progress_table, code, name)
        read = sa.select(progress_table.c.data).where(key).with_for_update()  # PostgreSQL: queue on the row
        try:
            for attempt in range(SAVE_ATTEMPTS):
                try:
                    with self.engine.begin() as conn:
                        if auth_version is not None:
                            version = conn.execute(
                                sa.select(auth_table.c.version).where(_row(auth_table, code, name))
                            ).scalar_one_or_none()
                            if version != auth_version:
                                raise SignedOut("the passphrase of this name in this class changed since you signed in")
                        old_text = conn.execute(read).scalar_one_or_none()
                        merged = merge_progress(_parse(old_text), incoming)
                        row = {
                            "learner": display,
                            "data": json.dumps(merged, sort_keys=True),
                            "updated_at": datetime.now(timezone.utc),
                        }
                        if old_text is None:
                            conn.execute(progress_table.insert().values(class_code=code, learner_key=name, **row))
                            return merged
                        swap = progress_table.update().where(key & (progress_table.c.data == old_text)).values(**row)
                        if conn.execute(swap).rowcount == 1:
                            return merged
                except IntegrityError:  # a concurrent first save of the same learner: re-read and merge
                    pass
                time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))  # a few ms: let the other writer finish
            raise ProgressStoreError("could not save progress: other sessions kept changing it; try again")
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self.describe())) from exc

    def class_records(self, class_code: str) -> list[dict[str, Any]]:
        """All learners of a class, sorted by name: ``{"learner", "learner_key", "progress", "updated_at",
        "has_passphrase", "sso"}`` (progress without its write stamps)."""
        code = name_key(validate_name(class_code, "class code"))
        joined = progress_table.outerjoin(
            auth_table,
            (auth_table.c.class_code == progress_table.c.class_code)
            & (auth_table.c.learner_key == progress_table.c.learner_key),
        )
        query = (
            sa.select(
                progress_table.c.learner,
                progress_table.c.learner_key,
                progress_table.c.data,
                progress_table.c.updated_at,
                auth_table.c.pass_hash.is_not(None).label("has_passphrase"),
            )
            .select_from(joined)
            .where(progress_table.c.class_code == code)
            .order_by(progress_table.c.learner_key)
        )
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(query).all()
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self.describe())) from exc
        return [
            {
                "learner": learner,
                "learner_key": key,
                "progress": visible_progress(_parse(text)),
                "updated_at": updated_at,
                "has_passphrase": bool(has),
                "sso": is_sso_key(key),  # signed in by the school's provider: no passphrase to reset
            }
            for learner, key, text, updated_at, has in rows
        ]

    # --- identity ---------------------------------------------------------------------------------------

    def sign_in(self, class_code: str, learner: str, passphrase: str, client: Client = NO_CLIENT) -> SignIn:
        """Accept ``learner`` in ``class_code`` with ``passphrase``, or raise SignInError saying why.

        A name without a passphrase (new, from before passphrases, or reset) takes this one (8+ visible
        characters, the rule checked first for every name); otherwise it must match, and after repeated
        failures from ``client`` its next try must wait. A new name that looks like a classmate's
        (``looks_alike``) is the classmate's name: it signs in as them, or is refused with their passphrase's
        message."""
        display_code, display = validate_name(class_code, "class code"), validate_name(learner)
        code, name = name_key(display_code), name_key(display)
        secret = check_passphrase(passphrase)
        typed = display
        cols = (auth_table.c.pass_hash, auth_table.c.salt, auth_table.c.params, auth_table.c.version)
        try:
            for _ in range(3):
                with self.engine.connect() as conn:
                    row = conn.execute(sa.select(*cols).where(_row(auth_table, code, name))).first()
                    had_progress = row is None and _has_progress(conn, code, name)
                    if row is None and not had_progress and typed == display:
                        twin = _lookalike(conn, code, display)
                        if twin is not None:  # "Ѕаѕһа" beside "Sasha": the same name, as the class sees it
                            display, name = twin
                            row = conn.execute(sa.select(*cols).where(_row(auth_table, code, name))).first()
                            had_progress = row is None and _has_progress(conn, code, name)
                if row is not None and row.pass_hash is not None:
                    self._check_passphrase(row, code, name, secret, client, _alias(typed, display))
                    return SignIn("verified", display_code, display, row.version)
                version = self._claim(row, code, name, display, secret)
                if version is not None:
                    status = "set" if row is not None or had_progress else "new"
                    return SignIn(status, display_code, display, version)
                # someone set a passphrase for this name meanwhile: check against theirs on the next round
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self.describe())) from exc
        raise ProgressStoreError("could not sign in: the record kept changing; try again")

    def _claim(self, row: Any, code: str, name: str, display: str, secret: str) -> int | None:
        """Set the passphrase of a name that has none (``row`` None: no auth row yet); the new version, or
        None when a concurrent sign-in set one first."""
        new_hash, salt, params = hash_passphrase(secret)
        values = {"learner": display, "pass_hash": new_hash, "salt": salt, "params": params}
        values["updated_at"] = datetime.now(timezone.utc)
        try:
            with self.engine.begin() as conn:
                if row is None:
                    conn.execute(auth_table.insert().values(class_code=code, learner_key=name, version=1, **values))
                    seen = sa.select(sa.func.count()).select_from(member_table).where(_row(member_table, code, name))
                    if not _has_progress(conn, code, name) and not conn.execute(seen).scalar_one():  # brand-new name
                        first = {"class_code": code, "learner_key": name, "first_seen": self.clock()}
                        conn.execute(member_table.insert().values(**first))
                else:
                    claim = auth_table.update().where(_row(auth_table, code, name) & auth_table.c.pass_hash.is_(None))
                    if conn.execute(claim.values(version=auth_table.c.version + 1, **values)).rowcount == 0:
                        return None
        except IntegrityError:  # a concurrent first sign-in of the same name inserted first
            return None
        return 1 if row is None else row.version + 1

    def _check_passphrase(self, row: Any, code: str, name: str, secret: str, client: Client, alias: str) -> None:
        """Verify against the stored hash (counted try first); SignInError on a wrong one, with the wait."""
        subject = _subject(code, name)
        wait = self._reserve_try(LEARNER_SCOPE, subject, client)
        if verify_passphrase(secret, row.pass_hash, row.salt, row.params):
            self._clear_tries(LEARNER_SCOPE, subject, client)
            if needs_rehash(row.params):  # parameters were raised since: store the stronger hash
                new_hash, salt, params = hash_passphrase(secret)
                same = _row(auth_table, code, name) & (auth_table.c.version == row.version)
                with self.engine.begin() as conn:
                    conn.execute(auth_table.update().where(same).values(pass_hash=new_hash, salt=salt, params=params))
            return
        later = f"; wait {wait_text(wait)} before the next try" if wait else ""
        raise SignInError(
            f"{alias}wrong passphrase for this name in this class{later}. Check it (capitals count), "
            "or ask your teacher to reset it",
            wait or None,
        )

    def reset_passphrase(self, class_code: str, learner: str) -> bool:
        """Forget the learner's passphrase (their next sign-in sets a new one) and their failed tries; the
        progress stays. False when they have no passphrase to reset."""
        code, name = _keys(class_code, learner)
        forget = {"pass_hash": None, "salt": None, "params": None, "updated_at": datetime.now(timezone.utc)}
        try:
            with self.engine.begin() as conn:
                done = conn.execute(
                    auth_table.update()
                    .where(_row(auth_table, code, name) & auth_table.c.pass_hash.is_not(None))
                    .values(version=auth_table.c.version + 1, **forget)
                ).rowcount
                subject = (tries_table.c.scope == LEARNER_SCOPE) & (tries_table.c.subject == _subject(code, name))
                conn.execute(tries_table.delete().where(subject))
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self.describe())) from exc
        return done == 1

    def check_teacher_key(self, given: str, expected: str, client: Client = NO_CLIENT) -> None:
        """Accept ``given`` if it is the server's key (constant time), else SignInError; repeated failures make
        ``client``'s next try wait (its session and address, on every replica); a client without failures is
        never refused because of others' (progress/auth.py)."""
        if not expected:
            raise SignInError("this server has no teacher key (KVLAB_TEACHER_KEY)")
        try:
            wait = self._reserve_try(TEACHER_SCOPE, "", client)
            if same_secret(given, expected):
                self._clear_tries(TEACHER_SCOPE, "", client)
                return
        except SQLAlchemyError as exc:
            raise ProgressStoreError(explain_failure(exc, self.describe())) from exc
        later = f"; wait {wait_text(wait)} before the next try" if wait else ""
        raise SignInError(f"wrong teacher key{later}", wait or None)

    def _reserve_try(self, scope: str, subject: str, client: Client) -> float:
        """Count one try on ``subject`` before checking it (so parallel tries cannot slip past a limit) on the
        client's session and address rows and the subject's row; return the wait a failure of it leaves this
        client. SignInError with the wait, nothing counted, while one of the client's waits runs, or the
        subject's wait does and this client has failed on the subject before."""
        now = self.clock()
        rules = RULES[scope]
        for _ in range(3):
            try:
                with self.engine.begin() as conn:  # a refusal raises inside: nothing of this try is counted
                    counts = {
                        kind: _bump(conn, scope, subject, key, rules[kind], now) for kind, key in client.keys().items()
                    }
                    clean = all(count == 1 for count in counts.values())  # no failure of its own before this try
                    counts[EVERYONE] = _bump(conn, scope, subject, ALL_CLIENTS, rules[EVERYONE], now, not clean)
                return max(lock_seconds(counts[kind], rules[kind].cap, rules[kind].free) for kind in counts)
            except IntegrityError:
                continue  # a parallel first try made a row: count on it
        raise ProgressStoreError("could not count the sign-in try: the record kept changing; try again")

    def _clear_tries(self, scope: str, subject: str, client: Client) -> None:
        """A success: the client's counts go, and its try no longer counts on the subject's row."""
        mine = (tries_table.c.scope == scope) & (tries_table.c.subject == subject)
        with self.engine.begin() as conn:
            conn.execute(tries_table.delete().where(mine & tries_table.c.client.in_(list(client.keys().values()))))
            everyone = mine & (tries_table.c.client == ALL_CLIENTS) & (tries_table.c.failures > 0)
            conn.execute(tries_table.update().where(everyone).values(failures=tries_table.c.failures - 1))

    def close(self) -> None:
        """Release pooled connections (tests and shutdown)."""
        self.engine.dispose()


def _keys(class_code: str, learner: str, learner_key: str | None = None) -> tuple[str, str]:
    """The stored keys of a class code and a learner name (validated, normalised), or of a single sign-on
    learner's ``learner_key`` (which no typed name can be)."""
    code = name_key(validate_name(class_code, "class code"))
    if learner_key is None:
        return code, name_key(validate_name(learner))
    if not isinstance(learner_key, str) or not is_sso_key(learner_key) or len(learner_key) > NAME_MAX_LEN:
        raise ValueError(f"learner_key {str(learner_key)[:60]!r} is not a single sign-on learner's key")
    return code, learner_key


def _row(table: sa.Table, code: str, name: str) -> Any:
    return (table.c.class_code == code) & (table.c.learner_key == name)


def _subject(code: str, name: str) -> str:
    return f"{code}|{name}"  # "|" is in no name (progress/names.py)


def _has_progress(conn: sa.Connection, code: str, name: str) -> bool:
    count = sa.select(sa.func.count()).select_from(progress_table).where(_row(progress_table, code, name))
    return bool(conn.execute(count).scalar_one())


def _lookalike(conn: sa.Connection, code: str, display: str) -> tuple[str, str] | None:
    """(display, key) of a classmate whose name looks like ``display`` (the first by key), else None."""
    names: dict[str, str] = {}
    for table in (auth_table, progress_table):
        query = sa.select(table.c.learner_key, table.c.learner).where(table.c.class_code == code)
        for key, shown in conn.execute(query):
            if not is_sso_key(key):  # an SSO learner's name is display text: a typed name never becomes them
                names.setdefault(key, shown)
    return next(((names[k], k) for k in sorted(names) if looks_alike(display, names[k])), None)


def _alias(typed: str, display: str) -> str:
    """The start of a message about a name typed as a lookalike of ``display``; "" when it was not."""
    if typed == display:
        return ""
    return f"{typed!r} looks the same as {display!r}, a name already in this class, so it is that name: "


def _bump(
    conn: sa.Connection, scope: str, subject: str, client: str, rule: Any, now: float, honour_lock: bool = True
) -> int:
    """Count one failure on a tries row (made if missing) and return its count; SignInError, nothing
    written, while ``honour_lock`` and the row's wait runs."""
    key = (tries_table.c.scope == scope) & (tries_table.c.subject == subject) & (tries_table.c.client == client)
    free = tries_table.c.locked_until.is_(None) | (tries_table.c.locked_until <= now)
    bump = tries_table.update().where(key & free if honour_lock else key)
    if conn.execute(bump.values(failures=tries_table.c.failures + 1, last_try=now)).rowcount:
        failures = conn.execute(sa.select(tries_table.c.failures).where(key)).scalar_one()
        wait = lock_seconds(failures, rule.cap, rule.free)
        if wait:
            conn.execute(tries_table.update().where(key).values(locked_until=now + wait))
        return failures
    locked = conn.execute(sa.select(tries_table.c.locked_until).where(key)).first()
    if locked is None:
        stale = (tries_table.c.last_try < now - TRIES_TTL_S) & free  # sessions that left: keep the table small
        conn.execute(tries_table.delete().where(stale))
        wait = lock_seconds(1, rule.cap, rule.free)
        values = {"failures": 1, "locked_until": now + wait if wait else None, "last_try": now}
        conn.execute(tries_table.insert().values(scope=scope, subject=subject, client=client, **values))
        return 1
    wait = max(0.0, (locked.locked_until or now) - now)
    raise SignInError(f"too many wrong tries; wait {wait_text(wait)}, then try again", wait)


def _parse(text: str | None) -> dict[str, Any]:
    """A stored row's progress; empty for none, and for a hand-edited or foreign row (rather than crash a page)."""
    if text is None:
        return empty_progress()
    try:
        return normalize_progress(json.loads(text))
    except ValueError:
        return empty_progress()


def explain_failure(exc: SQLAlchemyError, where: str, what: str = "Progress") -> str:
    """A learner- and teacher-readable reason for a failure of ``what``'s database (progress, a live round);
    the failure is also logged as a ``db_error`` event (docs/OPERATIONS.md)."""
    detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    low = detail.lower()
    if "locked" in low or "busy" in low:
        hint = (
            f"the database stayed locked for {SQLITE_BUSY_TIMEOUT_S:g} s: another program holds its lock; close it or "
            "set KVLAB_DATA_DIR to another folder"
        )
    elif "not a database" in low or "malformed" in low or "corrupt" in low:
        hint = "the file is damaged; move it aside (a new one is created) or set KVLAB_DATA_DIR"
    elif "unable to open" in low or "readonly" in low or "permission" in low:
        hint = "the folder is not writable; set KVLAB_DATA_DIR to a writable folder"
    else:
        hint = "check KVLAB_DATABASE_URL and that the database is running"
    # Every failure of the database passes here: the operator's log (and ui/metrics.py's counter) sees each.
    fields = {"what": what, "where": where, "error": type(exc).__name__, "detail": detail[:200]}
    logging.getLogger("kvlab.progress").warning("database error", extra={"event": "db_error", "fields": fields})
    return f"{what} database error in {where}: {detail} — {hint}."


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    """Folder for the default SQLite file: KVLAB_DATA_DIR, else the user's data directory for 'kvlab'."""
    env = os.environ if env is None else env
    if env.get("KVLAB_DATA_DIR"):
        return Path(env["KVLAB_DATA_DIR"]).expanduser()
    try:
        from platformdirs import user_data_dir
    except ImportError:  # XDG base-directory spec fallback
        base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        return Path(base) / "kvlab"
    return Path(user_data_dir("kvlab", appauthor=False))


def database_url(env: Mapping[str, str] | None = None) -> str:
    """KVLAB_DATABASE_URL (or the file KVLAB_DATABASE_URL_FILE names, kvlab.settings.read_secret) if set, else a
    SQLite file in :func:`data_dir` (the folder is created)."""
    env = os.environ if env is None else env
    url = read_secret(env, DATABASE_URL)
    if url is not None:
        return url
    folder = data_dir(env)
    folder.mkdir(parents=True, exist_ok=True)
    return sa.URL.create("sqlite", database=str(folder / SQLITE_FILENAME)).render_as_string()


def open_store(url: str | None = None) -> ProgressStore | NullStore:
    """A working store for ``url`` (default :func:`database_url`), or a NullStore explaining why not."""
    try:
        return ProgressStore(url if url is not None else database_url())
    except ProgressStoreError as exc:
        return NullStore(f"{exc} Progress is kept for this session only.")
    except OSError as exc:  # data folder cannot be created
        return NullStore(f"Cannot create the progress folder ({exc}); set KVLAB_DATA_DIR. Progress is not saved.")
