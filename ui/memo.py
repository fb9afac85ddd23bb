"""A process-wide cache for the pages' pure calculations and built figures: `@memo` in place of `st.cache_data`.

A lesson's numbers depend only on its settings, and the defaults are shared by every learner, so each result is
computed once per server process and shared, read-only. `st.cache_data` does that too, but on every call it
hashes each argument through `inspect.signature` and unpickles a copy of the result: about a millisecond per
call, five or six calls per widget move. `memo` keys its cache by the arguments themselves (they must be
hashable: numbers, strings, tuples) and their types, and hands out the same object: results are frozen
dataclasses, tuples and plotly figures nobody mutates (`ui.page.frozen_figure`).

The function may be defined in a page script, which Streamlit executes again on every run: the cache belongs
to the function's code (its file, name and bytecode), not to the function object, so every run, and every
learner, finds the same entries; editing the function starts a new cache. Entries are evicted least recently
used first, beyond ``max_entries`` per function. Two learners asking for the same missing entry at once wait
for one computation (an engine run can take seconds); an exception is raised to the caller and not cached.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_MAX_ENTRIES = 256


@dataclass(frozen=True)
class _Missing:
    """The marker for "no entry" (None can be a cached value)."""


_MISSING = _Missing()


class Cache:
    """A bounded, thread-safe, least-recently-used map from keys to shared values, filled on demand."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self._lock = threading.Lock()  # held for dict operations only, never while computing a value
        self._values: OrderedDict[Hashable, Any] = OrderedDict()
        self._pending: dict[Hashable, threading.Lock] = {}  # one lock per entry being computed

    def _lookup(self, key: Hashable) -> Any:
        value = self._values.get(key, _MISSING)
        if value is not _MISSING:
            self._values.move_to_end(key)
        return value

    def get_or_make(self, key: Hashable, make: Callable[[], R]) -> R:
        """The value under ``key``, made by ``make()`` if it is missing (once, however many ask at once)."""
        with self._lock:
            value = self._lookup(key)
            if value is not _MISSING:
                return value
            entry_lock = self._pending.setdefault(key, threading.Lock())
        with entry_lock:  # a second caller for the same entry waits here, then finds it
            with self._lock:
                value = self._lookup(key)
            if value is not _MISSING:
                return value
            try:
                value = make()
                with self._lock:
                    self._values[key] = value
                    while len(self._values) > self.max_entries:
                        self._values.popitem(last=False)
            finally:
                with self._lock:
                    self._pending.pop(key, None)
        return value

    def clear(self) -> None:
        with self._lock:
            self._values.clear()

    def __len__(self) -> int:
        return len(self._values)


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


def _key(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Hashable:
    key = tuple((type(a), a) for a in args) + tuple((k, type(v), v) for k, v in sorted(kwargs.items()))
    try:
        hash(key)
    except TypeError:
        raise TypeError(
            f"{fn.__qualname__}: @memo needs hashable arguments (numbers, strings, tuples), got "
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
        return cache.get_or_make(_key(fn, args, kwargs), lambda: fn(*args, **kwargs))

    cached.cache = cache  # type: ignore[attr-defined]
    return cached


def clear_all() -> None:
    """Empty every cache of this process (tests)."""
    for cache in _REGISTRY.caches():
        cache.clear()
