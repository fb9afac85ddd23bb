"""The one check of a whole-number argument, shared by every layer that may import kernels/.

A count or a size is a Python (or numpy) integer: `True` is an `int` in Python but never a count, and a float
such as `16.0` is refused rather than rounded, so a slider or a config that hands over the wrong type is told
so by name instead of silently indexing block 1 or truncating a length.
"""

from __future__ import annotations

from numbers import Integral


def is_whole(value: object) -> bool:
    """Whether ``value`` is an integer (Python or numpy) and not a bool."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def check_int(
    name: str,
    value: object,
    *,
    minimum: int | None = 1,
    maximum: int | None = None,
    kind: str = "an integer",
    hint: str = "",
) -> int:
    """``value`` as an int when it is whole and within [minimum, maximum]; else a ValueError naming it.

    The message reads ``name=value must be <kind> >= minimum`` (and ``<= maximum``), then `` (hint)``.
    """
    ok = is_whole(value)
    if ok and minimum is not None and value < minimum:
        ok = False
    if ok and maximum is not None and value > maximum:
        ok = False
    if ok:
        return int(value)
    bounds = []
    if minimum is not None:
        bounds.append(f">= {minimum}")
    if maximum is not None:
        bounds.append(f"<= {maximum}")
    message = f"{name}={value!r} must be {kind}" + (" " + " and ".join(bounds) if bounds else "")
    raise ValueError(message + (f" ({hint})" if hint else ""))
