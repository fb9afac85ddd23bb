"""LLM facade and sampling: parameters, sampler statistics, stop rules, seeds, step traces, sizing, errors,
the Triton (interpreter) path against the torch path, and the embedded demo model.

A tiny random checkpoint (hidden 32, 2 layers, GQA 4/2) with a byte-BPE tokenizer is written in the Hugging
Face layout (config.json + model.safetensors) so every test goes through the real loader.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from engine import LLM, RequestOutput
from engine.config import CPU_KV_BUDGET_BYTES
from engine.llm import PromptTooLongError
from engine.memory import MODELS, kv_blocks_from_budget, kv_bytes_per_token
from engine.model.loader import DEMO_DIR
from engine.sampling_params import SamplingParams
from engine.worker.sampler import filter_logits, make_generator, sample
from tests.conftest import DEVICE, requires_cuda, requires_triton
from tests.tiny_model import make_tiny_model

TEXT = "the cache holds keys and values; the scheduler fills blocks with the tokens of every request. " * 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random tiny Llama folder with a tokenizer; returns its path."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny"), TEXT)


def greedy(n: int = 8, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True, **kw)


# ---- sampling --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_tokens": 0}, "max_tokens=0"),
        ({"temperature": -1.0}, "temperature=-1.0"),
        ({"temperature": float("nan")}, "temperature=nan"),
        ({"top_k": -2}, "top_k=-2"),
        ({"top_p": 0.0}, "top_p=0.0"),
        ({"top_p": 1.5}, "top_p=1.5"),
        ({"seed": "x"}, "seed='x'"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
    ],
)
def test_bad_sampling_params(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


def test_filter_logits_matches_a_sorted_reference():
    torch.manual_seed(3)
    logits = torch.randn(50)
    probs = torch.softmax(logits, -1)
    order = torch.argsort(probs, descending=True)
    # top-k keeps exactly the k largest
    kept = filter_logits(logits, top_k=7, top_p=1.0).isfinite()
    assert set(kept.nonzero().flatten().tolist()) == set(order[:7].tolist())
    # top-p keeps the shortest prefix of the sorted distribution whose mass reaches p
    p = 0.6
    n = int((torch.cumsum(probs[order], 0) < p).sum()) + 1
    kept = filter_logits(logits, top_k=None, top_p=p).isfinite()
    assert set(kept.nonzero().flatten().tolist()) == set(order[:n].tolist())
    assert filter_logits(logits, top_k=None, top_p=1e-6).isfinite().sum() == 1  # the top token survives


def test_sampler_frequencies_follow_softmax_with_temperature():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0]])
    params = SamplingParams(temperature=0.7, seed=11)
    gen = make_generator(params, "cpu")
    draws = torch.tensor([sample(logits, [params], [gen])[0] for _ in range(4000)])
    freq = torch.bincount(draws, minlength=4).float() / len(draws)
    torch.testing.assert_close(freq, torch.softmax(logits[0] / 0.7, -1), atol=0.03, rtol=0)


def test_sampler_greedy_rows_and_top_k_rows():
    logits = torch.tensor([[0.0, 3.0, 1.0], [5.0, 4.9, -9.0]])
    params = [SamplingParams(temperature=0.0), SamplingParams(temperature=5.0, top_k=2, seed=0)]
    gens = [make_generator(p, "cpu") for p in params]
    assert gens[0] is None
    rows = [sample(logits, params, gens) for _ in range(200)]
    assert all(r[0] == 1 for r in rows)
    assert {r[1] for r in rows} == {0, 1}  # token 2 is outside the top 2, even at a high temperature


# ---- generation behaviour ------------------------------------------------------------------------------


def test_text_prompts_timings_and_order(tiny):
    llm = LLM(str(tiny), device="cpu", block_size=4, num_gpu_blocks=64)
    outs = llm.generate(["the cache", "blocks", "tokens of every request"], greedy(6))
    assert [o.request_id for o in outs] == [0, 1, 2]
    for o in outs:
        assert o.prompt_token_ids == llm.tokenizer.encode(o.prompt)
        assert len(o.token_ids) == 6 and o.finish_reason == "length" and o.finished
        assert o.text == llm.tokenizer.decode(o.token_ids)
        assert o.arrival_time <= o.first_token_time <= o.finish_time
        assert 0 <= o.ttft <= o.latency


def test_stop_token_and_eos(tiny):
    llm = LLM(str(tiny), device="cpu", block_size=4, num_gpu_blocks=64)
    prompt = [5, 6, 7, 8]
    full = llm.generate([prompt], greedy(12))[0].token_ids
    stop = full[3]
    out = llm.generate([prompt], greedy(12, stop_token_ids=[stop]))[0]
    assert out.finish_reason == "stop" and out.token_ids == full[: full.index(stop) + 1]
    # The same token as EOS stops generation unless ignore_eos.
    llm.eos_token_ids = (stop,)
    eos_out = llm.generate([prompt], SamplingParams(max_tokens=12, temperature=0.0))[0]
    assert eos_out.finish_reason == "stop" and eos_out.token_ids == out.token_ids
    assert llm.generate([prompt], greedy(12))[0].token_ids == full


def test_max_model_len_cuts_generation(tiny):
    llm = LLM(str(tiny), device="cpu", block_size=4, num_gpu_blocks=64, max_model_len=20)
    out = llm.generate([list(range(1, 16))], greedy(10))[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 5


def test_seeded_sampling_is_independent_of_the_batch(tiny):
    llm = LLM(str(tiny), device="cpu", block_size=4, num_gpu_blocks=64)
    params = SamplingParams(max_tokens=10, temperature=1.0, top_p=0.95, seed=123, ignore_eos=True)
    alone = llm.generate([[3, 4, 5]], params)[0].token_ids
    others = SamplingParams(max_tokens=7, temperature=1.3, ignore_eos=True)
    batched = llm.generate([[9, 9, 9, 9, 9], [3, 4, 5], [1]], [others, params, others])
    assert batched[1].token_ids == alone
    other_seed = SamplingParams(max_tokens=10, temperature=1.0, top_p=0.95, seed=124, ignore_eos=True)
    assert llm.generate([[3, 4, 5]], other_seed)[0].token_ids != alone


def test_step_api_and_traces(tiny):
    llm = LLM(str(tiny), device="cpu", block_size=4, num_gpu_blocks=12, max_num_batched_tokens=16)
    prompts = [list(range(1, 20)), [7, 8], list(range(30, 45))]
    expected = [o.token_ids for o in llm.generate(prompts, greedy(6))]
    ids = [llm.add_request(p, greedy(6)) for p in prompts]
    traces = []
    while llm.has_unfinished_requests():
        traces.append(llm.step())
    assert [llm.get_output(i).token_ids for i in ids] == expected
    assert llm.step() is None  # idle
    assert [t.step for t in traces] == list(range(traces[0].step, traces[0].step + len(traces)))
    assert sorted(sum((t.finished for t in traces), [])) == ids
    for t in traces:
        assert 1 <= t.num_batched_tokens <= 16 and 0.0 <= t.kv_usage <= 1.0 and t.duration_s >= 0
        assert set(t.block_tables) == set(t.running)
        for request_id, table in t.block_tables.items():
            assert all(request_id in t.blocks[b].owners for b in table)
        used = sum(1 for b in t.blocks if b.ref_count > 0)
        assert used == t.num_blocks - t.num_free_blocks == t.usage.num_used_blocks
        assert {r.phase for r in t.scheduled} <= {"prefill", "decode"}
    assert traces[0].scheduled[0].phase == "prefill" and traces[-1].scheduled[-1].phase == "decode"
    assert any(r.sampled_token is None for t in traces for r in t.scheduled)  # a partial prompt chunk


def test_cpu_block_count_follows_the_documented_budget(tiny):
    llm = LLM(str(tiny), block_size=16, device="cpu", max_num_seqs=4)
    per_slot = llm.kv_cache.bytes_per_slot
    assert per_slot == 2 * 2 * 2 * 8 * 4  # K and V x layers x kv heads x head_dim x fp32
    expected = min(CPU_KV_BUDGET_BYTES, 4 * 128 * per_slot) // (16 * per_slot)
    assert llm.num_gpu_blocks == expected and llm.max_model_len == 128


# ---- errors ----------------------------------------------------------------------------------------------


def test_bad_paths_and_configs(tiny, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        LLM(str(tmp_path / "nope"))
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        LLM(str(tmp_path / "file.txt"))
    bad = tmp_path / "bad"
    shutil.copytree(tiny, bad)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ValueError, match="GPT2LMHeadModel"):
        LLM(str(bad))
    with pytest.raises(ValueError, match="block_size=3"):
        LLM(str(tiny), block_size=3)
    with pytest.raises(ValueError, match="dtype='int8'"):
        LLM(str(tiny), dtype="int8")
    with pytest.raises(ValueError, match="num_gpu_blocks=0"):
        LLM(str(tiny), num_gpu_blocks=0)
    with pytest.raises(ValueError, match="max_model_len=100 is larger than"):
        LLM(str(tiny), device="cpu", block_size=4, num_gpu_blocks=8, max_model_len=100)
    with pytest.raises(ValueError, match="max_model_len=999"):
        LLM(str(tiny), max_model_len=999)
    with pytest.raises(ValueError, match="backend='cuda'"):
        LLM(str(tiny), backend="cuda")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_num_seqs": 0}, r"max_num_seqs=0 must be an integer >= 1 \(requests running at once"),
        ({"max_num_seqs": True}, "max_num_seqs=True must be an integer"),
        ({"max_num_batched_tokens": -1}, r"max_num_batched_tokens=-1 must be an integer >= 1 \(new tokens per step"),
        ({"max_num_batched_tokens": 2.5}, "max_num_batched_tokens=2.5 must be an integer"),
        ({"max_model_len": 0}, r"max_model_len=0 must be an integer >= 1 \(or None for the model's limit\)"),
        ({"num_gpu_blocks": -2}, r"num_gpu_blocks=-2 must be an integer >= 1 \(or None to size it\)"),
        ({"gpu_memory_utilization": 0.0}, r"gpu_memory_utilization=0.0 must be a fraction in \(0, 1\]"),
        ({"gpu_memory_utilization": "0.9"}, "gpu_memory_utilization='0.9' must be a fraction"),
        ({"block_size": 0}, "block_size=0"),
    ],
)
def test_bad_limits_are_named_before_the_model_loads_or_the_cache_is_sized(tiny, monkeypatch, kwargs, match):
    import engine.config
    import engine.llm

    def no_load(*args, **kw):
        raise AssertionError("the model was loaded before the limits were checked")

    monkeypatch.setattr(engine.llm, "load_model", no_load)
    monkeypatch.setattr(engine.config, "auto_num_blocks", no_load)
    with pytest.raises(ValueError, match=match):
        LLM(str(tiny), device="cpu", **kwargs)


def test_bad_devices_say_what_is_missing(tiny, monkeypatch):
    with pytest.raises(ValueError, match="device='gpu' is not a torch device; use 'cpu', 'cuda' or 'cuda:N'"):
        LLM(str(tiny), device="gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same answer on a machine with a GPU
    for device in ("cuda", "cuda:0", torch.device("cuda")):
        with pytest.raises(ValueError, match=r"but torch sees no CUDA device \(torch.cuda.is_available\(\) is False"):
            LLM(str(tiny), device=device)
    assert LLM(str(tiny), block_size=4, num_gpu_blocks=8).device.type == "cpu"  # None picks the CPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match=r"device='cuda:3' but only 1 CUDA device\(s\) are visible: cuda:0..cuda:0"):
        LLM(str(tiny), device="cuda:3")


def test_bad_prompts_and_params(tiny):
    llm = LLM(str(tiny), device="cpu", block_size=4, num_gpu_blocks=16, max_model_len=32)
    cases = [
        ([], "prompts is empty"),
        ([""], "prompt 0 is empty"),
        ([[1, 2], []], "prompt 1 is empty"),
        ([list(range(33))], "33 tokens, more than max_model_len=32"),
        ([[1, 10**6]], "outside the vocabulary"),
        ([1, 2, 3], "wrap it in a list"),
        ([3.5], "must be a str or a list of int"),
        ([[True, 2]], "must be a str or a list of int"),  # a bool is never a token id
    ]
    for prompts, match in cases:
        with pytest.raises(ValueError, match=match):
            llm.generate(prompts, greedy())
    with pytest.raises(ValueError, match="one per prompt"):
        llm.generate([[1], [2]], [greedy()])
    with pytest.raises(ValueError, match="must be a SamplingParams"):
        llm.add_request([1], {"max_tokens": 3})
    assert not llm.has_unfinished_requests()  # nothing half-queued by a rejected call
    assert llm.generate("the", greedy(2))[0].prompt == "the"  # a bare string is one prompt
    numpy_ids = list(np.array([1, 2], dtype=np.int64))  # numpy integers are token ids too (kernels.validate.is_whole)
    assert llm.generate([numpy_ids], greedy(2))[0].prompt_token_ids == [1, 2]


def test_text_prompt_without_tokenizer(tiny, tmp_path):
    folder = tmp_path / "notok"
    shutil.copytree(tiny, folder)
    (folder / "kvlab_tokenizer.json").unlink()
    llm = LLM(str(folder), device="cpu", block_size=4, num_gpu_blocks=16)
    with pytest.raises(ValueError, match="no tokenizer"):
        llm.generate(["hello"])
    assert llm.generate([[1, 2]], greedy(2))[0].text == ""


# ---- backends and the demo model -----------------------------------------------------------------------


@requires_triton
def test_triton_path_matches_torch_path(tiny, monkeypatch):
    import kernels.paged_varlen_attention
    import kernels.store_kv
    import kernels.varlen_attention

    calls = {"varlen": 0, "paged_varlen": 0, "store": 0}

    def spy(module, name, key):
        fn = getattr(module, name)

        def wrapped(*args, **kwargs):
            calls[key] += 1
            return fn(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapped)

    spy(kernels.varlen_attention, "varlen_attention_triton", "varlen")
    spy(kernels.paged_varlen_attention, "paged_varlen_attention_triton", "paged_varlen")
    spy(kernels.store_kv, "store_kv_triton", "store")
    prompts = [list(range(1, 8)), [40, 41, 42]]
    # A budget of 5 tokens chunks the 7-token prompt: fresh prefill, prefill over cached context, decode.
    kw = dict(device=DEVICE, dtype="float32", block_size=4, num_gpu_blocks=16, max_num_batched_tokens=5)
    expected = [o.token_ids for o in LLM(str(tiny), backend="torch", **kw).generate(prompts, greedy(3))]
    assert calls == {"varlen": 0, "paged_varlen": 0, "store": 0}
    got = [o.token_ids for o in LLM(str(tiny), backend="triton", **kw).generate(prompts, greedy(3))]
    assert got == expected
    # Every step, prefill, chunk or decode, is one paged varlen call per layer; the contiguous kernel is unused.
    assert calls["paged_varlen"] == calls["store"] > 0 and calls["varlen"] == 0


# Half-precision logits of the tiny model (|logits| ~ 1) differ from fp32 by <= 0.01 on CPU in bf16 (measured
# 2026-11, 24 positions); 0.05 leaves room for another kernel's accumulation order and is still far below a
# wrong mask or a wrong cache slot, which move logits by ~0.1-1.
HALF_LOGIT_ATOL = 0.05


def record_sampling_logits(llm: LLM) -> dict[tuple[int, int], torch.Tensor]:
    """Wrap the runner's sampler: (request id, tokens generated so far) -> fp32 logits of the row it sampled from."""
    record: dict[tuple[int, int], torch.Tensor] = {}
    sample_fn = llm.runner.sample

    def wrapped(scheduled, logits):
        for row, part in enumerate(scheduled):
            if part.samples:
                record[part.seq.seq_id, part.seq.num_completion_tokens] = logits[row].float().cpu()
        return sample_fn(scheduled, logits)

    llm.runner.sample = wrapped
    return record


