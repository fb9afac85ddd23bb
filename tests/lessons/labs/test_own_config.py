"""The learner's own config.json (lessons/labs/own_config.py): read through the memory model, size-capped, and
every broken paste a ValueError naming what is wrong. Reference numbers come from the published config.json
files (meta-llama/Meta-Llama-3-8B, Qwen/Qwen2.5-7B-Instruct), worked out here by hand."""

from __future__ import annotations

import json

import pytest

from engine.memory import published
from lessons.labs import own_config

# meta-llama/Meta-Llama-3-8B config.json (the fields the memory model reads)
LLAMA_3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 8192,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
}
# Qwen/Qwen2.5-7B-Instruct config.json: 28 layers, 28 query / 4 KV heads, head dim 3584 / 28 = 128
QWEN_25_7B = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "max_position_embeddings": 32768,
    "sliding_window": 131072,
    "use_sliding_window": False,
    "vocab_size": 152064,
}


def test_a_real_config_reads_back_its_kv_per_token():
    model = own_config.read_config(json.dumps(LLAMA_3_8B))
    assert model is not None and model.attention_kind == "GQA"
    assert model.kv_bytes_per_token("bf16") == 2 * 32 * 8 * 128 * 2 == 131_072
    assert model.kv_bytes_per_token("fp8") == 65_536
    rows = {r["figure"]: r["value"] for r in model.rows("bf16", context=8192)}
    assert rows["layers (num_hidden_layers)"] == "32"
    assert rows["KV heads cached"] == "8" and rows["head dim"] == "128"
    assert rows["KV per token (bf16)"] == "131,072 bytes = 128.0 KiB"
    assert rows["KV of one 8,192-token request"] == f"{131_072 * 8192 / 2**20:,.1f} MiB"  # 1,024.0 MiB
    assert "128.0 KiB of KV per token in bf16" in model.summary("bf16")
    qwen = own_config.read_config(json.dumps(QWEN_25_7B))
    assert qwen.kv_bytes_per_token() == 2 * 28 * 4 * 128 * 2 == 57_344  # 56 KiB; its window is switched off
    assert "28 full attention" in qwen.summary()


@pytest.mark.parametrize("text", [None, "", "   \n\t"])
def test_an_empty_box_is_no_model(text):
    assert own_config.read_config(text) is None


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({k: v for k, v in LLAMA_3_8B.items() if k != "num_hidden_layers"}, "num_hidden_layers"),
        ({**LLAMA_3_8B, "num_attention_heads": -4}, "num_attention_heads"),
        ({**LLAMA_3_8B, "num_key_value_heads": 5}, "num_kv_heads=5"),
    ],
)
def test_a_broken_config_names_the_field(config, named):
    with pytest.raises(ValueError, match=named):
        own_config.read_config(json.dumps(config))


def test_not_json_and_not_an_object_say_so():
    with pytest.raises(ValueError, match="not valid JSON"):
        own_config.read_config('{"num_hidden_layers": 32,')
    with pytest.raises(ValueError, match="JSON object"):
        own_config.read_config("[1, 2, 3]")
    with pytest.raises(ValueError, match="as text"):
        own_config.read_config(b"{}")


def test_an_oversize_paste_is_refused_before_it_is_parsed():
    padded = json.dumps({**LLAMA_3_8B, "padding": "x" * own_config.MAX_CONFIG_CHARS})
    with pytest.raises(ValueError, match=f"limit of {own_config.MAX_CONFIG_CHARS:,} or more"):
        own_config.read_config(padded)
    full = json.dumps(LLAMA_3_8B).ljust(own_config.MAX_CONFIG_CHARS)  # a full box: the browser cut the paste there
    with pytest.raises(ValueError, match="cut"):
        own_config.read_config(full)
    at_cap = json.dumps(LLAMA_3_8B).ljust(own_config.MAX_CONFIG_CHARS - 1)  # trailing spaces: still one config
    assert own_config.read_config(at_cap).kv_bytes_per_token() == 131_072


def test_the_paste_never_names_the_model_the_page_shows():
    hostile = {**LLAMA_3_8B, "_name_or_path": "**bold** <script>alert(1)</script>", "model_type": ":red[x]"}
    model = own_config.read_config(json.dumps(hostile))
    shown = model.summary() + json.dumps(model.rows(context=4))
    assert model.spec.name == own_config.OWN_NAME
    assert "script" not in shown and "bold" not in shown and ":red" not in shown


# Today's published configs, pasted as text (engine/memory/published.py holds them as the repos publish them).
# Expected numbers by hand from each config's fields.
TODAY = [
    # DeepSeek-V3: 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes, one latent, no V
    (published.deepseek_v3, "MLA", "61 MLA latent of 576", 61 * 576 * 2),
    # gpt-oss-120b: 18 full layers keep every token: 2 x 18 x 8 KV heads x 64 x 2 bytes
    (published.gpt_oss_120b, "GQA", "18 sliding window of 128, 18 full attention", 2 * 18 * 8 * 64 * 2),
    # Gemma 3 27B: 10 global layers of 62: 2 x 10 x 16 x 128 x 2
    (published.gemma_3_27b, "GQA", "52 sliding window of 1,024, 10 full attention", 2 * 10 * 16 * 128 * 2),
    # Qwen3-Next-80B-A3B: 12 full-attention layers of 48 (2 KV heads x 256), the rest Gated DeltaNet
    (published.qwen3_next_80b_a3b, "GQA", "36 linear attention (fixed state), 12 full attention", 2 * 12 * 2 * 256 * 2),
]


@pytest.mark.parametrize(("config", "kind", "kinds", "per_token"), TODAY, ids=lambda v: getattr(v, "__name__", ""))
def test_todays_configs_read_back_by_kind(config, kind, kinds, per_token):
    model = own_config.read_config(json.dumps(config()))
    assert model.attention_kind == kind and model.kv_bytes_per_token() == per_token
    assert model.layer_kinds() == kinds
    assert f"{per_token / 1024:,.1f} KiB of KV per token in bf16" in model.summary()


def test_an_mla_config_shows_its_latent_not_its_heads():
    model = own_config.read_config(json.dumps(published.deepseek_v3()))
    rows = {r["figure"]: r["value"] for r in model.rows(context=32_768)}
    assert rows["latent per token and layer (MLA)"] == "512 kv_lora_rank + 64 qk_rope_head_dim = 576"
    assert rows["num_key_value_heads (not cached by MLA)"] == "128"
    assert rows["KV of one 32,768-token request"] == f"{32_768 * 61 * 576 * 2 / 2**20:,.1f} MiB"  # 2,196.0 MiB
    assert model.kv_bytes_per_token("fp8") == 35_136


def test_a_broken_todays_config_names_its_field():
    broken = published.deepseek_v3()
    del broken["kv_lora_rank"]
    with pytest.raises(ValueError, match="kv_lora_rank"):
        own_config.read_config(json.dumps(broken))
    wrong = published.gpt_oss_120b()
    wrong["layer_types"] = wrong["layer_types"][:-1]
    with pytest.raises(ValueError, match="layer_types"):
        own_config.read_config(json.dumps(wrong))
