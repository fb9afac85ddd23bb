"""The playground (lessons/labs/playground.py) loads a DeepSeek-V3-style MLA folder and serves it on its latent cache.

The folder is written by the engine's own modules (random weights, a byte-BPE tokenizer), so no transformers is
needed; its numbers: 2 layers, kv_lora_rank 32, qk_rope_head_dim 8, fp32 -> 2 x 40 x 4 = 320 bytes per token.
A pool sized with the K/V formula (2 x layers x heads x head_dim) or a cache with K and V per head would fail the
byte checks; an MLA folder run as a Llama would not load.
"""

from __future__ import annotations

import json

import pytest
from safetensors.torch import save_file

from engine.model.loader import hf_state_dict
from engine.model.tokenizer import ByteBPETokenizer
from lessons.labs import mla_cache, playground

TEXT = "def add(a, b):\n    return a + b\n" * 20 + "class Stack:\n    pass\n" * 20


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("mla_models")
    path = root / "tiny-mla"
    path.mkdir()
    tok = ByteBPETokenizer.train(TEXT, vocab_size=300)
    tok.save(path)
    model = mla_cache.tiny_mla_model(vocab_size=tok.vocab_size)
    config = model.config.to_hf() | {"eos_token_id": tok.eos_token_id}
    weights = {k: v.detach().contiguous() for k, v in hf_state_dict(model).items()}
    save_file(weights, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(config))
    return root, path


def test_the_playground_serves_an_mla_folder(folder):
    root, path = folder
    policy = playground.model_policy({"KVLAB_MODEL_DIRS": str(root)})
    model = playground.resolve_model("folder", "tiny-mla", policy)
    loaded = playground.load(model, "cpu", policy)
    settings = playground.EngineSettings(block_size=8, num_blocks=12)
    assert playground.kv_pool_bytes(loaded, settings) == 8 * 12 * 2 * (32 + 8) * 4
    llm = playground.new_engine(loaded, model, settings)
    assert type(llm.kv_cache).__name__ == "LatentKVCache" and llm.kv_cache_bytes == 8 * 12 * 320
    params = playground.sampling_params(6, 0.0, 1.0, 0, 0)
    run = playground.generate(llm, ["def add(a, b):", "class Stack:"], params)
    assert all(1 <= len(o.token_ids) <= 6 for o in run.outputs)
    assert run.traces[-1].num_free_blocks == 12
