"""ui/course.py: the one list of pages matches the files on disk, the prose, the quizzes and the progress ids."""

import pytest

from lessons import content, quizzes
from ui.course import COURSE, LESSON_IDS, ROOT, page


def test_ids_are_unique_and_pages_holds_exactly_the_course_scripts():
    ids = [p.id for p in COURSE]
    assert len(set(ids)) == len(ids)
    assert COURSE[0].id == "welcome"  # the app's default page
    on_disk = {str(f.relative_to(ROOT)) for f in (ROOT / "pages").glob("*.py")}
    assert on_disk == {p.file for p in COURSE}  # one file per page, nothing else in pages/
    assert all(p.path.is_file() and p.title and p.icon.startswith(":material/") for p in COURSE)


def test_lessons_are_the_eight_with_prose_and_a_check():
    lessons = ("bandwidth", "gqa", "packing", "fragmentation", "paged", "pressure", "diagnosis", "golden_rules")
    assert LESSON_IDS == lessons
    for page_id in LESSON_IDS:
        assert quizzes.for_page(page_id), page_id


def test_prose_and_quizzes_use_course_ids():
    ids = {p.id for p in COURSE}
    assert {f.stem for f in content.LESSON_DIR.glob("*.md")} == ids - {"teacher"}  # every page but the teacher's
    assert {q.page_id for q in quizzes.BANK.values()} <= ids


def test_page_lookup():
    assert page("paged").file == "pages/5_paged_attention.py"
    assert page("diagnosis").file == "pages/6_diagnosis.py"  # renumbered in the navigation, not on disk (URLs)
    with pytest.raises(ValueError, match="unknown page id 'nope'; use one of welcome"):
        page("nope")
