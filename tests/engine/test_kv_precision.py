"""fp8 KV cache through the engine: the pool it buys under one budget, its scales, and the price it costs.

`LLM(..., kv_cache_dtype="fp8")` stores K/V as float8 e4m3 with per-layer scales set at each layer's first
write. Checked on a tiny random Llama (tests/tiny_model.py): byte counts and block counts against the
formula (2 x layers x KV heads x head_dim x bytes), the scales against their definition, and the logits
against the same engine in full precision along the same token path (lessons/labs/kv_precision.py).
"""

from __future__ import annotations

import pytest
import torch

from engine.llm import LLM
from engine.model.loader import load_model
from engine.sampling_params import SamplingParams
from engine.worker.kv_cache import PagedKVCache
from lessons.labs import kv_precision as lab
from tests.conftest import requires_triton
from tests.tiny_model import make_tiny_model

TEXT = "def add(a, b):\n    return a + b\n" * 20 + "class Stack:\n    def push(self, x):\n        pass\n" * 20
PROMPTS = ("def add(a, b):", "class Stack:", "return a", "def push(self, x):")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(folder, loaded (model, config, tokenizer)) of a tiny Llama: 2 layers, 2 KV heads, head_dim 8."""
    folder = make_tiny_model(tmp_path_factory.mktemp("tiny"), TEXT)
    return str(folder), load_model(folder)


def test_unknown_kv_cache_dtype_lists_the_accepted_ones(tiny):
    folder, _ = tiny
    with pytest.raises(ValueError, match=r"kv_cache_dtype='int3' is not supported; use one of 'auto', 'fp8'"):
        LLM(folder, device="cpu", kv_cache_dtype="int3")


@pytest.mark.parametrize("dtype, bytes_per_element", [("float32", 4), ("bfloat16", 2)])
def test_the_same_budget_holds_more_tokens_in_fp8(tiny, dtype, bytes_per_element):
    folder, _ = tiny
    per_token = 2 * 2 * 2 * 8  # K and V x 2 layers x 2 KV heads x head_dim 8 elements
    budget = per_token * bytes_per_element * 16 * 10  # ten blocks of 16 tokens at the model's precision
    engines = {
        kind: LLM(folder, device="cpu", dtype=dtype, kv_cache_dtype=kind, kv_cache_memory_bytes=budget)
        for kind in ("auto", "fp8")
    }
    full, fp8 = engines["auto"], engines["fp8"]
    assert full.kv_cache.dtype == getattr(torch, dtype) and fp8.kv_cache.dtype == torch.float8_e4m3fn
    assert (full.kv_bytes_per_token, fp8.kv_bytes_per_token) == (per_token * bytes_per_element, per_token)
    assert full.num_gpu_blocks == 10 and fp8.num_gpu_blocks == 10 * bytes_per_element  # 2x bf16, 4x fp32
    assert full.kv_cache_bytes == fp8.kv_cache_bytes == budget  # the same memory, more tokens
    assert fp8.kv_cache.kv.element_size() == 1 and fp8.kv_cache.scales.shape == (2, 2, 1)


def test_a_budget_below_one_block_is_a_value_error(tiny):
    folder, _ = tiny
    with pytest.raises(ValueError, match="kv_cache_memory_bytes=100 must be a whole number of bytes holding"):
        LLM(folder, device="cpu", kv_cache_memory_bytes=100)
    with pytest.raises(ValueError, match="both size the KV pool; give one of them"):
        LLM(folder, device="cpu", kv_cache_memory_bytes=2**20, num_gpu_blocks=4)


def test_scales_are_set_at_the_first_write_and_then_fixed(tiny):
    folder, loaded = tiny
    llm = lab.engine(loaded, "fp8", 2**20, model=folder)
    scales = llm.kv_cache.scales
    assert torch.equal(scales, torch.zeros_like(scales))  # unset until a layer writes
    greedy = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    llm.generate(list(PROMPTS[:2]), greedy)
    first = scales.clone()
    assert bool((first > 0).all())
    llm.generate(list(PROMPTS[2:]), greedy)
    assert torch.equal(scales, first)  # tokens already stored stay decodable with the scale they were written with


def test_fp8_costs_little_against_full_precision(tiny):
    folder, loaded = tiny
    full, fp8 = (lab.engine(loaded, kind, 2**20, model=folder) for kind in lab.CHOICES)
    result = lab.compare_engines(full, fp8, PROMPTS, max_tokens=12)
    assert result.bytes_per_token_ratio == 4.0 and result.blocks_ratio == 4.0
    # 2**20 B over 16-token blocks of 2 x 2 layers x 2 KV heads x 8 elements: 4 B each in fp32, 1 B in fp8.
    assert result.auto == lab.KvPool("float32", 256, 2**20 // (256 * 16), 2**20 // 256, 2**20)
    assert result.fp8 == lab.KvPool("float8_e4m3fn", 64, 2**20 // (64 * 16), 2**20 // 64, 2**20)
    price = result.price
    assert price.positions == 4 * 13 and price.num_prompts == 4 and result.max_tokens == 12
    # Quantization really happened (the logits moved), and it moved them little: top-1 mostly unchanged.
    assert 0.0 < price.mean_logit_error < price.max_logit_error < 1.0
    assert price.top1_agreement >= 0.9
    assert 0 <= price.identical_generations <= 4


def test_the_price_is_the_logit_difference_along_full_precisions_path(tiny):
    """The price against a reference built here from the engines' own outputs and path_logits."""
    folder, loaded = tiny
    full, fp8 = (lab.engine(loaded, kind, 2**20, model=folder) for kind in lab.CHOICES)
    prompts = PROMPTS[:2]
    price = lab.compare_engines(full, fp8, prompts, max_tokens=6).price
    greedy = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    ref, low = full.generate(list(prompts), greedy), fp8.generate(list(prompts), greedy)
    diffs, agree = [], []
    for out in ref:
        ids, n = out.prompt_token_ids + out.token_ids, len(out.prompt_token_ids)
        a, b = lab.path_logits(full, ids, n), lab.path_logits(fp8, ids, n)
        diffs.append((a - b).abs())
        agree.append(a.argmax(-1) == b.argmax(-1))
    every = torch.cat(diffs)  # [2 x 7 positions, vocab]
    assert price.positions == every.shape[0] == 2 * 7
    assert price.max_logit_error == pytest.approx(float(every.max()))
    assert price.mean_logit_error == pytest.approx(float(every.mean()), rel=1e-5)
    assert price.top1_agreement == pytest.approx(float(torch.cat(agree).float().mean()))
    assert price.identical_generations == sum(r.token_ids == s.token_ids for r, s in zip(ref, low, strict=True))


