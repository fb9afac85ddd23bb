"""Live classroom rounds (progress/live.py): the lifecycle, the answer rules, the cache, replicas, reveal races.

Most tests run on SQLite and on a real PostgreSQL (``store_url``); the lock tests need PostgreSQL's row locks.
A fake clock makes answer order and cache ages exact.
"""

from __future__ import annotations

import math
import threading

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from progress import live
from progress.live import (
    MAX_ANSWER,
    MAX_SETTING_LEN,
    MAX_SETTINGS,
    LiveBoard,
    LiveRound,
    answer_table,
    session_table,
)
from progress.store import NullStore, ProgressStore, ProgressStoreError


class Clock:
    """A fake store clock: ``step`` seconds later on every read (0: frozen until moved by hand)."""

    def __init__(self, start: float = 1_000.0, step: float = 0.0) -> None:
        self.now, self.step = start, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(step=0.001)


@pytest.fixture
def stores(store_url, clock):
    """Two stores (two replicas) on one database, sharing the fake clock; closed after the test."""
    opened = [ProgressStore(store_url, clock=clock), ProgressStore(store_url, clock=clock)]
    yield opened
    for s in opened:
        s.close()


@pytest.fixture
def board(stores) -> LiveBoard:
    return LiveBoard(stores[0])


def stored_answers(board: LiveBoard) -> int:
    """Rows in the answer table, whatever their round (what the API may hide)."""
    with board.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(answer_table)).scalar_one()


def queries(engine: sa.Engine) -> list[str]:
    """A list that collects every SQL statement the engine runs from now on."""
    seen: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda *args: seen.append(args[2]))
    return seen


# --- the lifecycle ----------------------------------------------------------------------------------------


def test_a_round_from_open_to_close(board, clock):
    opened = board.open_round("Room 7", "kv_size", {"model": "llama", "batch": "8"})
    assert opened == LiveRound("Room 7", "kv_size", 1, False, (("model", "llama"), ("batch", "8")), opened.opened_at, 0)
    assert opened.opened_at == pytest.approx(clock.now, abs=0.01)
    assert board.current("Room 7") == opened

    assert board.answer("Room 7", "Ana", "kv_size", 128.0) == 1
    assert board.answer("Room 7", "Ben", "kv_size", 256) == 1
    assert board.answers("Room 7", 1) == (128.0, 256.0)
    assert board.my_answer("Room 7", "Ana", 1) == 128.0
    assert board.my_answer("Room 7", "Cleo", 1) is None
    assert board.current("Room 7").answers == 2

    revealed = board.reveal("Room 7", 1)
    assert revealed is not None and revealed.revealed and revealed.answers == 2 and revealed.round == 1
    assert board.reveal("Room 7", 1) == revealed  # idempotent
    assert board.answer("Room 7", "Cleo", "kv_size", 64) is None  # too late: refused, not stored
    assert board.answer("Room 7", "Ana", "kv_size", 1.0) is None  # no changing one's answer after the reveal
    assert board.answers("Room 7", 1) == (128.0, 256.0) and stored_answers(board) == 2
    assert board.my_answer("Room 7", "Cleo", 1) is None

    again = board.open_round("Room 7", "kv_size")  # a new round on the same lesson
    assert (again.round, again.revealed, again.answers, again.settings) == (2, False, 0, ())
    assert board.answers("Room 7", 1) == () and stored_answers(board) == 0  # the old round is forgotten
    assert board.my_answer("Room 7", "Ana", 1) is None and board.my_answer("Room 7", "Ana", 2) is None
    assert board.answer("Room 7", "Ana", "kv_size", 130) == 2
    assert board.show("Room 7", 1, {"x": "1"}) is None and board.reveal("Room 7", 1) is None  # not current
    assert board.current("Room 7").settings == () and not board.current("Room 7").revealed
    shown = board.show("Room 7", 2, {"batch": "16"})
    assert shown == LiveRound("Room 7", "kv_size", 2, False, (("batch", "16"),), again.opened_at, 1)

    other = board.open_round("Room 7", "blocks")  # another lesson: round 3, the kv_size answers are gone
    assert (other.round, other.lesson, other.answers) == (3, "blocks", 0) and stored_answers(board) == 0
    assert board.answer("Room 7", "Ben", "blocks", 7) == 3

    assert board.close("Room 7") is True
    assert board.current("Room 7") is None and board.answers("Room 7", 3) == () and stored_answers(board) == 0
    assert board.answer("Room 7", "Ana", "blocks", 1) is None and stored_answers(board) == 0
    assert board.close("Room 7") is False
    assert board.reveal("Room 7", 3) is None and board.show("Room 7", 3, {}) is None
    assert board.open_round("Room 7", "blocks").round == 1  # a new live session counts from 1


