"""KV capacity at one byte budget: an MLA model's latent cache against a GQA model of the same width.

Two tiny random models built in memory (nothing downloaded), both hidden 128, 8 query heads, 2 layers, fp32 on
CPU: a Llama-style GQA model with 2 KV heads of 16 (Llama 3's 4 query heads per KV head) and a DeepSeek-V3-style
MLA model with kv_lora_rank 32 and qk_rope_head_dim 8 (the latent a quarter of the width, the rope key half a
no-rope head, as in DeepSeek-V2-Lite). Each engine gets the same `kv_cache_memory_bytes`; then, by serving:
- the longest context: one request of the engine's pool-limited max_model_len tokens (prompt + 8 generated) is
  served without preemption, and a prompt one token longer is refused;
- the most concurrent requests: the largest N for which N requests of PROMPT + OUTPUT tokens, submitted at once,
  all run together to completion with no preemption (tried N = 1, 2, ... until one fails).
Reported per side with the bytes per token (engine-measured), and MLA / GQA ratios, in one run. Capacities are
counts, not timings, so the run is deterministic; the load average is recorded anyway.

    python -m bench.kv_capacity_mla --json [--save]
"""

from __future__ import annotations

import os

import torch

from bench.harness import emit, env_info, log, parser, save
from engine import LLM, SamplingParams
from engine.model.config import ModelConfig
from engine.model.deepseek import DeepseekCausalLM
from engine.model.llama import CausalLM
from engine.model.mla_config import MLAConfig

BUDGET_BYTES = 256 * 2**10
BLOCK_SIZE = 16
PROMPT, OUTPUT = 48, 16  # one concurrency request: 64 tokens, 4 blocks of 16
WIDTH = {"vocab_size": 128, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2}
WIDTH |= {"num_attention_heads": 8, "max_position_embeddings": 4096}


def gqa_config() -> ModelConfig:
    """8 query heads of 16, 2 KV heads: 2 x 2 layers x 2 heads x 16 x 4 bytes = 512 bytes per token."""
    return ModelConfig(**WIDTH, num_key_value_heads=2, head_dim=16)


def mla_config() -> ModelConfig:
    """8 heads, latent 32 + rope key 8: 2 layers x 40 x 4 bytes = 320 bytes per token."""
    mla = MLAConfig(kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
    return ModelConfig(**WIDTH, num_key_value_heads=1, head_dim=8, architecture="DeepseekV3ForCausalLM", mla=mla)


def engine(config: ModelConfig, max_num_seqs: int = 256) -> LLM:
    """An engine over random weights of `config` with the shared KV byte budget."""
    torch.manual_seed(0)
    model = (CausalLM if config.mla is None else DeepseekCausalLM)(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(std=0.1)
    return LLM(
        config.architecture,
        device="cpu",
        backend="torch",
        dtype="float32",
        block_size=BLOCK_SIZE,
        kv_cache_memory_bytes=BUDGET_BYTES,
        max_num_seqs=max_num_seqs,
        preloaded=(model, config, None),
    )


def longest_context(llm: LLM) -> int:
    """Serve one request of max_model_len tokens (8 generated) without preemption; one more token is refused."""
    n = llm.max_model_len
    traces = []
    out = llm.generate(
        [[1] * (n - 8)], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True), on_step=traces.append
    )
    assert len(out[0].token_ids) == 8 and not any(t.preempted for t in traces), "the longest context was not served"
    try:
        llm.generate([[1] * (n + 1)], SamplingParams(max_tokens=1))
    except ValueError:
        return n
    raise AssertionError(f"a {n + 1}-token prompt was accepted past max_model_len={n}")


def all_run_together(llm: LLM, num: int) -> bool:
    """Whether `num` requests of PROMPT + OUTPUT tokens, submitted at once, all run together without preemption."""
    traces = []
    params = SamplingParams(max_tokens=OUTPUT, temperature=0.0, ignore_eos=True)
    llm.generate([[1 + i % 100] * PROMPT for i in range(num)], params, on_step=traces.append)
    return not any(t.preempted for t in traces) and max(len(t.running) for t in traces) == num


def most_concurrent(llm: LLM) -> int:
    """The largest N that all_run_together (N = 1, 2, ... until one fails)."""
    num = 0
    while all_run_together(llm, num + 1):
        num += 1
    return num


def measure(config: ModelConfig) -> dict:
    """One side: bytes per token, pool, longest context and most concurrent requests at the budget."""
    llm = engine(config)
    return {
        "architecture": config.architecture,
        "kv_bytes_per_token": llm.kv_cache.bytes_per_slot,
        "num_gpu_blocks": llm.num_gpu_blocks,
        "pool_tokens": llm.num_gpu_blocks * BLOCK_SIZE,
        "pool_bytes": llm.kv_cache_bytes,
        "longest_context_tokens": longest_context(llm),
        "most_concurrent_requests": most_concurrent(llm),
    }


def main() -> None:
    """Measure both sides and print one JSON line."""
    args = parser("KV capacity at one byte budget: MLA latent cache vs GQA of the same width").parse_args()
    log(f"kv_capacity_mla: budget {BUDGET_BYTES} bytes, blocks of {BLOCK_SIZE}, requests of {PROMPT}+{OUTPUT}")
    sides = {"gqa": measure(gqa_config()), "mla": measure(mla_config())}
    ratios = {
        key: sides["mla"][key] / sides["gqa"][key]
        for key in ("longest_context_tokens", "most_concurrent_requests", "pool_tokens")
    }
    result = {
        "benchmark": "kv_capacity_mla",
        "budget_bytes": BUDGET_BYTES,
        "block_size": BLOCK_SIZE,
        "request_tokens": {"prompt": PROMPT, "output": OUTPUT},
        "shapes": {
            "width": WIDTH,
            "gqa": {"num_key_value_heads": 2, "head_dim": 16},
            "mla": {"kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16},
        },
        **sides,
        "mla_over_gqa": ratios,
        "bytes_per_token_ratio": sides["gqa"]["kv_bytes_per_token"] / sides["mla"]["kv_bytes_per_token"],
        "env": env_info(),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    log(
        f"longest context gqa {sides['gqa']['longest_context_tokens']} mla {sides['mla']['longest_context_tokens']}; "
        f"most concurrent gqa {sides['gqa']['most_concurrent_requests']} mla {sides['mla']['most_concurrent_requests']}"
    )
    if args.save:
        log(f"saved {save('kv_capacity_mla', result)}")
    emit(result)


if __name__ == "__main__":
    main()
