"""Greedy decoding through the engine equals Hugging Face transformers' `generate`, token for token.

Tiny random LlamaForCausalLM / Qwen2ForCausalLM checkpoints are written with `save_pretrained` (safetensors)
and loaded by both sides. The engine runs all prompts together (packed prefill, paged decode, continuous
batching); the reference runs each prompt alone, unpadded, so nothing about batching can leak into it.
Variants: block sizes 4 and 16, prefix caching on prompts that share a prefix, and a cache so small that
requests queue, are chunked and get preempted. The engine runs on CPU in fp32 so the comparison is exact;
tests/engine/test_llm.py checks the CUDA / Triton path against this CPU path.
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from engine.llm import LLM  # noqa: E402
from engine.sampling_params import SamplingParams  # noqa: E402

MAX_TOKENS = 10
VOCAB = 256
ARCHS = ["llama", "qwen2"]


def _tiny_config(arch: str):
    common = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
        initializer_range=0.1,  # wider than default: well separated logits, no argmax near-ties
    )
    if arch == "llama":
        return transformers.LlamaForCausalLM, transformers.LlamaConfig(rope_theta=10000.0, **common)
    return transformers.Qwen2ForCausalLM, transformers.Qwen2Config(
        rope_theta=1000.0, tie_word_embeddings=True, **common
    )


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    rand = lambda n: torch.randint(1, VOCAB, (n,), generator=g).tolist()
    shared = rand(37)  # a common system prompt: 9 full blocks of 4, 2 of 16
    return [rand(1), rand(5), rand(83), rand(16), shared + rand(3), shared + rand(11), shared, rand(130)]


@pytest.fixture(scope="module", params=ARCHS)
def checkpoint(request, tmp_path_factory):
    """(folder, prompts, reference greedy continuations) for one architecture."""
    cls, config = _tiny_config(request.param)
    torch.manual_seed(0)
    model = cls(config).eval()
    folder = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(folder, safe_serialization=True)
    model.generation_config.eos_token_id = None  # run to max_new_tokens, as ignore_eos does
    prompts = _prompts()
    refs = []
    with torch.no_grad():
        for p in prompts:
            out = model.generate(torch.tensor([p]), max_new_tokens=MAX_TOKENS, do_sample=False)
            refs.append(out[0, len(p) :].tolist())
    return folder, prompts, refs


def _greedy() -> SamplingParams:
    return SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)


@pytest.mark.parametrize("block_size", [4, 16])
@pytest.mark.parametrize("prefix", [False, True])
def test_greedy_matches_transformers(checkpoint, block_size, prefix):
    folder, prompts, refs = checkpoint
    llm = LLM(
        str(folder),
        device="cpu",
        block_size=block_size,
        num_gpu_blocks=2048 // block_size,
        enable_prefix_caching=prefix,
    )
    outs = llm.generate(prompts[:5], _greedy())  # the first batch leaves `shared` in the prefix cache...
    outs += llm.generate(prompts[5:], _greedy())  # ...which the second batch hits when caching is on
    assert [o.token_ids for o in outs] == refs
    assert all(o.finish_reason == "length" and o.prompt_token_ids == p for o, p in zip(outs, prompts, strict=True))
    hits = [o.num_cached_tokens for o in outs]
    # Only full blocks of the 37 shared tokens are reusable: 36 tokens with blocks of 4, 32 with 16.
    expected = 36 // block_size * block_size if prefix else 0
    assert hits == [0, 0, 0, 0, 0, expected, expected, 0]
    assert llm.block_manager.num_free_blocks == llm.num_gpu_blocks  # every block came back


def test_tiny_cache_queues_chunks_and_preempts(checkpoint):
    folder, prompts, refs = checkpoint
    traces = []
    # 10 blocks of 16 = 160 slots for ~440 tokens of work; 48 tokens per step forces chunked prefill. Admission
    # checks each whole prompt's blocks (vLLM V1's scheduler_reserve_full_isl), so only decodes outgrow the pool:
    # 12 blocks, enough when admission checked first chunks only, no longer preempt.
    llm = LLM(str(folder), device="cpu", block_size=16, num_gpu_blocks=10, max_num_batched_tokens=48, max_num_seqs=4)
    outs = llm.generate(prompts, _greedy(), on_step=traces.append)
    assert [o.token_ids for o in outs] == refs
    assert any(t.preempted for t in traces), "the workload was meant to preempt"
    assert any(t.waiting for t in traces) and all(t.num_batched_tokens <= 48 for t in traces)
    assert sum(o.num_preemptions for o in outs) == sum(len(t.preempted) for t in traces)
    assert llm.block_manager.num_free_blocks == 10


def test_tiny_cache_with_prefix_caching(checkpoint):
    folder, prompts, refs = checkpoint
    llm = LLM(
        str(folder),
        device="cpu",
        block_size=4,
        num_gpu_blocks=40,
        max_num_batched_tokens=32,
        enable_prefix_caching=True,
    )
    traces = []
    outs = llm.generate(prompts, _greedy(), on_step=traces.append)
    assert [o.token_ids for o in outs] == refs
    assert any(t.preempted for t in traces)