def test_an_answer_on_another_lesson_or_without_a_session_is_refused_and_not_stored(board):
    assert board.answer("Room 7", "Ana", "kv_size", 1) is None  # no session
    assert board.current("Room 7") is None and stored_answers(board) == 0
    board.open_round("Room 7", "kv_size")
    assert board.answer("Room 7", "Ana", "blocks", 1) is None  # the class is on another lesson
    assert board.answer("Room 8", "Ana", "kv_size", 1) is None  # another class has no session
    assert stored_answers(board) == 0 and board.current("Room 7").answers == 0
    board.open_round("Room 7", "blocks")
    assert board.answer("Room 7", "Ana", "kv_size", 1) is None  # the teacher moved on
    assert board.answer("Room 7", "Ana", "blocks", 1) == 2 and stored_answers(board) == 1


def test_a_later_answer_replaces_the_earlier_one_and_goes_last(board):
    board.open_round("Room 7", "kv_size")
    for learner, value in (("Ana", 1), ("Ben", 2), ("Cleo", 3), ("Ana", 4)):
        assert board.answer("Room 7", learner, "kv_size", value) == 1
    assert board.answers("Room 7", 1) == (2.0, 3.0, 4.0)  # one per learner, in the order they last answered
    assert board.current("Room 7").answers == 3 and stored_answers(board) == 3
    assert board.my_answer("Room 7", "Ana", 1) == 4.0


def test_class_codes_and_names_are_compared_in_key_form(board):
    board.open_round("Room 7", "kv_size")
    assert board.current("room 7").class_code == "Room 7"  # the display form the teacher typed
    assert board.current(" ROOM   7 ").round == 1
    assert board.answer("room 7", "Ana", "kv_size", 5) == 1
    assert board.answer("ＲＯＯＭ 7", "ANA", "kv_size", 6) == 1  # fullwidth and capitals: the same class and learner
    assert board.answers("Room 7", 1) == (6.0,) and board.my_answer("ROOM 7", "ana", 1) == 6.0
    assert board.open_round("room 7", "kv_size").class_code == "room 7"  # a new round takes the new spelling
    assert board.reveal("ROOM 7", 2).revealed and board.close("rOOm 7")


def test_the_count_and_the_answers_are_of_the_current_round_only(board):
    """A row of another round (as a replica's stale write would leave) is neither counted nor listed."""
    board.open_round("Room 7", "kv_size")
    board.open_round("Room 7", "kv_size")
    with board.engine.begin() as conn:
        conn.execute(
            answer_table.insert().values(class_code="room 7", learner_key="ana", round=1, value=9, answered_at=0)
        )
    assert board.current("Room 7").answers == 0
    assert board.answers("Room 7", 2) == () and board.my_answer("Room 7", "Ana", 2) is None
    assert board.answer("Room 7", "Ben", "kv_size", 3) == 2
    assert board.current("Room 7").answers == 1 and board.answers("Room 7", 2) == (3.0,)


