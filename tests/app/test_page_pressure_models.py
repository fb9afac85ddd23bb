"""Lesson 6's GPU-scale section (AppTest): its model select box moves to one of today's models and to the
learner's pasted config.json, and the simulated chart's summary names the chosen model; a model too big for
the GPU gets a message, never a traceback."""

import json

import pytest
from streamlit.testing.v1 import AppTest

from engine.memory.catalog import MODELS
from lessons.labs.own_config import OWN_NAME
from ui.own_config import key
from ui.pressure_gpu import MODEL_KEY, OWN

SMALL = {
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 8192,
    "vocab_size": 128256,
}


def rendered(at: AppTest) -> str:
    parts = [e.value for group in (at.markdown, at.caption, at.error, at.warning, at.info) for e in group]
    return "\n".join(str(p) for p in parts)


@pytest.fixture(scope="module")
def at(app_test):
    app = app_test("pressure", timeout=180)
    app.run()
    assert not app.exception and not app.error
    return app


def test_the_default_model_is_todays_sweep(at):
    box = at.selectbox(key=MODEL_KEY)
    assert box.value == "llama-2-13b" and OWN_NAME not in box.options
    assert f"Simulated: {MODELS['llama-2-13b'].name} on" in rendered(at)


def test_a_new_model_is_simulated(at):
    at.selectbox(key=MODEL_KEY).set_value("qwen3-8b").run()
    assert not at.exception and not at.error
    assert f"Simulated: {MODELS['qwen3-8b'].name} on" in rendered(at)


def test_a_model_too_big_gets_a_message(at):
    at.selectbox(key=MODEL_KEY).set_value("deepseek-v3").run()
    assert not at.exception
    assert any("DeepSeek-V3" in e.value and "bigger GPU" in e.value for e in at.error) or "bigger GPU" in rendered(at)
    assert "Simulated: DeepSeek-V3 on" not in rendered(at)


def test_the_pasted_config_is_simulated(at):
    at.text_area(key=key("pressure")).set_value(json.dumps(SMALL)).run()
    assert not at.exception
    assert OWN_NAME in at.selectbox(key=MODEL_KEY).options
    at.selectbox(key=MODEL_KEY).set_value(OWN).run()
    assert not at.exception and not at.error
    assert f"Simulated: {OWN_NAME} on" in rendered(at)


def test_a_hybrid_is_simulated_per_kv_cache_group(at):
    at.selectbox(key="pr_gpu").set_value("a100-80gb").run()
    at.selectbox(key=MODEL_KEY).set_value("gemma-3-27b").run()
    assert not at.exception and not at.error
    text = rendered(at)
    assert f"Simulated: {MODELS['gemma-3-27b'].name} on" in text
    assert "KV slots shared by 7 KV-cache groups" in text  # the pool's slots, not vLLM's token figure
