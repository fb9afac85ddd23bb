"""The published config.json of today's models, trimmed to the fields the memory model reads, with their repos.

Each function returns a fresh dict as the Hugging Face repo publishes it (keys and values copied, fields the
memory model does not read left out); the catalog (engine/memory/catalog.py) builds its entries from them with
`model_from_config`, so the catalog reads these models exactly as it reads a learner's pasted config.json.
`PUBLISHED` pairs each catalog key with its repo and the parameter counts its model card states (total, active),
which tests/engine/memory/test_params.py checks the architecture's own count against.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any


def _alternating(num_layers: int) -> list[str]:
    """gpt-oss's layer_types as published: sliding on even layers, full on odd ones."""
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(num_layers)]


def _fp8_block() -> dict[str, Any]:
    return {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}


def deepseek_v3() -> dict[str, Any]:
    """deepseek-ai/DeepSeek-V3 config.json (V3-0324 and R1 share it)."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": 129280,
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_nextn_predict_layers": 1,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "n_shared_experts": 1,
        "n_routed_experts": 256,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "qk_nope_head_dim": 128,
        "num_experts_per_tok": 8,
        "moe_layer_freq": 1,
        "first_k_dense_replace": 3,
        "max_position_embeddings": 163840,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "quantization_config": _fp8_block(),
    }


def kimi_k2() -> dict[str, Any]:
    """moonshotai/Kimi-K2-Instruct config.json: DeepSeek-V3's architecture, 64 heads, 384 experts, 1 dense layer."""
    return {
        **deepseek_v3(),
        "model_type": "kimi_k2",
        "vocab_size": 163840,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "n_routed_experts": 384,
        "first_k_dense_replace": 1,
        "max_position_embeddings": 131072,
    }


def gpt_oss_120b() -> dict[str, Any]:
    """openai/gpt-oss-120b config.json."""
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "attention_bias": True,
        "experts_per_token": 4,
        "num_experts_per_tok": 4,
        "head_dim": 64,
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "layer_types": _alternating(36),
        "max_position_embeddings": 131072,
        "num_attention_heads": 64,
        "num_hidden_layers": 36,
        "num_key_value_heads": 8,
        "num_local_experts": 128,
        "sliding_window": 128,
        "tie_word_embeddings": False,
        "vocab_size": 201088,
        "quantization_config": {
            "modules_to_not_convert": [
                "model.layers.*.self_attn",
                "model.layers.*.mlp.router",
                "model.embed_tokens",
                "lm_head",
            ],
            "quant_method": "mxfp4",
        },
    }


def gpt_oss_20b() -> dict[str, Any]:
    """openai/gpt-oss-20b config.json: gpt-oss-120b's shape with 24 layers and 32 experts."""
    return {**gpt_oss_120b(), "layer_types": _alternating(24), "num_hidden_layers": 24, "num_local_experts": 32}


def gemma_3_27b() -> dict[str, Any]:
    """google/gemma-3-27b-it config.json: the language model nested in text_config, no layer_types (pattern 6).

    The published text_config leaves vocab_size and max_position_embeddings at transformers' Gemma3TextConfig
    defaults (262208 and 131072); they are written out here."""
    return {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "text_config": {
            "head_dim": 128,
            "hidden_size": 5376,
            "intermediate_size": 21504,
            "model_type": "gemma3_text",
            "num_attention_heads": 32,
            "num_hidden_layers": 62,
            "num_key_value_heads": 16,
            "sliding_window": 1024,
            "vocab_size": 262208,
            "max_position_embeddings": 131072,
        },
        "torch_dtype": "bfloat16",
    }


