"""Quiz questions and grading: the short check at the end of every lesson and the golden-rules review.

The questions are data, `lessons/quizzes.json`, a list of objects a teacher can edit without touching Python:

    {"id": "gqa.mqa",                       # "<page_id>.<name>": the key of the learner's saved answer; keep it
     "prompt": "Multi-query attention (MQA) keeps how many KV heads per layer?",
     "options": ["One", "As many as query heads", "Half the query heads", "Eight"],
     "answer": "One",                       # the right option's text, exactly
     "explanation": "MQA (Shazeer, 2019) shares a single K/V head ..."}   # shown after every answer

The file is read and checked once, at import, into frozen `Question`s (`BANK`, by id); a malformed entry is
a ValueError naming the file, the question and the field. A page's check is every question whose id starts
with its page id, in the file's order; each question's options are rotated so that the right one sits at a
stable position that depends on the id (not always first). Learners' saved answers are option texts, so an
edit that keeps an option's text keeps their answers. Grading is plain Python (no Streamlit).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

QUIZ_FILE = Path(__file__).resolve().parent / "quizzes.json"
FIELDS = ("id", "prompt", "options", "answer", "explanation")  # every question has exactly these
QUESTION_ID = re.compile(r"[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*")  # "<page_id>.<name>"


@dataclass(frozen=True)
class Question:
    """One multiple-choice question."""

    id: str
    prompt: str
    options: tuple[str, ...]  # in the order the page shows them (the file's, rotated)
    answer: int  # index into options
    explanation: str

    def __post_init__(self) -> None:
        if not 0 <= self.answer < len(self.options):
            raise ValueError(
                f"question {self.id!r}: answer index {self.answer} outside options 0..{len(self.options) - 1}"
            )
        if len(set(self.options)) != len(self.options):
            raise ValueError(f"question {self.id!r}: options must be distinct")

    @property
    def page_id(self) -> str:
        """The page this question belongs to (the part of the id before the dot)."""
        return self.id.split(".", 1)[0]

    @property
    def correct_option(self) -> str:
        """The text of the right answer."""
        return self.options[self.answer]


@dataclass(frozen=True)
class Grade:
    """The result of answering one question."""

    question_id: str
    answer: str
    correct: bool
    feedback: str  # "Correct — ..." or "Not quite — the answer is ... because ..."


def _place_answer(qid: str, options: list[str], answer: int) -> tuple[tuple[str, ...], int]:
    """Rotate the options so the right one sits at a stable, id-dependent position (not always first)."""
    if not 0 <= answer < len(options):
        raise ValueError(f"question {qid!r}: answer index {answer} outside options 0..{len(options) - 1}")
    target = zlib.crc32(qid.encode()) % len(options)
    shift = (answer - target) % len(options)
    rotated = options[shift:] + options[:shift]
    return tuple(rotated), target


def _text(where: str, name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: field {name!r} must be non-empty text, got {value!r}; write it in quotes")
    return value


def _question(entry: object, number: int, source: str, seen: dict[str, int]) -> Question:
    """One entry of the file as a Question (number counts from 1, for the message)."""
    where = f"{source}: question {number}"
    if not isinstance(entry, dict):
        raise ValueError(f"{where} is {type(entry).__name__}; write an object with the fields {', '.join(FIELDS)}")
    if isinstance(entry.get("id"), str):
        where += f" ({entry['id']!r})"
    missing = [f for f in FIELDS if f not in entry]
    if missing:
        raise ValueError(f"{where}: field {missing[0]!r} is missing; every question has {', '.join(FIELDS)}")
    extra = [k for k in entry if k not in FIELDS]
    if extra:
        raise ValueError(f"{where}: field {extra[0]!r} is not a question field; use only {', '.join(FIELDS)}")
    qid = _text(where, "id", entry["id"])
    if not QUESTION_ID.fullmatch(qid):
        raise ValueError(
            f"{where}: field 'id' {qid!r} is not '<page_id>.<name>'; use lower-case letters, digits and _ "
            "around one dot, e.g. 'gqa.mqa'"
        )
    if qid in seen:
        raise ValueError(f"{where}: field 'id' {qid!r} is already the id of question {seen[qid]}; give each its own")
    prompt = _text(where, "prompt", entry["prompt"])
    options = entry["options"]
    if not isinstance(options, list) or len(options) < 2:
        raise ValueError(f"{where}: field 'options' is {options!r}; write a list of at least two option texts")
    options = [_text(where, f"options[{i}]", o) for i, o in enumerate(options)]
    twice = next((o for i, o in enumerate(options) if o in options[:i]), None)
    if twice is not None:
        raise ValueError(f"{where}: field 'options' lists {twice!r} twice; make every option different")
    answer = _text(where, "answer", entry["answer"])
    if answer not in options:
        raise ValueError(
            f"{where}: field 'answer' {answer!r} is not one of its options; copy the right option's text exactly"
        )
    explanation = _text(where, "explanation", entry["explanation"])
    seen[qid] = number
    placed, index = _place_answer(qid, options, options.index(answer))
    return Question(qid, prompt, placed, index, explanation)


def parse_questions(text: str, source: str) -> tuple[Question, ...]:
    """The questions in ``text`` (the quiz file's JSON); ``source`` names the file in every error."""
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{source}: not valid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg}); fix the syntax there"
        ) from None
    if not isinstance(data, list) or not data:
        raise ValueError(
            f"{source}: the file holds {'an empty list' if data == [] else type(data).__name__}; it must be a "
            f"non-empty JSON list of questions, objects with the fields {', '.join(FIELDS)}"
        )
    seen: dict[str, int] = {}
    return tuple(_question(entry, number, source, seen) for number, entry in enumerate(data, start=1))


