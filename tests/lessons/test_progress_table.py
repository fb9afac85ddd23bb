"""The learner's progress table (lessons/progress_table.py, the sidebar's): visits, check scores, predictions."""

from lessons import content, predictions, quizzes
from lessons.progress_table import NOT_YET, prediction_verdict, progress_rows
from ui.course import LESSON_IDS


def test_rows_show_visits_scores_and_predictions():
    q = quizzes.for_page("gqa")[0]
    progress = {
        "visited": ["gqa"],
        "quiz": {q.id: {"answer": q.correct_option, "correct": True}},
        "predict": {"gqa": predictions.check("gqa", 68.6).record(), "paged": predictions.check("paged", 62).record()},
    }
    rows = dict(zip(LESSON_IDS, progress_rows(progress, LESSON_IDS), strict=True))
    assert rows["gqa"] == {
        "lesson": content.load("gqa").title,
        "visited": True,
        "check": f"1/{len(quizzes.for_page('gqa'))}",
        "prediction": "close",
    }
    assert rows["paged"]["prediction"] == "off" and rows["bandwidth"]["prediction"] == "—"
    assert rows["golden_rules"]["prediction"] == "—"  # the review has no prediction exercise


def test_rows_of_progress_saved_before_predictions_existed():
    rows = progress_rows({"visited": [], "quiz": {}, "diagnosis": {}}, LESSON_IDS)
    assert [r["prediction"] for r in rows] == ["—"] * len(LESSON_IDS)
    assert [r["lesson"] for r in rows] == [content.load(p).title for p in LESSON_IDS]  # every lesson, in order
    assert not any(r["visited"] for r in rows)


def test_rows_follow_the_lessons_asked_for_and_count_only_right_answers():
    q1, q2 = quizzes.for_page("paged")[:2]
    wrong = next(o for o in q2.options if o != q2.correct_option)
    progress = {
        "visited": ["paged", "welcome"],
        "quiz": {q1.id: {"answer": q1.correct_option, "correct": True}, q2.id: {"answer": wrong, "correct": False}},
    }
    (row,) = progress_rows(progress, ["paged"])
    assert row["visited"] is True and row["check"] == f"1/{len(quizzes.for_page('paged'))}"
    assert progress_rows(progress, []) == []


def test_a_prediction_verdict_is_one_word():
    assert prediction_verdict({"value": 1.0, "answer": 1.0, "close": True}) == "close"
    assert prediction_verdict({"value": 9.0, "answer": 1.0, "close": False}) == "off"
    assert prediction_verdict({}) == "off"  # saved without a verdict: not counted as close
    for nothing in (None, "close", 1):
        assert prediction_verdict(nothing) == NOT_YET
