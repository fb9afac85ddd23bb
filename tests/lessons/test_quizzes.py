"""The quiz file (lessons/quizzes.json) and its loader, grading and scoring (lessons/quizzes.py); the lesson
prose loader (lessons/content.py)."""

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lessons import content, quizzes
from ui.course import COURSE, LESSON_IDS

# Pages ending with a short check: all but the welcome page, the golden-rules quiz and the teacher view.
CHECKED_PAGES = [p.id for p in COURSE if p.id not in ("welcome", "golden_rules", "teacher")]
PROSE_IDS = sorted(f.stem for f in content.LESSON_DIR.glob("*.md"))  # the pages with prose


def test_every_lesson_page_has_a_short_check_and_golden_rules_a_quiz():
    assert len(CHECKED_PAGES) == 8  # 6 · Serving under KV pressure is the eighth
    for page in CHECKED_PAGES:
        assert 1 <= len(quizzes.for_page(page)) <= 5, page
    assert len(quizzes.for_page("golden_rules")) >= 6


RAW = json.loads(quizzes.QUIZ_FILE.read_text(encoding="utf-8"))  # the file itself: the loader's reference
# Learners' saved answers are keyed by these ids: a question may be added, never renamed or dropped unnoticed.
STABLE_IDS = {
    *("bandwidth.batch", "bandwidth.bound", "bandwidth.prefill", "diagnosis.fix", "diagnosis.weights_fit"),
    *("fragmentation.internal", "fragmentation.share", "golden_rules.blocks", "golden_rules.budget"),
    *("golden_rules.calculator", "golden_rules.decode", "golden_rules.engine", "golden_rules.gqa"),
    *("golden_rules.padding", "golden_rules.static", "gqa.kv_formula", "gqa.mqa", "gqa.read_once"),
    *("packing.mask", "packing.waste", "paged.block_size", "paged.sharing", "paged.waste", "playground.join"),
    *("paged.v1_sampling", "paged.prefix_hash", "pressure.binding", "pressure.preempt", "pressure.budget"),
}


def test_every_question_in_the_file_loads_with_exactly_its_fields():
    assert isinstance(RAW, list) and [e["id"] for e in RAW] == list(quizzes.BANK)  # all of them, in file order
    ids = [e["id"] for e in RAW]
    assert len(set(ids)) == len(ids)  # unique
    assert STABLE_IDS <= set(ids)
    pages = {p.id for p in COURSE}
    for entry in RAW:
        assert set(entry) == set(quizzes.FIELDS), entry["id"]  # nothing missing, nothing unknown
        assert entry["id"].split(".")[0] in pages, entry["id"]
        assert entry["answer"] in entry["options"], entry["id"]
        assert len(set(entry["options"])) == len(entry["options"]) >= 2, entry["id"]
        assert all(isinstance(entry[f], str) and entry[f].strip() for f in ("prompt", "answer", "explanation"))


def test_bank_keeps_the_authored_right_answer_and_varies_its_position():
    for entry in RAW:
        q = quizzes.get(entry["id"])
        assert q.correct_option == entry["answer"]  # rotation never changes which text is right
        assert sorted(q.options) == sorted(entry["options"]) and q.options != ()
        assert (q.prompt, q.explanation) == (entry["prompt"], entry["explanation"])  # the file's text, as written
        shift = entry["options"].index(q.options[0])
        assert list(q.options) == entry["options"][shift:] + entry["options"][:shift]  # a rotation, order kept
    positions = {q.answer for q in quizzes.BANK.values()}
    assert len(positions) >= 3  # the right answer is not always in the same place
    assert quizzes.load_questions() == tuple(quizzes.BANK.values())  # loading is deterministic


def test_questions_are_frozen():
    q = quizzes.get("gqa.mqa")
    with pytest.raises(AttributeError):
        q.answer = 0
    with pytest.raises(TypeError):
        quizzes.BANK["gqa.mqa"] = q  # the bank is read-only (every learner's session shares it)


GOOD = {"id": "gqa.x", "prompt": "P?", "options": ["a", "b"], "answer": "b", "explanation": "E."}


@pytest.mark.parametrize(
    ("entries", "words"),
    [
        (
            [{k: v for k, v in GOOD.items() if k != "explanation"}],
            "question 1 ('gqa.x'): field 'explanation' is missing",
        ),
        ([{**GOOD, "hint": "h"}], "question 1 ('gqa.x'): field 'hint' is not a question field"),
        ([{**GOOD, "answer": "c"}], "question 1 ('gqa.x'): field 'answer' 'c' is not one of its options"),
        ([GOOD, {**GOOD}], "question 2 ('gqa.x'): field 'id' 'gqa.x' is already the id of question 1"),
        ([{**GOOD, "options": "a, b"}], "question 1 ('gqa.x'): field 'options' is 'a, b'; write a list"),
        ([{**GOOD, "options": ["a"]}], "field 'options' is ['a']; write a list of at least two option texts"),
        ([{**GOOD, "options": ["a", "a"], "answer": "a"}], "field 'options' lists 'a' twice"),
        ([{**GOOD, "options": ["a", 2]}], "question 1 ('gqa.x'): field 'options[1]' must be non-empty text"),
        ([{**GOOD, "prompt": " "}], "question 1 ('gqa.x'): field 'prompt' must be non-empty text"),
        ([{**GOOD, "answer": 1}], "question 1 ('gqa.x'): field 'answer' must be non-empty text"),
        ([{**GOOD, "id": "GQA x"}], "question 1 ('GQA x'): field 'id' 'GQA x' is not '<page_id>.<name>'"),
        ([{**GOOD, "id": 7}], "question 1: field 'id' must be non-empty text"),
        ([GOOD, ["gqa.y"]], "question 2 is list; write an object with the fields id, prompt"),
        ({"questions": [GOOD]}, "the file holds dict; it must be a non-empty JSON list of questions"),
        ([], "the file holds an empty list; it must be a non-empty JSON list"),
    ],
)
def test_a_malformed_entry_names_the_file_the_question_and_the_field(entries, words):
    with pytest.raises(ValueError) as info:
        quizzes.parse_questions(json.dumps(entries), "quiz.json")
    message = str(info.value)
    assert message.startswith("quiz.json: ") and words in message, message
    assert "; " in message  # and says what to do about it


