"""Shared Streamlit helpers for KV Lab's pages: lesson prose, charts with their data, downloads, errors, checks.

Every page is a thin script: `page_header(page_id)`, widgets with explicit keys, figures from the `ui.charts*`
builders shown with `show_chart(...)`, then `lesson_check(page_id)` (the quiz, then the predict-then-observe
exercise of ui/predict.py). `page_header` shows the lesson's `## Objective` above its intro. A lesson's
deep-linked settings come from `linked_view(page_id)` (lessons/links.py parses and checks them; `link_note`
words a bad value). Calculations live in engine/ and lessons/; this module only wires them to Streamlit.
Progress helpers (`record_diagnosis`, `clear_quiz`, ...) are in ui/progress.py.

State rules (Streamlit runs each learner's session in its own thread):
- per-learner state lives only in `st.session_state`;
- `st.cache_resource` only for read-only shared objects (never mutate what it returns);
- `ui.memo.memo` for pure calculations and built figures (process-wide, shared read-only: results are frozen);
  no other module-level mutable state here or in pages.
"""

from __future__ import annotations

import dataclasses
import functools
import html
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import Any, TypeVar

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

from kernels.backend import describe
from lessons import content, links, quizzes
from ui.export import rows_to_csv, to_json
from ui.inert import inert_md, prose_md
from ui.memo import named_cache
from ui.predict import prediction_exercise, prediction_teaser
from ui.progress import ensure_progress, mark_visited, record_quiz

T = TypeVar("T")


_PLAIN = (str, int, float, bool, type(None))