def test_answer_values_and_settings_are_kept_exactly(board):
    settings_ = {"z": "", "a": "x" * MAX_SETTING_LEN, **{f"s{i}": f"v {i} ü" for i in range(MAX_SETTINGS - 2)}}
    opened = board.open_round("Room 7", "a" * 40, settings_)
    assert opened.settings == tuple(settings_.items())  # the order given, not sorted
    values = [0, MAX_ANSWER, 0.1, 1 / 3, 123456.789, 5e-324]
    for i, value in enumerate(values):
        assert board.answer("Room 7", f"learner {i}", "a" * 40, value) == 1
    assert board.answers("Room 7", 1) == tuple(float(v) for v in values)


# --- bad arguments ----------------------------------------------------------------------------------------

BAD = [
    (lambda b: b.open_round("Room 7", "Kv_size"), "lesson 'Kv_size' is not a page id"),
    (lambda b: b.open_round("Room 7", "kv-size"), "lesson 'kv-size' is not a page id"),
    (lambda b: b.open_round("Room 7", ""), "lesson '' is not a page id"),
    (lambda b: b.open_round("Room 7", "a" * 41), "is not a page id"),
    (lambda b: b.open_round("Room 7", None), "lesson None is not a page id"),
    (lambda b: b.answer("Room 7", "Ana", "_kv", 1), "lesson '_kv' is not a page id"),
    (lambda b: b.open_round("Room 7", "kv", [("a", "b")]), "settings must be a mapping of name -> value, got list"),
    (lambda b: b.open_round("Room 7", "kv", {str(i): "" for i in range(17)}), "settings has 17 entries, at most 16"),
    (lambda b: b.open_round("Room 7", "kv", {"": "1"}), "setting '': the name '' must be 1–200 printable"),
    (lambda b: b.open_round("Room 7", "kv", {1: "1"}), "setting 1: the name must be text, got int"),
    (lambda b: b.open_round("Room 7", "kv", {"n": 1}), "setting 'n': the value must be text, got int"),
    (lambda b: b.open_round("Room 7", "kv", {"n": "x" * 201}), "setting 'n': the value 'xxxx"),
    (lambda b: b.open_round("Room 7", "kv", {"n": "a\nb"}), "setting 'n': the value 'a\\nb' must be 0–200 printable"),
    (lambda b: b.show("Room 7", 1, {"n\t": "1"}), "setting 'n\\t': the name"),
    (lambda b: b.show("Room 7", 0, {}), "round must be a whole number >= 1, got 0; pass LiveRound.round"),
    (lambda b: b.reveal("Room 7", -1), "round must be a whole number >= 1, got -1"),
    (lambda b: b.reveal("Room 7", True), "got True"),
    (lambda b: b.answers("Room 7", 1.0), "round must be a whole number >= 1, got 1.0"),
    (lambda b: b.my_answer("Room 7", "Ana", "1"), "round must be a whole number >= 1, got '1'"),
    (lambda b: b.answer("Room 7", "Ana", "kv", math.nan), "answer must be a finite number, got nan"),
    (lambda b: b.answer("Room 7", "Ana", "kv", math.inf), "answer must be a finite number, got inf"),
    (lambda b: b.answer("Room 7", "Ana", "kv", -0.5), "answer must be between 0 and 1e+12, got -0.5"),
    (lambda b: b.answer("Room 7", "Ana", "kv", 1e12 + 1), "answer must be between 0 and 1e+12, got 1000000000001.0"),
    (lambda b: b.answer("Room 7", "Ana", "kv", "12"), "answer must be a number, got str"),
    (lambda b: b.answer("Room 7", "Ana", "kv", True), "answer must be a number, got bool"),
    (lambda b: b.answer("Room 7", "A\tna", "kv", 1), "learner name may use letters"),
    (lambda b: b.answer("", "Ana", "kv", 1), "class code is empty"),
    (lambda b: b.open_round("Rооm", "kv"), "class code mixes"),  # Cyrillic "о"
    (lambda b: b.close(7), "class code must be text, got int"),
    (lambda b: b.current("Room 7", -1), "max_age_s must be a finite number of seconds >= 0, got -1"),
    (lambda b: b.current("Room 7", math.nan), "max_age_s must be a finite number of seconds >= 0, got nan"),
]