def load_questions(path: Path = QUIZ_FILE) -> tuple[Question, ...]:
    """The questions of a quiz file, checked (a ValueError names the file, the question and the field)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"{_shown(path)}: the quiz file cannot be read ({exc}); restore it from the repository"
        ) from None
    return parse_questions(text, _shown(path))


def _shown(path: Path) -> str:
    """The file as messages name it: relative to the repository for the course's own files."""
    root = QUIZ_FILE.parents[1]
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


BANK: Mapping[str, Question] = MappingProxyType({q.id: q for q in load_questions()})


def for_page(page_id: str) -> list[Question]:
    """The questions of one page, in the bank's order (empty for pages without a check)."""
    return [q for q in BANK.values() if q.page_id == page_id]


def get(question_id: str) -> Question:
    """One question by id."""
    try:
        return BANK[question_id]
    except KeyError:
        raise ValueError(f"unknown question id {question_id!r}; ids look like 'gqa.kv_formula'") from None


def grade(question_id: str, answer: str | int) -> Grade:
    """Grade an answer given as the option text or its index; explains the right answer either way."""
    q = get(question_id)
    if isinstance(answer, bool):  # bool is an int subclass; it is never a valid answer
        raise ValueError(f"answer {answer!r} for {question_id!r} must be an option text or index")
    if isinstance(answer, int):
        if not 0 <= answer < len(q.options):
            raise ValueError(f"answer index {answer} for {question_id!r} outside 0..{len(q.options) - 1}")
        text = q.options[answer]
    elif answer in q.options:
        text = answer
    else:
        raise ValueError(f"answer {answer!r} is not one of the options of {question_id!r}")
    correct = text == q.correct_option
    if correct:
        feedback = f"Correct — {q.explanation}"
    else:
        feedback = f"Not quite — the answer is “{q.correct_option}”. {q.explanation}"
    return Grade(question_id, text, correct, feedback)


def score(quiz_progress: Mapping[str, Mapping[str, object]], page_id: str | None = None) -> tuple[int, int]:
    """(correct, total) over a page's questions (or every question) from progress["quiz"]."""
    questions = for_page(page_id) if page_id is not None else list(BANK.values())
    correct = sum(1 for q in questions if bool(quiz_progress.get(q.id, {}).get("correct", False)))
    return correct, len(questions)


def saved_choice(quiz_progress: Mapping[str, object], question_id: str) -> int | None:
    """The index of the learner's saved answer among the question's options, or None: nothing saved, or an
    answer that is no longer one of its options (the file changed since)."""
    q = get(question_id)
    entry = quiz_progress.get(q.id)
    saved = entry.get("answer") if isinstance(entry, Mapping) else None
    return q.options.index(saved) if isinstance(saved, str) and saved in q.options else None


def answer_rows(quiz_progress: Mapping[str, object], page_id: str) -> list[dict[str, object]]:
    """One row per question of the page: the question, the learner's answer ("" if none), right or not, and
    the right answer (the golden-rules review's table and its download)."""
    rows = []
    for q in for_page(page_id):
        entry = quiz_progress.get(q.id)
        entry = entry if isinstance(entry, Mapping) else {}
        rows.append(
            {
                "question": q.prompt,
                "your answer": entry.get("answer", ""),
                "correct": entry.get("correct", False),
                "right answer": q.correct_option,
            }
        )
    return rows
