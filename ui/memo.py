"""The app's one cache for shared results: `@memo` and `named_cache`, on cachetools' LRU cache and single flight.

A lesson's numbers depend only on its settings, and the defaults are shared by every learner, so each result is
computed once per server process and shared, read-only. `st.cache_data` does that too, but on every call it
hashes each argument through `inspect.signature` and unpickles a copy of the result: about a millisecond per
call, five or six calls per widget move. `memo` keys its cache by the arguments themselves (they must be
hashable: numbers, strings, tuples, frozen dataclasses) and their types, and hands out the same object: results
are frozen dataclasses, tuples and plotly figures nobody mutates (`ui.figure_cache.frozen_figure`).

The function may be defined in a page script, which Streamlit executes again on every run: the cache belongs
to the function's code (its file, name and bytecode), not to the function object, so every run, and every
learner, finds the same entries; editing the function starts a new cache. Entries are evicted least recently
used first, beyond ``max_entries`` per function. Two learners asking for the same missing entry at once wait
for one computation (an engine run can take seconds); an exception is raised to the caller and not cached.

What is cached elsewhere, and why: `st.cache_resource` holds the process's *resources*, objects with a lifetime
rather than results (the progress store and its connection pool, the live board, a model's weights, a lock).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable
from typing import Any, ParamSpec, TypeVar

import cachetools
import cachetools.keys

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_MAX_ENTRIES = 256


def _given_key(key: Hashable, make: Callable[[], Any]) -> Hashable:
    return key


def _call(key: Hashable, make: Callable[[], R]) -> R:
    return make()


class Cache:
    """A bounded, thread-safe, least-recently-used map from keys to shared values, filled on demand."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self.entries: cachetools.LRUCache = cachetools.LRUCache(maxsize=max_entries)
        # With a condition, cachetools computes a missing key once: a second caller for it waits on the condition
        # (the lock is held for the map only, never while computing), and an exception is not stored.
        self._get = cachetools.cached(self.entries, key=_given_key, condition=threading.Condition())(_call)

    def get_or_make(self, key: Hashable, make: Callable[[], R]) -> R:
        """The value under ``key``, made by ``make()`` if it is missing (once, however many ask at once)."""
        return self._get(key, make)

    def clear(self) -> None:
        """Drop every entry."""
        self._get.cache_clear()

    def __len__(self) -> int:
        return len(self.entries)


class _Registry:
    """Every cache of this process, by name (the only module-level object here: shared results, no learner's)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._caches: dict[Hashable, Cache] = {}

    def get(self, name: Hashable, max_entries: int) -> Cache:
        with self._lock:
            cache = self._caches.get(name)
            if cache is None:
                cache = self._caches[name] = Cache(max_entries)
            return cache

    def caches(self) -> list[Cache]:
        with self._lock:
            return list(self._caches.values())


_REGISTRY = _Registry()


def named_cache(name: Hashable, max_entries: int = DEFAULT_MAX_ENTRIES) -> Cache:
    """This process's cache called ``name`` (made on first use)."""
    return _REGISTRY.get(name, max_entries)


def _identity(fn: Callable[..., Any]) -> Hashable:
    code = fn.__code__
    return code.co_filename, fn.__qualname__, code.co_code, code.co_consts


def typed_key(what: str, args: tuple, kwargs: dict) -> Hashable:
    """The cache key of a call: its arguments and their types (1, 1.0 and True are three settings); a TypeError
    naming ``what`` and the fix when an argument is not hashable."""
    key = cachetools.keys.typedkey(*args, **kwargs)
    try:
        hash(key)
    except TypeError:
        raise TypeError(
            f"{what}: cached calls need hashable arguments (numbers, strings, tuples, frozen dataclasses), got "
            f"{', '.join(type(a).__name__ for a in (*args, *kwargs.values()))}; pass a tuple instead of a list"
        ) from None
    return key


def memo(fn: Callable[P, R] | None = None, *, max_entries: int = DEFAULT_MAX_ENTRIES) -> Any:
    """Cache ``fn`` per process by its arguments (see the module's docstring); use as ``@memo`` or
    ``@memo(max_entries=32)``."""
    if fn is None:
        return functools.partial(memo, max_entries=max_entries)
    cache = named_cache(_identity(fn), max_entries)

    @functools.wraps(fn)
    def cached(*args: P.args, **kwargs: P.kwargs) -> R:
        return cache.get_or_make(typed_key(fn.__qualname__, args, kwargs), lambda: fn(*args, **kwargs))

    cached.cache = cache  # type: ignore[attr-defined]
    return cached


def clear_all() -> None:
    """Empty every cache of this process (tests)."""
    for cache in _REGISTRY.caches():
        cache.clear()