def qwen3_8b() -> dict[str, Any]:
    """Qwen/Qwen3-8B config.json."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "head_dim": 128,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "max_position_embeddings": 40960,
        "max_window_layers": 36,
        "num_attention_heads": 32,
        "num_hidden_layers": 36,
        "num_key_value_heads": 8,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "vocab_size": 151936,
    }


def qwen3_235b_a22b() -> dict[str, Any]:
    """Qwen/Qwen3-235B-A22B config.json."""
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "decoder_sparse_step": 1,
        "head_dim": 128,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "max_position_embeddings": 40960,
        "max_window_layers": 94,
        "mlp_only_layers": [],
        "moe_intermediate_size": 1536,
        "num_attention_heads": 64,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 94,
        "num_key_value_heads": 4,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "vocab_size": 151936,
    }


def qwen3_next_80b_a3b() -> dict[str, Any]:
    """Qwen/Qwen3-Next-80B-A3B-Instruct config.json: Gated DeltaNet layers, full attention every 4th layer."""
    return {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "decoder_sparse_step": 1,
        "full_attention_interval": 4,
        "head_dim": 256,
        "hidden_size": 2048,
        "intermediate_size": 5120,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_value_head_dim": 128,
        "max_position_embeddings": 262144,
        "mlp_only_layers": [],
        "moe_intermediate_size": 512,
        "num_attention_heads": 16,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "num_hidden_layers": 48,
        "num_key_value_heads": 2,
        "shared_expert_intermediate_size": 512,
        "tie_word_embeddings": False,
        "vocab_size": 151936,
    }


def llama_4_scout() -> dict[str, Any]:
    """meta-llama/Llama-4-Scout-17B-16E-Instruct config.json: text_config nested; NoPE layers every 4th (default)."""
    return {
        "architectures": ["Llama4ForConditionalGeneration"],
        "model_type": "llama4",
        "text_config": {
            "attention_chunk_size": 8192,
            "head_dim": 128,
            "hidden_size": 5120,
            "interleave_moe_layer_step": 1,
            "intermediate_size": 8192,
            "intermediate_size_mlp": 16384,
            "max_position_embeddings": 10485760,
            "model_type": "llama4_text",
            "num_attention_heads": 40,
            "num_experts_per_tok": 1,
            "num_hidden_layers": 48,
            "num_key_value_heads": 8,
            "num_local_experts": 16,
            "tie_word_embeddings": False,
            "vocab_size": 202048,
        },
        "torch_dtype": "bfloat16",
    }


@dataclass(frozen=True, slots=True)
class Published:
    """One model as its repo publishes it: name, repo, config.json and the model card's parameter counts."""

    name: str
    repo: str
    config: Callable[[], dict[str, Any]]
    total_params: float
    active_params: float | None = None  # None: a dense model, every parameter active


PUBLISHED: Mapping[str, Published] = MappingProxyType(
    {
        "deepseek-v3": Published("DeepSeek-V3", "deepseek-ai/DeepSeek-V3", deepseek_v3, 671e9, 37e9),
        "kimi-k2": Published("Kimi-K2", "moonshotai/Kimi-K2-Instruct", kimi_k2, 1.0e12, 32e9),
        "gpt-oss-20b": Published("gpt-oss-20b", "openai/gpt-oss-20b", gpt_oss_20b, 20.91e9, 3.61e9),
        "gpt-oss-120b": Published("gpt-oss-120b", "openai/gpt-oss-120b", gpt_oss_120b, 116.83e9, 5.13e9),
        "gemma-3-27b": Published("Gemma-3-27B", "google/gemma-3-27b-it", gemma_3_27b, 27e9),
        "qwen3-8b": Published("Qwen3-8B", "Qwen/Qwen3-8B", qwen3_8b, 8.2e9),
        "qwen3-235b-a22b": Published("Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B", qwen3_235b_a22b, 235e9, 22e9),
        "qwen3-next-80b-a3b": Published(
            "Qwen3-Next-80B-A3B", "Qwen/Qwen3-Next-80B-A3B-Instruct", qwen3_next_80b_a3b, 80e9, 3e9
        ),
        "llama-4-scout": Published(
            "Llama-4-Scout", "meta-llama/Llama-4-Scout-17B-16E-Instruct", llama_4_scout, 109e9, 17e9
        ),
    }
)
