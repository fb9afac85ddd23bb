"""Lesson 8 page (AppTest): every question gives immediate, explained feedback; score; start over."""

import pytest
from streamlit.testing.v1 import AppTest

from lessons import quizzes

QUESTIONS = quizzes.for_page("golden_rules")


def score(at: AppTest) -> str:
    return next(m.value for m in at.metric if m.label == "Score")


@pytest.fixture
def at(app_test):
    app = app_test("golden_rules", timeout=30)
    app.run()
    assert not app.exception and not app.error
    return app


def test_all_right_gives_full_score_and_feedback(at):
    assert score(at) == f"0 / {len(QUESTIONS)}"
    for q in QUESTIONS:
        at.radio(key=f"quiz_{q.id}").set_value(q.correct_option)
    at.run()
    assert not at.exception
    assert score(at) == f"{len(QUESTIONS)} / {len(QUESTIONS)}"
    assert len(at.success) == len(QUESTIONS) and not at.warning
    assert all(s.value.startswith("Correct") for s in at.success)  # a text mark, not colour alone
    progress = at.session_state["progress"]
    assert all(progress["quiz"][q.id]["correct"] for q in QUESTIONS)
    assert "golden_rules" in progress["visited"]
    (answers,) = [t.value for t in at.dataframe if "right answer" in t.value.columns]
    assert list(answers["question"]) == [q.prompt for q in QUESTIONS]
    assert list(answers["your answer"]) == list(answers["right answer"]) == [q.correct_option for q in QUESTIONS]
    assert answers["correct"].all()


def test_wrong_answer_explains_the_right_one_and_start_over_clears(at):
    q = QUESTIONS[0]
    wrong = next(o for o in q.options if o != q.correct_option)
    at.radio(key=f"quiz_{q.id}").set_value(wrong).run()
    assert score(at) == f"0 / {len(QUESTIONS)}"
    (feedback,) = at.warning
    assert feedback.value.startswith("Not quite") and q.correct_option in feedback.value
    at.radio(key=f"quiz_{QUESTIONS[1].id}").set_value(QUESTIONS[1].correct_option).run()
    assert score(at) == f"1 / {len(QUESTIONS)}"
    at.button(key="golden_reset").click().run()
    assert not at.exception
    assert score(at) == f"0 / {len(QUESTIONS)}"
    assert all(at.radio(key=f"quiz_{x.id}").value is None for x in QUESTIONS)
    assert not any(x.id in at.session_state["progress"]["quiz"] for x in QUESTIONS)
