"""read_vllm_log on real vLLM logs from public issues (fixtures/, each with its URL) and on garbage."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lessons.diagnosis import read_vllm_log
from lessons.diagnosis.readlog import MAX_LOG_CHARS, VllmLog

FIXTURES = Path(__file__).parent / "fixtures"
FIELDS = (
    "weights_gb",
    "kv_cache_gib",
    "kv_cache_tokens",
    "num_gpu_blocks",
    "max_model_len",
    "max_concurrency",
    "cuda_graph_gib",
    "total_gib",
    "gpu_memory_utilization",
    "suggested_utilization",
    "peak_torch_gib",
    "non_torch_gib",
    "activation_gib",
    "oom_tried_gib",
    "oom_total_gib",
    "oom_free_gib",
    "oom_allocated_gib",
    "running_reqs",
    "waiting_reqs",
    "preemptions",
    "kv_cache_usage_pct",
)

# Every number below is read off the fixture's text by eye; fields not listed must come back None.
EXPECTED = {
    "vllm-10517-20k-v0.log": (
        "V0",
        dict(
            weights_gb=14.9888,
            kv_cache_gib=3.81,
            num_gpu_blocks=1952,
            max_model_len=20000,
            max_concurrency=1.56,
            total_gib=23.58,
            gpu_memory_utilization=0.90,
            peak_torch_gib=17.06,
            non_torch_gib=0.35,
        ),
        (),
    ),
    "vllm-10517-29k-v0-maxlen-error.log": (
        "V0",
        dict(
            weights_gb=14.9888,
            kv_cache_gib=2.89,
            num_gpu_blocks=1478,
            max_model_len=29000,
            max_concurrency=0.82,
            total_gib=23.58,
            gpu_memory_utilization=0.90,
            peak_torch_gib=17.98,
            non_torch_gib=0.35,
        ),
        ("max seq len (29000) is larger", "KV cache (23648)"),
    ),
    "vllm-pr-12569-v1-concurrency.log": (
        "V1",
        dict(weights_gb=67.7229, num_gpu_blocks=1381, max_model_len=2048, max_concurrency=10.79),
        (),
    ),
    "vllm-25350-v1-fp8-kv.log": (
        "V1",
        dict(kv_cache_gib=10.55, kv_cache_tokens=230528, max_model_len=100000, max_concurrency=2.31),
        (),
    ),
    "vllm-25350-v1-maxlen-error.log": (
        "V1",
        dict(max_model_len=221000, kv_cache_gib=5.59),
        ("(10.12 GiB KV cache is needed", "estimated maximum model length is 122080"),
    ),
    "vllm-53013-v1-cuda-graph-no-blocks.log": (
        "V1",
        dict(cuda_graph_gib=118.65),
        ("No available memory for the cache blocks",),
    ),
    "gpustack-runner-251-v1-cuda-graph.log": (
        "V1",
        dict(kv_cache_gib=6.87, cuda_graph_gib=0.36, gpu_memory_utilization=0.82, suggested_utilization=0.8352),
        (),
    ),
    "lmcache-3430-v1-cuda-graph-default-sizes.log": (
        "V1",
        dict(
            kv_cache_gib=6.37,
            kv_cache_tokens=46368,
            max_model_len=16384,
            max_concurrency=2.83,
            cuda_graph_gib=0.52,
            gpu_memory_utilization=0.9764,
            suggested_utilization=0.9984,
        ),
        (),
    ),
    "vllm-12529-v0-profile-breakdown.log": (
        "V0",
        dict(
            weights_gb=3.34,
            kv_cache_gib=2.20,
            num_gpu_blocks=5148,
            max_model_len=2000,
            max_concurrency=41.18,
            total_gib=7.75,
            gpu_memory_utilization=0.90,
            non_torch_gib=0.04,
            activation_gib=1.39,
        ),
        (),
    ),
    "vllm-2140-torch-oom.log": (
        None,
        dict(oom_tried_gib=3.50, oom_total_gib=23.69, oom_free_gib=3.09, oom_allocated_gib=20.13),
        ("CUDA out of memory. Tried to allocate 3.50 GiB",),
    ),
    "vllm-14286-v1-graph-capture.log": ("V1", dict(max_model_len=65536, max_concurrency=1.46, cuda_graph_gib=2.02), ()),
    "vllm-33263-v1-kv-size.log": ("V1", dict(kv_cache_gib=18.78, kv_cache_tokens=175856), ()),
}


def test_every_fixture_is_checked_and_names_its_source():
    assert sorted(p.name for p in FIXTURES.glob("*.log")) == sorted(EXPECTED)
    for path in FIXTURES.glob("*.log"):
        assert path.read_text().startswith("# source: https://github.com/"), path.name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_logs_parse_to_the_numbers_in_their_text(name):
    version, expected, error_parts = EXPECTED[name]
    text = (FIXTURES / name).read_text()
    got = read_vllm_log(text)
    assert got.version == version and got.recognised and got.message is None
    for f in FIELDS:
        want = expected.get(f)
        assert getattr(got, f) == (pytest.approx(want) if isinstance(want, float) else want), f
        if want is not None:  # the number really is in the text as printed
            assert f"{want:,}" in text or f"{want}" in text or f"{want:.2f}" in text, f
    for part in error_parts:
        assert any(part in e for e in got.errors), part
    assert len(got.errors) == (1 if error_parts else 0)


def test_the_last_start_up_wins_and_repeated_worker_errors_count_once():
    ok = (FIXTURES / "vllm-10517-20k-v0.log").read_text()
    bad = (FIXTURES / "vllm-10517-29k-v0-maxlen-error.log").read_text()
    both = read_vllm_log(ok + bad + bad)
    assert both.num_gpu_blocks == 1478 and both.max_model_len == 29000 and len(both.errors) == 1
    assert read_vllm_log((bad + ok).encode()).num_gpu_blocks == 1952  # bytes are decoded too


@pytest.mark.parametrize(
    "junk",
    [
        None,
        "",
        "   \n",
        "hello world",
        b"\x00\xff\xfe\x80" * 1000,
        12,
        ["Loading model weights took 3 GB"],
        "x" * (MAX_LOG_CHARS + 10),
        "GPU blocks: " + "9" * 5000,
        "Maximum concurrency for 1e999 tokens per request: infx",
        "max seq len (" * 50_000,
        "\x00" * 100,
    ],
)
def test_garbage_gets_a_message_not_an_exception(junk):
    got = read_vllm_log(junk)
    assert isinstance(got, VllmLog) and not got.recognised and got.errors == ()
    # a figure beyond any GPU ("1e999 tokens") is read, refused and named in a note instead
    assert got.message and ("No vLLM start-up figures" in got.message or ("looks wrong" in got.message and got.doubts))
    assert all(getattr(got, f) is None for f in FIELDS)


def test_a_huge_paste_is_cut_and_says_so():
    text = (FIXTURES / "vllm-10517-20k-v0.log").read_text() + "x" * MAX_LOG_CHARS
    got = read_vllm_log(text)
    assert got.num_gpu_blocks == 1952 and "only the first 2,000,000 characters were read" in got.message


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=400) | st.binary(max_size=400))
def test_arbitrary_input_never_raises(text):
    got = read_vllm_log(text)
    assert got.recognised or got.message


@pytest.mark.parametrize("digits", ["٩٩", "９９", "९९", "𝟗𝟗"])
def test_figures_are_read_in_ascii_digits_only(digits):
    # float() reads every script's digits; a vLLM log prints ASCII, so anything else is not a figure
    parsed = read_vllm_log(f"GPU KV cache size: {digits} tokens\n# GPU blocks: {digits}")
    assert parsed.found == () and not parsed.recognised
    assert read_vllm_log("GPU KV cache size: 99 tokens").kv_cache_tokens == 99


def test_v029_prints_the_kv_cache_size_and_the_concurrency_on_one_line():
    # vllm/v1/core/kv_cache_utils.py at v0.34.0 (update_kv_cache_capacity) logs both figures in one message:
    # "GPU KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx"
    log = read_vllm_log(
        "INFO [gpu_worker.py] Available KV cache memory: 3.84 GiB\n"
        "INFO [kv_cache_utils.py] GPU KV cache size: 31,440 tokens, Maximum concurrency for 32,768 tokens per "
        "request: 0.96x"
    )
    assert (log.kv_cache_tokens, log.max_model_len, log.max_concurrency) == (31440, 32768, 0.96)


def test_the_extensible_kv_caches_measured_size_wins_over_its_first_estimate():
    # vLLM v0.34.0's default on CUDA: the first pass logs an estimate at utilization 1.0 (the address range it
    # reserves), then the warm-up measures and commits less (vllm/v1/worker/extensible_kv_cache.py)
    text = (
        "INFO 12-07 10:00:01 [gpu_worker.py:790] Available KV cache memory: 62.1 GiB\n"
        "INFO 12-07 10:00:31 [extensible_kv_cache.py:693] Memory after warmup: 62.79 GiB free, 0.0 GiB committed to "
        "the KV cache, 1.34 GiB kept for transient activations (1.34 GiB allocated at peak, 0.0 GiB of torch "
        "reservation growth); 7794 KV cache blocks (60.89 GiB) fit within the requested 79.11 GiB. Torch may "
        "reserve up to 17.89 GiB.\n"
        "INFO 12-07 10:00:31 [extensible_kv_cache.py:536] Extended KV cache to 7794 blocks (60.89 GiB).\n"
    )
    log = read_vllm_log(text)
    assert log.kv_cache_gib == pytest.approx(60.89) and log.num_gpu_blocks == 7794
    # without the extensible lines the estimate is all the log says
    assert read_vllm_log(text.splitlines()[0]).kv_cache_gib == pytest.approx(62.1)
