"""The live round's screens: the teacher's projector screen, the teacher's banner on the lessons, the learners' banner.

- `teacher_screen(code)` (pages/teacher.py, "Live round"): start a round on a lesson, reveal the answer, start
  a new round, move the class to another lesson, end the session, close the class to names new this session
  and admit the ones the teacher knows (their names only in a folded box); under the controls the projector screen, a
  fragment that re-reads the class's answers every `TEACHER_POLL_S`: the lesson's question in large type, the
  number of answers and their histogram, no names. The engine's answer stays hidden until the teacher reveals
  it; then the chart marks it and a second chart groups the answers by the slip they most likely come from.
- `teacher_banner()` (app.py, every page of a session that leads a live round): which round is live, and on a
  lesson page one click to show the class this lesson with the settings on the teacher's screen.
- `learner_banner()` (app.py, every page of a signed-in learner): a fragment polling the class's board every
  `LEARNER_POLL_S` that says which lesson the teacher is on, with a Follow button (the teacher's lesson with
  the teacher's settings); after the reveal, the learner's own answer against the class's and the engine's.

Both fragments re-run alone (`st.fragment(run_every=...)`): a poll never re-runs the page under them. The
logic is in lessons/live.py (the class's answers read against the lesson's prediction) and progress/live.py
(the board in the database); ui/live.py holds the session's side.
"""

from __future__ import annotations

import streamlit as st

from lessons import links, predictions
from lessons.live import ClassRound, class_round, learner_line
from progress import ProgressStoreError, name_key
from progress.live import LiveBoard, LiveRound
from ui import live
from ui.chart_view import show_chart
from ui.charts_live import class_histogram, histogram_summary, slip_chart, slip_summary
from ui.course import page
from ui.figure_cache import figure
from ui.inert import inert_md, prose_md
from ui.linked_view import adopt_view, current_view
from ui.logs import event, learner_id
from ui.memo import named_cache

_REVEALED = named_cache("ui.live_screens.revealed", max_entries=64)  # shared read-only: ClassRound is frozen
_UNKNOWN = (
    "This round is on {lesson}, which is not a lesson with a prediction question on this server (a replica of "
    "another version?). Start a new round on one of this course's lessons."
)
NO_DATABASE = (
    "Live rounds need the class's database: this server keeps progress for each session only. Whoever runs it "
    "fixes the progress database (README, Deployment: KVLAB_DATA_DIR or KVLAB_DATABASE_URL)."
)


def _title(page_id: str) -> str:
    return page(page_id).title


def _here() -> str | None:
    """The lesson (with a prediction question) this session's page shows, else None."""
    path = st.session_state.get(live.PAGE_KEY)
    return next((p for p in predictions.PAGES if links.SPECS[p].url_path == path), None)


# --- the teacher's screen ------------------------------------------------------------------------------------


def teacher_screen(code: str) -> None:
    """The live round of class ``code``: its controls, then the projector screen (re-read every second)."""
    board = live.live_board()
    if board is None:
        st.warning(NO_DATABASE)
        return
    try:
        current = board.current(code)
        if current is None:
            _start(board, code)
            return
        st.session_state[live.LEAD_KEY] = code
        _controls(board, code, current)
    except ProgressStoreError as exc:
        st.error(prose_md(exc))
        return
    every = live.REVEALED_POLL_S if current.revealed else live.TEACHER_POLL_S  # a revealed round takes no answers
    st.fragment(_projector, run_every=every)(code)


def _start(board: LiveBoard, code: str) -> None:
    st.write(
        f"No live round in class {inert_md(code)}. Start one on a lesson: learners signed in with this class code "
        "see on every page, within a few seconds, that you are on it and can follow with one click. Their checked "
        "predictions on that lesson come to this screen as counts, without names."
    )
    lesson = st.selectbox("Lesson", predictions.PAGES, format_func=_title, key="live_lesson")
    start = st.button("Start the live round", type="primary", key="live_start", icon=":material/cast_for_education:")
    if start and lesson in predictions.PAGES:  # a forged choice is not a lesson with a question: nothing opens
        opened = board.open_round(code, lesson)
        event("live_round_started", class_code=code, lesson=lesson, round=opened.round)
        st.session_state[live.LEAD_KEY] = code
        st.rerun()


