"""Engine playground page (AppTest): guided errors for bad prompts and folders, a real generation on a local
folder, stepping through the scheduler, and the knobs at their extremes."""

import pytest
from streamlit.testing.v1 import AppTest

from lessons.labs.playground import DEMO_DIR
from tests.lessons.labs.test_playground import make_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_model(tmp_path_factory.mktemp("tiny_page")))


@pytest.fixture(scope="module")
def at(app_test):
    app = app_test("playground", timeout=120)
    app.run()
    assert not app.exception and not app.error
    return app


def generate(at: AppTest) -> AppTest:
    at.button(key="pg_generate").click().run()
    assert not at.exception
    return at


def test_demo_model_generates_or_explains_why_not(at):
    generate(at)
    if any(DEMO_DIR.glob("*.safetensors")):
        assert not at.error and {m.label for m in at.metric} >= {"Tokens/s", "Generated tokens"}
    else:
        assert "demo model's weights are not installed" in at.error[0].value and "How to fix" in at.error[0].value


def test_bad_folder_and_prompts_show_guidance(at, tmp_path):
    at.radio(key="pg_source").set_value("folder").run()
    for path, match in (("", "empty"), (str(tmp_path / "missing"), "not a folder"), (str(tmp_path), "no config.json")):
        at.text_input(key="pg_path").set_value(path)
        generate(at)
        assert len(at.error) == 1 and match in at.error[0].value


def test_folder_model_generates_and_steps(at, tiny):
    at.radio(key="pg_source").set_value("folder")
    at.text_input(key="pg_path").set_value(tiny)
    at.text_area(key="pg_prompts").set_value("def add(a, b):\nclass Stack:\nself.items\nreturn a + b")
    generate(at)
    assert not at.error
    shown = {m.label: m.value for m in at.metric}
    assert int(shown["Generated tokens"]) > 0 and float(shown["Tokens/s"].replace(",", "")) > 0
    assert 0 < int(shown["Peak KV usage"].rstrip("%")) <= 100 and int(shown["Preemptions"]) >= 0
    outputs = next(d.value for d in at.dataframe if "generated text" in d.value.columns)
    assert len(outputs) == 4 and outputs["generated tokens"].sum() == int(shown["Generated tokens"])
    assert outputs["generated text"].str.len().sum() > 0  # the engine produced text
    steps = int(shown["Scheduler steps"])
    for step in (steps, max(1, steps // 2), 1):
        at.slider(key="pg_step").set_value(step).run()
        assert not at.exception and not at.error
        assert any(m.value.startswith(f"**Step {step}.**") for m in at.markdown)
    assert "Joined" in next(m.value for m in at.markdown if m.value.startswith("**Step 1.**"))


def test_knobs_at_extremes(at, tiny):
    at.radio(key="pg_source").set_value("folder")
    at.text_input(key="pg_path").set_value(tiny)
    at.text_area(key="pg_prompts").set_value("def add(a, b):\nclass Stack:")
    at.slider(key="pg_max_tokens").set_value(1)
    at.slider(key="pg_temperature").set_value(2.0)
    at.slider(key="pg_top_p").set_value(0.05)
    at.number_input(key="pg_top_k").set_value(1024)
    at.number_input(key="pg_seed").set_value(2**31 - 1)
    at.select_slider(key="pg_block").set_value(256)
    at.slider(key="pg_blocks").set_value(256)
    at.toggle(key="pg_prefix").set_value(True)
    generate(at)
    assert not at.error and {m.label: m.value for m in at.metric}["Generated tokens"] == "2"
    at.select_slider(key="pg_block").set_value(1)
    at.slider(key="pg_blocks").set_value(1)  # one 1-token block: no prompt fits
    generate(at)
    assert "max_model_len=1" in at.error[0].value and "How to fix" in at.error[0].value
    at.text_area(key="pg_prompts").set_value("")
    generate(at)
    assert "no prompts" in at.error[0].value
    at.text_area(key="pg_prompts").set_value("x\n" * 9)
    generate(at)
    assert "9 prompts" in at.error[0].value
    at.slider(key="pg_max_tokens").set_value(64)
    at.slider(key="pg_temperature").set_value(0.0)
    at.slider(key="pg_top_p").set_value(1.0)
    at.number_input(key="pg_top_k").set_value(0)
    at.number_input(key="pg_seed").set_value(0)
    at.slider(key="pg_blocks").set_value(64)
    at.text_area(key="pg_prompts").set_value("class Stack:")
    generate(at)
    assert not at.error and int({m.label: m.value for m in at.metric}["Generated tokens"]) >= 1
    radio = next(r for r in at.radio if r.key.startswith("quiz_playground."))
    radio.set_value(radio.options[0]).run()
    assert not at.exception
