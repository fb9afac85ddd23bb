"""Lesson 2's MLA section: the engine's latent cache on a tiny multi-head latent attention model (no Streamlit).

Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434) caches per token and layer one latent of
`kv_lora_rank` values plus one rotary key of `qk_rope_head_dim`, shared by every head, instead of K and V per
head: bytes per token = layers x (kv_lora_rank + qk_rope_head_dim) x bytes per element (vLLM's
MLAAttentionSpec, vllm/v1/kv_cache_interface.py: one latent per token, no separate V). `run_latent_cache`
builds a tiny random DeepSeek-V3-shaped model in memory (engine/model/deepseek.py; nothing downloaded),
serves a few prompts with the real engine over its paged latent cache, and returns what the cache holds,
measured from the engine's own tensors, beside the formula and beside the K/V cache the same heads would need
without the latent (2 x layers x heads x head dims x bytes). `DEEPSEEK_V3` is the published checkpoint's
arithmetic for the same formula.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from engine.llm import LLM
from engine.model.config import ModelConfig
from engine.model.deepseek import DeepseekCausalLM
from engine.model.mla_config import MLAConfig
from engine.sampling_params import SamplingParams

BLOCK_SIZE = 16
NUM_BLOCKS = 32
PROMPT_LENS = (5, 23, 40)  # token ids; the longest spans three blocks
MAX_TOKENS = 8
# DeepSeek-V3's config.json: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64, 128 heads of 128 + 64 (q/k) and
# 128 (v); its num_key_value_heads (128) describes the expanded heads, not the cache.
DEEPSEEK_V3 = {"layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "heads": 128, "qk_head_dim": 192, "v": 128}


@dataclass(frozen=True, slots=True)
class LatentCacheRun:
    """The engine's latent cache on a tiny MLA model, measured, beside the formula (bytes are per token)."""

    num_layers: int
    num_heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_head_dim: int
    v_head_dim: int
    element_bytes: int
    measured_bytes_per_token: int  # the engine's cache tensor bytes / its token slots
    formula_bytes_per_token: int  # layers x (kv_lora_rank + qk_rope_head_dim) x bytes
    expanded_bytes_per_token: int  # the same heads' K and V without the latent
    num_blocks: int
    block_size: int
    pool_bytes: int
    tokens_served: int  # prompt + generated tokens of the run
    cache_shape: tuple[int, ...]  # one layer's cache rows [num_blocks, block_size, 1, latent]

    @property
    def saving(self) -> float:
        """How many times smaller the latent cache is than the expanded K/V."""
        return self.expanded_bytes_per_token / self.formula_bytes_per_token

    @property
    def matches(self) -> bool:
        """The measured bytes per token are the formula's."""
        return self.measured_bytes_per_token == self.formula_bytes_per_token

    def rows(self) -> list[dict[str, Any]]:
        """The section's table: what is cached per token and layer, and what it costs."""
        layers, size = self.num_layers, self.element_bytes
        return [
            {
                "cache": "MLA latent (this engine, measured)",
                "values per token and layer": self.kv_lora_rank + self.qk_rope_head_dim,
                "bytes per token": self.measured_bytes_per_token,
            },
            {
                "cache": f"formula: {layers} x ({self.kv_lora_rank} + {self.qk_rope_head_dim}) x {size}",
                "values per token and layer": self.kv_lora_rank + self.qk_rope_head_dim,
                "bytes per token": self.formula_bytes_per_token,
            },
            {
                "cache": f"K and V of {self.num_heads} heads ({self.qk_head_dim} + {self.v_head_dim})",
                "values per token and layer": self.num_heads * (self.qk_head_dim + self.v_head_dim),
                "bytes per token": self.expanded_bytes_per_token,
            },
        ]


def deepseek_v3_bytes_per_token(element_bytes: int = 2) -> tuple[int, int]:
    """DeepSeek-V3's latent bytes per token and its expanded K/V's, at `element_bytes` per value (bf16: 2)."""
    v3 = DEEPSEEK_V3
    latent = v3["layers"] * (v3["kv_lora_rank"] + v3["qk_rope_head_dim"]) * element_bytes
    expanded = v3["layers"] * v3["heads"] * (v3["qk_head_dim"] + v3["v"]) * element_bytes
    return latent, expanded


def tiny_mla_config(vocab_size: int = 128) -> ModelConfig:
    """A tiny DeepSeek-V3-shaped config: 2 dense layers, 4 heads, latent 32 + rope 8, q_lora_rank 24."""
    mla = MLAConfig(kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, q_lora_rank=24)
    return ModelConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=mla.qk_rope_head_dim,
        max_position_embeddings=256,
        architecture="DeepseekV3ForCausalLM",
        mla=mla,
    )


def tiny_mla_model(seed: int = 0, vocab_size: int = 128) -> DeepseekCausalLM:
    """Random weights (seeded) for `tiny_mla_config`, in eval mode, fp32 on CPU."""
    torch.manual_seed(seed)
    model = DeepseekCausalLM(tiny_mla_config(vocab_size))
    with torch.no_grad():
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.1)
    return model.eval()


def run_latent_cache(seed: int = 0) -> LatentCacheRun:
    """Serve PROMPT_LENS prompts for MAX_TOKENS tokens on the tiny MLA model and measure its latent cache."""
    model = tiny_mla_model(seed)
    config = model.config
    llm = LLM(
        "tiny-mla",
        device="cpu",
        backend="torch",
        block_size=BLOCK_SIZE,
        num_gpu_blocks=NUM_BLOCKS,
        preloaded=(model, config, None),
    )
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(1, config.vocab_size, (n,), generator=g).tolist() for n in PROMPT_LENS]
    outs = llm.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True))
    cache, mla = llm.kv_cache, config.mla
    rows = cache.layers[0].k
    size = rows.element_size()
    # K (qk_head_dim) and V (v_head_dim) of every head, as a cache without the latent would hold them
    expanded = config.num_hidden_layers * config.num_attention_heads * (mla.qk_head_dim + mla.v_head_dim) * size
    return LatentCacheRun(
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        kv_lora_rank=mla.kv_lora_rank,
        qk_rope_head_dim=mla.qk_rope_head_dim,
        qk_head_dim=mla.qk_head_dim,
        v_head_dim=mla.v_head_dim,
        element_bytes=size,
        measured_bytes_per_token=cache.rows.numel() * cache.rows.element_size() // cache.num_slots,
        formula_bytes_per_token=config.num_hidden_layers * (mla.kv_lora_rank + mla.qk_rope_head_dim) * size,
        expanded_bytes_per_token=expanded,
        num_blocks=llm.num_gpu_blocks,
        block_size=BLOCK_SIZE,
        pool_bytes=llm.kv_cache_bytes,
        tokens_served=sum(len(o.prompt_token_ids) + len(o.token_ids) for o in outs),
        cache_shape=tuple(rows.shape),
    )
