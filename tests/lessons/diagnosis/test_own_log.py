"""Page 7's "diagnose your own server" logic on real logs: memory bar parts, room for requests, flag changes;
absurd figures (beyond any GPU, negative, contradicting each other) give notes, and no log ever raises."""

import math
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.memory.catalog import GiB
from lessons.diagnosis import own_log, read_vllm_log
from lessons.diagnosis.readlog import LIMITS, MAX_GPU_GIB, MAX_TOKENS

FIXTURES = Path(__file__).parent / "fixtures"


def log(name: str):
    return read_vllm_log((FIXTURES / name).read_text())


def test_memory_parts_of_the_10517_log_add_up_to_its_total():
    parts = own_log.memory_parts(log("vllm-10517-20k-v0.log"))
    rows = {p.part: p.gib for p in parts}
    assert rows["weights"] == pytest.approx(14.9888, abs=1e-3)
    assert rows["activations (profiled peak)"] == pytest.approx(17.06 - 14.9888, abs=1e-3)  # peak torch - weights
    assert rows["KV cache"] == 3.81 and rows["CUDA context / non-torch"] == 0.35
    assert rows["held back (1 - gpu_memory_utilization)"] == pytest.approx(23.58 * 0.10, abs=1e-3)
    assert sum(rows.values()) == pytest.approx(23.58, abs=0.01)  # the parts account for the whole card
    table = own_log.memory_rows(log("vllm-10517-20k-v0.log"))  # the table: the same parts, GiB to 3 decimals
    assert table == [{"part": p.part, "GiB": round(p.gib, 3), "bytes": p.bytes} for p in parts]
    assert all(p.bytes == p.gib * GiB for p in parts)


def test_an_oom_message_alone_still_draws_the_card():
    rows = {p.part: p.gib for p in own_log.memory_parts(log("vllm-2140-torch-oom.log"))}
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
    rows = {c.flag: c for c in own_log.suggestions(parsed, 29000)}
    assert rows["(as logged)"].kv_tokens == 23648 and rows["(as logged)"].requests == 0
    assert rows["--gpu-memory-utilization 0.95"].kv_gib == pytest.approx(2.89 + 0.05 * 23.58, abs=0.01)
    assert rows["--kv-cache-dtype fp8"].kv_tokens == pytest.approx(2 * 23648, rel=0.01)
    assert rows["--kv-cache-dtype fp8"].requests == 1  # fp8 makes one 29,000-token request fit
    assert rows["--quantization fp8"].kv_gib == pytest.approx(2.89 + 14.9888 / 2, abs=0.01)
    assert rows["--max-model-len 23552"].kv_tokens == 23648
    assert "--enforce-eager" not in rows  # the log shows no CUDA graphs
    for c in rows.values():  # each change's room is its own pool's: whole 16-token blocks, 1,813 per request
        assert c.requests == c.kv_tokens // 16 // 1813, c
    graphs = {c.flag: c for c in own_log.suggestions(log("gpustack-runner-251-v1-cuda-graph.log"), 4096, "llama-3-8b")}
    assert graphs["--enforce-eager"].kv_gib == pytest.approx(6.87 + 0.36, abs=0.01)
    assert 6.87 < graphs["--max-num-seqs 64"].kv_gib < 6.87 + 0.36
    # the v0.20+ profiling notice: "increase --gpu-memory-utilization to 0.8352" gives back the graphs' 0.36 GiB
    assert graphs["--gpu-memory-utilization 0.8352"].kv_gib == pytest.approx(6.87 + 0.36, abs=0.01)
    assert "--gpu-memory-utilization 0.8352" not in rows  # the V0 log has no such notice
    # with the model known, fp8 saves half of the linear layers only: Llama-3-8B's embedding and lm_head stay bf16
    llama = {c.flag: c for c in own_log.suggestions(parsed, 29000, "llama-3.1-8b")}
    saved = llama["--quantization fp8"].kv_gib - 2.89
    assert 14.9888 / 2 * 0.85 < saved < 14.9888 / 2 * 0.9  # 1.05 of its 8.03 B parameters are the two tables


def test_a_flag_change_row_is_the_pages_table_row():
    change = own_log.FlagChange("--enforce-eager", 7.23, 59_216, 14, "no CUDA graphs")
    assert change.row() == {
        "change": "--enforce-eager",
        "KV cache (GiB)": 7.23,
        "KV tokens": 59_216,
        "requests at once": 14,
        "why": "no CUDA graphs",
    }
    assert own_log.suggestions(log("vllm-53013-v1-cuda-graph-no-blocks.log"), 4096) == []  # no pool: nothing to say


