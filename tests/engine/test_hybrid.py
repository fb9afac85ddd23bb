"""Hybrid models: Qwen2 with per-layer `layer_types` (full and sliding attention) against transformers.

Tiny random Qwen2ForCausalLM checkpoints whose config.json says `layer_types` (and, without it,
`max_window_layers`) are saved with `save_pretrained` and loaded by both sides, eager attention, fp32 on CPU.
The engine keeps a KV-cache group per layer kind over one block pool (engine/core/kv_groups.py): greedy output
equals transformers' past the window at block sizes 4 and 16, the sliding group gives blocks back while the
full group keeps them, and at a byte budget that holds 128 tokens for two full layers the 1-full + 1-sliding
model serves a 160-token prompt plus 40 new tokens while the all-full model is refused. Layer kinds the
engine does not run are refused by name at load.
"""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from engine.core.sliding_window import FREED, kv_blocks_per_seq  # noqa: E402
from engine.llm import LLM  # noqa: E402
from engine.model.config import ModelConfig  # noqa: E402
from engine.sampling_params import SamplingParams  # noqa: E402

VOCAB = 256
WINDOW = 8
HYBRID = ["full_attention", "sliding_attention"]


def _config(layer_types, window=WINDOW, num_layers=2, use_sliding_window=True, **extra):
    config = transformers.Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        use_sliding_window=use_sliding_window,
        sliding_window=window,
        layer_types=layer_types,
        rope_theta=1000.0,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
        initializer_range=0.1,  # well separated logits, no argmax near-ties
        **extra,
    )
    config._attn_implementation = "eager"
    return config


def _save(config, folder, seed=0):
    torch.manual_seed(seed)
    model = transformers.Qwen2ForCausalLM(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    model.generation_config.eos_token_id = None  # run to max_new_tokens, as ignore_eos does
    return model


def _reference(model, prompts, max_tokens):
    with torch.no_grad():
        return [
            model.generate(torch.tensor([p]), max_new_tokens=max_tokens, do_sample=False)[0, len(p) :].tolist()
            for p in prompts
        ]


def _greedy(max_tokens):
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)


def _prompts(lens, seed=2):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, VOCAB, (n,), generator=g).tolist() for n in lens]


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    """(folder, prompts, transformers' greedy continuations) for a 1-full + 1-sliding Qwen2 (window 8)."""
    folder = tmp_path_factory.mktemp("qwen2_hybrid")
    model = _save(_config(HYBRID), folder)
    prompts = _prompts((3, 29, 61))
    shared = prompts[2][:40] + _prompts((5,), seed=3)[0]  # a prefix-cache hit well past the window
    prompts.append(shared)
    return folder, prompts, _reference(model, prompts, 30)


@pytest.mark.parametrize(
    "block_size, chunk, prefix", [(4, 2048, False), (16, 2048, False), (4, 12, True), (16, 2048, True)]
)
def test_greedy_matches_transformers_past_the_window(hybrid, block_size, chunk, prefix):
    folder, prompts, refs = hybrid
    num_blocks = 2048 // block_size
    llm = LLM(
        str(folder),
        device="cpu",
        block_size=block_size,
        num_gpu_blocks=num_blocks,
        max_num_batched_tokens=chunk,
        enable_prefix_caching=prefix,
    )
    assert [g.kind for g in llm.cache_config.kv_groups] == ["full", "sliding"]
    traces = []
    if prefix:  # warm the cache with the prompt whose prefix the last one shares
        llm.generate([prompts[2]], _greedy(1))
    outs = llm.generate(prompts, _greedy(30), on_step=traces.append)
    assert [o.token_ids for o in outs] == refs
    if prefix:
        assert llm.block_manager.prefix_cache_hits >= 40 // block_size * block_size
    sliding_held_less = False
    for t in traces:
        by_group = [set(), set()]  # block ids each group holds over all running requests
        for tables in t.group_block_tables.values():
            for g, table in enumerate(tables):
                by_group[g] |= {b for b in table if b != FREED}
            full, sliding = tables
            assert FREED not in full and len(full) == len(sliding)  # the full group keeps every block
            kept = sum(b != FREED for b in sliding)
            assert kept <= kv_blocks_per_seq(len(sliding) * block_size, block_size, WINDOW, chunk)
            sliding_held_less |= kept < len(full)
        assert not by_group[0] & by_group[1]  # no block owned by two groups
        assert t.num_free_blocks == num_blocks - len(by_group[0] | by_group[1])  # free + used = pool
    assert sliding_held_less  # the sliding group really handed blocks back