@pytest.fixture(scope="module")
def one_round(tmp_path_factory):
    """A SQLite board with round 1 open on "kv" and no answers, shared by the bad-argument cases."""
    store = ProgressStore(f"sqlite:///{tmp_path_factory.mktemp('bad') / 'p.sqlite3'}")
    board = LiveBoard(store)
    board.open_round("Room 7", "kv")
    yield board
    store.close()


@pytest.mark.parametrize("call, message", BAD, ids=[m for _, m in BAD])
def test_every_bad_argument_is_a_value_error_naming_it(one_round, call, message):
    with pytest.raises(ValueError) as info:
        call(one_round)
    assert message in str(info.value)
    assert one_round.current("Room 7").round == 1 and stored_answers(one_round) == 0  # nothing changed


def test_a_board_needs_a_database_and_says_when_it_fails(tmp_path):
    with pytest.raises(ProgressStoreError, match="live rounds need the progress database; no db here"):
        LiveBoard(NullStore("no db here"))
    store = ProgressStore(f"sqlite:///{tmp_path / 'p.sqlite3'}")
    board = LiveBoard(store)
    with store.engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE kvlab_live_answer"))
    with pytest.raises(ProgressStoreError, match="Live round database error in the file .*no such table"):
        board.answers("Room 7", 1)
    LiveBoard(store)  # a new board creates the missing table again
    assert board.answers("Room 7", 1) == ()
    store.close()


@pytest.fixture
def sqlite_board(tmp_path):
    store = ProgressStore(f"sqlite:///{tmp_path / 'h.sqlite3'}")
    yield LiveBoard(store)
    store.close()


PRINTABLE = st.characters(codec="utf-8", categories=["L", "N", "P", "S"], include_characters=" ")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    view=st.dictionaries(
        st.text(PRINTABLE, min_size=1, max_size=20), st.text(PRINTABLE, max_size=30), max_size=MAX_SETTINGS
    ),
    value=st.floats(0, MAX_ANSWER),
)
def test_any_valid_view_and_value_come_back_as_given(sqlite_board, view, value):
    number = sqlite_board.open_round("Room 7", "kv", view).round
    assert sqlite_board.current("Room 7").settings == tuple(view.items())
    assert sqlite_board.answer("Room 7", "Ana", "kv", value) == number
    assert sqlite_board.my_answer("Room 7", "Ana", number) == value


# --- the cache --------------------------------------------------------------------------------------------


def test_another_replica_sees_a_write_once_its_cache_is_older_than_max_age(stores, clock):
    clock.step = 0.0  # frozen: ages move only by hand
    teacher, replica = LiveBoard(stores[0]), LiveBoard(stores[1])
    assert replica.current("Room 7", max_age_s=2) is None  # remembered: no session
    teacher.open_round("Room 7", "kv_size")
    assert replica.current("Room 7", max_age_s=2) is None  # still the cached answer ...
    assert replica.current("Room 7").round == 1  # ... but max_age 0 always asks the database
    assert replica.current("Room 7", max_age_s=2).round == 1  # and that fresh read refilled the cache

    teacher.answer("Room 7", "Ana", "kv_size", 1)
    clock.now += 2.0
    assert replica.current("Room 7", max_age_s=2).answers == 0  # 2 s old: still good for max_age 2
    assert replica.current("Room 7", max_age_s=1).answers == 1  # too old for max_age 1: read again
    teacher.reveal("Room 7", 1)
    clock.now += 2.5
    assert replica.current("Room 7", max_age_s=2).revealed  # not cached forever
    assert replica.current("Room 8", max_age_s=100) is None  # per class code: Room 7's entry is not Room 8's


