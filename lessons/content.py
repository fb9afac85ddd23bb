"""Lesson prose: one Markdown file per page, `lessons/<page_id>.md`, and one per section that several pages
show, `lessons/sections/<name>.md`; each split into named sections.

A prose file starts with a `# Title` line, then an intro paragraph, then `## Section` blocks. Pages ask
for sections by name (`load("gqa").sections["Why it works"]`, `load_section("kv_precision")`) so the prose
lives in Markdown a teacher can edit without touching Python. Sources are cited inside the prose. The page
ids themselves are the course's (ui/course.py); this module only knows the files.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

import cachetools

LESSON_DIR = Path(__file__).resolve().parent
SECTION_DIR = LESSON_DIR / "sections"  # prose shown by more than one page (the KV-precision section of 2 and 6)
PAGE_ID = re.compile(r"[a-z][a-z0-9_]*")  # a page id (or a section name) is a file stem: never a path

# The app's one cache library (ui/memo.py uses it too); prose files are few, so nothing is ever evicted.
PROSE_CACHE = 64

INTRO = "intro"  # the name of the text between the title and the first `## ` heading


@dataclass(frozen=True)
class Lesson:
    """One page's prose: its title and an ordered map of section name -> Markdown body."""

    page_id: str
    title: str
    sections: dict[str, str] = field(default_factory=dict)


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


@cachetools.cached(cachetools.LRUCache(maxsize=PROSE_CACHE), lock=threading.Lock())
def load(page_id: str) -> Lesson:
    """The lesson prose of `page_id`, read once per process (the files are read-only course material)."""
    if not (isinstance(page_id, str) and PAGE_ID.fullmatch(page_id) and (LESSON_DIR / f"{page_id}.md").is_file()):
        raise ValueError(f"no lesson prose for page id {page_id!r}; write lessons/{page_id}.md or use a course page id")
    return parse(page_id, (LESSON_DIR / f"{page_id}.md").read_text(encoding="utf-8"))


@cachetools.cached(cachetools.LRUCache(maxsize=PROSE_CACHE), lock=threading.Lock())
def load_section(name: str) -> Lesson:
    """The prose of a section several pages show (`lessons/sections/<name>.md`), read once per process."""
    if not (isinstance(name, str) and PAGE_ID.fullmatch(name) and (SECTION_DIR / f"{name}.md").is_file()):
        raise ValueError(f"no shared section {name!r}; write lessons/sections/{name}.md or use one that exists")
    return parse(name, (SECTION_DIR / f"{name}.md").read_text(encoding="utf-8"))
