"""progress/report.py's class headline and download name, against numbers worked out by hand.

The per-learner rows and the CSV against a real store are in test_store.py (test_report_and_csv); here the
rows come from `class_report` over plain records, so no database is needed.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from progress.report import ClassSummary, class_report, class_summary, report_file_name

LESSONS = ("bandwidth", "gqa", "varlen", "fragmentation", "paged", "diagnosis", "playground")  # seven pages


def _rows(*visits: list[str]) -> list[dict]:
    records = [{"learner": f"L{i}", "progress": {"visited": v}} for i, v in enumerate(visits)]
    return class_report(records, LESSONS)


def test_summary_counts_who_visited_every_lesson_and_the_mean_completion():
    # 7/7, 1/7 and 0/7 lessons: one learner visited them all; mean = 100 x (7 + 1 + 0) / (3 x 7) = 800/21 %.
    summary = class_summary(_rows(list(LESSONS), ["gqa"], []), LESSONS)
    assert summary == ClassSummary(learners=3, visited_every_lesson=1, lessons_total=7, mean_completion_pct=800 / 21)
    assert f"{summary.mean_completion_pct:.0f} %" == "38 %"  # what the teacher view shows


def test_the_mean_is_not_the_mean_of_rounded_percentages():
    # 1/7 = 14.2857 % (the row rounds it to 14.3); two such learners average 14.2857 %, not 14.3 %.
    summary = class_summary(_rows(["gqa"], ["paged"]), LESSONS)
    assert summary.mean_completion_pct == pytest.approx(100 / 7, rel=1e-12)
    assert summary.visited_every_lesson == 0


def test_visiting_every_lesson_needs_every_lesson():
    six = list(LESSONS[:-1])
    summary = class_summary(_rows(six, list(LESSONS), [*LESSONS, "teacher", "home"]), LESSONS)
    # Six of seven is not all; pages outside the lessons do not count towards them (class_report drops them).
    assert (summary.learners, summary.visited_every_lesson) == (3, 2)
    assert summary.mean_completion_pct == pytest.approx(100 * (6 + 7 + 7) / 21)


def test_everyone_done_and_one_learner():
    assert class_summary(_rows(list(LESSONS)), LESSONS) == ClassSummary(1, 1, 7, 100.0)
    assert class_summary(_rows(list(LESSONS), list(reversed(LESSONS))), LESSONS).visited_every_lesson == 2


def test_an_empty_class_has_no_mean():
    assert class_summary([], LESSONS) == ClassSummary(0, 0, 7, None)


def test_rows_from_other_lessons_and_no_lessons_are_value_errors():
    rows = class_report([{"learner": "Ana", "progress": {"visited": ["gqa"]}}], LESSONS[:3])
    with pytest.raises(ValueError, match="the row of 'Ana' counts 3 lessons but lesson_ids has 7"):
        class_summary(rows, LESSONS)
    with pytest.raises(ValueError, match="lesson_ids is empty"):
        class_summary([], [])


def test_the_summary_is_frozen():
    with pytest.raises(FrozenInstanceError):
        class_summary([], LESSONS).learners = 5  # type: ignore[misc]


def test_report_file_name():
    assert report_file_name("Room 7") == "kvlab-room_7-progress.csv"
    assert report_file_name("STRASSE a b") == "kvlab-strasse_a_b-progress.csv"
    assert report_file_name("Straße") == "kvlab-strasse-progress.csv"  # case folding, as class codes compare
