"""The sidebar's progress table (ui/progress.py: progress_rows): visits, check scores and prediction verdicts."""

from lessons import content, predictions, quizzes
from ui.course import LESSON_IDS
from ui.progress import progress_rows


def test_rows_show_visits_scores_and_predictions():
    q = quizzes.for_page("gqa")[0]
    progress = {
        "visited": ["gqa"],
        "quiz": {q.id: {"answer": q.correct_option, "correct": True}},
        "predict": {"gqa": predictions.check("gqa", 128).record(), "paged": predictions.check("paged", 62).record()},
    }
    rows = dict(zip(LESSON_IDS, progress_rows(progress), strict=True))
    assert rows["gqa"] == {
        "lesson": content.load("gqa").title,
        "visited": True,
        "check": f"1/{len(quizzes.for_page('gqa'))}",
        "prediction": "close",
    }
    assert rows["paged"]["prediction"] == "off" and rows["bandwidth"]["prediction"] == "—"
    assert rows["golden_rules"]["prediction"] == "—"  # the review has no prediction exercise


def test_rows_of_progress_saved_before_predictions_existed():
    rows = progress_rows({"visited": [], "quiz": {}, "diagnosis": {}})
    assert [r["prediction"] for r in rows] == ["—"] * len(LESSON_IDS)