def assert_follows_fp32_greedy(half: LLM, fp32: LLM, prompts: list[list[int]], n: int) -> list[list[int]]:
    """Greedy `half` (bf16/fp16, fresh engine) against fp32, with the tolerance a near-tie needs.

    Comparing tokens alone is wrong both ways: two logits closer than the half-precision error may swap (then
    every later token differs), and a bug can hide behind equal token counts. So fp32 is teacher-forced on
    the tokens `half` chose: at every position the logits `half` sampled from (prefill or paged decode) must be
    within HALF_LOGIT_ATOL of fp32's, and the chosen token must be fp32's argmax or within 2 * HALF_LOGIT_ATOL
    of it. Where fp32's winner leads by more than that, the tokens are therefore identical.
    """
    seen = record_sampling_logits(half)
    outs = [o.token_ids for o in half.generate(prompts, greedy(n))]
    ref = record_sampling_logits(fp32)
    for request_id, (prompt, tokens) in enumerate(zip(prompts, outs, strict=True)):
        assert len(tokens) == n
        for i, token in enumerate(tokens):
            ref.clear()
            fp32.generate([prompt + tokens[:i]], greedy(1))
            (expected,) = ref.values()
            got = seen[request_id, i]
            torch.testing.assert_close(got, expected, atol=HALF_LOGIT_ATOL, rtol=0)
            assert expected.max() - expected[token] <= 2 * HALF_LOGIT_ATOL, (request_id, i, token)
    return outs


