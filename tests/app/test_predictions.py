"""Lessons 1–8 open with their objective; lessons 1–7 end with the predict-then-observe exercise (AppTest).

For each lesson: the objective is the first thing under the title, a prediction typed into `predict_<page>` and
checked gets feedback saying how far off it was (with the working), bad input gets a clear message, and the
checked prediction lands in the learner's progress. Persistence across replicas: tests/progress/test_restore.py.
"""

import pytest

from lessons import content, predictions
from ui.course import LESSON_IDS


@pytest.fixture(scope="module", params=predictions.PAGES)
def lesson(request, app_test):
    at = app_test(request.param, timeout=90).run()
    assert not at.exception and not at.error
    return request.param, at


def _feedback(at, page):
    texts = [m.value for m in (*at.success, *at.warning)]
    return [t for t in texts if t.startswith(("Close", "Off"))]


def test_objective_opens_the_lesson(lesson):
    page, at = lesson
    objective = content.load(page).sections["Objective"]
    assert at.info[0].value == f"**Objective:** {objective}"
    assert 40 < len(objective) < 400  # one or two sentences
    prompt = predictions.for_page(page).prompt  # asked up front, before the page shows its numbers
    assert any(c.value.startswith("**Predict before you read on:** ") and prompt in c.value for c in at.caption)


def test_empty_and_bad_predictions_get_a_clear_message(lesson):
    page, at = lesson
    assert at.number_input(key=f"predict_{page}").value is None  # nothing predicted yet
    at.button(key=f"predict_{page}_check").click().run()
    assert not at.exception and "No prediction yet" in at.error[0].value
    at.number_input(key=f"predict_{page}").set_value(-3).run()
    at.button(key=f"predict_{page}_check").click().run()
    assert not at.exception and "is negative" in at.error[0].value
    at.number_input(key=f"predict_{page}").set_value(1e9).run()
    at.button(key=f"predict_{page}_check").click().run()
    assert "beyond any plausible answer" in at.error[0].value
    assert page not in at.session_state["progress"]["predict"]  # nothing bad is saved


def test_a_checked_prediction_gets_feedback_and_is_saved(lesson):
    page, at = lesson
    pred = predictions.for_page(page)
    wrong = round(pred.answer * 0.5, 3)
    at.number_input(key=f"predict_{page}").set_value(wrong).run()
    assert not _feedback(at, page)  # no verdict before Check
    at.button(key=f"predict_{page}_check").click().run()
    assert not at.exception and not at.error
    (text,) = _feedback(at, page)
    assert text.startswith("Off") and "too low" in text and "Working:" in text
    assert at.session_state["progress"]["predict"][page] == {"value": wrong, "answer": pred.answer, "close": False}
    at.number_input(key=f"predict_{page}").set_value(pred.answer).run()
    at.button(key=f"predict_{page}_check").click().run()
    (text,) = _feedback(at, page)
    assert text.startswith("Close") and at.session_state["progress"]["predict"][page]["close"] is True
    at.run()  # any other re-run keeps showing the verdict for the checked value
    assert _feedback(at, page) == [text]


def test_golden_rules_opens_with_its_objective_and_has_no_prediction(app_test):
    at = app_test("golden_rules").run()
    assert "golden_rules" in LESSON_IDS and at.info[0].value.startswith("**Objective:** ")
    assert not [n for n in at.number_input if n.key.startswith("predict_")]