def test_a_boards_own_writes_refresh_its_cache(stores, clock):
    clock.step = 0.0
    board = LiveBoard(stores[0])
    assert board.current("Room 7", max_age_s=100) is None
    board.open_round("Room 7", "kv_size", {"a": "1"})
    assert board.current("Room 7", max_age_s=100).round == 1
    board.answer("Room 7", "Ana", "kv_size", 1)
    assert board.current("Room 7", max_age_s=100).answers == 1
    board.show("Room 7", 1, {"a": "2"})
    assert board.current("Room 7", max_age_s=100).settings == (("a", "2"),)
    board.reveal("Room 7", 1)
    assert board.current("Room 7", max_age_s=100).revealed
    board.open_round("Room 7", "blocks")
    assert board.current("Room 7", max_age_s=100).lesson == "blocks"
    board.close("Room 7")
    assert board.current("Room 7", max_age_s=100) is None


def test_a_polling_class_costs_one_query_and_current_is_one_query(stores, clock):
    clock.step = 0.0
    teacher, replica = LiveBoard(stores[0]), LiveBoard(stores[1])
    teacher.open_round("Room 7", "kv_size")
    seen = queries(stores[1].engine)
    results: list[LiveRound | None] = []
    threads = [threading.Thread(target=lambda: results.append(replica.current("Room 7", 1.0))) for _ in range(30)]
    replica.current("Room 7", 1.0)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 30 and set(results) == {teacher.current("Room 7")}
    assert len([q for q in seen if "kvlab_live" in q]) == 1  # one query: the row and its count together
    clock.now += 1.5
    replica.current("Room 7", 1.0)
    assert len([q for q in seen if "kvlab_live" in q]) == 2


def test_caches_are_per_board_not_shared(stores, clock):
    clock.step = 0.0
    first, second = LiveBoard(stores[0]), LiveBoard(stores[0])  # two boards on one engine
    assert second.current("Room 7", max_age_s=100) is None
    first.open_round("Room 7", "kv_size")
    assert first.current("Room 7", max_age_s=100).round == 1
    assert second.current("Room 7", max_age_s=100) is None  # its own (stale, in age) cache, not first's


# --- replicas and races (PostgreSQL) ----------------------------------------------------------------------


POSTGRESQL_ONLY = pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)


@pytest.fixture
def pg_stores(stores):
    """Two replicas' stores on PostgreSQL (use with POSTGRESQL_ONLY)."""
    return stores


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("learner", ["Ana", "Ben"])
def test_a_reveal_between_the_answers_read_and_its_write_refuses_it_on_sqlite(stores, learner):
    """SQLite's read locks nothing: a reveal by another replica may commit after the answer read the round
    as open and before its first write (which takes the file's write lock). The writes themselves must then
    refuse: Ana answered before (the UPDATE path), Ben did not (the UPDATE finds no row, the INSERT path).
    On PostgreSQL the answer's row lock makes this interleaving impossible."""
    board, other = LiveBoard(stores[0]), LiveBoard(stores[1])
    board.open_round("Room 7", "kv_size")
    assert board.answer("Room 7", "Ana", "kv_size", 1) == 1
    fired: list[str] = []

    def reveal_first(conn, cursor, sql, *args) -> None:
        if sql.startswith("UPDATE kvlab_live_answer") and not fired:
            fired.append(sql)
            other.reveal("Room 7", 1)

    sa.event.listen(stores[0].engine, "before_cursor_execute", reveal_first)
    assert board.answer("Room 7", learner, "kv_size", 2) is None
    assert fired and board.answers("Room 7", 1) == (1.0,) and board.current("Room 7").revealed


@POSTGRESQL_ONLY
def test_two_replicas_one_goes_away_mid_round_the_other_carries_on(pg_stores):
    one, two = LiveBoard(pg_stores[0]), LiveBoard(pg_stores[1])
    number = one.open_round("Room 7", "kv_size", {"batch": "8"}).round
    assert one.answer("Room 7", "Ana", "kv_size", 1) == number
    assert two.answer("Room 7", "Ben", "kv_size", 2) == number
    pg_stores[0].close()  # replica one is gone (its connections closed)
    del one
    assert two.current("Room 7").answers == 2 and two.current("Room 7").settings == (("batch", "8"),)
    assert two.answer("Room 7", "Ana", "kv_size", 3) == number  # a learner reconnects to replica two
    assert two.reveal("Room 7", number).answers == 2
    assert two.answers("Room 7", number) == (2.0, 3.0)
    assert two.open_round("Room 7", "kv_size").round == number + 1


