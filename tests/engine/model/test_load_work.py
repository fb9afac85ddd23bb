"""engine/model/loader.py: a model folder's sizes are checked from config.json before any module is built."""

from __future__ import annotations

import json

import pytest
import torch

from engine.model import llama
from engine.model.config import ModelConfig
from engine.model.llama import CausalLM
from engine.model.loader import MAX_SERVED_LAYERS, ModelTooLargeError, load_model, model_elements
from tests.tiny_model import make_tiny_model

SHAPE = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4)


@pytest.mark.parametrize(
    "extra",
    [
        dict(num_key_value_heads=2),
        dict(num_key_value_heads=4, tie_word_embeddings=True),
        dict(num_key_value_heads=1, head_dim=16, qkv_bias=True),
        dict(num_key_value_heads=2, qkv_bias=True, o_bias=True, architecture="LlamaForCausalLM"),
    ],
)
def test_model_elements_counts_what_building_the_model_holds(extra):
    config = ModelConfig(**SHAPE, **extra)
    with torch.device("meta"):
        net = CausalLM(config)
    assert model_elements(config) == sum(t.numel() for t in (*net.parameters(), *net.buffers()))


@pytest.fixture
def counted_layers(monkeypatch):
    """How many decoder layers were built (a list that grows by one per DecoderLayer.__init__)."""
    built: list[int] = []
    original = llama.DecoderLayer.__init__

    def counting(self, config):
        built.append(1)
        original(self, config)

    monkeypatch.setattr(llama.DecoderLayer, "__init__", counting)
    return built


def test_a_config_claiming_200000_layers_is_refused_before_one_layer_is_built(tmp_path, counted_layers):
    folder = make_tiny_model(tmp_path / "m", "a tiny text for a tiny tokenizer. " * 10)
    disk = (folder / "model.safetensors").stat().st_size
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(cfg | {"num_hidden_layers": 200_000}))
    counted_layers.clear()  # make_tiny_model built its own two
    with pytest.raises(ModelTooLargeError, match="the weights in memory as float32 take") as info:
        load_model(folder, max_bytes=disk)
    assert counted_layers == []  # the work is the arithmetic on config.json, not 200,000 modules
    assert info.value.size == 4 * model_elements(ModelConfig.from_hf(cfg | {"num_hidden_layers": 200_000}))


def test_the_memory_limit_is_exact_at_the_load_dtype(tmp_path, counted_layers):
    folder = make_tiny_model(tmp_path / "m", "a tiny text for a tiny tokenizer. " * 10)
    model, config, _ = load_model(folder)
    held = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    counted_layers.clear()
    with pytest.raises(ModelTooLargeError, match="as float64 take") as info:
        load_model(folder, dtype=torch.float64, max_bytes=2 * held - 1)
    assert info.value.size == 2 * held and counted_layers == []
    assert load_model(folder, dtype=torch.float64, max_bytes=2 * held)[0].lm_head.weight.dtype == torch.float64
    assert len(counted_layers) == config.num_hidden_layers


def test_tiny_layers_that_pass_any_byte_limit_are_refused_by_count_before_building(tmp_path, counted_layers):
    # 200,000 layers of width 2 are 25 MB of weights, far under a server's 2 GiB, and minutes of CPU to build
    folder = make_tiny_model(tmp_path / "m", "a tiny text for a tiny tokenizer. " * 10)
    cfg = json.loads((folder / "config.json").read_text())
    narrow = cfg | dict(hidden_size=2, intermediate_size=2, num_attention_heads=1, num_key_value_heads=1, head_dim=2)
    (folder / "config.json").write_text(json.dumps(narrow | {"num_hidden_layers": 200_000}))
    assert 4 * model_elements(ModelConfig.from_hf(narrow | {"num_hidden_layers": 200_000})) < 2**30
    counted_layers.clear()
    with pytest.raises(ValueError, match="num_hidden_layers=200,000 is more than the 256 layers this server builds"):
        load_model(folder, max_bytes=2 * 2**30)
    assert counted_layers == []
    # at the limit the count passes (and the weights, made for 2 layers, are what is wrong)
    (folder / "config.json").write_text(json.dumps(narrow | {"num_hidden_layers": MAX_SERVED_LAYERS}))
    with pytest.raises(ValueError, match="shape|missing"):
        load_model(folder, max_bytes=2 * 2**30)
    assert len(counted_layers) == MAX_SERVED_LAYERS