def test_cpu_sparse_decode_builds_one_index_per_step_and_matches_the_gather_path(tiny, monkeypatch):
    """fp32 decode rows on CPU read the cache in place (kernels/paged_decode_torch.py's sparse path, inside the
    one paged varlen call) through one index per step, built by the step's attention plan and shared by every
    layer; the greedy tokens equal those of the gather path."""
    import kernels.paged_varlen_attention_torch as varlen_torch
    import kernels.plan

    built = []
    token_slots = varlen_torch.token_slots

    def spy(block_tables, seq_lens, block_size, heads=None, lens=None):
        built.append(heads)
        return token_slots(block_tables, seq_lens, block_size, heads, lens)

    monkeypatch.setattr(varlen_torch, "token_slots", spy)
    prompts = [list(range(1, 8)), [40, 41, 42], list(range(50, 70))]  # ragged: padding scored and masked
    kw = dict(device="cpu", dtype="float32", block_size=4, num_gpu_blocks=32, backend="torch")
    llm = LLM(str(tiny), **kw)
    sparse = [o.token_ids for o in llm.generate(prompts, greedy(6))]
    cfg = llm.runner.model.config
    assert built and set(built) == {(cfg.num_attention_heads, cfg.num_key_value_heads)}
    assert len(built) == llm.num_steps - 1  # every step but the first (all prefill) decodes, one index each
    monkeypatch.setattr(kernels.plan, "sparse_decode_applies", lambda *args: False)
    built.clear()
    gathered = [o.token_ids for o in LLM(str(tiny), **kw).generate(prompts, greedy(6))]
    assert set(built) <= {None} and gathered == sparse