def _per_layer_token_bytes(config) -> int:
    return 2 * config.num_key_value_heads * (config.hidden_size // config.num_attention_heads) * 4  # K+V fp32


@pytest.mark.parametrize("block_size", [4, 16])
def test_byte_budget_serves_a_longer_context_than_all_full(tmp_path, block_size):
    """The budget holds 128 tokens for two full layers; 1 full + 1 sliding (window 16) serves 160 + 40."""
    window, chunk = 16, 16  # the sliding group holds at most W - 1 + 16 positions plus a block
    hybrid_cfg = _config(HYBRID, window=window)
    budget = 128 * 2 * _per_layer_token_bytes(hybrid_cfg)
    model = _save(hybrid_cfg, tmp_path / "hybrid")
    (prompt,) = _prompts((160,), seed=5)
    (ref,) = _reference(model, [prompt], 40)
    common = dict(device="cpu", block_size=block_size, kv_cache_memory_bytes=budget, max_num_batched_tokens=chunk)
    llm = LLM(str(tmp_path / "hybrid"), max_model_len=200, **common)
    # One pool slot is one layer's K+V: the same bytes hold twice the slots of the two-layer all-full pool.
    assert llm.num_gpu_blocks * block_size == 256 and llm.kv_cache_bytes <= budget
    traces = []
    (out,) = llm.generate([prompt], _greedy(40), on_step=traces.append)
    assert out.token_ids == ref
    assert not any(t.preempted for t in traces) and llm.scheduler.num_preemptions == 0
    full = _config(["full_attention", "full_attention"], window=window)
    _save(full, tmp_path / "full")
    with pytest.raises(ValueError, match="max_model_len=200"):
        LLM(str(tmp_path / "full"), max_model_len=200, **common)
    assert LLM(str(tmp_path / "full"), **common).max_model_len == 128  # the pool sets its limit


@pytest.mark.parametrize(
    "num_layers, max_window_layers, use_sliding_window",
    [(4, 2, True), (4, 0, True), (4, 4, True), (2, 1, False)],
)
def test_layer_kinds_are_read_as_transformers_reads_them(num_layers, max_window_layers, use_sliding_window):
    config = _config(None, num_layers=num_layers, use_sliding_window=use_sliding_window)
    config.max_window_layers = max_window_layers
    hf = json.loads(config.to_json_string())
    del hf["layer_types"]  # an older config.json: the kinds follow from max_window_layers
    derived = _config(
        None, num_layers=num_layers, use_sliding_window=use_sliding_window, max_window_layers=max_window_layers
    )
    ours = ModelConfig.from_hf(hf | {"architectures": ["Qwen2ForCausalLM"]})
    expected = tuple(derived.sliding_window if kind == "sliding_attention" else None for kind in derived.layer_types)
    assert ours.layer_sliding_windows == expected


def test_sliding_layers_without_a_window_are_refused(tmp_path):
    """use_sliding_window false leaves "sliding_attention" layers no window, which transformers cannot run either."""
    _save(_config(HYBRID, use_sliding_window=False), tmp_path)
    with pytest.raises(ValueError, match="layer 1 is 'sliding_attention' but this Qwen2 config sets no window"):
        LLM(str(tmp_path), device="cpu", block_size=4, num_gpu_blocks=64)


@pytest.mark.parametrize("kind", ["chunked_attention", "linear_attention", "mamba", "attention_sink"])
def test_a_layer_kind_the_engine_does_not_run_is_refused_by_name(tmp_path, kind):
    _save(_config(HYBRID), tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["layer_types"] = ["full_attention", kind]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=f"layer 1 has layer type '{kind}'"):
        LLM(str(tmp_path), device="cpu", num_gpu_blocks=16)


def test_layer_types_of_the_wrong_length_are_refused(tmp_path):
    _save(_config(HYBRID), tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["layer_types"] = ["full_attention"] * 3
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="layer_types has 3 entries but the model has num_hidden_layers=2"):
        LLM(str(tmp_path), device="cpu", num_gpu_blocks=16)


def test_a_config_built_in_code_with_a_sliding_layer_needs_a_window():
    tiny = dict(vocab_size=16, hidden_size=8, intermediate_size=8, num_hidden_layers=2, num_attention_heads=2)
    with pytest.raises(ValueError, match="layer 1 is 'sliding_attention' but sliding_window is None"):
        ModelConfig(**tiny, num_key_value_heads=1, layer_types=("full_attention", "sliding_attention"))
    ok = ModelConfig(
        **tiny, num_key_value_heads=1, sliding_window=4, layer_types=("full_attention", "sliding_attention")
    )
    assert ok.layer_sliding_windows == (None, 4) and ok.is_hybrid
