"""engine/model/config.py: a config.json number no checkpoint can have is refused at load, by its field's name."""

from __future__ import annotations

import json
import math

import pytest

from engine.model.config import ModelConfig, real_number
from engine.model.loader import load_model
from tests.tiny_model import make_tiny_model

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny checkpoint folder and its config.json as a dict."""
    folder = make_tiny_model(tmp_path_factory.mktemp("tiny"), "the cat sat on the mat. " * 20)
    return folder, json.loads((folder / "config.json").read_text())


def with_config(tiny, tmp_path, **changes):
    """A copy of the tiny folder whose config.json has `changes` (written as Python's json writes NaN)."""
    folder, cfg = tiny
    for f in folder.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "config.json").write_text(json.dumps(cfg | changes))
    return tmp_path


def test_the_unchanged_tiny_folder_loads_and_keeps_its_numbers(tiny, tmp_path):
    model, config, _ = load_model(with_config(tiny, tmp_path, rope_theta=500000, rms_norm_eps=1e-5))
    assert config.rope_theta == 500000.0 and config.rms_norm_eps == 1e-5 and type(config.rope_theta) is float
    assert model.model.norm.eps == 1e-5


@pytest.mark.parametrize("field", ["rope_theta", "rms_norm_eps"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 0, -1e-6, "1e-5", True, None, [1.0]])
def test_an_impossible_float_field_is_refused_at_load_by_name(tiny, tmp_path, field, value):
    folder = with_config(tiny, tmp_path, **{field: value})
    with pytest.raises(ValueError, match=rf"config\.json: {field}=") as info:
        load_model(folder)
    assert "must be" in str(info.value) or "not a finite number" in str(info.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("factor", math.nan),
        ("factor", 0.0),
        ("factor", -8.0),
        ("factor", "8"),
        ("low_freq_factor", math.inf),
        ("low_freq_factor", -1.0),
        ("high_freq_factor", math.nan),
        ("high_freq_factor", 1.0),  # == low_freq_factor: the blend divides by high - low
        ("high_freq_factor", 0.5),
        ("original_max_position_embeddings", math.nan),
        ("original_max_position_embeddings", 0),
    ],
)
def test_an_impossible_rope_scaling_number_is_refused_at_load_by_name(tiny, tmp_path, key, value):
    folder = with_config(tiny, tmp_path, rope_scaling=LLAMA3 | {key: value})
    with pytest.raises(ValueError, match=rf"config\.json: rope scaling (high_freq_factor=.* low_freq_factor|{key})="):
        load_model(folder)


def test_valid_rope_scaling_loads(tiny, tmp_path):
    folder = with_config(tiny, tmp_path, rope_scaling=LLAMA3 | {"original_max_position_embeddings": 64})
    assert load_model(folder)[1].rope_scaling["factor"] == 8.0
    folder = with_config(tiny, tmp_path, rope_scaling={"rope_type": "linear", "factor": 2})
    assert load_model(folder)[1].rope_scaling == {"rope_type": "linear", "factor": 2}


@pytest.mark.parametrize("field", ["rope_theta", "rms_norm_eps"])
def test_a_config_built_in_code_is_checked_too(field):
    shape = dict(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_attention_heads=2)
    for bad in (math.nan, -1.0, 0.0, math.inf):
        with pytest.raises(ValueError, match=rf"^{field}="):
            ModelConfig(**shape, num_key_value_heads=1, **{field: bad})


def test_real_number_names_the_field_and_returns_a_float():
    assert real_number("x", 3) == 3.0 and type(real_number("x", 3)) is float
    for bad in (math.nan, "3", False, None):
        with pytest.raises(ValueError, match=r"^x="):
            real_number("x", bad)
