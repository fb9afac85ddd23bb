"""Built figures shared by every learner: `figure(builder, ...)` builds a ui.charts* figure once per process for
each set of arguments, and `frozen_figure` makes a figure hand out its plotly dict without copying it.

Building a plotly figure costs far more than a page's arithmetic, and a shared figure is only read
(st.plotly_chart serialises its ``to_dict()``, computed once here), so one built figure serves every run of
every learner. The cache is the app's one cache for shared results (`ui.memo`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from ui.memo import named_cache, typed_key

T = TypeVar("T")

_PLAIN = (str, int, float, bool, type(None))


def _plain(value: Any) -> bool:
    """Whether ``value`` is built only of str / int / float / bool / None in tuples, lists and dicts: then its
    repr is exact and cheap (Streamlit's hashing of a few hundred table cells costs milliseconds)."""
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def frozen_figure(fig: Any) -> Any:
    """``fig`` with its plotly dict computed once: st.plotly_chart serialises ``fig.to_dict()`` on every run,
    a deep copy of the whole figure; a shared, never mutated figure can hand out the same dict."""
    spec = fig.to_dict()
    fig.to_dict = lambda: spec
    fig._frozen_spec = spec  # read by chart_alt: plotly's own attribute access is slow
    return fig


_FIGURES = named_cache("ui.figure_cache.figure", max_entries=512)


def figure_key(builder: Callable[..., Any], args: tuple, kwargs: dict) -> Hashable:
    """The cache key of ``builder(*args, **kwargs)``: the builder's name and its arguments' values.

    Rows of numbers and strings (lists and dicts, not hashable) are keyed by their repr, which is exact for
    them; anything else by its hash and type, as `ui.memo` keys a call (frozen dataclasses, enums, tuples). A
    TypeError names the builder and the fix for an argument that is neither (a list inside a dataclass, an
    array)."""
    name = f"{builder.__module__}.{builder.__qualname__}"
    if _plain(args) and _plain(kwargs):
        return f"{name}{args!r}{sorted(kwargs.items())!r}"
    return name, typed_key(f"figure({builder.__qualname__}, ...)", args, kwargs)


def figure(builder: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``builder(*args, **kwargs)`` (a ui.charts* figure builder: a pure function of its arguments) built once
    per process for each set of arguments (`figure_key`) and shared by every learner, read-only."""
    return _FIGURES.get_or_make(figure_key(builder, args, kwargs), lambda: frozen_figure(builder(*args, **kwargs)))