@POSTGRESQL_ONLY
def test_an_answer_waits_for_a_reveal_in_flight_and_is_then_refused(pg_stores):
    """A reveal that has updated the row but not committed yet: an answer must wait for it, then see it."""
    board = LiveBoard(pg_stores[0])
    board.open_round("Room 7", "kv_size")
    got: list[int | None] = []
    with pg_stores[1].engine.connect() as conn:
        conn.execute(session_table.update().values(revealed=True))  # a reveal in flight, not committed
        late = threading.Thread(target=lambda: got.append(board.answer("Room 7", "Ana", "kv_size", 1)))
        late.start()
        late.join(0.3)
        assert late.is_alive() and got == []  # waiting for the row, not answering from before the reveal
        conn.commit()
    late.join(5)
    assert got == [None] and board.answers("Room 7", 1) == ()


@POSTGRESQL_ONLY
def test_a_reveal_waits_for_an_answer_in_flight(pg_stores):
    """An answer that holds the row delays the reveal; the reveal then counts it."""
    board = LiveBoard(pg_stores[0])
    board.open_round("Room 7", "kv_size")
    got: list[LiveRound | None] = []
    with pg_stores[1].engine.connect() as conn:
        locked = sa.select(session_table.c.round).with_for_update()  # as LiveBoard.answer locks it
        conn.execute(locked)
        conn.execute(
            answer_table.insert().values(class_code="room 7", learner_key="ana", round=1, value=1, answered_at=0)
        )
        reveal = threading.Thread(target=lambda: got.append(board.reveal("Room 7", 1)))
        reveal.start()
        reveal.join(0.3)
        assert reveal.is_alive()
        conn.commit()
    reveal.join(5)
    assert got[0].revealed and got[0].answers == 1


def test_answers_racing_a_reveal_are_counted_or_refused_never_lost(stores, learners=20):
    """Learners answer again and again on two replicas while the teacher reveals: each answer that got a
    round number is in the round's answers with its value, each refused one is not, nothing comes in after."""
    boards = [LiveBoard(stores[0]), LiveBoard(stores[1])]
    teacher = boards[0]
    teacher.open_round("Room 7", "kv_size")
    start = threading.Barrier(learners + 1)
    accepted: dict[str, float] = {}
    refused_first: list[str] = []
    ran_out: list[str] = []  # learners who answered all their attempts without ever being refused
    counted = threading.Semaphore(0)
    errors: list[BaseException] = []

    def learner(i: int) -> None:
        name, board = f"learner {i}", boards[i % 2]
        try:
            start.wait()
            for attempt in range(200):
                value = float(i * 1000 + attempt)
                if board.answer("Room 7", name, "kv_size", value) is None:
                    if attempt == 0:
                        refused_first.append(name)
                    return
                accepted[name] = value
                counted.release()
            ran_out.append(name)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=learner, args=(i,)) for i in range(learners)]
    for t in threads:
        t.start()
    start.wait()
    for _ in range(learners):  # a reveal in the middle of the answering
        counted.acquire(timeout=5)
    revealed = teacher.reveal("Room 7", 1)
    at_reveal = teacher.answers("Room 7", 1)
    for t in threads:  # each stops at its first refused answer; on a loaded machine that can take a while
        t.join(300)
    # an answer counted in the database before its call returned is in `accepted` only once its thread is done
    assert not [t for t in threads if t.is_alive()], "a learner's answer call never returned"
    assert not errors, errors
    # The reveal queues behind the answers in flight, not behind every later one: had it waited for the
    # learners to stop, every learner would have used up all its attempts. Counted, not timed, so a busy
    # machine cannot fail it.
    assert len(ran_out) < learners, "the reveal waited until every learner had answered 200 times"
    assert revealed.answers == len(at_reveal) == len(accepted) > 0
    assert teacher.answers("Room 7", 1) == at_reveal  # nothing added after the reveal
    assert sorted(at_reveal) == sorted(accepted.values())  # each accepted answer, at its last accepted value
    for name, value in accepted.items():
        assert teacher.my_answer("Room 7", name, 1) == value
    for name in refused_first:
        assert teacher.my_answer("Room 7", name, 1) is None
    assert teacher.current("Room 7").answers == len(accepted)