def test_compare_runs_both_engines_on_one_model_and_budget(tiny):
    folder, _ = tiny
    run = lab.compare(folder, PROMPTS[:1], max_tokens=4, budget_bytes=2**19)
    assert (run.model, run.budget_bytes, run.budget_mib) == (folder, 2**19, 0.5)
    assert run.auto.kv_cache_bytes == run.fp8.kv_cache_bytes == 2**19 and run.auto.num_gpu_blocks == 2**19 // 4096
    assert (run.price.positions, run.price.num_prompts, run.max_tokens) == (5, 1, 4)
    assert run.record()["model"] == folder and run.record()["budget_bytes"] == 2**19


def test_path_logits_match_the_engines_greedy_tokens(tiny):
    """The lab's teacher-forced logits are the engine's own: their argmax reproduces its greedy output."""
    folder, loaded = tiny
    llm = lab.engine(loaded, "auto", 2**20, model=folder)
    out = llm.generate([PROMPTS[0]], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))[0]
    logits = lab.path_logits(llm, out.prompt_token_ids + out.token_ids, len(out.prompt_token_ids))
    assert logits[:-1].argmax(-1).tolist() == out.token_ids


def test_fp8_copy_blocks_copies_the_bytes():
    cache = PagedKVCache(2, 4, 4, 2, 8, dtype=torch.float8_e4m3fn)
    cache.kv.view(torch.uint8).copy_(torch.randint(0, 120, cache.kv.shape, dtype=torch.uint8))
    before = cache.kv.view(torch.uint8).clone()
    cache.copy_blocks([(1, 3)])
    after = cache.kv.view(torch.uint8)
    assert torch.equal(after[:, :, 3], before[:, :, 1]) and torch.equal(after[:, :, :3], before[:, :, :3])
    assert cache.bytes_per_slot == 2 * 2 * 2 * 8 and cache.is_fp8 and len(cache.layers) == 2


@requires_triton
def test_triton_fp8_path_matches_the_torch_fp8_path(tiny):
    """Triton store (quantize) + paged varlen attention (dequantize) against the torch twins, same scales.

    Under the interpreter its numpy float8 cast rounds a few values one binade low (tests/kernels/
    test_store_kv_fp8.py), so the logits agree to 0.05 there rather than to float32 rounding."""
    folder, loaded = tiny
    ids = [5, 9, 12, 40, 41, 42, 7, 8, 9, 10]
    logits, scales = {}, {}
    for backend in ("torch", "triton"):
        llm = LLM(
            folder,
            device="cpu",
            backend=backend,
            kv_cache_dtype="fp8",
            num_gpu_blocks=16,
            block_size=4,
            preloaded=loaded,
        )
        logits[backend] = lab.path_logits(llm, ids, 6)  # a 6-token prefill, then 4 decodes
        scales[backend] = llm.kv_cache.scales.clone()
    assert torch.equal(scales["torch"][0], scales["triton"][0])  # layer 0 sees the same K/V on both paths
    torch.testing.assert_close(scales["triton"], scales["torch"], atol=0, rtol=0.05)
    torch.testing.assert_close(logits["triton"], logits["torch"], atol=0.05, rtol=0)
