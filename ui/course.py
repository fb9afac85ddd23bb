"""The course, defined once: every page's id, script, navigation title, icon, and whether it is a lesson.

`app.py` builds its navigation from `COURSE` (in this order; the first page is the default), the sidebar
counts the learner's progress over `LESSON_IDS`, and the teacher view reports completion over the same ids.
A page id is also the key of `progress["visited"]`, the stem of the page's prose (`lessons/<id>.md`) and
the prefix of its quiz question ids (`"<id>.<name>"`). No Streamlit here, so benchmarks and tests read it too.

A lesson's script is numbered as the course numbers the lesson (`pages/7_diagnosis.py` is lesson 7). Its URL
path is its file name without the number (`/diagnosis`): that is how Streamlit finds a page in `pages/` before
app.py's navigation has run (ui/router.py, `through_the_router`), and app.py gives the same path to
`st.Page`, so renumbering a lesson never changes its published URL. Links and embeds use these paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository root (ui/ lives under it)


@dataclass(frozen=True, slots=True)
class CoursePage:
    """One page of the app."""

    id: str
    file: str  # script path relative to the repository root: pages/[<number>_]<url>.py, numbered as its title
    url: str  # URL path (published: lessons are linked and embedded by it); the default page is also at "/"
    title: str  # navigation title
    icon: str  # Material icon
    lesson: bool  # counted in the learner's progress and the teacher's completion

    @property
    def path(self) -> Path:
        """The page script's absolute path."""
        return ROOT / self.file


COURSE: tuple[CoursePage, ...] = (
    CoursePage("welcome", "pages/0_welcome.py", "welcome", "Welcome", ":material/school:", lesson=False),
    CoursePage(
        "bandwidth", "pages/1_bandwidth.py", "bandwidth", "1 · Memory bandwidth", ":material/speed:", lesson=True
    ),
    CoursePage("gqa", "pages/2_gqa.py", "gqa", "2 · MHA, MQA, GQA", ":material/hub:", lesson=True),
    CoursePage("packing", "pages/3_packing.py", "packing", "3 · Packed batches", ":material/view_week:", lesson=True),
    CoursePage(
        "fragmentation",
        "pages/4_fragmentation.py",
        "fragmentation",
        "4 · Fragmentation",
        ":material/broken_image:",
        lesson=True,
    ),
    CoursePage(
        "paged",
        "pages/5_paged_attention.py",
        "paged_attention",
        "5 · PagedAttention",
        ":material/grid_view:",
        lesson=True,
    ),
    CoursePage(
        "pressure",
        "pages/6_pressure.py",
        "pressure",
        "6 · Serving under KV pressure",
        ":material/stacked_line_chart:",
        lesson=True,
    ),
    CoursePage(
        "diagnosis",
        "pages/7_diagnosis.py",
        "diagnosis",
        "7 · Production diagnosis",
        ":material/medical_services:",
        lesson=True,
    ),
    CoursePage(
        "golden_rules",
        "pages/8_golden_rules.py",
        "golden_rules",
        "8 · Golden rules",
        ":material/verified:",
        lesson=True,
    ),
    # The playground has a short check but is practice, not a lesson: it does not count towards completion.
    CoursePage(
        "playground",
        "pages/9_playground.py",
        "playground",
        "9 · Engine playground",
        ":material/play_circle:",
        lesson=False,
    ),
    CoursePage("teacher", "pages/teacher.py", "teacher", "Teacher view", ":material/groups:", lesson=False),
)

LESSON_IDS: tuple[str, ...] = tuple(p.id for p in COURSE if p.lesson)


def page(page_id: str) -> CoursePage:
    """The course page with this id (ValueError naming the ids that exist)."""
    for p in COURSE:
        if p.id == page_id:
            return p
    raise ValueError(f"unknown page id {page_id!r}; use one of {', '.join(p.id for p in COURSE)}")