def test_a_broken_or_missing_file_is_named(tmp_path):
    broken = tmp_path / "quizzes.json"
    broken.write_text('[{"id": "gqa.x",\n  "prompt": "P?" "options": []}]', encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(f"{broken}: not valid JSON at line 2, column 18")):
        quizzes.load_questions(broken)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'nope.json'}: the quiz file cannot be read")):
        quizzes.load_questions(tmp_path / "nope.json")
    assert quizzes.parse_questions(json.dumps([GOOD]), "quiz.json")[0].correct_option == "b"


def test_the_course_file_is_named_from_the_repository():
    with pytest.raises(ValueError, match=r"^lessons/nope\.json: the quiz file cannot be read"):
        quizzes.load_questions(quizzes.QUIZ_FILE.with_name("nope.json"))


def test_saved_choice_finds_the_saved_option_or_nothing():
    q = quizzes.get("gqa.mqa")
    wrong = next(i for i, o in enumerate(q.options) if o != q.correct_option)
    assert quizzes.saved_choice({q.id: {"answer": q.options[wrong], "correct": False}}, q.id) == wrong
    assert quizzes.saved_choice({q.id: {"answer": q.correct_option, "correct": True}}, q.id) == q.answer
    for progress in ({}, {q.id: {"answer": "an option the file no longer has"}}, {q.id: "junk"}, {q.id: {}}):
        assert quizzes.saved_choice(progress, q.id) is None


def test_answer_rows_show_each_question_with_the_learners_and_the_right_answer():
    questions = quizzes.for_page("golden_rules")
    first, second = questions[0], questions[1]
    wrong = next(o for o in second.options if o != second.correct_option)
    progress = {
        first.id: {"answer": first.correct_option, "correct": True},
        second.id: {"answer": wrong, "correct": False},
    }
    rows = quizzes.answer_rows(progress, "golden_rules")
    assert [r["question"] for r in rows] == [q.prompt for q in questions]
    assert rows[0] == {
        "question": first.prompt,
        "your answer": first.correct_option,
        "correct": True,
        "right answer": first.correct_option,
    }
    assert rows[1]["your answer"] == wrong and rows[1]["correct"] is False
    assert all(r["your answer"] == "" and r["correct"] is False for r in rows[2:])  # not answered yet
    assert all(r["right answer"] == q.correct_option for r, q in zip(rows, questions, strict=True))


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


def test_shared_sections_parse_and_load_refuses_unknown_names():
    names = sorted(f.stem for f in content.SECTION_DIR.glob("*.md"))
    assert "kv_precision" in names
    for name in names:
        section = content.load_section(name)
        assert section.title and section.title != name, name
        assert len(section.sections[content.INTRO]) > 50 and section.sections.get("Sources"), name
    for bad in ("nope", "../gqa", "KV_precision", "gqa"):  # a page's prose is not a shared section
        with pytest.raises(ValueError, match="no shared section"):
            content.load_section(bad)


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


def test_paged_sharing_answers_recompute_on_the_engines_block_manager():
    from engine.core.block_manager import BlockManager
    from engine.core.sequence import Sequence

    # paged.v1_sampling: n = 4 children of a 1,000-token prompt share its full blocks through the prefix cache
    assert "62 full blocks" in quizzes.get("paged.v1_sampling").correct_option and divmod(1000, 16) == (62, 8)
    bm = BlockManager(400, 16, enable_prefix_caching=True)
    prompt = list(range(1000))
    first = Sequence(0, prompt, 16)
    bm.allocate_sequence(first)
    first.num_computed_tokens = 1000
    bm.cache_computed_blocks(first)
    children = [first] + [Sequence(i, prompt, 16) for i in (1, 2, 3)]
    assert [bm.allocate_sequence(c) for c in children[1:]] == [62 * 16] * 3
    refs = [bm.allocator.ref_count(b) for b in first.block_table]
    assert refs[:62] == [4] * 62 and refs[62] == 1  # the partial 63rd block is each child's own
    assert len({c.block_table[62] for c in children}) == 4
    # paged.prefix_hash: a different first block breaks the chain, so no block of B hits
    assert quizzes.get("paged.prefix_hash").correct_option.startswith("None")
    bm = BlockManager(40, 16, enable_prefix_caching=True)
    a = Sequence(0, list(range(11 * 16)), 16)
    bm.allocate_sequence(a)
    a.num_computed_tokens = a.num_tokens
    bm.cache_computed_blocks(a)
    b = Sequence(1, [9999] * 16 + list(range(16, 11 * 16)), 16)
    assert bm.num_cached_prefix_tokens(b) == 0
