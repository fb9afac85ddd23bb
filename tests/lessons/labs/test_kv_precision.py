"""lessons/labs/kv_precision.py's page-facing results: the pool table, one choice's summary, ratios, the JSON record.

Built by hand from the demo model's numbers on CPU (bench/results/kv_precision-cpu.json): fp32 against fp8 in
an 8 MiB budget, so every expected value below is arithmetic on those, not the lab's own output.
"""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from lessons.labs import kv_precision as lab

RESULTS = Path(__file__).resolve().parents[3] / "bench" / "results" / "kv_precision-cpu.json"
AUTO = lab.KvPool("float32", 4096, 128, 2048, 8 * 2**20)
FP8 = lab.KvPool("float8_e4m3fn", 1024, 512, 8192, 8 * 2**20)
PRICE = lab.Fp8Price(
    max_logit_error=0.2,
    mean_logit_error=0.01,
    top1_agreement=0.95,
    positions=200,
    identical_generations=3,
    num_prompts=8,
)
RUN = lab.PrecisionRun(AUTO, FP8, PRICE, max_tokens=24, model="demo", budget_bytes=8 * 2**20)


def test_bytes_per_token_follow_the_formula():
    # The demo model: 4 layers, 2 KV heads, head_dim 64 -> 2 x 4 x 2 x 64 = 1024 elements per token.
    assert lab.bytes_per_token(4, 2, 64) == {"fp32": 4096, "bf16": 2048, "fp8": 1024}


def test_the_ratios_say_how_much_fp8_saves():
    assert RUN.bytes_per_token_ratio == 4.0  # 4096 B / 1024 B: full precision over fp8
    assert RUN.blocks_ratio == 4.0  # 512 blocks / 128 blocks: fp8 over full precision
    bf16 = lab.PrecisionComparison(lab.KvPool("bfloat16", 2048, 256, 4096, 2**23), FP8, PRICE, 24)
    assert (bf16.bytes_per_token_ratio, bf16.blocks_ratio) == (2.0, 2.0)
    lopsided = lab.PrecisionComparison(lab.KvPool("float32", 3000, 100, 1600, 2**23), FP8, PRICE, 24)
    assert lopsided.bytes_per_token_ratio == 3000 / 1024 and lopsided.blocks_ratio == 512 / 100  # not inverted


def test_budget_and_pool_in_mib():
    assert RUN.budget_mib == 8.0 and AUTO.pool_mib == 8.0
    assert lab.KvPool("float32", 4096, 3, 48, 3 * 65536).pool_mib == 0.1875  # 196608 B / 1048576 B per MiB
    assert lab.PrecisionRun(AUTO, FP8, PRICE, 24, "demo", 2**19).budget_mib == 0.5


def test_summary_shows_the_price_only_for_fp8():
    auto = RUN.summary("auto")
    assert (auto.choice, auto.pool, auto.price) == ("auto", AUTO, None)
    fp8 = RUN.summary("fp8")
    assert (fp8.choice, fp8.pool, fp8.price) == ("fp8", FP8, PRICE)
    assert fp8.price.top1_agreement == 0.95 and fp8.pool.kv_bytes_per_token == 1024
    assert (RUN.pool_of("auto"), RUN.pool_of("fp8")) == (AUTO, FP8)
    with pytest.raises(ValueError, match="'int3' is not offered; use one of auto, fp8"):
        RUN.summary("int3")
    with pytest.raises(ValueError, match="'fp8_e4m3' is not offered"):
        RUN.pool_of("fp8_e4m3")


def test_pool_rows_keep_their_columns_and_values():
    assert RUN.rows() == [
        {
            "KV precision": "auto (float32)",
            "KV bytes / token": 4096,
            "blocks in budget": 128,
            "tokens in budget": 2048,
            "pool MiB": 8.0,
        },
        {
            "KV precision": "fp8 (float8_e4m3fn)",
            "KV bytes / token": 1024,
            "blocks in budget": 512,
            "tokens in budget": 8192,
            "pool MiB": 8.0,
        },
    ]
    assert lab.KvPool("float32", 4096, 3, 48, 200_000).row("auto")["pool MiB"] == 0.19  # 0.19073 MiB, 2 places


def test_results_are_frozen():
    with pytest.raises(FrozenInstanceError):
        RUN.budget_bytes = 1  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        AUTO.num_gpu_blocks = 1  # type: ignore[misc]


def test_the_record_has_the_benchmarks_fields_in_its_order():
    saved = json.loads(RESULTS.read_text())
    record = RUN.record()
    # The benchmark adds its own fields around the lab's (device, timings, environment); the rest are the lab's.
    bench_only = {"benchmark", "device", "generate_s", "tokens_per_s", "fp8_speed_ratio", "generated_tokens"}
    bench_only |= {"prompts", "repeats", "env", "load_average_1min"}
    assert list(record) == [k for k in saved if k not in bench_only]
    assert list(record["auto"]) == list(saved["auto"]) and list(record["fp8"]) == list(saved["fp8"])
    assert record["auto"] == saved["auto"] and record["fp8"] == saved["fp8"]  # the same demo pools on CPU
    assert (record["bytes_per_token_ratio"], record["blocks_ratio"]) == (4.0, 4.0)
    assert (record["model"], record["budget_bytes"], record["max_tokens"], record["num_prompts"]) == (
        "demo",
        2**23,
        24,
        8,
    )
    assert (record["top1_agreement"], record["positions"], record["identical_generations"]) == (0.95, 200, 3)
    assert (record["max_logit_error"], record["mean_logit_error"]) == (0.2, 0.01)
    json.dumps(record)  # plain JSON, nothing left as a dataclass


def test_engine_rejects_an_unknown_precision():
    with pytest.raises(ValueError, match="KV precision 'int3' is not offered"):
        lab.engine((None, None, None), "int3")
    with pytest.raises(ValueError, match="prompts is empty"):
        lab.compare(prompts=())
