"""Lesson prose: one Markdown file per page in lessons/, split into named sections.

A lesson file starts with a `# Title` line, then an intro paragraph, then `## Section` blocks. Pages ask
for sections by name (`section("gqa", "Why it works")`) so the prose lives in Markdown a teacher can edit
without touching Python. Sources are cited inside the prose (see LESSONS.md for the checked figures).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

LESSON_DIR = Path(__file__).resolve().parent

# Page id -> Markdown file stem. The ids are also the keys of the learner's "visited" progress list.
PAGE_IDS: tuple[str, ...] = (
    "welcome",
    "bandwidth",
    "gqa",
    "packing",
    "fragmentation",
    "paged",
    "diagnosis",
    "golden_rules",
    "playground",
)

INTRO = "intro"  # the name of the text between the title and the first `## ` heading


@dataclass(frozen=True)
class Lesson:
    """One page's prose: its title and an ordered map of section name -> Markdown body."""

    page_id: str
    title: str
    sections: dict[str, str] = field(default_factory=dict)

    def section(self, name: str) -> str:
        """The Markdown body of section `name` (raises KeyError naming the sections that exist)."""
        try:
            return self.sections[name]
        except KeyError:
            raise KeyError(
                f"lesson {self.page_id!r} has no section {name!r}; sections are {list(self.sections)}"
            ) from None


def parse(page_id: str, text: str) -> Lesson:
    """Split Markdown into a title (`# `), an intro, and `## ` sections."""
    title = page_id
    sections: dict[str, list[str]] = {INTRO: []}
    current = INTRO
    for line in text.splitlines():
        if line.startswith("# ") and title == page_id and not any(sections[INTRO]):
            title = line[2:].strip()
        elif line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        else:
            sections[current].append(line)
    return Lesson(page_id, title, {name: "\n".join(body).strip() for name, body in sections.items()})


@functools.cache
def load(page_id: str) -> Lesson:
    """The lesson for `page_id`, read once per process (the files are read-only course material)."""
    if page_id not in PAGE_IDS:
        raise ValueError(f"unknown page id {page_id!r}; use one of {', '.join(PAGE_IDS)}")
    path = LESSON_DIR / f"{page_id}.md"
    if not path.exists():
        return Lesson(page_id, page_id.replace("_", " ").title(), {INTRO: ""})
    return parse(page_id, path.read_text(encoding="utf-8"))


def section(page_id: str, name: str = INTRO) -> str:
    """Shortcut: the Markdown of one section of one page."""
    return load(page_id).section(name)
