"""Live rounds in the app (AppTest): the teacher's projector screen (start, counts without names, reveal, new
round, move, end) and a learner's banner (the teacher's lesson, Follow with the teacher's settings, the answer
joining the round, the reveal beside their own answer)."""

import pytest
from streamlit.testing.v1 import AppTest

from lessons import predictions
from progress import auth, open_store
from progress.live import LiveBoard
from ui import live
from ui.signin import LEARNER_KEY, VERSION_KEY

KEY = "s3cret teacher key"
LIVE = "Live round (projector)"
CLASS = "Room 9"
GQA = predictions.for_page("gqa")


@pytest.fixture(autouse=True)
def server(tmp_path, monkeypatch):
    """A server with its SQLite file in tmp_path and a teacher key."""
    monkeypatch.setenv("KVLAB_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("KVLAB_DATABASE_URL", raising=False)
    monkeypatch.setenv("KVLAB_TEACHER_KEY", KEY)
    monkeypatch.setattr(auth, "ARGON2_MEMORY_KIB", 8)  # quick sign-ins (Argon2id at 8 KiB)
    monkeypatch.setattr(live, "LEARNER_MAX_AGE_S", 0.0)  # the app's board reads afresh: the test's board writes


@pytest.fixture
def board():
    store = open_store()
    yield LiveBoard(store)
    store.close()


def _teacher(app_test):
    at = app_test("teacher", timeout=60).run()
    at.text_input(key="teacher_key").input(KEY)
    at.button(key="FormSubmitter:teacher_unlock-Open the teacher view").click().run()
    at.text_input(key="teacher_class_code").input(CLASS).run()
    return at.radio(key="teacher_mode").set_value(LIVE).run()


def _texts(at) -> str:
    parts = [e.value for kind in ("markdown", "caption", "info", "warning", "success", "error") for e in at.get(kind)]
    return "\n".join(str(p) for p in parts) + "\n" + "\n".join(f"{m.label} {m.value}" for m in at.metric)


def test_the_projector_counts_answers_without_names_and_hides_the_answer_until_revealed(app_test, board):
    at = _teacher(app_test)
    assert not at.exception and not at.error
    assert board.current(CLASS) is None
    at.selectbox(key="live_lesson").select("gqa")
    at.button(key="live_start").click().run()
    live = board.current(CLASS)
    assert live is not None and live.lesson == "gqa" and live.round == 1 and not live.revealed
    assert [m.value for m in at.metric] == ["0", "0"] and "Waiting for the first answer" in _texts(at)
    mha, half = GQA.traps[0].value, GQA.traps[1].value
    for name, value in (("Ana", GQA.answer), ("Bob", mha), ("Cy", half), ("Zed", GQA.answer)):
        assert board.answer(CLASS, name, "gqa", value) == 1
    at.run()
    assert not at.exception and not at.error
    assert [m.value for m in at.metric] == ["4", "0"]
    charts = at.get("plotly_chart")
    assert len(charts) == 1  # the histogram only: no slip chart before the reveal
    text = _texts(at)
    assert "hidden until you reveal" in text and GQA.prompt in text
    assert not any(name in text for name in ("Ana", "Bob", "Zed"))  # counts only, no names on a projector
    at.button(key="live_reveal").click().run()
    assert board.current(CLASS).revealed and not at.exception and not at.error
    assert len(at.get("plotly_chart")) == 2 and at.button(key="live_reveal").disabled
    text = _texts(at)
    assert "hidden until you reveal" not in text and not any(n in text for n in ("Ana", "Bob", "Zed"))
    assert board.answer(CLASS, "Eve", "gqa", GQA.answer) is None  # revealed: no more answers
    at.button(key="live_again").click().run()
    again = board.current(CLASS)
    assert (again.round, again.lesson, again.revealed, again.answers) == (2, "gqa", False, 0)
    assert [m.value for m in at.metric] == ["0", "0"]
    at.selectbox(key="live_move_to").select("paged")
    at.button(key="live_move").click().run()
    moved = board.current(CLASS)
    assert (moved.round, moved.lesson) == (3, "paged") and "PagedAttention" in _texts(at)
    at.button(key="live_end").click().run()
    assert board.current(CLASS) is None and not at.exception
    assert at.selectbox(key="live_lesson")  # back to starting a round


def test_the_class_report_still_lists_names_and_the_live_view_needs_a_database(app_test, monkeypatch, board):
    store = open_store()
    store.save(CLASS, "Ana", {"visited": ["gqa"]})
    store.close()
    at = app_test("teacher", timeout=60).run()
    at.text_input(key="teacher_key").input(KEY)
    at.button(key="FormSubmitter:teacher_unlock-Open the teacher view").click().run()
    at.text_input(key="teacher_class_code").input(CLASS).run()
    assert list(at.dataframe[0].value["learner"]) == ["Ana"]  # the report is the default view
    monkeypatch.setenv("KVLAB_DATABASE_URL", "nosuchdb://nowhere")
    at = _teacher(app_test)
    assert not at.exception
    assert any("Live rounds need the class's database" in w.value for w in at.warning)


def _banner_app() -> None:
    """The learner banner alone (app.py draws it above every page), with st.switch_page recorded, not run."""
    import streamlit as st

    from ui import live_screens

    def record(page, query_params=None):
        st.session_state["switched_to"] = (str(page), dict(query_params or {}))

    st.switch_page = record
    live_screens.learner_banner()


SETTINGS = {"model": "llama-3-70b", "kv_dtype": "bf16", "groups": "8", "context": "4096"}


def test_follow_opens_the_teachers_lesson_with_the_teachers_settings(board):
    at = AppTest.from_function(_banner_app, default_timeout=60).run()
    assert not at.markdown  # not signed in: no banner (and no polling)
    at.session_state[LEARNER_KEY] = (CLASS.lower(), "Ana")
    at.run()
    assert not at.markdown and not at.button  # signed in, no live round: nothing to show
    board.open_round(CLASS, "gqa", SETTINGS)
    at.session_state["gqa_context"] = 1024  # a learner who moved the slider on an earlier visit
    at.run()
    assert "your teacher is on **2 · MHA, MQA, GQA**" in at.markdown[0].value
    at.button(key="live_follow").click().run()
    assert at.session_state["switched_to"] == ("pages/2_gqa.py", SETTINGS)
    assert at.session_state["gqa_model"] == "llama-3-70b" and at.session_state["gqa_context"] == 4096
    assert at.session_state["gqa_groups_llama-3-70b"] == 8 and at.session_state["gqa_dtype"] == "bf16"
    at.session_state[live.PAGE_KEY] = "gqa"  # now on the lesson, with the teacher's settings in the address
    at.query_params.update(SETTINGS)
    at.run()
    assert "live_follow" not in [b.key for b in at.button]  # nothing left to follow
    at.query_params["context"] = "2048"
    at.run()
    assert at.button(key="live_follow").label == "Use the teacher's settings"


def _signed_in(at, name: str):
    at.session_state[LEARNER_KEY] = (CLASS.lower(), name)  # class codes are not case-sensitive
    at.session_state[VERSION_KEY] = None
    return at


def test_a_learner_answers_in_the_round_and_sees_the_reveal_beside_their_answer(app_test, board):
    banner = _signed_in(AppTest.from_function(_banner_app, default_timeout=60), "Ana").run()
    board.open_round(CLASS, "gqa", SETTINGS)
    at = _signed_in(app_test("gqa", timeout=60), "Ana").run()
    mha = GQA.traps[0].value
    at.number_input(key="predict_gqa").set_value(mha)
    at.button(key="predict_gqa_check").click().run()
    assert "Your answer joined your class's live round 1 (1 answers so far)." in _texts(at)
    assert board.answers(CLASS, 1) == (mha,) and board.my_answer(CLASS, "ana", 1) == mha
    banner.session_state[live.MINE_KEY] = at.session_state[live.MINE_KEY]  # one session: the page and the banner
    assert f"1 answers so far. Your answer is in: {mha:g}." in banner.run().markdown[0].value
    board.answer(CLASS, "Bob", "gqa", GQA.answer)
    board.reveal(CLASS, 1)
    text = banner.run().markdown[0].value
    assert "The engine:" in text and GQA.traps[0].slip in text  # "read num_key_value_heads"
    assert f"{mha:g}" in text.replace(",", "")  # their own answer beside the engine's and the class's
    other = _signed_in(AppTest.from_function(_banner_app, default_timeout=60), "Bob").run()  # another replica
    assert "none of the known slips" not in other.markdown[0].value and "close" in other.markdown[0].value


def test_an_answer_outside_the_round_stays_the_learners_own(app_test, board):
    board.open_round(CLASS, "paged")
    at = _signed_in(app_test("gqa", timeout=60), "Bob").run()
    at.number_input(key="predict_gqa").set_value(GQA.answer)
    at.button(key="predict_gqa_check").click().run()
    assert not at.exception and "joined your class's live round" not in _texts(at)
    assert at.success and board.answers(CLASS, 1) == ()  # checked and saved for them; not the class's round
    board.reveal(CLASS, 1)
    assert board.answer(CLASS, "Bob", "paged", 63) is None


def test_a_round_on_a_lesson_without_a_question_shows_a_clear_note_not_a_traceback(app_test, board):
    board.open_round(CLASS, "welcome")  # a valid id, but no prediction question (a row from another version)
    at = _teacher(app_test)
    assert not at.exception and not at.error
    assert any("not a lesson with a prediction question" in w.value for w in at.warning)
    banner = _signed_in(AppTest.from_function(_banner_app, default_timeout=60), "Ana").run()
    assert not banner.exception and not banner.markdown  # the learner sees no banner for it
    at.button(key="live_again").click().run()  # the teacher's controls still work: a new round ...
    at.selectbox(key="live_move_to").select("gqa")
    at.button(key="live_move").click().run()  # ... and a move to a lesson with a question
    assert board.current(CLASS).lesson == "gqa" and [m.value for m in at.metric] == ["0", "0"]


def _answer_on_gqa(at, value):
    at.number_input(key="predict_gqa").set_value(value)
    return at.button(key="predict_gqa_check").click().run()


def test_the_old_tab_of_a_reset_name_is_signed_out_and_cannot_replace_the_owners_answer(app_test, board):
    store = open_store()
    mallory = store.sign_in(CLASS, "Bob", "mallory got here first")
    board.open_round(CLASS, "gqa")
    old_tab = _signed_in(app_test("gqa", timeout=60), "Bob")
    old_tab.session_state[VERSION_KEY] = mallory.version
    _answer_on_gqa(old_tab.run(), 5)
    assert board.answers(CLASS, 1) == (5.0,)
    assert store.reset_passphrase(CLASS, "Bob")  # the teacher
    bob = store.sign_in(CLASS, "Bob", "bob's own passphrase")
    assert board.answer(CLASS, "Bob", "gqa", 77, bob.version) == 1
    old_tab.number_input(key="predict_gqa").set_value(None).run()
    _answer_on_gqa(old_tab, 5)  # the old tab checks its 5 again
    assert not old_tab.exception and board.answers(CLASS, 1) == (77.0,)
    assert LEARNER_KEY not in old_tab.session_state
    assert any("Signed out" in w.value and "was reset" in w.value for w in old_tab.warning)
    store.close()


def test_a_learners_answer_is_not_shown_in_the_next_round_of_the_same_lesson(app_test, board):
    board.open_round(CLASS, "gqa")
    at = _signed_in(app_test("gqa", timeout=60), "Ana").run()
    _answer_on_gqa(at, 512)
    banner = _signed_in(AppTest.from_function(_banner_app, default_timeout=60), "Ana")
    banner.session_state[live.MINE_KEY] = at.session_state[live.MINE_KEY]  # one session: the page and the banner
    assert "Your answer is in: 512." in banner.run().markdown[0].value
    current = board.current(CLASS)
    board.open_round(CLASS, "gqa", dict(current.settings))  # "New round on this lesson": round 2
    text = banner.run().markdown[0].value
    assert "round 2" in text and "Your answer is in" not in text


def test_a_new_live_session_does_not_show_the_old_sessions_round_1(app_test, board):
    # Hole 9: after "End the live session", a new round 1 on the same lesson showed the old one's figures.
    board.open_round(CLASS, "gqa")
    at = _signed_in(app_test("gqa", timeout=60), "Ana").run()
    _answer_on_gqa(at, 512)
    banner = _signed_in(AppTest.from_function(_banner_app, default_timeout=60), "Ana")
    banner.session_state[live.MINE_KEY] = at.session_state[live.MINE_KEY]
    board.reveal(CLASS, 1)
    old = banner.run().markdown[0].value
    assert "512" in old.replace(",", "")
    assert board.close(CLASS)  # the teacher ends the live session ...
    again = board.open_round(CLASS, "gqa")  # ... and later starts a new one: round 1 again
    assert again.round == 1
    board.answer(CLASS, "Bob", "gqa", GQA.answer)
    board.reveal(CLASS, 1)
    new = banner.run().markdown[0].value
    assert "512" not in new.replace(",", "") and new != old  # not Ana's old answer, not the old class figures
    other = _signed_in(AppTest.from_function(_banner_app, default_timeout=60), "Carol").run()
    assert new.split(":", 1)[0] == other.markdown[0].value.split(":", 1)[0]  # the same round as a fresh session


def test_the_teacher_closes_the_class_to_new_names_and_admits_one(app_test, board):
    store = open_store()
    store.sign_in(CLASS, "Ana", "ana's passphrase")  # known before the session
    at = _teacher(app_test)
    at.button(key="live_start").click().run()
    lesson = board.current(CLASS).lesson
    for bot in ("Bot1", "Bot2"):
        store.sign_in(CLASS, bot, "made up on the spot")
        assert board.answer(CLASS, bot, lesson, 512) == 1
    assert board.answer(CLASS, "Ana", lesson, 1) == 1
    at.run()
    assert [(m.label, m.value) for m in at.metric] == [("Answers", "3"), ("From names new this session", "2")]
    toggle = next(t for t in at.toggle if t.key.startswith("live_closed_"))
    toggle.set_value(True).run()
    assert board.current(CLASS).closed and [m.value for m in at.metric] == ["1", "0"]
    assert "2 answers from new names wait for you to admit them" in _texts(at)
    assert "New names waiting: 2" in [e.label for e in at.expander]
    at.button(key="live_admit_bot1").click().run()
    assert board.waiting_names(CLASS) == ["Bot2"] and [m.value for m in at.metric] == ["2", "1"]
    assert not at.exception
    for bot, held in (("Bot2", True), ("Bot1", False)):  # the learner's banner says when theirs waits
        banner = _signed_in(AppTest.from_function(_banner_app, default_timeout=60), bot).run()
        assert "admits your name" not in banner.markdown[0].value  # no answer from this session: no note
        banner.session_state[live.MINE_KEY] = (live.round_id(board.current(CLASS)), 512.0)
        text = banner.run().markdown[0].value
        assert "Your answer is in: 512." in text
        assert ("once your teacher admits your name" in text) is held
    store.close()