def test_bf16_engine_follows_fp32_greedy(tiny):
    prompts = [list(range(1, 30)), [40, 41, 42], list(range(50, 60))]
    fp32 = LLM(str(tiny), device="cpu", block_size=16, num_gpu_blocks=16)
    half = LLM(str(tiny), device="cpu", dtype="bfloat16", block_size=16, num_gpu_blocks=16)
    assert half.dtype == torch.bfloat16 and fp32.dtype == torch.float32
    assert_follows_fp32_greedy(half, fp32, prompts, 8)


@requires_cuda
def test_cuda_engine_matches_cpu_engine(tiny):
    prompts = [list(range(1, 30)), [40, 41, 42], list(range(50, 60))]
    cpu_engine = LLM(str(tiny), device="cpu", block_size=16, num_gpu_blocks=16)
    cpu = cpu_engine.generate(prompts, greedy(4))
    gpu = LLM(str(tiny), device="cuda", dtype="float32", block_size=16, num_gpu_blocks=16)
    assert gpu.backend == "triton"
    assert [o.token_ids for o in gpu.generate(prompts, greedy(4))] == [o.token_ids for o in cpu]
    auto = LLM(str(tiny), block_size=16)  # bf16, blocks sized from free CUDA memory
    assert auto.dtype == torch.bfloat16 and auto.num_gpu_blocks == 64 * 128 // 16  # capped by max_num_seqs
    assert auto.backend == "triton"
    assert_follows_fp32_greedy(auto, cpu_engine, prompts, 4)


