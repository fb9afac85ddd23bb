"""ui.warm: the warm-up fills the caches a learner's first visit through the router reads (a cache hit,
checked by making the computation itself fail afterwards), and a page that fails is reported, not fatal."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from lessons.labs import paged as paged_lab
from ui import memo, warm
from ui.course import ROOT, page


def _refuse(*args, **kwargs):
    raise AssertionError("computed again: the warm-up did not fill the cache the page reads")


def test_every_page_but_the_teacher_view_is_warmed():
    ids = [p.id for p in warm.pages_to_warm()]
    assert "teacher" not in ids
    assert {"gqa", "packing", "paged", "pressure"} <= set(ids)


@pytest.mark.slow
def test_a_warmed_lesson_is_served_from_the_cache_through_the_router(monkeypatch):
    memo.clear_all()  # a cold process, as after a restart
    done = warm.warm([page("paged")])
    assert [(w.page, w.error) for w in done] == [("paged", None)]
    # The first learner's visit goes through app.py's navigation, as on the server; lesson 5's kernel timing and
    # block-size sweep must come from the warm-up's entries, so computing them again fails the page.
    monkeypatch.setattr(paged_lab, "measure_kernel", _refuse)
    monkeypatch.setattr(paged_lab, "sweep", _refuse)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.switch_page(page("paged").file).run()
    assert not at.exception and not at.error
    assert "paged" in at.session_state["progress"]["visited"]


def test_without_the_warm_up_the_same_visit_computes(monkeypatch):
    memo.clear_all()
    monkeypatch.setattr(paged_lab, "measure_kernel", _refuse)
    at = AppTest.from_file(str(page("paged").path), default_timeout=120).run()
    assert at.exception or at.error  # the check above is not vacuous: a cold page does call it


def test_a_failing_page_is_reported_not_raised(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("raise RuntimeError('no model here')\n")
    broken = page("welcome").__class__("broken", str(script), "broken", "Broken", ":material/error:", lesson=False)
    (result,) = warm.warm([broken])
    assert result.page == "broken" and result.error  # the server's settings redact the page's own message
