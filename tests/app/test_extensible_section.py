"""Lesson 7's extensible-KV-cache section (ui/extensible_section.py) in AppTest: at its defaults the measured cache
holds more blocks than the estimate; a 0.9 habit shows vLLM's warning; a model too large for the card is a message."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from lessons import content
from lessons.labs import extensible as lab


@pytest.fixture
def at():
    app = AppTest.from_string("from ui.extensible_section import extensible_section\nextensible_section('diag')\n")
    app.default_timeout = 60
    app.run()
    assert not app.exception and not app.error
    return app


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_the_defaults_show_the_measured_cache_holding_more(at):
    assert [h.value for h in at.subheader] == [content.load_section("extensible_kv").title]
    c = lab.compare()
    shown = _metrics(at)
    assert shown["KV blocks, estimate at 0.92"] == f"{c.estimate.num_blocks:,}"
    assert shown["KV blocks, measured (v0.34.0)"] == f"{c.measured.num_blocks:,}"
    assert c.gain_blocks > 0 and shown["KV difference"].startswith("+")
    assert "Extended KV cache to" in at.code[0].value and "caps this instance" not in at.code[0].value


def test_a_utilization_habit_shows_the_warning_and_fewer_blocks(at):
    at.selectbox(key="diag_ext_util").set_value(0.9).run()
    assert not at.exception
    assert "gpu_memory_utilization=0.9 caps this instance" in at.code[0].value
    assert _metrics(at)["KV difference"].startswith("-")


def test_every_gpu_and_a_model_too_large_for_it(at):
    at.selectbox(key="diag_ext_model").set_value("llama-3.1-405b").run()
    assert not at.exception and at.error  # a message naming the model and the fix, not a traceback
    assert "do not fit" in at.error[0].value
    at.selectbox(key="diag_ext_model").set_value("qwen2.5-7b")
    for gpu in ("l4", "mi300x", "b200"):
        at.selectbox(key="diag_ext_gpu").set_value(gpu).run()
        assert not at.exception and not at.error, gpu
        assert _metrics(at)["KV difference"].startswith("+"), gpu


def test_lesson_7_shows_the_section_and_its_widgets_move_there(app_test):
    page = app_test("diagnosis", timeout=60)
    page.run()
    assert not page.exception and not page.error
    title = content.load_section("extensible_kv").title
    assert title in [h.value for h in page.subheader]
    page.selectbox(key="diagnosis_ext_gpu").set_value("l4").run()
    assert not page.exception and not page.error
    assert any("Extended KV cache to" in c.value for c in page.code)
