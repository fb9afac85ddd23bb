"""A learner's progress as a dict, and the merge that lets two sessions of one learner save without losing
each other's work (no database, no Streamlit).

Shape (ui/progress.py documents what each part holds): ``visited`` page ids, then ``quiz``, ``diagnosis`` and
``predict`` entries keyed by id, and ``written_at_us``: per part and id, when the item was last written or
cleared. ``merge_progress`` is a union of visits and, per item, the later write (a cleared answer is a time
with no entry, a tombstone); it is commutative, associative and idempotent, so sessions and replicas can
merge in any order and agree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

MAX_PROGRESS_BYTES = 64_000  # one learner's JSON; far above a full course, small enough to refuse abuse
ID_PARTS = ("quiz", "diagnosis", "predict")  # progress parts keyed by question / scenario / page id
STAMPS = "written_at_us"  # progress key: {part: {id: microseconds since 1970 of the id's last write or clear}}


def empty_progress() -> dict[str, Any]:
    """A fresh progress dict: nothing visited, no answers (quiz, diagnosis, predict: keyed by id), no stamps."""
    return {"visited": [], "quiz": {}, "diagnosis": {}, "predict": {}, STAMPS: {}}


def _clean_stamps(stamps: object) -> dict[str, dict[str, int]]:
    if not isinstance(stamps, Mapping):
        raise ValueError(f"progress[{STAMPS!r}] must be a dict {{part: {{id: microseconds}}}}")
    out: dict[str, dict[str, int]] = {}
    for part, by_id in stamps.items():
        if part not in ID_PARTS:
            continue  # a part this version does not know: drop its stamps with it
        if not isinstance(by_id, Mapping):
            raise ValueError(f"progress[{STAMPS!r}][{part!r}] must be a dict {{id: microseconds}}")
        clean = {}
        for k, v in by_id.items():
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int | float) or not v == v:
                raise ValueError(f"progress[{STAMPS!r}][{part!r}] must map id strings to microseconds")
            clean[k] = int(v)
        if clean:
            out[part] = clean
    return out


def normalize_progress(progress: object) -> dict[str, Any]:
    """Check the progress dict shape and return a JSON-safe copy; raise ValueError naming the bad part."""
    if not isinstance(progress, Mapping):
        raise ValueError(f"progress must be a dict, got {type(progress).__name__}")
    visited = progress.get("visited", [])
    if not isinstance(visited, list | tuple) or not all(isinstance(v, str) for v in visited):
        raise ValueError("progress['visited'] must be a list of page ids (strings)")
    out = empty_progress()
    out["visited"] = list(dict.fromkeys(visited))  # unique, first-visit order
    for part in ID_PARTS:
        entries = progress.get(part, {})
        if not isinstance(entries, Mapping) or not all(isinstance(k, str) for k in entries):
            raise ValueError(f"progress[{part!r}] must be a dict keyed by id strings")
        out[part] = {k: v for k, v in entries.items()}
    out[STAMPS] = _clean_stamps(progress.get(STAMPS) or {})
    try:
        text = json.dumps(out, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"progress must hold only JSON values (str, number, bool, list, dict): {exc}") from exc
    if len(text) > MAX_PROGRESS_BYTES:
        raise ValueError(f"progress is {len(text)} bytes; the limit is {MAX_PROGRESS_BYTES}")
    return json.loads(text)


def _stamp(progress: Mapping[str, Any], part: str, item: str) -> int:
    """When ``item`` of ``part`` was last written or cleared (0: unknown, e.g. a row from before stamps)."""
    return int(progress[STAMPS].get(part, {}).get(item, 0))


def _side(progress: Mapping[str, Any], part: str, item: str) -> tuple[int, int, str]:
    """A total order of one item's versions: later write first, then an entry over a tombstone, then content."""
    present = item in progress[part]
    return (_stamp(progress, part, item), int(present), json.dumps(progress[part].get(item), sort_keys=True))


def merge_progress(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Two progress dicts as one: visits a union, each item the later write of the two (by ``written_at_us``).

    Per item the merge takes the maximum of a total order (stamp, entry-over-tombstone, content), so it is
    commutative, associative and idempotent: sessions can merge in any order and agree. An item with a stamp
    but no entry is a cleared answer (a tombstone); it wins over older entries. Items without a stamp (rows
    from before stamps) lose to any stamped write."""
    x, y = normalize_progress(a), normalize_progress(b)
    out = empty_progress()
    out["visited"] = list(dict.fromkeys(x["visited"] + y["visited"]))
    for part in ID_PARTS:
        items = set(x[part]) | set(y[part]) | set(x[STAMPS].get(part, {})) | set(y[STAMPS].get(part, {}))
        for item in sorted(items):
            win = x if _side(x, part, item) >= _side(y, part, item) else y
            if item in win[part]:
                out[part][item] = win[part][item]
            stamp = _stamp(win, part, item)
            if stamp:
                out[STAMPS].setdefault(part, {})[item] = stamp
    return normalize_progress(out)  # the size limit holds for the union too


def stamp_changes(progress: Mapping[str, Any], base: Mapping[str, Any] | None, now_us: int) -> dict[str, Any]:
    """``progress`` with a write time for every item that differs from ``base`` (what was last saved or
    loaded): added or changed entries and removed ones (tombstones). Each new stamp is later than the
    item's previous one, so a write always wins over the version it replaced, even with clocks apart.
    With no ``base`` only items without any stamp are stamped (work done before signing in)."""
    out = normalize_progress(progress)
    old = normalize_progress(base) if base is not None else None
    for part in ID_PARTS:
        stamps = out[STAMPS].setdefault(part, {})
        items = set(out[part]) | (set(old[part]) if old else set())
        for item in items:
            if old is None:
                changed = item in out[part] and item not in stamps
            else:
                changed = (item in out[part], out[part].get(item)) != (item in old[part], old[part].get(item))
            if changed:
                before = max(stamps.get(item, 0), _stamp(old, part, item) if old else 0)
                stamps[item] = max(now_us, before + 1)
        if not stamps:
            del out[STAMPS][part]
    return out


def stamp_missing(progress: Mapping[str, Any], now_us: int) -> dict[str, Any]:
    """``progress`` with ``now_us`` as the write time of every entry that has none (a caller that does not stamp)."""
    return stamp_changes(progress, None, now_us)


def visible_progress(progress: Mapping[str, Any]) -> dict[str, Any]:
    """The progress without its bookkeeping (write stamps): what a learner or teacher reads."""
    out = normalize_progress(progress)
    del out[STAMPS]
    return out
