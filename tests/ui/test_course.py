"""ui/course.py: the one list of pages matches the files on disk, the prose, the quizzes and the progress ids."""

import re
from pathlib import Path

import pytest
from streamlit.source_util import page_icon_and_name

from lessons import content, quizzes
from ui.course import COURSE, LESSON_IDS, ROOT, page

# Every page's URL path as published (README's link table, embeds, saved links): a rename must not change one.
PUBLISHED_URLS = {
    "welcome": "welcome",
    "bandwidth": "bandwidth",
    "gqa": "gqa",
    "packing": "packing",
    "fragmentation": "fragmentation",
    "paged": "paged_attention",
    "pressure": "pressure",
    "diagnosis": "diagnosis",
    "golden_rules": "golden_rules",
    "playground": "playground",
    "teacher": "teacher",
}


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


def test_page_files_are_numbered_as_the_course_numbers_its_lessons():
    for p in COURSE:
        number = re.match(r"(\d+) · ", p.title)
        stem = Path(p.file).stem
        if p.id == "welcome":
            assert stem == "0_welcome"
        elif number:  # "7 · Production diagnosis" is pages/7_diagnosis.py
            assert stem.split("_", 1)[0] == number.group(1), (p.id, p.file, p.title)
        else:
            assert not stem[0].isdigit(), p.file  # the teacher view has no number
    numbered = [int(Path(p.file).stem.split("_", 1)[0]) for p in COURSE if p.title[0].isdigit()]
    assert numbered == list(range(1, 10))  # the nine numbered pages, in the navigation's order


def test_every_page_keeps_its_published_url():
    assert {p.id: p.url for p in COURSE} == PUBLISHED_URLS
    for p in COURSE:
        # app.py gives st.Page this path; before its navigation has run, Streamlit serves a pages/ script at the
        # path it infers from the file name (ui.router.through_the_router): the two must be the same.
        assert page_icon_and_name(Path(p.file))[1] == p.url, (p.file, p.url)


def test_page_lookup():
    assert page("paged").file == "pages/5_paged_attention.py"
    assert page("diagnosis").file == "pages/7_diagnosis.py" and page("diagnosis").url == "diagnosis"
    with pytest.raises(ValueError, match="unknown page id 'nope'; use one of welcome"):
        page("nope")