def test_the_room_question_starts_at_the_logs_max_model_len():
    assert own_log.request_len_default(read_vllm_log("hello")) == own_log.DEFAULT_REQUEST_LEN == 4096
    assert own_log.request_len_default(read_vllm_log("INFO engine config: max_seq_len=29000, more")) == 29000
    huge = read_vllm_log("INFO engine config: max_seq_len=20000000, more")
    assert huge.max_model_len == 20_000_000 and own_log.request_len_default(huge) == own_log.MAX_REQUEST_LEN


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


# --- absurd numbers: a note that the line looks wrong, never a crash ---------------------------------------

INT64 = 2**63 - 1
LINES = (  # the real line shapes read_vllm_log knows, with a number slot
    "INFO [gpu_worker.py] Available KV cache memory: {f} GiB",
    "INFO [kv_cache_utils.py] GPU KV cache size: {i} tokens",
    "INFO [kv_cache_utils.py] Maximum concurrency for {i} tokens per request: {f}x",
    "INFO [worker.py] Loading model weights took {f} GB",
    "INFO [executor_base.py] # GPU blocks: {i}, # CPU blocks: 2048",
    "INFO Memory profiling takes 5.2 seconds total_gpu_memory={f}GiB x gpu_memory_utilization={u} = 21.22GiB "
    "model weights take {f}GiB; non_torch_memory takes {f}GiB; PyTorch activation peak memory takes {f}GiB; "
    "the rest of the memory reserved for KV Cache is {f}GiB.",
    "INFO [gpu_model_runner.py] Graph capturing finished in 12 secs, took {f} GiB",
    "INFO Estimated CUDA graph memory: {f} GiB total",
    "ValueError: The model's max seq len ({i}) is larger than the maximum number of tokens that can be stored in "
    "KV cache ({i}). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {f} GiB. GPU 0 has a total capacity of {f} GiB "
    "of which {f} GiB is free. Of the allocated memory {f} GiB is allocated by PyTorch",
    "INFO Initializing a V1 LLM engine with config: model='meta-llama/Meta-Llama-3-8B-Instruct', max_seq_len={i}",
    # vLLM v0.34.0's shapes (vllm/v1/worker/gpu/model_runner.py, gpu_worker.py, vllm/v1/metrics/loggers.py,
    # vllm/v1/core/kv_cache_planning.py)
    "INFO [model_runner.py] Model loading took {f} GiB memory and {f} seconds",
    "INFO [gpu_worker.py] CUDA graph pool memory: {f} GiB (actual), {f} GiB (estimated), difference: {f} GiB (1.0%).",
    "INFO [loggers.py] Engine 000: Avg prompt throughput: {f} tokens/s, Avg generation throughput: {f} tokens/s, "
    "Running: {i} reqs, Waiting: {i} reqs, Preemptions: {i}, GPU KV cache usage: {f}%, Prefix cache hit rate: 0.0%",
    "WARNING [kv_cache_planning.py] --max-model-len auto reduced max_model_len from {i} to {i} (5.0 GiB GPU "
    "available for the KV cache). Requests longer than 1 tokens will be rejected.",
)
NUMBER = st.one_of(
    st.integers(min_value=0, max_value=10**25).map(str),
    st.integers(min_value=0, max_value=10**25).map(lambda n: f"{n:,}"),
    st.floats(min_value=0, max_value=1e25, allow_nan=False).map(lambda x: f"{x:.2f}"),
    st.sampled_from(["0", "0.00", "-3.2", "-1", "1e30", "1e999", "9" * 25, "1,2,,3", "0.0001"]),
)


@st.composite
def logs(draw) -> str:
    lines = draw(st.lists(st.sampled_from(LINES), min_size=1, max_size=8))
    out = []
    for line in lines:
        for slot in ("{i}", "{f}", "{u}"):
            while slot in line:
                value = draw(NUMBER if slot != "{u}" else st.sampled_from(["0.9", "0.5", "5.5", "0", ".95", "1.0"]))
                line = line.replace(slot, value, 1)
        out.append(line)
    return "\n".join(out)


def table_safe(rows) -> None:
    """What st.dataframe can show: ints within int64, finite floats."""
    for row in rows:
        for value in row.values():
            if isinstance(value, int):
                assert -INT64 <= value <= INT64, row
            elif isinstance(value, float):
                assert math.isfinite(value), row