@pytest.mark.skipif(not (DEMO_DIR / "config.json").is_file(), reason="demo model not trained yet")
def test_demo_kv_pool_is_what_the_memory_model_predicts():
    llm = LLM(model="demo", device="cpu")
    spec = MODELS["demo"]
    per_token = kv_bytes_per_token(spec, llm.dtype.itemsize)  # the calculator at the engine's dtype (fp32 on CPU)
    budget = min(CPU_KV_BUDGET_BYTES, 64 * spec.max_context * per_token)  # capped by max_num_seqs x max_model_len
    assert llm.num_gpu_blocks == kv_blocks_from_budget(budget, per_token, llm.block_size)
    assert llm.kv_cache_bytes == llm.num_gpu_blocks * llm.block_size * per_token


def test_public_api_and_request_state_on_the_sequence(tiny):
    import engine
    import engine.llm

    assert engine.LLM is engine.llm.LLM and set(engine.__all__) == {"LLM", "SamplingParams", "RequestOutput"}
    llm = LLM(str(tiny), device="cpu", block_size=4, num_gpu_blocks=16)
    request_id = llm.add_request("the cache", SamplingParams(max_tokens=3, temperature=1.0, seed=5))
    seq = llm.scheduler.waiting[0]
    assert seq.seq_id == request_id and seq.prompt == "the cache" and seq.generator is not None
    while llm.has_unfinished_requests():
        llm.step(trace=False)
    out = llm.get_output(request_id)
    assert isinstance(out, RequestOutput) and out.prompt == "the cache" and out.num_preemptions == 0
    llm.release(request_id)
    with pytest.raises(ValueError, match="unknown request id"):
        llm.get_output(request_id)


@pytest.mark.skipif(not (DEMO_DIR / "config.json").is_file(), reason="demo model not trained yet")
def test_demo_model_writes_text():
    llm = LLM("demo")
    out = llm.generate(["def main("], SamplingParams(max_tokens=24, temperature=0.0))[0]
    assert out.text and out.text == llm.tokenizer.decode(out.token_ids)
    assert out.finish_reason in ("stop", "length")


def test_a_prompt_longer_than_a_pool_capped_max_model_len_says_the_pool_set_it():
    llm = LLM("demo", block_size=2, num_gpu_blocks=3)  # 6 tokens: the pool, not the model, sets max_model_len
    with pytest.raises(PromptTooLongError, match="the KV pool holds only 6 tokens") as caught:
        llm.generate([[1, 2], [1] * 7], SamplingParams(max_tokens=1))
    assert (caught.value.index, caught.value.num_tokens, caught.value.max_model_len) == (1, 7, 6)
    roomy = LLM("demo", block_size=16, num_gpu_blocks=64, max_model_len=8)  # set by the caller
    with pytest.raises(PromptTooLongError, match="shorten it or raise max_model_len") as caught:
        roomy.generate([[1] * 9], SamplingParams(max_tokens=1))
    assert caught.value.pool_tokens is None
