"""Lesson 5's hybrid-model run: a sliding group hands blocks back, live, beside the full group that keeps them.

A tiny random Qwen2 whose `layer_types` make layer 0 full attention and layer 1 sliding-window attention runs
on the real engine (engine.LLM): its two KV-cache groups draw blocks from one shared pool
(engine/core/kv_groups.py, vLLM V1's hybrid KV-cache manager). One request (a long prompt, chunked, then
decodes) is traced step by step: the blocks each group holds and the pool's free blocks, from each
`StepTrace`. The full group's count grows with the context; the sliding group's stays at the few blocks its
window needs (engine/core/sliding_window.py). No Streamlit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.core.kv_groups import blocks_per_seq, kv_cache_groups
from engine.llm import LLM
from engine.model.config import ModelConfig
from engine.model.llama import CausalLM
from engine.sampling_params import SamplingParams

WINDOWS: tuple[int, ...] = (8, 16, 32, 64)  # the sliding layer's window, tokens
DEFAULT_WINDOW = 16
PROMPT_TOKENS, NEW_TOKENS, CHUNK = 160, 40, 32  # one request: prompt chunks of 32, then 40 decodes
VOCAB = 256

__all__ = ["DEFAULT_WINDOW", "WINDOWS", "HybridRun", "HybridStep", "hybrid_run", "tiny_hybrid"]


@dataclass(frozen=True, slots=True)
class HybridStep:
    """One engine step of the traced request: its length and the blocks each group holds after it."""

    step: int
    context: int  # tokens with K/V in the cache after the step
    full_blocks: int  # blocks the full-attention group holds
    sliding_blocks: int  # blocks the sliding-window group holds
    free_blocks: int  # the shared pool's free blocks


@dataclass(frozen=True, slots=True)
class HybridRun:
    """The traced run: its settings, each step, and what the request would hold with every layer full."""

    window: int
    block_size: int
    num_blocks: int
    steps: tuple[HybridStep, ...]
    all_full_blocks: int  # blocks the same request holds at its end when both layers attend fully

    @property
    def given_back(self) -> int:
        """Blocks the sliding group returned to the pool by the end: what the full group holds beyond it."""
        last = self.steps[-1]
        return last.full_blocks - last.sliding_blocks

    @property
    def peak_sliding(self) -> int:
        """The most blocks the sliding group held at once."""
        return max(s.sliding_blocks for s in self.steps)

    @property
    def hybrid_blocks(self) -> int:
        """Blocks the request holds at its end over both groups."""
        last = self.steps[-1]
        return last.full_blocks + last.sliding_blocks

    def rows(self) -> list[dict[str, int]]:
        """The table under the chart: one row per engine step."""
        return [
            {
                "step": s.step,
                "tokens in the cache": s.context,
                "full group's blocks": s.full_blocks,
                "sliding group's blocks": s.sliding_blocks,
                "free blocks in the pool": s.free_blocks,
            }
            for s in self.steps
        ]

    def summary(self) -> str:
        """One sentence: what the chart shows at these settings."""
        last = self.steps[-1]
        return (
            f"After {last.context} tokens the full group holds {last.full_blocks} blocks and the sliding group "
            f"{last.sliding_blocks} (never more than {self.peak_sliding}): it gave {self.given_back} blocks back to "
            f"the shared pool, so the request holds {self.hybrid_blocks} blocks where every layer full would hold "
            f"{self.all_full_blocks}."
        )


def tiny_hybrid(window: int) -> tuple[CausalLM, ModelConfig]:
    """The lesson's random tiny Qwen2 (seed 0): layer 0 full attention, layer 1 sliding within `window` tokens."""
    config = ModelConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        sliding_window=window,
        layer_types=("full_attention", "sliding_attention"),
        architecture="Qwen2ForCausalLM",
        qkv_bias=True,
    )
    torch.manual_seed(0)
    model = CausalLM(config).eval()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.2)
    return model, config


def hybrid_run(block_size: int, window: int = DEFAULT_WINDOW) -> HybridRun:
    """Serve one 160-token prompt plus 40 new tokens on the real engine and trace each group's blocks."""
    if window not in WINDOWS:
        raise ValueError(f"window={window!r} is not offered; pick one of {', '.join(map(str, WINDOWS))} tokens")
    model, config = tiny_hybrid(window)
    num_blocks = blocks_per_seq(kv_cache_groups(config.layer_sliding_windows), 256, block_size, CHUNK)
    llm = LLM(
        "hybrid",
        device="cpu",
        block_size=block_size,
        num_gpu_blocks=num_blocks,
        max_num_batched_tokens=CHUNK,
        preloaded=(model, config, None),
    )
    steps: list[HybridStep] = []

    def record(trace) -> None:
        if not trace.group_block_tables:
            return
        full, sliding = trace.group_held_blocks
        context = trace.scheduled[0].num_computed_tokens + trace.scheduled[0].num_new_tokens
        steps.append(HybridStep(trace.step, context, full, sliding, trace.num_free_blocks))

    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(1, VOCAB, (PROMPT_TOKENS,), generator=g).tolist()
    llm.generate([prompt], SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True), on_step=record)
    all_full = 2 * -(-steps[-1].context // block_size)
    return HybridRun(window, block_size, num_blocks, tuple(steps), all_full)
