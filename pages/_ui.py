"""Shared Streamlit helpers for KV Lab's pages: progress, lesson prose, charts, downloads, errors, checks.

Every page is a thin script: `page_header(page_id)`, widgets with explicit keys, figures from `ui.charts`
shown with `show_chart(...)`, then `lesson_check(page_id)`. Calculations live in engine/ and lessons/;
this module only wires them to Streamlit.

State rules (Streamlit runs each learner's session in its own thread):
- per-learner state lives only in `st.session_state`;
- `st.cache_resource` only for read-only shared objects (never mutate what it returns);
- `st.cache_data` for pure calculations; no module-level mutable state here or in pages.

Progress contract (shared with pages/_progress_ui.py, which persists it):
    st.session_state["progress"] = {
        "visited": list[str],                                   # page ids, first-visit order
        "quiz": {question_id: {"answer": str, "correct": bool}},  # ids like "gqa.kv_formula"
        "diagnosis": {scenario_id: dict},                       # whatever the diagnosis page records
    }
Only the helpers below write it (`mark_visited`, `record_quiz`, `record_diagnosis`); each write calls
`_progress_ui.persist(progress)` when that module exists. `_progress_ui.sidebar_signin()` may replace the
dict with a stored one of the same shape (after `ensure_progress` normalizes it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import streamlit as st

from kernels.backend import describe
from lessons import content, quizzes
from ui.export import rows_to_csv, to_json

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[1]  # the repository root (pages/ lives under it)

# The course in order: (script path relative to the repo root, navigation title, Material icon).
# Page ids for lessons/<id>.md and progress: welcome, bandwidth, gqa, packing, fragmentation, paged,
# diagnosis, golden_rules, playground.
PAGES: list[tuple[str, str, str]] = [
    ("pages/0_welcome.py", "Welcome", ":material/school:"),
    ("pages/1_bandwidth.py", "1 · Memory bandwidth", ":material/speed:"),
    ("pages/2_gqa.py", "2 · MHA, MQA, GQA", ":material/hub:"),
    ("pages/3_packing.py", "3 · Packed batches", ":material/view_week:"),
    ("pages/4_fragmentation.py", "4 · Fragmentation", ":material/broken_image:"),
    ("pages/5_paged_attention.py", "5 · PagedAttention", ":material/grid_view:"),
    ("pages/6_diagnosis.py", "6 · Production diagnosis", ":material/medical_services:"),
    ("pages/7_golden_rules.py", "7 · Golden rules", ":material/verified:"),
    ("pages/8_playground.py", "8 · Engine playground", ":material/play_circle:"),
]


def available_pages(root: Path = ROOT) -> list[tuple[str, str, str]]:
    """The PAGES entries whose script exists under `root`."""
    return [entry for entry in PAGES if (root / entry[0]).exists()]


PROGRESS_KEY = "progress"
# Lesson pages counted for the sidebar's progress (welcome and playground are not lessons with a check).
LESSON_PAGES: tuple[str, ...] = ("bandwidth", "gqa", "packing", "fragmentation", "paged", "diagnosis", "golden_rules")


# --- cached shared resources -------------------------------------------------------------------------


@st.cache_resource(show_spinner=False)
def backend_info() -> dict:
    """kernels.backend.describe() computed once per process (read-only)."""
    return describe()


def _progress_module() -> Any | None:
    """pages/_progress_ui.py when the classroom module is present, else None."""
    try:
        return importlib.import_module("pages._progress_ui")
    except ImportError:
        return None


# --- progress ----------------------------------------------------------------------------------------


def ensure_progress() -> dict:
    """The learner's progress dict, created (or repaired to the contract's shape) in session state."""
    progress = st.session_state.get(PROGRESS_KEY)
    if not isinstance(progress, dict):
        progress = {}
    progress.setdefault("visited", [])
    progress.setdefault("quiz", {})
    progress.setdefault("diagnosis", {})
    st.session_state[PROGRESS_KEY] = progress
    return progress


def _persist(progress: dict) -> None:
    mod = _progress_module()
    if mod is None or not hasattr(mod, "persist"):
        return
    try:
        mod.persist(progress)
    except Exception as exc:  # persistence is optional: the lesson must keep working without it
        st.warning(f"Progress could not be saved ({exc}); it is kept for this session only.")


def mark_visited(page_id: str) -> None:
    """Record that the learner opened `page_id` (once)."""
    progress = ensure_progress()
    if page_id not in progress["visited"]:
        progress["visited"].append(page_id)
        _persist(progress)


def record_quiz(question_id: str, answer: str, correct: bool) -> None:
    """Record the learner's latest answer to one question."""
    progress = ensure_progress()
    entry = {"answer": answer, "correct": bool(correct)}
    if progress["quiz"].get(question_id) != entry:
        progress["quiz"][question_id] = entry
        _persist(progress)


def clear_quiz(question_ids: Sequence[str]) -> None:
    """Forget answers to these questions (progress and radio state); call it from a widget callback."""
    progress = ensure_progress()
    for qid in question_ids:
        progress["quiz"].pop(qid, None)
        st.session_state[f"quiz_{qid}"] = None
    _persist(progress)


def record_diagnosis(scenario_id: str, result: Mapping[str, Any]) -> None:
    """Record the learner's latest graded diagnosis of one incident scenario."""
    progress = ensure_progress()
    progress["diagnosis"][scenario_id] = dict(result)
    _persist(progress)