def test_a_first_answer_is_stored_in_one_write(stores, monkeypatch):
    """A learner's first answer is one insert that is known to have stored it: no second try, so no window in
    which a reveal could refuse an answer the round already counts (psycopg's rowcount is -1 for INSERT ...
    SELECT; reading it as "not stored" retried, and a reveal in between refused a counted answer)."""
    retries: list[int] = []
    monkeypatch.setattr(live, "_pause", retries.append)
    board = LiveBoard(stores[0])
    board.open_round("Room 7", "kv_size")
    assert board.answer("Room 7", "ana", "kv_size", 1.0) == 1
    assert board.answer("Room 7", "ana", "kv_size", 2.0) == 1  # the second replaces it
    assert retries == []
    assert board.answers("Room 7", 1) == (2.0,)


def test_an_answer_refused_by_a_reveal_between_its_tries_was_not_stored(stores, monkeypatch):
    """Force the race: the teacher reveals while the first answer's write is being retried. Whatever the
    learner is told, the round's answers agree with it."""
    board = LiveBoard(stores[0])
    board.open_round("Room 7", "kv_size")
    monkeypatch.setattr(live, "_pause", lambda attempt: LiveBoard(stores[1]).reveal("Room 7", 1))
    told = board.answer("Room 7", "ana", "kv_size", 1.0)
    assert (told is None) == (board.my_answer("Room 7", "ana", 1) is None)


def test_replicas_opening_the_first_round_at_once_agree(stores):
    """Two replicas' first open_round race on the insert: one inserts, the other retries as round 2."""
    boards = [LiveBoard(stores[0]), LiveBoard(stores[1])]
    rounds: list[int] = []
    gate = threading.Barrier(2)

    def open_(board: LiveBoard) -> None:
        gate.wait()
        rounds.append(board.open_round("Room 7", "kv_size").round)

    threads = [threading.Thread(target=open_, args=(b,)) for b in boards]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(rounds) == [1, 2] and boards[0].current("Room 7").round == 2


def test_a_read_that_raced_a_write_of_the_same_board_is_not_cached(stores, clock):
    """current() read the old row, then (before it could cache it) an answer through this board committed:
    the old row must not be served from the cache afterwards."""
    clock.step = 0.0
    board = LiveBoard(stores[0])
    board.open_round("Room 7", "kv_size")
    fired: list[int | None] = []

    def answer_meanwhile(conn, cursor, sql, *args) -> None:
        if sql.startswith("SELECT kvlab_live_session") and not fired:
            fired.append(None)  # once (the answer's own statements come through here too)
            fired[0] = board.answer("Room 7", "Ana", "kv_size", 1)

    sa.event.listen(stores[0].engine, "after_cursor_execute", answer_meanwhile)
    assert board.current("Room 7", max_age_s=100).answers == 0  # read before the answer committed
    assert fired == [1]
    assert board.current("Room 7", max_age_s=100).answers == 1


def test_the_cache_keeps_at_most_cache_max_class_codes_dropping_the_oldest(sqlite_board, monkeypatch):
    monkeypatch.setattr(live, "CACHE_MAX", 2)
    seen = queries(sqlite_board.engine)
    for code in ("Room 1", "Room 2", "Room 3"):  # Room 1 is the oldest entry when Room 3 comes
        sqlite_board.current(code, max_age_s=1e9)
    sqlite_board.current("Room 3", max_age_s=1e9), sqlite_board.current("Room 2", max_age_s=1e9)
    assert len(seen) == 3  # both still cached
    sqlite_board.current("Room 1", max_age_s=1e9)
    assert len(seen) == 4  # dropped: read again