def _controls(board: LiveBoard, code: str, current: LiveRound) -> None:
    row = st.container(horizontal=True)
    reveal = row.button("Reveal the answer", type="primary", key="live_reveal", disabled=current.revealed)
    again = row.button("New round on this lesson", key="live_again")
    end = row.button("End the live session", key="live_end")
    others = [p for p in predictions.PAGES if p != current.lesson]
    move = st.container(horizontal=True, vertical_alignment="bottom")
    target = move.selectbox("Move the class to", others, format_func=_title, key="live_move_to")
    moved = move.button("Move the class", key="live_move")
    if reveal:
        board.reveal(code, current.round)
        event(
            "live_round_revealed", class_code=code, lesson=current.lesson, round=current.round, answers=current.answers
        )
    elif again:
        opened = board.open_round(code, current.lesson, dict(current.settings))
        event("live_round_new", class_code=code, lesson=current.lesson, round=opened.round)
    elif moved and target in others:
        opened = board.open_round(code, target)
        event("live_class_moved", class_code=code, lesson=target, previous=current.lesson, round=opened.round)
    elif end:
        board.close(code)
        event("live_session_ended", class_code=code, lesson=current.lesson, round=current.round)
        st.session_state.pop(live.LEAD_KEY, None)
    elif not _gate(board, code, current):
        return
    st.rerun()


def _gate(board: LiveBoard, code: str, current: LiveRound) -> bool:
    """The class closed to names new this session, and the waiting names to admit; True after a change."""
    closed = st.toggle(
        "Only learners seen before this session count (new names wait for you to admit them)",
        value=current.closed,
        key=f"live_closed_{current.opened_at}",  # per round: the toggle follows the board, not an old run
    )
    if closed != current.closed:
        board.set_closed(code, closed)
        event("live_class_closed" if closed else "live_class_opened", class_code=code, round=current.round)
        return True
    if not current.waiting:
        return False
    # Names, so folded: the projector shows the room no name (open it on the teacher's own screen).
    with st.expander(f"New names waiting: {current.waiting}", expanded=False):
        for name in board.waiting_names(code):
            row = st.container(horizontal=True, vertical_alignment="center")
            row.markdown(inert_md(name))
            if row.button(
                "Admit", key=f"live_admit_{name_key(name)}", help="Count this name's answers: you know who it is"
            ):
                board.admit(code, name)
                event("live_name_admitted", class_code=code, learner_id=learner_id(code, name))
                return True
    return False


def _projector(code: str) -> None:
    board = live.live_board()
    if board is None:
        return
    try:
        current = board.current(code)
        if current is None:
            st.info("This live session has ended.")
            return
        if current.lesson not in predictions.PAGES:
            st.warning(_UNKNOWN.format(lesson=inert_md(current.lesson)))
            return
        cr = class_round(current.lesson, board.answers(code, current.round), current.revealed)
    except ProgressStoreError as exc:
        st.error(prose_md(exc))
        return
    screen = st.container(key="live_screen")  # large type (ui/styles.py's PAGE_CSS)
    with screen:
        st.markdown(f"### {_title(current.lesson)} · round {current.round}")
        st.markdown(cr.prompt)
        counts = st.container(horizontal=True)
        counts.metric("Answers", cr.answers)
        counts.metric(
            "From names new this session",
            current.new_answers,
            help="Answers from names whose first sign-in in this class came after this live session started.",
        )
        if current.waiting:
            st.caption(f"{current.waiting} answers from new names wait for you to admit them (not counted).")
        if not cr.answers:
            st.caption(
                f"Waiting for the first answer: learners signed in with class {inert_md(code)} check their "
                "prediction at the end of the lesson."
            )
        else:
            bins = [{"from": b.low, "to": b.high, "answers": b.count} for b in cr.bins]
            show_chart(
                figure(class_histogram, cr),
                "Each bar counts the class's answers in its range (no names).",
                bins,
                f"live-{current.lesson}-round-{current.round}",
                "live_histogram",
                summary=histogram_summary(cr),
            )
        if not cr.revealed:
            st.caption("The engine's answer is hidden until you reveal it.")
            return
        groups = [{"group": g.label, "answers": g.count, "share": round(g.share, 4)} for g in cr.groups]
        show_chart(
            figure(slip_chart, cr),
            "Each wrong answer is grouped by the slip its value matches (the lesson's feedback names the same).",
            groups,
            f"live-{current.lesson}-round-{current.round}-slips",
            "live_slips",
            summary=slip_summary(cr),
        )


