"""Quiz bank integrity, grading and scoring (lessons/quizzes.py) and the lesson prose loader (lessons/content.py)."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lessons import content, quizzes
from lessons.quiz_bank import QUESTIONS
from ui.course import COURSE, LESSON_IDS

# Pages ending with a short check: all but the welcome page, the golden-rules quiz and the teacher view.
CHECKED_PAGES = [p.id for p in COURSE if p.id not in ("welcome", "golden_rules", "teacher")]
PROSE_IDS = sorted(f.stem for f in content.LESSON_DIR.glob("*.md"))  # the pages with prose


def test_every_lesson_page_has_a_short_check_and_golden_rules_a_quiz():
    assert len(CHECKED_PAGES) == 7
    for page in CHECKED_PAGES:
        assert 1 <= len(quizzes.for_page(page)) <= 3, page
    assert len(quizzes.for_page("golden_rules")) >= 6


def test_bank_keeps_the_authored_right_answer_and_varies_its_position():
    for qid, _prompt, options, answer, _ in QUESTIONS:
        q = quizzes.get(qid)
        assert q.correct_option == options[answer]  # rotation never changes which text is right
        assert sorted(q.options) == sorted(options)
    positions = {q.answer for q in quizzes.BANK.values()}
    assert len(positions) >= 3  # the right answer is not always in the same place


def test_grade_right_and_wrong_answers_explain_the_right_one():
    q = quizzes.get("gqa.kv_formula")
    right = quizzes.grade(q.id, q.correct_option)
    assert right.correct and right.feedback.startswith("Correct")
    wrong_text = next(o for o in q.options if o != q.correct_option)
    wrong = quizzes.grade(q.id, wrong_text)
    assert not wrong.correct and q.correct_option in wrong.feedback and q.explanation in wrong.feedback
    assert quizzes.grade(q.id, q.answer).correct  # an index works too


@pytest.mark.parametrize("bad", ["not an option", 99, -1, True])
def test_grade_rejects_bad_answers_with_a_clear_error(bad):
    with pytest.raises(ValueError, match="gqa.kv_formula"):
        quizzes.grade("gqa.kv_formula", bad)


def test_unknown_question_id():
    with pytest.raises(ValueError, match="unknown question id"):
        quizzes.grade("nope.q", 0)


@settings(deadline=None, max_examples=40)
@given(st.lists(st.sampled_from(sorted(quizzes.BANK)), unique=True), st.booleans())
def test_score_counts_only_correct_answers(answered, all_right):
    progress = {}
    for qid in answered:
        q = quizzes.get(qid)
        choice = q.correct_option if all_right else next(o for o in q.options if o != q.correct_option)
        g = quizzes.grade(qid, choice)
        progress[qid] = {"answer": g.answer, "correct": g.correct}
    correct, total = quizzes.score(progress)
    assert total == len(quizzes.BANK)
    assert correct == (len(answered) if all_right else 0)
    for page in PROSE_IDS:
        c, t = quizzes.score(progress, page)
        assert t == len(quizzes.for_page(page))
        assert c == (sum(1 for a in answered if a.startswith(page + ".")) if all_right else 0)


def test_lesson_files_parse_into_title_intro_and_sources():
    assert len(PROSE_IDS) >= 9
    for page in PROSE_IDS:
        lesson = content.load(page)
        assert lesson.title and lesson.title != page, page
        assert len(lesson.sections[content.INTRO]) > 50, page
        if page != "welcome":
            assert "Sources" in lesson.sections or "Further reading" in lesson.sections, page


def test_parse_splits_sections_and_load_refuses_unknown_pages():
    lesson = content.parse("x", "# Title\nintro line\n## A\nbody a\n## B\nbody b\n")
    assert lesson.title == "Title"
    assert lesson.sections == {"intro": "intro line", "A": "body a", "B": "body b"}
    for bad in ("no_such_page", "../README", "GQA"):
        with pytest.raises(ValueError, match="no lesson prose for page id"):
            content.load(bad)


def test_golden_rules_questions_cite_the_rule_they_test():
    # "Rule N:" in a question must be rule N of lessons/golden_rules.md (the quiz once said 2/3/4 for rules 3/4/5).
    rules = content.load("golden_rules").sections["The rules"]
    numbered = dict(re.findall(r"^(\d)\. \*\*(.+?)\*\*", rules, flags=re.M))
    topic = {"decode": "bandwidth-bound", "static": "never reserve the maximum", "gqa": "GQA", "engine": "paged"}
    cited = {q.id: q.prompt.split(":", 1)[0] for q in quizzes.for_page("golden_rules") if q.prompt.startswith("Rule")}
    assert set(cited) == {f"golden_rules.{name}" for name in topic}
    for qid, label in cited.items():
        assert topic[qid.split(".")[1]] in numbered[label.removeprefix("Rule ")], (qid, label)


def test_every_lesson_states_its_objective_after_the_intro():
    for page in LESSON_IDS:
        lesson = content.load(page)
        objective = lesson.sections.get("Objective", "")
        assert 40 < len(objective) < 400 and objective.endswith("."), page  # one or two sentences
        assert list(lesson.sections)[:2] == [content.INTRO, "Objective"], page
