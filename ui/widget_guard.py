"""A widget value no browser sends is dropped where Streamlit first reads it, so it cannot break the session.

The browser reports every widget's value as a WidgetState protobuf; Streamlit keeps it serialized and turns
it into a Python value (the widget's deserializer) on the next read, which for every widget the session
has shown happens in `SessionState.on_script_will_rerun`, before any page code runs. A hand-made client can
send a value of the wrong kind (a `string_value` for a number input, a list for a select box, a bool for a
slider) or a number no widget holds (NaN, infinity). Some deserializers then raise there, outside the
app's error handling, and since the value stays stored, every later run of that session raises again
until a reload; others return NaN, which the widget's own code chokes on in every later run.

`install()` guards the two places Streamlit handles a serialized widget value. Where the browser's values
come in (`WStates.set_widget_from_proto`), a value for a widget this session has drawn is stored only if it
is finite and its widget's deserializer accepts it; otherwise it is left out, as if the browser had not
sent it, so the widget keeps the value it had and the page runs normally. A reconnecting browser's values
for widgets not drawn yet cannot be checked then; where such a value is first read (`WStates.__getitem__`)
a refused one is replaced by "no value" (the widget's default) instead of raising again on every run.
`ui.serve` installs it before the server starts.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from streamlit.proto.WidgetStates_pb2 import WidgetState
from streamlit.runtime.state import common as _common
from streamlit.runtime.state import session_state as _session_state

_log = logging.getLogger("kvlab")
# Widgets whose deserializer only converts (it can be tried on a value and the value used again).
_PURE = frozenset(
    {"bool_value", "double_value", "int_value", "string_value", "double_array_value", "int_array_value"}
    | {"string_array_value", "json_value"}
)


def finite(state: Any) -> bool:
    """Whether a WidgetState proto holds no NaN or infinity (every value a browser's widget can send)."""
    field = state.WhichOneof("value")
    if field == "double_value":
        return math.isfinite(state.double_value)
    if field == "double_array_value":
        return all(math.isfinite(v) for v in state.double_array_value.data)
    return True


def refused(state: Any, metadata: Any) -> str | None:
    """Why a widget's deserializer cannot use this WidgetState (None when it can), trying it on a copy;
    widgets whose deserializer consumes what it reads (uploads, chat input) are only checked for finiteness."""
    if not finite(state):
        return "not a finite number"
    if metadata.value_type not in _PURE or state.WhichOneof("value") is None:
        return None
    try:
        metadata.deserializer(_common.unpack_widget_state_value(state))
    except Exception as exc:  # a deserializer's refusal of a value of the wrong kind
        return f"{type(exc).__name__}: {str(exc)[:120]}"
    return None


def _drop(state: Any, reason: str) -> None:
    _log.warning("dropped a widget value no browser sends (%s, %s)", state.WhichOneof("value"), reason)


def _guarded_set(original: Any) -> Any:
    def set_widget_from_proto(self: Any, widget_state: Any) -> None:
        metadata = self.widget_metadata.get(widget_state.id)
        reason = refused(widget_state, metadata) if metadata is not None else None
        if reason is None:
            original(self, widget_state)
        else:
            _drop(widget_state, reason)

    set_widget_from_proto.kvlab_guarded = True  # type: ignore[attr-defined]
    return set_widget_from_proto


def _guarded_get(original: Any) -> Any:
    def getitem(self: Any, key: str) -> Any:
        wstate = self.states.get(key)
        if not isinstance(wstate, _session_state.Serialized) or key not in self.widget_metadata:
            return original(self, key)
        reason = None if finite(wstate.value) else "not a finite number"
        if reason is None:
            try:
                return original(self, key)
            except KeyError:
                raise
            except Exception as exc:
                reason = f"{type(exc).__name__}: {str(exc)[:120]}"
        _drop(wstate.value, reason)
        # Replaced in place, not deleted: Streamlit may be iterating over these states right now.
        self.states[key] = _session_state.Serialized(WidgetState(id=key))
        raise KeyError(key)  # what Streamlit's callers already read as "no value for this widget"

    getitem.kvlab_guarded = True  # type: ignore[attr-defined]
    return getitem


def install() -> bool:
    """Guard Streamlit's widget-value handling in this process (idempotent); True when it was installed now."""
    states = _session_state.WStates
    if getattr(states.set_widget_from_proto, "kvlab_guarded", False):
        return False
    states.set_widget_from_proto = _guarded_set(states.set_widget_from_proto)  # type: ignore[method-assign]
    states.__getitem__ = _guarded_get(states.__getitem__)  # type: ignore[method-assign]
    return True


__all__ = ["finite", "install", "refused"]