@settings(max_examples=300, deadline=None)
@given(logs(), st.integers(min_value=1, max_value=10_000_000), st.sampled_from([None, "llama-3-8b", "mistral-7b"]))
@example(
    "INFO GPU KV cache size: 99999999999999999999 tokens\nINFO Available KV cache memory: 6.87 GiB", 4096, None
)  # the crash: 10^20 tokens overflowed the flag-change table (int64)
@example("GPU 0 has a total capacity of 23.69 GiB of which 30.00 GiB is free", 4096, None)  # no negative part
def test_any_log_of_real_lines_with_any_numbers_never_raises(text, length, model):
    parsed = own_log.read_paste(text, "")
    table_safe(own_log.found_rows(parsed))
    rows = own_log.memory_rows(parsed)
    table_safe(rows)
    for row in rows:
        assert 0 <= row["GiB"] <= 2 * MAX_GPU_GIB, row
    assert [r["part"] for r in rows] == [p.part for p in own_log.memory_parts(parsed)]
    pool = own_log.kv_pool(parsed, model)
    if pool is not None:
        assert 0 <= pool.tokens <= MAX_TOKENS
        assert own_log.room_for(pool.tokens, length) >= 0
        assert own_log.room_sentence(pool, length)
    table_safe([c.row() for c in own_log.suggestions(parsed, length, model)])
    assert 1 <= own_log.request_len_default(parsed) <= own_log.MAX_REQUEST_LEN  # a value the length box accepts
    for name in parsed.found:
        value = getattr(parsed, name)
        low, high, _ = LIMITS[name]
        assert low <= value <= high, (name, value)  # nothing beyond any GPU is kept


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("GPU KV cache size: 99999999999999 tokens", "99,999,999,999,999 tokens is more than the KV tokens"),
        ("Loading model weights took 1000000000 GiB", "1,000,000,000 GiB is more than any GPU's memory"),
        ("Maximum concurrency for 2048 tokens per request: 1e30x", "1e+30x is more than"),
        ("Maximum concurrency for 1000000000000 tokens per request: 2.00x", "1,000,000,000,000 tokens is more"),
        ("max_seq_len=1000000000000", "max_model_len looks wrong"),
        ("Available KV cache memory: -3.20 GiB", "-3.2 GiB is negative"),
        ("total_gpu_memory=80GiB gpu_memory_utilization=1.50", "1.5 is more than the whole GPU"),
    ],
)
def test_a_figure_beyond_any_gpu_is_left_out_with_a_note(text, words):
    parsed = own_log.read_paste(text)
    assert any(words in d and "looks wrong" in d for d in parsed.doubts), parsed.doubts


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("total_gpu_memory=23.58GiB gpu_memory_utilization=0.90 model weights take 40.00GiB", "weights (40 GiB)"),
        ("total_gpu_memory=23.58GiB gpu_memory_utilization=0.90 reserved for KV Cache is 30GiB", "KV cache (30 GiB)"),
        (
            "total_gpu_memory=24GiB gpu_memory_utilization=0.90 model weights take 14GiB; reserved for KV Cache is "
            "14GiB",
            "add up to 28.00 GiB",
        ),
        ("GPU KV cache size: 99,999 tokens\nAvailable KV cache memory: 0.0001 GiB", "bytes per token"),
        ("GPU 0 has a total capacity of 23.69 GiB of which 30.00 GiB is free", "free memory (30 GiB)"),
    ],
)
def test_impossible_combinations_are_flagged(text, words):
    parsed = own_log.read_paste(text)
    assert any(words in d for d in parsed.doubts), parsed.doubts
    table_safe([c.row() for c in own_log.suggestions(parsed, 4096)])


def test_a_kv_pool_with_impossible_bytes_per_token_has_no_size():
    parsed = own_log.read_paste("GPU KV cache size: 99,999 tokens\nAvailable KV cache memory: 0.0001 GiB")
    pool = own_log.kv_pool(parsed)
    assert pool.tokens == 99_999 and pool.bytes_per_token is None and own_log.suggestions(parsed, 4096) == []