# --- banners -------------------------------------------------------------------------------------------------


def teacher_banner() -> None:
    """On every page of a session that leads a live round: the round, and on a lesson, one click to show it."""
    code = st.session_state.get(live.LEAD_KEY)
    board = live.live_board()
    if not code or board is None or st.session_state.get(live.PAGE_KEY) == "teacher":
        return
    try:
        current = board.current(code)
    except ProgressStoreError:
        return
    if current is None or current.lesson not in predictions.PAGES:
        if current is None:
            st.session_state.pop(live.LEAD_KEY, None)
        return
    box = st.container(border=True, key="live_lead_banner")
    state = "answer revealed" if current.revealed else f"{current.answers} answers so far"
    box.markdown(
        f":material/cast_for_education: **You lead class {inert_md(code)} live:** {_title(current.lesson)}, "
        f"round {current.round}, {state}."
    )
    here = _here()
    if here is not None:
        view = current_view(here)
        if here != current.lesson:
            if box.button("Move the class to this lesson, with these settings", key="live_lead_move"):
                opened = board.open_round(code, here, view)
                event("live_class_moved", class_code=code, lesson=here, previous=current.lesson, round=opened.round)
                st.rerun()
        elif view != dict(current.settings):
            if box.button("Show the class these settings", key="live_lead_show"):
                board.show(code, current.round, view)
                event("live_settings_shown", class_code=code, lesson=here, round=current.round, settings=view)
                st.rerun()
    box.page_link(page("teacher").file, label="Projector screen (teacher view)", icon=":material/groups:")


def learner_banner() -> None:
    """On every page of a signed-in learner: poll the class's live round (a fragment, every LEARNER_POLL_S)."""
    if live.signed_in() is None or live.live_board() is None:
        return
    st.fragment(_learner_poll, run_every=live.LEARNER_POLL_S)()


def _learner_poll() -> None:
    who, board = live.signed_in(), live.live_board()
    if who is None or board is None:
        return
    code, learner = who
    try:
        current = board.current(code, max_age_s=live.LEARNER_MAX_AGE_S)
        if current is None or current.lesson not in predictions.PAGES:
            return  # no round, or one on a lesson this server's course does not ask about (another version's)
        mine = live.my_answer(board, current, learner) if current.revealed else live.answer_here(current)
        cr = _revealed(board, current) if current.revealed else None
    except ProgressStoreError:
        return  # the banner is an extra: the lesson goes on without it
    box = st.container(border=True, key="live_banner")
    title = _title(current.lesson)
    if cr is None:
        joined = f" Your answer is in: {mine:g}." if mine is not None else ""
        if mine is not None and current.waiting and _held(board, current, learner):
            joined += " It counts once your teacher admits your name (new to this class this session)."
        box.markdown(
            f":material/cast_for_education: **Live with your class:** your teacher is on **{title}**, round "
            f"{current.round} · {current.answers} answers so far.{joined}"
        )
    else:
        box.markdown(
            f":material/cast_for_education: **{title}, round {current.round}:** "
            f"{learner_line(current.lesson, mine, cr)}"
        )
    on_page = _here() == current.lesson
    if on_page and all(st.query_params.get(k) == v for k, v in current.settings):
        return
    label = "Use the teacher's settings" if on_page else f"Follow: open {title} with the teacher's settings"
    if box.button(label, key="live_follow", icon=":material/arrow_forward:"):
        query = dict(current.settings)
        adopt_view(current.lesson, query)
        st.switch_page(page(current.lesson).file, query_params=query)


def _held(board: LiveBoard, current: LiveRound, learner: str) -> bool:
    """Whether this learner's answer waits for the teacher (asked only while some answer does). A learner the
    school's provider signed in is no made-up name: never held."""
    if live.sso_key() is not None:
        return False
    try:
        return name_key(learner) in {name_key(n) for n in board.waiting_names(current.class_code)}
    except ProgressStoreError:
        return False


def _revealed(board: LiveBoard, current: LiveRound) -> ClassRound:
    """The revealed round as the class answered it: read once per server for all its learners (a revealed
    round takes no more answers, so its count names its answers)."""
    key = (board, *live.round_id(current), current.lesson, current.answers)  # board: its database; round_id: not
    # the round number alone (a new live session's round 1 is another round)
    return _REVEALED.get_or_make(
        key, lambda: class_round(current.lesson, board.answers(current.class_code, current.round), True)
    )
