"""Quiz data and grading: the short check at the end of every lesson and the golden-rules review.

Each question has a stable id ("<page_id>.<name>") used as the key of the learner's quiz progress, a list
of options, the index of the right one, and an explanation shown right after the learner answers —
whether they were right or not, so the feedback teaches. Grading is plain Python (no Streamlit).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from lessons.quiz_bank import QUESTIONS


@dataclass(frozen=True)
class Question:
    """One multiple-choice question."""

    id: str
    prompt: str
    options: tuple[str, ...]
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


def _build() -> dict[str, Question]:
    out: dict[str, Question] = {}
    for qid, prompt, options, answer, explanation in QUESTIONS:
        if qid in out:
            raise ValueError(f"duplicate question id {qid!r}")
        placed, index = _place_answer(qid, list(options), answer)
        out[qid] = Question(qid, prompt, placed, index, explanation)
    return out


BANK: dict[str, Question] = _build()


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