def progress_rows(progress: Mapping[str, Any] | None = None) -> list[dict]:
    """One row per lesson: visited flag and check score, for the sidebar table and its download."""
    progress = ensure_progress() if progress is None else progress
    rows = []
    for page_id in LESSON_PAGES:
        correct, total = quizzes.score(progress.get("quiz", {}), page_id)
        rows.append(
            {
                "lesson": content.load(page_id).title,
                "visited": page_id in progress.get("visited", []),
                "check": f"{correct}/{total}" if total else "—",
            }
        )
    return rows


# --- page furniture ----------------------------------------------------------------------------------


def page_header(page_id: str) -> None:
    """Title and intro prose from lessons/<page_id>.md; marks the page visited."""
    lesson = content.load(page_id)
    st.title(lesson.title)
    intro = lesson.sections.get(content.INTRO, "")
    if intro:
        st.markdown(intro)
    mark_visited(page_id)


def prose(page_id: str, section: str) -> None:
    """Render one `## section` of a lesson's Markdown (silently nothing if the file lacks it)."""
    text = content.load(page_id).sections.get(section)
    if text:
        st.markdown(text)


def sources(page_id: str) -> None:
    """The lesson's `## Sources` section in a collapsed expander (citations for the page's figures)."""
    text = content.load(page_id).sections.get("Sources")
    if text:
        with st.expander("Sources", expanded=False):
            st.markdown(text)


def show_error(message: str, hint: str | None = None) -> None:
    """A learner-facing error: what is wrong and how to fix it (never a traceback)."""
    st.error(f"{message}\n\n**How to fix:** {hint}" if hint else message)


def run_or_stop(fn: Callable[..., T], *args: Any, hint: str | None = None, **kwargs: Any) -> T:
    """Call fn; on a ValueError (bad learner input) show it with `show_error` and stop this re-run."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        show_error(str(exc), hint)
        st.stop()
        raise  # unreachable: st.stop() raises; keeps type checkers honest


def download_rows(rows: Sequence[Mapping[str, Any]], name: str, key: str, label: str = "data") -> None:
    """Two download buttons (CSV and JSON) for a table of rows; `key` must be unique on the page."""
    if not rows:
        return
    c1, c2 = st.columns(2)
    c1.download_button(
        f"Download {label} (CSV)", rows_to_csv(rows), file_name=f"{name}.csv", mime="text/csv", key=f"{key}_csv"
    )
    c2.download_button(
        f"Download {label} (JSON)",
        to_json(list(rows)),
        file_name=f"{name}.json",
        mime="application/json",
        key=f"{key}_json",
    )


def show_table(rows: Sequence[Mapping[str, Any]], name: str, key: str, label: str = "table") -> None:
    """A table plus its CSV/JSON downloads."""
    st.dataframe(list(rows), hide_index=True, key=f"{key}_table")
    download_rows(rows, name, key, label)


def show_chart(fig: Any, caption: str, rows: Sequence[Mapping[str, Any]], name: str, key: str) -> None:
    """A plotly figure with its caption, a data-table alternative (accessibility) and downloads."""
    st.plotly_chart(fig, key=f"{key}_chart", config={"displaylogo": False})
    st.caption(caption)
    with st.expander("Data behind this chart (table)", expanded=False):
        st.dataframe(list(rows), hide_index=True, key=f"{key}_data")
        download_rows(rows, name, key, "chart data")


# --- end-of-lesson check -----------------------------------------------------------------------------


def lesson_check(page_id: str, title: str = "Check your understanding") -> tuple[int, int]:
    """The page's 1–3 questions as radios with immediate explained feedback; returns (correct, total)."""
    questions = quizzes.for_page(page_id)
    if not questions:
        return 0, 0
    st.divider()
    st.subheader(title)
    progress = ensure_progress()
    for q in questions:
        choice = st.radio(q.prompt, q.options, index=None, key=f"quiz_{q.id}")
        if choice is None:
            continue
        result = quizzes.grade(q.id, choice)
        record_quiz(q.id, result.answer, result.correct)
        # The words "Correct" / "Not quite" and the icon carry the verdict, so colour is never the only signal.
        if result.correct:
            st.success(result.feedback, icon="✅")
        else:
            st.warning(result.feedback, icon="✖️")
    correct, total = quizzes.score(progress["quiz"], page_id)
    st.caption(f"Score on this page: {correct} / {total}")
    return correct, total


# --- sidebar (called by app.py) ----------------------------------------------------------------------


def sidebar() -> Any:
    """Backend badge, device name and sign-in; returns a sidebar container for `sidebar_progress` to fill."""
    info = backend_info()
    with st.sidebar:
        st.markdown(f"**Engine backend:** `{info['label']}`")
        st.caption(f"Device: {info['device']} · torch {info['torch']} · {info['threads']} threads")
        mod = _progress_module()
        if mod is not None and hasattr(mod, "sidebar_signin"):
            try:
                mod.sidebar_signin()
            except Exception as exc:  # a broken store must not take the course down
                st.warning(f"Sign-in is unavailable ({exc}); progress is kept for this session only.")
        return st.container()


def sidebar_progress(slot: Any) -> None:
    """Lesson progress in the sidebar; called after the page ran so this visit and its answers count."""
    progress = ensure_progress()
    rows = progress_rows(progress)
    done = sum(1 for r in rows if r["visited"])
    with slot:
        st.progress(done / len(rows), text=f"Lessons visited: {done} / {len(rows)}")
        correct, total = quizzes.score(progress["quiz"])
        st.caption(f"Quiz answers correct: {correct} / {total}")
        with st.expander("My progress", expanded=False):
            st.dataframe(rows, hide_index=True, key="sidebar_progress_table")
            st.download_button(
                "Download progress (JSON)",
                to_json(progress),
                file_name="kvlab-progress.json",
                mime="application/json",
                key="sidebar_progress_json",
            )