class _NotPlain(Exception):
    """A figure argument with no exact, cheap key (an array, an arbitrary object)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Form:
    """A dataclass or enum member in a key: its qualified class name and values (no plain value reprs so)."""

    cls: str
    values: tuple


def _key_form(value: Any) -> Any:
    """``value`` rebuilt of str / int / float / bool / None in tuples, lists and dicts, so that its repr is an
    exact and cheap cache key: a lab's frozen dataclass becomes its class and field values, an enum member its
    class and value (Streamlit's hashing of a few hundred cells, or of a dozen dataclasses, costs milliseconds).
    _NotPlain for anything else."""
    cls = type(value)
    if isinstance(value, Enum):  # before _PLAIN: a StrEnum is a str, and two enums may share a value
        return _Form(f"{cls.__module__}.{cls.__qualname__}", (value.value,))
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, tuple):
        return tuple(_key_form(v) for v in value)
    if isinstance(value, list):
        return [_key_form(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise _NotPlain
        return {k: _key_form(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        fields = tuple(_key_form(getattr(value, f.name)) for f in dataclasses.fields(value))
        return _Form(f"{cls.__module__}.{cls.__qualname__}", fields)
    raise _NotPlain


def frozen_figure(fig: Any) -> Any:
    """``fig`` with its plotly dict computed once: st.plotly_chart serialises ``fig.to_dict()`` on every run,
    a deep copy of the whole figure; a shared, never mutated figure can hand out the same dict."""
    spec = fig.to_dict()
    fig.to_dict = lambda: spec
    fig._frozen_spec = spec  # read by chart_alt: plotly's own attribute access is slow
    return fig


@st.cache_resource(show_spinner=False, max_entries=512)
def _built_figure_hashed(name: str, args: tuple, kwargs: dict, _builder: Callable[..., Any]) -> Any:
    return frozen_figure(_builder(*args, **kwargs))  # other arguments (arrays, objects): Streamlit's own hashing


_FIGURES = named_cache("ui.page.figure", max_entries=512)


def figure(builder: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``builder(*args, **kwargs)`` (a ui.charts* figure builder: a pure function of its arguments) built once
    per process for each set of arguments and shared by every learner, read-only: building a plotly figure
    costs far more than the page's arithmetic. The cache (ui.memo) is keyed by the builder's name and its
    arguments' values (`_key_form`: numbers, strings and the labs' frozen dataclasses and enums); st.plotly_chart
    only reads a figure (it serialises its ``to_dict()``, computed once here)."""
    name = f"{builder.__module__}.{builder.__qualname__}"
    try:
        key = f"{name}{_key_form(args)!r}{sorted(_key_form(kwargs).items())!r}"
    except _NotPlain:
        return _built_figure_hashed(name, args, kwargs, builder)
    return _FIGURES.get_or_make(key, lambda: frozen_figure(builder(*args, **kwargs)))


@st.cache_resource(show_spinner=False)
def backend_info() -> dict:
    """kernels.backend.describe() computed once per process (read-only)."""
    return describe()


# --- page furniture ----------------------------------------------------------------------------------

# What the theme (.streamlit/config.toml) cannot set. A slider's value is drawn in the accent colour, 3.9:1 on
# the dark theme's background (WCAG asks 4.5:1). Streamlit's light plotly theme writes tick labels, axis
# titles, annotations and outside bar labels in #808495, 3.8:1 on white; the dark theme's #e6eaf1 is fine. Both
# take the body text colour instead (currentColor: the theme's, so the rule holds in either theme). The live
# round's projector screen (ui/live_screens.py) is read from the back of a room: its text and count are large.
PAGE_CSS = """<style>
[data-testid="stSliderThumbValue"], [data-testid="stSliderThumbValue"] p { color: inherit !important; }
[data-testid="stPlotlyChart"] text[style*="fill: rgb(128, 132, 149)"] { fill: currentColor !important; }
.st-key-live_screen p, .st-key-live_screen li { font-size: 1.6rem; line-height: 1.4; }
.st-key-live_screen [data-testid="stMetricValue"] { font-size: 4rem; line-height: 1.2; }
.st-key-live_screen [data-testid="stMetricValue"] * { font-size: inherit; }
</style>"""


def page_styles() -> None:
    """The course's few style rules (PAGE_CSS); a style-only st.html adds no element to the page."""
    st.html(PAGE_CSS)


def through_the_router() -> None:
    """Make sure this page runs inside app.py (its sidebar, sign-in and progress), also on a deep link.

    Streamlit 1.67 treats an app with a `pages/` folder as a v1 multipage app until some run has executed
    `st.navigation` (app.py's): until then a request for a page's URL runs that page script alone, and the
    first learners to open `/paged_attention?...` after a server start (an embedded lesson, say) got the
    page without the app around it. Streamlit's own flag for that mode is switched off here and the run
    restarted; the re-run goes through app.py's navigation to the same page with the same query.
    """
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False  # what st.navigation itself does on its first call
        st.rerun()


PAGE_FAILED = (
    "This page could not use what it was sent: a value no browser form sends, or a fault of ours. Reload the "
    "page to start it again from its defaults; your progress is kept, and the server's log has the details."
)


def run_page(page: Any) -> None:
    """Run the navigation's page; an exception it raises becomes a clear message and a logged traceback.

    Streamlit returns a select box's or a radio's value as the client sent it, even one that is not among
    the options, and some forged values fail inside Streamlit's own widget code: a hand-made client can make
    any page raise. Script control (st.stop, st.rerun) is not an Exception and passes through.
    """
    try:
        page.run()
    except Exception:
        logging.getLogger("kvlab").exception("page %r failed", getattr(page, "url_path", page))
        st.error(PAGE_FAILED, icon=":material/restart_alt:")


def lesson_section(body: Callable[[], None]) -> None:
    """Run ``body`` (a lesson's calculator: its linked view, widgets, numbers and charts) as an ``st.fragment``.

    A widget inside it re-runs ``body`` alone: not app.py's navigation and sidebar, not the page's header,
    sources or end-of-lesson check, none of which depend on those widgets (the learner's progress changes
    only in the full runs that draw the header and the check). A full run (opening the page, a quiz answer)
    still runs everything in page order. An exception inside a fragment run never reaches ``run_page``, so it
    is handled here the same way: the clear message and a logged traceback."""

    @functools.wraps(body)
    def section() -> None:
        try:
            body()
        except Exception:
            logging.getLogger("kvlab").exception("lesson section %r failed", body.__qualname__)
            st.error(PAGE_FAILED, icon=":material/restart_alt:")

    st.fragment(section)()


OBJECTIVE = "Objective"  # the `## Objective` section: what the learner will be able to do after the lesson


def page_header(page_id: str) -> None:
    """Title, the lesson's objective and intro prose from lessons/<page_id>.md; marks the page visited."""
    through_the_router()
    lesson = content.load(page_id)
    st.title(lesson.title)
    objective = lesson.sections.get(OBJECTIVE)
    if objective:
        st.info(f"**Objective:** {objective}", icon=":material/flag:")
    intro = lesson.sections.get(content.INTRO, "")
    if intro:
        st.markdown(intro)
    prediction_teaser(page_id)
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


def show_error(message: object, hint: str | None = None) -> None:
    """A learner-facing error: what is wrong and how to fix it (never a traceback).

    ``message`` is shown inertly (`ui.inert.prose_md`): an exception's text often quotes the bad value a
    learner typed, so it is never read as Markdown, LaTeX, an icon or a link. ``hint`` is the course's own
    Markdown and is rendered as such."""
    body = prose_md(message)
    st.error(f"{body}\n\n**How to fix:** {hint}" if hint else body)


def run_or_stop(fn: Callable[..., T], *args: Any, hint: str | None = None, **kwargs: Any) -> T:
    """Call fn; on a ValueError (bad learner input) show it with `show_error` and stop this re-run."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        show_error(exc, hint)
        st.stop()
        raise  # unreachable: st.stop() raises; keeps type checkers honest


def download_rows(rows: Sequence[Mapping[str, Any]], name: str, key: str, label: str = "data") -> None:
    """Two download buttons (CSV and JSON) for a table of rows; `key` must be unique on the page."""
    if not rows:
        return
    # The files are made when a learner asks for one (Streamlit calls ``data`` on the click), not on every
    # run: most runs never download, and every chart on every page has both buttons.
    rows = list(rows)
    row = st.container(horizontal=True)  # one block, not a row of two columns: every message costs a run time
    row.download_button(
        f"Download {label} (CSV)",
        lambda: rows_to_csv(rows),
        file_name=f"{name}.csv",
        mime="text/csv",
        key=f"{key}_csv",
    )
    row.download_button(
        f"Download {label} (JSON)",
        lambda: to_json(rows),
        file_name=f"{name}.json",
        mime="application/json",
        key=f"{key}_json",
    )


def metric_row(count: int) -> list[Any]:
    """A row for ``count`` st.metric calls, made in order: ``m1, m2 = metric_row(2)`` then ``m1.metric(...)``,
    ``m2.metric(...)``. One horizontal container (each returned name is the same one), not ``st.columns``: a
    row of columns is one message per column on every run, and a page run's cost follows its messages."""
    row = st.container(horizontal=True)
    return [row] * count


def show_table(rows: Sequence[Mapping[str, Any]], name: str, key: str, label: str = "table") -> None:
    """A table plus its CSV/JSON downloads."""
    st.dataframe(list(rows), hide_index=True, key=f"{key}_table")
    download_rows(rows, name, key, label)


SUMMARY_LEAD = "In short:"  # starts every chart's one-sentence summary on the page
# plotly's tool bar puts about ten buttons per chart in the Tab order; a keyboard learner would step through
# them on every chart. Kept: saving the picture (and Streamlit's full screen); dragging still zooms, a double
# click resets, and the table under each chart has the exact numbers.
CHART_CONFIG = {
    "displaylogo": False,
    "modeBarButtonsToRemove": [
        "zoom2d",
        "pan2d",
        "select2d",
        "lasso2d",
        "zoomIn2d",
        "zoomOut2d",
        "autoScale2d",
        "resetScale2d",
    ],
}


def chart_alt(fig: Any, summary: str | None = None) -> str:
    """The chart's accessible name: its title (plotly's markup and escapes removed), then the summary."""
    spec = getattr(fig, "_frozen_spec", None)
    title = spec.get("layout", {}).get("title", {}).get("text") if spec is not None else fig.layout.title.text
    plain = " ".join(html.unescape(re.sub(r"<[^>]*>", " ", title or "")).split())
    text = " ".join(part for part in (plain and f"{plain.rstrip('.')}.", summary) if part)
    return text or "Chart (its data is in the table below)"


Rows = Sequence[Mapping[str, Any]]


def show_chart(
    fig: Any,
    caption: str,
    rows: Rows | Callable[[], Rows],
    name: str,
    key: str,
    *,
    summary: str,
) -> None:
    """A plotly figure with its one-sentence summary, caption, a data-table alternative and downloads.

    Accessibility: `summary` says what the chart shows at the current settings (the number the lesson is
    about; the labs compute it). Screen readers get it twice: in the chart's accessible name (`alt`, after
    its title) and as the text under it; the table under it holds every number the chart draws. Every
    course chart passes one (tests/ui/test_chart_summaries.py)."""
    if not summary.strip():
        raise ValueError(f"chart {key!r}: give a one-sentence summary of what it shows")
    st.plotly_chart(fig, key=f"{key}_chart", config=CHART_CONFIG, alt=chart_alt(fig, summary))
    st.markdown(f"**{SUMMARY_LEAD}** {summary}")
    st.caption(caption)
    chart_table(rows, name, key)


CHART_TABLE_LABEL = "Data behind this chart (table)"
CHART_TABLE_OPEN = "_table_open"  # suffix of the session-state key that holds whether a chart's table is open


def chart_table(rows: Rows | Callable[[], Rows], name: str, key: str) -> None:
    """The chart's numbers as a table with CSV/JSON downloads, in an expander whose contents are made only
    while it is open.

    A data table is the costliest element of a page run (pandas, then Arrow: several milliseconds each, and a
    lesson draws up to nine), and most learners never open one. Opening the expander re-runs the part of the
    page it is in (the lesson's calculator, a fragment) and the table is drawn; it stays open, and current,
    across later runs until it is closed. Its state is ``st.session_state[key + CHART_TABLE_OPEN]``. ``rows``
    may be a function that makes them (a large table: it is then made only while the table is open too)."""
    box = st.expander(CHART_TABLE_LABEL, key=f"{key}{CHART_TABLE_OPEN}", on_change="rerun")
    if box.open:
        rows = rows() if callable(rows) else rows
        with box:
            st.dataframe(list(rows), hide_index=True, key=f"{key}_data")
            download_rows(rows, name, key, "chart data")


# --- end-of-lesson check -----------------------------------------------------------------------------


def lesson_check(page_id: str, title: str = "Check your understanding") -> tuple[int, int]:
    """The page's 1–3 questions as radios with explained feedback, then its prediction exercise (lessons 1–7).

    Returns the quiz's (correct, total)."""
    questions = quizzes.for_page(page_id)
    if not questions:
        prediction_exercise(page_id)
        return 0, 0
    st.divider()
    st.subheader(title)
    progress = ensure_progress()
    for q in questions:
        index = quizzes.saved_choice(progress["quiz"], q.id)  # shown again after navigating or signing in
        choice = st.radio(q.prompt, q.options, index=index, key=f"quiz_{q.id}")
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
    prediction_exercise(page_id)
    return correct, total


# --- deep links: a page's main settings in the URL (lessons/links.py parses and checks them) ----------


def link_note(bad: links.BadValue) -> str:
    """The warning for a link parameter the page did not take: Markdown whose only untrusted parts (the
    link's value, a free-text parameter's complaint about it) are inert (`ui.inert`)."""
    why = f"{prose_md(bad.reason)}; it takes {bad.accepts}" if bad.reason is not None else f"it takes {bad.accepts}"
    return (
        f"Link parameter `{bad.name}` has the value {inert_md(bad.raw)}, which is not valid ({why}); "
        f"showing the default, {inert_md(bad.default)}."
    )


LINK_LABEL = "Copy link to this view"
LINK_OPEN = "_link_open"  # suffix of the session-state key that holds whether the link expander is open


class LinkedView:
    """A page's deep-linked settings for this run (from `linked_view`); `publish()` after the last widget."""

    def __init__(self, spec: links.LinkSpec) -> None:
        self.spec = spec
        self._top = st.container()  # notes and the link control sit under the page's intro
        query = {name: st.query_params[name] for name in spec.names if name in st.query_params}
        wanted, bad = links.resolve(spec, query)
        self.keys: dict[str, str] = {}
        current: dict[str, Any] = {}  # each setting's value this run: the widget's own, else the link's
        shown = []
        for p in spec.params:
            key = p.key_for(current)
            self.keys[p.name] = key
            if key not in st.session_state:
                # A widget the page has not drawn yet in this session (the page was just opened, or a widget
                # that depends on a changed setting): it starts from the link when the settings it depends
                # on are the link's, else from its default. A widget already on screen keeps its value,
                # so a re-run that races a stale URL can never undo a learner's move.
                same = all(current[e] == wanted[e] for e in current)
                st.session_state[key] = wanted[p.name] if same else p.default_for(current)
                shown += [link_note(bad[p.name])] if p.name in bad else []
            current[p.name] = st.session_state[key]
        for note in shown:
            self._top.warning(note, icon=":material/link_off:")

    def values(self) -> dict[str, Any]:
        """Each linked setting's current value (the widgets' values once they are drawn)."""
        return {name: st.session_state.get(key) for name, key in self.keys.items()}

    def publish(self) -> str:
        """Write the view into the address bar (only what changed) and show the link; returns the link."""
        query = links.query_for(self.spec, self.values())
        others = links.other_pages_params(self.spec)  # left over from a lesson opened before this one
        if any(st.query_params.get(k) != v for k, v in query.items()) or any(k in others for k in st.query_params):
            kept = {k: v for k, v in st.query_params.to_dict().items() if k not in others and k not in query}
            st.query_params.from_dict({**kept, **query})  # one address-bar update; embed=true is kept
        link = links.link(self.spec, self.values())
        box = self._top.expander(
            LINK_LABEL, icon=":material/link:", key=f"{self.spec.page_id}{LINK_OPEN}", on_change="rerun"
        )
        if not box.open:
            return link  # its contents are made only while it is open, like a chart's table
        with box:
            st.caption("Add this to the app's address (for example `https://kvlab.example.org/`):")
            st.code(link, language=None, wrap_lines=True)  # no sideways scrolling a keyboard cannot reach
            st.caption("To embed this view in a course page (`embed=true`: no Streamlit toolbar or footer):")
            embed = links.link(self.spec, self.values(), embed="true")
            st.code(
                f'<iframe src="https://kvlab.example.org/{embed}" width="100%" height="900" '
                'style="border:0" title="KV Lab"></iframe>',
                language=None,  # Streamlit's syntax colours are under 4.5:1 on the code background
                wrap_lines=True,
            )
        return link


def current_view(page_id: str) -> dict[str, str]:
    """The settings of ``page_id`` in this session's address, checked (a bad or missing value: its default), as
    the page's query parameters: what a teacher's "show the class these settings" sends (ui/live_screens.py)."""
    spec = links.SPECS[page_id]
    query = {name: st.query_params[name] for name in spec.names if name in st.query_params}
    return links.query_for(spec, links.resolve(spec, query)[0])


def adopt_view(page_id: str, query: Mapping[str, str]) -> None:
    """Set the widgets of ``page_id`` to the view ``query`` names before switching to it (following a teacher):
    `LinkedView` keeps a widget's own value over the link's, so a learner who had moved them sees the link's."""
    spec = links.SPECS[page_id]
    wanted, _ = links.resolve(spec, dict(query))
    earlier: dict[str, Any] = {}
    for p in spec.params:
        st.session_state[p.key_for(earlier)] = wanted[p.name]
        earlier[p.name] = wanted[p.name]


def linked_view(page_id: str) -> LinkedView:
    """The page's settings from the URL (bad values: a warning and the default), seeded into widget state.

    Call it after `page_header` and before the page's widgets, which then take `key=view.keys[name]` and no
    default of their own (lessons/links.py holds the defaults); call `view.publish()` after the last of them.
    """
    return LinkedView(links.SPECS[page_id])
