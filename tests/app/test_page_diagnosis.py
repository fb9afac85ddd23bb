"""Lesson 6 page (AppTest): symptoms render, the reference fix resolves an incident and doing nothing does not,
fix widgets at their extremes never crash, the result is recorded."""

import pytest
from streamlit.testing.v1 import AppTest

from lessons.diagnosis import get_scenario, lab, scenario_ids


@pytest.fixture
def at(app_test):
    app = app_test("diagnosis", timeout=60)
    app.run()
    assert not app.exception and not app.error
    return app


def set_fix(at: AppTest, param: str, value, suffix: str) -> None:
    key = f"diag_fix_{param}_{suffix}"
    if param == "model":
        at.selectbox(key=key).set_value(value)
    elif param in ("policy", "kv_cache_dtype"):
        at.radio(key=key).set_value(value)
    else:
        at.select_slider(key=key).set_value(value)


def test_nothing_changed_is_not_resolved(at):
    assert any("OutOfMemoryError" in c.value for c in at.code)  # the incident's log lines
    at.button(key="diag_run").click().run()
    assert not at.exception
    assert at.warning and at.warning[0].value.startswith("NOT RESOLVED")
    assert not at.session_state["progress"]["diagnosis"]["chat-oom"]["resolved"]


@pytest.mark.parametrize("sid", scenario_ids())
def test_right_diagnosis_and_reference_fix_resolve(at, sid):
    at.selectbox(key="diag_scenario").set_value(sid).run()
    scenario = get_scenario(sid)
    suffix = f"{sid}_0"
    for d in scenario.diagnoses:
        if d.correct:
            at.checkbox(key=f"diag_dx_{d.id}_{suffix}").check()
    for param, value in scenario.reference_fix.items():
        set_fix(at, param, value, suffix)
    at.run()
    assert any(f"{next(iter(scenario.reference_fix))}" in m.value for m in at.markdown if "Changed" in m.value)
    at.button(key="diag_run").click().run()
    assert not at.exception and not at.error
    assert at.success and at.success[0].value.startswith("RESOLVED") and "diagnosis right" in at.success[0].value
    record = at.session_state["progress"]["diagnosis"][sid]
    assert record["resolved"] and record["diagnosis_correct"] and record["fixes"] == scenario.reference_fix
    assert any(c.value.startswith("vllm serve") or "vllm serve" in c.value for c in at.code)


def test_fix_widgets_at_extremes_and_variants(at):
    scenario = get_scenario("chat-oom")
    now = lab.current_values(scenario.config)
    for pick in (0, -1):
        for param, current in now.items():
            opts = lab.options_for(param, current)
            set_fix(at, param, opts[pick], "chat-oom_0")
        at.run()
        at.button(key="diag_run").click().run()
        assert not at.exception  # an impossible configuration is graded or shown as a guided error
        assert at.success or at.warning or (at.error and "How to fix" in at.error[0].value)
    at.number_input(key="diag_variant").set_value(lab.MAX_VARIANT).run()
    assert not at.exception and not at.error
    at.checkbox(key=f"diag_dx_weights-too-big_chat-oom_{lab.MAX_VARIANT}").check().run()
    at.button(key="diag_run").click().run()
    assert not at.exception and "diagnosis incomplete or wrong" in at.warning[0].value
