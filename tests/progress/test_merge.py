"""No lost update: two sessions of one learner (tabs, devices, replicas) merge per item, latest write wins,
visits are a union, a clear is a tombstone. The merge's laws (Hypothesis), then interleaved and concurrent
saves through two stores on SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from progress.records import empty_progress, merge_progress, normalize_progress, stamp_changes, visible_progress
from progress.store import ProgressStore


def _with(progress: dict, part: str, item: str, entry: dict | None, at: int) -> dict:
    """``progress`` with ``item`` written (or cleared, entry None) at time ``at``."""
    out = normalize_progress(progress)
    if entry is None:
        out[part].pop(item, None)
    else:
        out[part][item] = entry
    out["written_at_us"].setdefault(part, {})[item] = at
    return out


def test_the_later_write_of_an_answer_wins_either_way():
    a = _with(empty_progress(), "quiz", "q1", {"answer": "A", "correct": False}, 10)
    b = _with(empty_progress(), "quiz", "q1", {"answer": "B", "correct": True}, 20)
    assert merge_progress(a, b)["quiz"]["q1"]["answer"] == "B" == merge_progress(b, a)["quiz"]["q1"]["answer"]
    assert merge_progress(a, b)["written_at_us"]["quiz"]["q1"] == 20


def test_a_clear_is_a_tombstone_that_beats_older_copies_only():
    answered = _with(empty_progress(), "quiz", "q1", {"answer": "A", "correct": False}, 10)
    cleared = _with(answered, "quiz", "q1", None, 20)
    assert "q1" not in merge_progress(answered, cleared)["quiz"]  # the other tab's older copy does not revive it
    assert merge_progress(answered, cleared)["written_at_us"]["quiz"]["q1"] == 20  # the tombstone travels on
    again = _with(cleared, "quiz", "q1", {"answer": "C", "correct": True}, 30)
    assert merge_progress(cleared, again)["quiz"]["q1"]["answer"] == "C"  # answered after the clear: back


def test_unstamped_rows_from_before_stamps_lose_to_any_write():
    legacy = {"visited": ["gqa"], "quiz": {"q1": {"answer": "old", "correct": False}, "q2": {"answer": "kept"}}}
    new = _with(empty_progress(), "quiz", "q1", {"answer": "new", "correct": True}, 1)
    merged = merge_progress(legacy, new)
    assert merged["quiz"] == {"q1": {"answer": "new", "correct": True}, "q2": {"answer": "kept"}}


def test_stamp_changes_marks_what_differs_from_the_last_save():
    base = _with(empty_progress(), "quiz", "q1", {"answer": "A"}, 500)
    base = _with(base, "quiz", "q2", {"answer": "B"}, 500)
    now = normalize_progress(base)
    now["quiz"]["q1"] = {"answer": "C"}  # changed
    del now["quiz"]["q2"]  # cleared (ui/progress.py clear_quiz pops the entry)
    now["predict"]["gqa"] = {"value": 1.0}  # added
    stamped = stamp_changes(now, base, now_us=100)  # this machine's clock is behind the other writer's
    assert stamped["written_at_us"]["quiz"] == {"q1": 501, "q2": 501}  # still later than what it replaced
    assert stamped["written_at_us"]["predict"] == {"gqa": 100}
    assert "q2" not in merge_progress(base, stamped)["quiz"] and merge_progress(stamped, base)["quiz"]["q1"] == {
        "answer": "C"
    }
    assert stamp_changes(base, base, now_us=900) == normalize_progress(base)  # nothing changed: nothing stamped


# --- the merge's laws -------------------------------------------------------------------------------------

IDS = st.sampled_from(["q1", "q2", "q3", "q4"])
ENTRY = st.one_of(st.none(), st.fixed_dictionaries({"answer": st.sampled_from("ABC"), "correct": st.booleans()}))
WRITES = st.lists(st.tuples(st.sampled_from(["quiz", "predict"]), IDS, ENTRY, st.integers(1, 50)), max_size=8)
VISITS = st.lists(st.sampled_from(["gqa", "paged", "bandwidth", "rules"]), max_size=4)


@st.composite
def sessions(draw) -> dict:
    progress = {**empty_progress(), "visited": draw(VISITS)}
    for part, item, entry, at in draw(WRITES):
        progress = _with(progress, part, item, entry, at)
    return normalize_progress(progress)


def _same(a: dict, b: dict) -> bool:
    """Equal up to the order of visits (a union has no single order)."""
    return {**a, "visited": sorted(a["visited"])} == {**b, "visited": sorted(b["visited"])}


@settings(max_examples=150, deadline=None)
@given(sessions(), sessions(), sessions())
def test_merge_is_commutative_associative_and_idempotent(a, b, c):
    assert _same(merge_progress(a, b), merge_progress(b, a))
    assert _same(merge_progress(merge_progress(a, b), c), merge_progress(a, merge_progress(b, c)))
    m = merge_progress(a, b)
    assert merge_progress(m, m) == m and _same(merge_progress(m, a), m)


@settings(max_examples=150, deadline=None)
@given(sessions(), sessions())
def test_merge_keeps_every_items_latest_write_and_every_visit(a, b):
    m = merge_progress(a, b)
    assert set(m["visited"]) == set(a["visited"]) | set(b["visited"])
    for part in ("quiz", "predict"):
        for item in set(a[part]) | set(b[part]) | set(a["written_at_us"].get(part, {})):
            at_a = a["written_at_us"].get(part, {}).get(item, 0)
            at_b = b["written_at_us"].get(part, {}).get(item, 0)
            latest = a if at_a > at_b else b if at_b > at_a else None
            if latest is not None:  # a strictly later write decides the item, entry or tombstone
                assert m[part].get(item) == latest[part].get(item)
            assert m["written_at_us"].get(part, {}).get(item, 0) == max(at_a, at_b)


# --- two sessions on a real database ----------------------------------------------------------------------


def test_two_sessions_interleaved_lose_nothing(store):
    # Tab 1 and tab 2 of Ana on two replicas: each loads, changes its own part, saves; neither undoes the other.
    other = ProgressStore(store.url)
    try:
        tab1, tab2 = store.load("c", "Ana"), other.load("c", "Ana")
        tab1 = stamp_changes({**tab1, "visited": ["gqa"], "quiz": {"q1": {"answer": "A"}}}, tab1, 1_000)
        tab2 = stamp_changes({**tab2, "visited": ["paged"], "quiz": {"q2": {"answer": "B"}}}, tab2, 1_001)
        saved1 = store.save("c", "Ana", tab1)
        saved2 = other.save("c", "Ana", tab2)  # saved from a load that predates tab 1's save
        assert visible_progress(saved2) == {
            "visited": ["gqa", "paged"],
            "quiz": {"q1": {"answer": "A"}, "q2": {"answer": "B"}},
            "diagnosis": {},
            "predict": {},
        }
        assert store.load("c", "Ana") == saved2
        # Tab 1 answers q2 again later and clears q1; tab 2, still holding its old copy, saves a prediction.
        tab1b = normalize_progress(saved1)
        tab1b["quiz"] = {"q2": {"answer": "C"}}
        store.save("c", "Ana", stamp_changes(tab1b, saved1, 2_000))
        tab2b = {**saved2, "predict": {"gqa": {"value": 512.0}}}
        final = other.save("c", "Ana", stamp_changes(tab2b, saved2, 2_001))
        assert final["quiz"] == {"q2": {"answer": "C"}} and final["predict"] == {"gqa": {"value": 512.0}}
        assert final["visited"] == ["gqa", "paged"]
    finally:
        other.close()


def test_many_concurrent_sessions_each_adding_answers_all_survive(store):
    # N sessions of one learner on two engines (replicas) save at once, each its own answers, several times.
    replica = ProgressStore(store.url)
    errors: list[BaseException] = []
    sessions_n, answers_each = 8, 4
    start = threading.Barrier(sessions_n)

    def session(i: int) -> None:
        s = store if i % 2 else replica
        try:
            start.wait()
            mine = empty_progress()
            for k in range(answers_each):
                before = normalize_progress(mine)
                mine["quiz"][f"s{i}.q{k}"] = {"answer": f"{i}-{k}", "correct": True}
                mine["visited"].append(f"page{i}")
                mine = s.save("c", "Ana", stamp_changes(mine, before, 1_000 + k))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=session, args=(i,)) for i in range(sessions_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    replica.close()
    assert errors == []
    got = store.load("c", "Ana")
    expected = {f"s{i}.q{k}" for i in range(sessions_n) for k in range(answers_each)}
    assert set(got["quiz"]) == expected  # every answer of every session survived
    assert set(got["visited"]) == {f"page{i}" for i in range(sessions_n)}


def test_a_save_returns_the_union_with_what_others_saved(store):
    store.save("c", "Ana", {"quiz": {"q1": {"answer": "A"}}})
    mine = store.save("c", "Ana", {"quiz": {"q2": {"answer": "B"}}})  # a session that never saw q1
    assert set(mine["quiz"]) == {"q1", "q2"}