def test_an_answer_from_a_sign_in_before_a_reset_is_refused_and_replaces_nothing(stores, board):
    # Hole 4: Mallory claims "Bob"; the teacher resets it; Bob signs in and answers 77; Mallory's old tab
    # re-checks its 5. Her answer must not replace his.
    from progress import SignedOut

    store = stores[0]
    board.open_round("Room 1", "gqa")
    mallory = store.sign_in("Room 1", "Bob", "mallory got here first")
    assert board.answer("Room 1", "Bob", "gqa", 5, mallory.version) == 1
    assert store.reset_passphrase("Room 1", "Bob")
    bob = store.sign_in("Room 1", "Bob", "bob's own passphrase")
    assert board.answer("room 1", "bob", "gqa", 77, bob.version) == 1
    with pytest.raises(SignedOut):
        board.answer("Room 1", "Bob", "gqa", 5, mallory.version)
    assert board.answers("Room 1", 1) == (77.0,) and board.my_answer("Room 1", "Bob", 1) == 77.0
    with pytest.raises(SignedOut):  # a name with no sign-in at all cannot answer with a version either
        board.answer("Room 1", "Carol", "gqa", 5, 1)
    assert board.answer("Room 1", "Carol", "gqa", 6) == 1  # without a version (a script, a test): unchecked


def test_a_class_closed_to_new_names_counts_only_learners_seen_before(stores, board):
    # Hole 3: anyone with the class code could sign in under made-up names and stuff the projector's counts.
    store = stores[0]
    store.sign_in("Room 1", "Ana", "ana's passphrase")  # before the live session
    store.save("Room 1", "Old", {"visited": ["gqa"]})  # a record from before the class's names were dated
    board.open_round("Room 1", "gqa")
    for bot in ("Bot1", "Bot2", "Bot3"):
        store.sign_in("Room 1", bot, "made up on the spot")
    for name, value in (("Ana", 10), ("Old", 20), ("Bot1", 30), ("Bot2", 40)):
        assert board.answer("Room 1", name, "gqa", value) == 1
    now = board.current("Room 1")
    assert (now.answers, now.new_answers, now.waiting, now.closed) == (4, 2, 0, False)  # the projector says 2 new
    closed = board.set_closed("room 1", True)
    assert (closed.answers, closed.new_answers, closed.waiting, closed.closed) == (2, 0, 2, True)
    assert board.answers("Room 1", 1) == (10.0, 20.0) and board.waiting_names("Room 1") == ["Bot1", "Bot2"]
    assert board.answer("Room 1", "Bot3", "gqa", 50) == 1  # kept, not counted
    assert board.current("Room 1").waiting == 3 and board.answers("Room 1", 1) == (10.0, 20.0)
    assert board.admit("Room 1", "bot1")  # the teacher knows this one
    now = board.current("Room 1")
    assert (now.answers, now.new_answers, now.waiting) == (3, 1, 2) and board.answers("Room 1", 1) == (10, 20, 30)
    again = board.open_round("Room 1", "gqa")  # the next round of the same session: still closed, still new
    assert again.closed and board.answer("Room 1", "Bot2", "gqa", 41) == 2
    assert (board.current("Room 1").answers, board.current("Room 1").waiting) == (0, 1)
    opened = board.set_closed("Room 1", False)
    assert (opened.answers, opened.new_answers, opened.waiting) == (1, 1, 0)
    assert board.close("Room 1") and board.admit("Room 1", "Bot2") is False  # no session: nothing to admit
    board.open_round("Room 1", "gqa")  # a new live session: last session's names are now seen before
    assert board.set_closed("Room 1", True).closed
    board.answer("Room 1", "Bot2", "gqa", 42)
    now = board.current("Room 1")
    assert (now.answers, now.new_answers, now.waiting) == (1, 0, 0)
    assert board.set_closed("Nobody", True) is None
    with pytest.raises(ValueError, match="closed must be True or False"):
        board.set_closed("Room 1", "yes")