def test_every_figure_the_reader_can_find_has_a_label_on_the_page():
    from dataclasses import fields

    from lessons.diagnosis.readlog import VllmLog

    numeric = [f.name for f in fields(VllmLog) if f.type in ("float | None", "int | None")]
    assert "suggested_utilization" in numeric and len(numeric) >= 17
    every = VllmLog(**{name: 1 for name in numeric}, found=tuple(numeric))
    assert len(own_log.found_rows(every)) == len(numeric)  # a label for each (no KeyError)
    rows = {r["figure"]: r["value"] for r in own_log.found_rows(log("gpustack-runner-251-v1-cuda-graph.log"))}
    assert rows["suggested gpu_memory_utilization (same KV as before v0.20)"] == "0.8352"


V034_LOG = "\n".join(  # each line in vLLM v0.34.0's own format string, numbers made up
    [
        "(EngineCore pid=7) INFO 12-07 10:00:01 [model_runner.py:442] Model loading took 14.99 GiB memory and "
        "5.123456 seconds",
        "(EngineCore pid=7) INFO 12-07 10:00:10 [gpu_worker.py:796] Available KV cache memory: 5.21 GiB",
        "(EngineCore pid=7) INFO 12-07 10:00:10 [gpu_worker.py:809] CUDA graph memory profiling is enabled (default "
        "since v0.21.0). The current --gpu-memory-utilization=1.0000 is equivalent to --gpu-memory-utilization=0.9805 "
        "without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase "
        "--gpu-memory-utilization to 1.0000. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.",
        "(EngineCore pid=7) INFO 12-07 10:00:31 [gpu_worker.py:1112] CUDA graph pool memory: 0.45 GiB (actual), "
        "0.46 GiB (estimated), difference: 0.01 GiB (2.2%).",
        "(EngineCore pid=7) INFO 12-07 10:00:31 [kv_cache_utils.py:1168] GPU KV cache size: 42,672 tokens, Maximum "
        "concurrency for 8,192 tokens per request: 5.21x",
        "(APIServer pid=1) INFO 12-07 10:05:00 [loggers.py:336] Engine 000: Avg prompt throughput: 1234.5 tokens/s, "
        "Avg generation throughput: 456.7 tokens/s, Running: 12 reqs, Waiting: 3 reqs, Preemptions: 2, GPU KV cache "
        "usage: 97.3%, Prefix cache hit rate: 12.5%",
    ]
)


def test_a_v034_log_is_read_whole():
    parsed = own_log.read_paste(V034_LOG, "")
    assert parsed.version == "V1" and parsed.weights_gb == 14.99 and parsed.kv_cache_gib == 5.21
    assert parsed.cuda_graph_gib == 0.45  # the measured pool, not the estimate
    assert (parsed.kv_cache_tokens, parsed.max_model_len, parsed.max_concurrency) == (42672, 8192, 5.21)
    assert (parsed.running_reqs, parsed.waiting_reqs, parsed.preemptions, parsed.kv_cache_usage_pct) == (12, 3, 2, 97.3)
    # vLLM prints "Preemptions" only when there were any: a later line without it means none in its interval
    quiet = V034_LOG + (
        "\n(APIServer pid=1) INFO [loggers.py:336] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
        "throughput: 40.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 2.0%, Prefix cache hit "
        "rate: 12.5%"
    )
    later = own_log.read_paste(quiet, "")
    assert (later.running_reqs, later.waiting_reqs, later.preemptions, later.kv_cache_usage_pct) == (1, 0, 0, 2.0)
    assert own_log.read_paste(V034_LOG.rsplit("\n", 1)[0], "").preemptions is None  # no metrics line: unknown


def test_a_utilization_of_one_gets_no_raise_it_suggestion():
    # the extensible KV cache's default 1.0: the notice suggests 1.0 (capped), which would change nothing
    rows = own_log.suggestions(own_log.read_paste(V034_LOG, ""), 8192)
    assert not any(r.flag.startswith("--gpu-memory-utilization") for r in rows)
    assert any(r.flag == "--enforce-eager" for r in rows)


def test_max_model_len_auto_is_offered_after_a_max_seq_len_error():
    text = (
        "ValueError: To serve at least one request with the model's max seq len (131072), (16.0 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (3.84 GiB). Based on the available memory, the "
        "estimated maximum model length is 31424. Try increasing `gpu_memory_utilization` when initializing the engine."
    )
    rows = {r.flag: r for r in own_log.suggestions(own_log.read_paste(text, ""), 4096, "llama-3.1-8b")}
    auto = rows["--max-model-len auto"]
    assert auto.kv_tokens == 31424 and auto.requests == 31424 // 16 // 256
    assert "--max-model-len 30720" in rows  # the explicit value, rounded down to 1024
