"""The course, defined once: every page's id, script, navigation title, icon, and whether it is a lesson.

`app.py` builds its navigation from `COURSE` (in this order; the first page is the default), the sidebar
counts the learner's progress over `LESSON_IDS`, and the teacher view reports completion over the same ids.
A page id is also the key of `progress["visited"]`, the stem of the page's prose (`lessons/<id>.md`) and
the prefix of its quiz question ids (`"<id>.<name>"`). No Streamlit here, so benchmarks and tests read it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository root (ui/ lives under it)


@dataclass(frozen=True, slots=True)
class CoursePage:
    """One page of the app."""

    id: str
    file: str  # script path relative to the repository root
    title: str  # navigation title
    icon: str  # Material icon
    lesson: bool  # counted in the learner's progress and the teacher's completion

    @property
    def path(self) -> Path:
        """The page script's absolute path."""
        return ROOT / self.file


COURSE: tuple[CoursePage, ...] = (
    CoursePage("welcome", "pages/0_welcome.py", "Welcome", ":material/school:", lesson=False),
    CoursePage("bandwidth", "pages/1_bandwidth.py", "1 · Memory bandwidth", ":material/speed:", lesson=True),
    CoursePage("gqa", "pages/2_gqa.py", "2 · MHA, MQA, GQA", ":material/hub:", lesson=True),
    CoursePage("packing", "pages/3_packing.py", "3 · Packed batches", ":material/view_week:", lesson=True),
    CoursePage(
        "fragmentation", "pages/4_fragmentation.py", "4 · Fragmentation", ":material/broken_image:", lesson=True
    ),
    CoursePage("paged", "pages/5_paged_attention.py", "5 · PagedAttention", ":material/grid_view:", lesson=True),
    CoursePage(
        "pressure", "pages/6_pressure.py", "6 · Serving under KV pressure", ":material/stacked_line_chart:", lesson=True
    ),
    # File names keep their old numbers so every existing lesson URL (derived from the file) keeps working.
    CoursePage(
        "diagnosis", "pages/6_diagnosis.py", "7 · Production diagnosis", ":material/medical_services:", lesson=True
    ),
    CoursePage("golden_rules", "pages/7_golden_rules.py", "8 · Golden rules", ":material/verified:", lesson=True),
    # The playground has a short check but is practice, not a lesson: it does not count towards completion.
    CoursePage("playground", "pages/8_playground.py", "9 · Engine playground", ":material/play_circle:", lesson=False),
    CoursePage("teacher", "pages/teacher.py", "Teacher view", ":material/groups:", lesson=False),
)

LESSON_IDS: tuple[str, ...] = tuple(p.id for p in COURSE if p.lesson)


def page(page_id: str) -> CoursePage:
    """The course page with this id (ValueError naming the ids that exist)."""
    for p in COURSE:
        if p.id == page_id:
            return p
    raise ValueError(f"unknown page id {page_id!r}; use one of {', '.join(p.id for p in COURSE)}")
