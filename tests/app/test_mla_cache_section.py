"""Lesson 2's MLA section (ui/mla_cache.py) in AppTest: nothing runs until the button, then the engine's measured
latent bytes per token stand beside the formula (2 layers x (32 + 8) x 4 bytes = 320) and DeepSeek-V3's."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from lessons import content


@pytest.fixture(scope="module")
def at():
    app = AppTest.from_string("from ui.mla_cache import mla_cache_section\nmla_cache_section('gqa')\n")
    app.default_timeout = 120
    app.run()
    assert not app.exception and not app.error
    return app


def test_the_prose_and_nothing_runs_until_the_button(at):
    prose = content.load_section("mla_cache")
    assert [h.value for h in at.subheader] == [prose.title]
    assert at.markdown[0].value == prose.sections[content.INTRO]
    assert not at.metric and "Serves 3 prompts" in at.caption[0].value


def test_the_run_shows_measured_bytes_beside_the_formula(at):
    at.button(key="gqa_mla_run").click().run()
    assert not at.exception and not at.error
    shown = {m.label: m.value for m in at.metric}
    assert shown["Measured bytes / token"] == shown["Formula bytes / token"] == "320"
    assert shown["Smaller than per-head K/V"] == "4.0×"
    assert "2 layers × (32 + 8) × 4 bytes = 320 bytes per token" in at.markdown[-1].value
    assert "70,272 bytes per token" in at.caption[-1].value
    at.run()  # a re-run keeps the result (session state) and reads the cached run
    assert {m.label: m.value for m in at.metric} == shown
