"""ui.memo: one computation per distinct arguments per process, shared by every run of a page script."""

import threading
import time

import pytest

from ui.memo import Cache, memo, named_cache

PAGE_SOURCE = """
calls = []

@memo(max_entries=2)
def area(w, h):
    calls.append((w, h))
    return (w * h,)
"""


def run_page_script(code) -> dict:
    """Execute a page's code as Streamlit does on every run: new function objects each time."""
    scope = {"memo": memo}
    exec(code, scope)  # noqa: S102
    return scope


def test_a_page_script_run_again_finds_its_entries():
    code = compile(PAGE_SOURCE, "pages/9_memo_test.py", "exec")
    first = run_page_script(code)
    assert first["area"](2, 3) == (6,) and first["calls"] == [(2, 3)]
    again = run_page_script(code)  # the next run: a new `area`, the same cache
    assert again["area"](2, 3) is first["area"](2, 3)  # the same object, not a copy
    assert again["calls"] == [] and first["calls"] == [(2, 3)]
    edited = run_page_script(compile(PAGE_SOURCE.replace("w * h", "w + h"), "pages/9_memo_test.py", "exec"))
    assert edited["area"](2, 3) == (5,)  # edited code: a cache of its own


def test_arguments_of_other_types_are_other_entries_and_the_oldest_goes_first():
    scope = run_page_script(compile(PAGE_SOURCE, "pages/9_memo_types.py", "exec"))
    area, calls = scope["area"], scope["calls"]
    area(1, 1), area(True, 1), area(1.0, 1)  # equal and hash-equal, but not the same setting
    assert calls == [(1, 1), (True, 1), (1.0, 1)]
    area(1.0, 1)  # max_entries=2: (1, 1) was evicted, (1.0, 1) is kept
    area(1, 1)
    assert calls == [(1, 1), (True, 1), (1.0, 1), (1, 1)]
    assert len(area.cache) == 2


def test_a_hit_keeps_an_entry_the_least_recently_used_goes_first():
    scope = run_page_script(compile(PAGE_SOURCE, "pages/9_memo_lru.py", "exec"))
    area, calls = scope["area"], scope["calls"]
    area(1, 1), area(2, 2)
    area(1, 1)  # a hit: (1, 1) is now the most recently used, (2, 2) the least
    area(3, 3)  # max_entries=2: least recently used first evicts (2, 2); first in, first out would evict (1, 1)
    area(1, 1)
    assert calls == [(1, 1), (2, 2), (3, 3)]
    area(2, 2)
    assert calls == [(1, 1), (2, 2), (3, 3), (2, 2)]


def test_unhashable_arguments_are_refused_with_the_fix():
    @memo
    def total(values):
        return sum(values)

    with pytest.raises(TypeError, match="pass a tuple instead of a list"):
        total([1, 2])
    assert total((1, 2)) == 3


def test_an_exception_is_not_cached():
    attempts = []

    @memo
    def flaky(x):
        attempts.append(x)
        if len(attempts) == 1:
            raise ValueError("first call fails")
        return x

    with pytest.raises(ValueError):
        flaky(1)
    assert flaky(1) == 1 and flaky(1) == 1 and attempts == [1, 1]


def test_learners_asking_at_once_wait_for_one_computation():
    cache, made = Cache(4), []

    def slow():
        made.append(1)
        time.sleep(0.2)
        return object()

    got = []
    threads = [threading.Thread(target=lambda: got.append(cache.get_or_make("k", slow))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and len(got) == 6 and all(g is got[0] for g in got)


def test_a_failed_computation_lets_the_waiting_learner_compute_it():
    cache, started, release, attempts = Cache(4), threading.Event(), threading.Event(), []

    def make():
        attempts.append(1)
        if len(attempts) == 1:
            started.set()
            release.wait(5)
            raise ValueError("the first computation fails")
        return "made"

    failed, got = [], []

    def first():
        try:
            cache.get_or_make("k", make)
        except ValueError as exc:
            failed.append(exc)

    one = threading.Thread(target=first)
    one.start()
    assert started.wait(5)
    two = threading.Thread(target=lambda: got.append(cache.get_or_make("k", make)))
    two.start()  # waits for the first computation, which then fails: it computes the entry itself
    release.set()
    one.join(5), two.join(5)
    assert len(failed) == 1 and got == ["made"] and len(attempts) == 2
    assert cache.get_or_make("k", make) == "made" and len(attempts) == 2


def test_named_caches_are_per_process_and_bounded():
    assert named_cache("tests.memo.a") is named_cache("tests.memo.a")
    assert named_cache("tests.memo.a") is not named_cache("tests.memo.b")
    with pytest.raises(ValueError, match="max_entries must be at least 1"):
        Cache(0)
