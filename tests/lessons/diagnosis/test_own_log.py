"""Page 6's "diagnose your own server" logic on real logs: memory bar parts, room for requests, flag changes."""

from pathlib import Path

import pytest

from engine.memory.catalog import GiB
from lessons.diagnosis import own_log, read_vllm_log

FIXTURES = Path(__file__).parent / "fixtures"


def log(name: str):
    return read_vllm_log((FIXTURES / name).read_text())


def test_memory_rows_of_the_10517_log_add_up_to_its_total():
    rows = {r["part"]: r["GiB"] for r in own_log.memory_rows(log("vllm-10517-20k-v0.log"))}
    assert rows["weights"] == pytest.approx(14.9888, abs=1e-3)
    assert rows["activations (profiled peak)"] == pytest.approx(17.06 - 14.9888, abs=1e-3)  # peak torch - weights
    assert rows["KV cache"] == 3.81 and rows["CUDA context / non-torch"] == 0.35
    assert rows["held back (1 - gpu_memory_utilization)"] == pytest.approx(23.58 * 0.10, abs=1e-3)
    assert sum(rows.values()) == pytest.approx(23.58, abs=0.01)  # the parts account for the whole card


def test_an_oom_message_alone_still_draws_the_card():
    rows = {r["part"]: r["GiB"] for r in own_log.memory_rows(log("vllm-2140-torch-oom.log"))}
    assert rows["allocated by PyTorch"] == 20.13 and rows["free"] == 3.09
    assert sum(rows.values()) == pytest.approx(23.69, abs=0.01)


def test_pool_and_room_follow_the_logged_blocks():
    parsed = log("vllm-10517-20k-v0.log")
    pool = own_log.kv_pool(parsed)
    assert pool.tokens == 1952 * 16 and pool.gib == pytest.approx(3.81)
    assert own_log.room_for(pool.tokens, 20000) == 1  # 1,250 blocks each: "1.56x" means one whole request
    assert own_log.room_for(pool.tokens, 1000) == 1952 // 63
    assert "**1 such request fits at once**" in own_log.room_sentence(pool, 20000)
    assert "Not even one" in own_log.room_sentence(pool, 40000)
    with pytest.raises(ValueError, match="request length 0"):
        own_log.room_for(pool.tokens, 0)


def test_pool_from_other_lines():
    assert own_log.kv_pool(log("vllm-25350-v1-fp8-kv.log")).tokens == 230528  # "GPU KV cache size"
    assert own_log.kv_pool(log("vllm-25350-v1-maxlen-error.log")).tokens == 122080  # from V1's error text
    assert own_log.kv_pool(log("vllm-14286-v1-graph-capture.log")).tokens == int(1.46 * 65536)  # concurrency x len
    assert own_log.kv_pool(log("vllm-53013-v1-cuda-graph-no-blocks.log")) is None
    with_model = own_log.kv_pool(log("gpustack-runner-251-v1-cuda-graph.log"), "llama-3-8b")
    assert with_model.tokens == int(6.87 * GiB // (128 * 1024))


def test_suggestions_recompute_the_pool_for_each_flag():
    parsed = log("vllm-10517-29k-v0-maxlen-error.log")
    rows = {r["change"]: r for r in own_log.suggestions(parsed, 29000)}
    assert rows["(as logged)"]["KV tokens"] == 23648 and rows["(as logged)"]["requests at once"] == 0
    assert rows["--gpu-memory-utilization 0.95"]["KV cache (GiB)"] == pytest.approx(2.89 + 0.05 * 23.58, abs=0.01)
    assert rows["--kv-cache-dtype fp8"]["KV tokens"] == pytest.approx(2 * 23648, rel=0.01)
    assert rows["--kv-cache-dtype fp8"]["requests at once"] == 1  # fp8 makes one 29,000-token request fit
    assert rows["--quantization fp8"]["KV cache (GiB)"] == pytest.approx(2.89 + 14.9888 / 2, abs=0.01)
    assert rows["--max-model-len 23552"]["KV tokens"] == 23648
    assert "--enforce-eager" not in rows  # the log shows no CUDA graphs
    graphs = {
        r["change"]: r for r in own_log.suggestions(log("gpustack-runner-251-v1-cuda-graph.log"), 4096, "llama-3-8b")
    }
    assert graphs["--enforce-eager"]["KV cache (GiB)"] == pytest.approx(6.87 + 0.36, abs=0.01)
    assert 6.87 < graphs["--max-num-seqs 64"]["KV cache (GiB)"] < 6.87 + 0.36
    assert own_log.suggestions(log("vllm-53013-v1-cuda-graph-no-blocks.log"), 4096) == []  # no pool: nothing to say


def test_found_rows_and_model_guess():
    parsed = log("vllm-pr-12569-v1-concurrency.log")
    rows = {r["figure"]: r["value"] for r in own_log.found_rows(parsed)}
    assert rows["GPU blocks"] == "1381" and rows["log format"] == "V1"
    assert rows["model"] == "neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8"
    assert own_log.guess_model(read_vllm_log("vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192")) == (
        "llama-3.1-8b"
    )
    assert own_log.guess_model(parsed) is None  # a quantized third-party repo is not a catalog checkpoint
    assert own_log.read_paste("", "").message and own_log.read_paste(None, None).message
