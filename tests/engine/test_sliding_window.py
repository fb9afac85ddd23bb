"""Sliding-window attention end to end: greedy output equals transformers' Mistral far past the window.

A tiny random MistralForCausalLM (eager attention, window W = 8 or 20 tokens) is saved with
`save_pretrained` and loaded by both sides. Prompts and generations run to several times the window; the
engine serves them together at block sizes 1, 4 and 16 (a window smaller than one block included), once
with chunked prefill mixed with decodes. Each engine step's trace shows what the window let go: blocks
wholly outside every query's window are back in the allocator, so a sequence never holds more than the
memory model's `kv_blocks_per_seq` blocks, far fewer than its length needs without a window.
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from engine.core.sliding_window import FREED, kv_blocks_per_seq  # noqa: E402
from engine.llm import LLM  # noqa: E402
from engine.sampling_params import SamplingParams  # noqa: E402

VOCAB = 256
MAX_TOKENS = 40
PROMPT_LENS = (3, 29, 61)


@pytest.fixture(scope="module", params=[8, 20], ids=lambda w: f"window{w}")
def mistral(request, tmp_path_factory):
    """(folder, window, prompts, transformers' greedy continuations) for one window size."""
    window = request.param
    config = transformers.MistralConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        sliding_window=window,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
        initializer_range=0.1,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.MistralForCausalLM(config).eval()
    folder = tmp_path_factory.mktemp(f"mistral{window}")
    model.save_pretrained(folder, safe_serialization=True)
    model.generation_config.eos_token_id = None
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(1, VOCAB, (n,), generator=g).tolist() for n in PROMPT_LENS]
    refs = []
    with torch.no_grad():
        for p in prompts:
            out = model.generate(torch.tensor([p]), max_new_tokens=MAX_TOKENS, do_sample=False)
            refs.append(out[0, len(p) :].tolist())
    return folder, window, prompts, refs


def _held(table: list[int]) -> int:
    return sum(1 for b in table if b != FREED)


@pytest.mark.parametrize("block_size, chunk", [(1, 2048), (4, 2048), (16, 2048), (4, 12)])
def test_greedy_matches_transformers_past_the_window(mistral, block_size, chunk):
    folder, window, prompts, refs = mistral
    num_blocks = 1024 // block_size
    llm = LLM(str(folder), device="cpu", block_size=block_size, num_gpu_blocks=num_blocks, max_num_batched_tokens=chunk)
    assert llm.max_model_len == 256 > window  # the window no longer caps the context
    traces = []
    outs = llm.generate(
        prompts, SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True), on_step=traces.append
    )
    assert [o.token_ids for o in outs] == refs
    # Blocks the window dropped are free again: the pool's free count is exactly what the tables do not hold.
    for t in traces:
        assert t.num_free_blocks == num_blocks - sum(_held(table) for table in t.block_tables.values())
    # A sequence never holds more than the memory model says (W - 1 + one step's tokens, plus one block) ...
    peak = max(_held(table) for t in traces for table in t.block_tables.values())
    longest = max(PROMPT_LENS) + MAX_TOKENS
    assert peak <= kv_blocks_per_seq(longest, block_size, window, chunk)
    # ... and once decoding, at most ceil((W - 1) / block_size) + 1 blocks: about W + block_size tokens.
    decode_peak = max(
        _held(t.block_tables[r.request_id])
        for t in traces
        for r in t.scheduled
        if r.phase == "decode" and r.request_id in t.block_tables
    )
    assert decode_peak <= -(-(window - 1) // block_size) + 1 < -(-longest // block_size)
    freed = max(sum(1 for b in table if b == FREED) for t in traces for table in t.block_tables.values())
    assert freed > 0
    assert llm.block_manager.num_free_blocks == num_blocks  # every block came back at the end
    if chunk < max(PROMPT_LENS):
        assert any(len(t.scheduled) > 1 and {r.phase for r in t.scheduled} == {"prefill", "decode"} for t in traces)


def test_a_cache_smaller_than_the_context_serves_a_windowed_model(mistral):
    """max_model_len may exceed the pool: a windowed sequence only ever holds its window's blocks."""
    folder, window, prompts, refs = mistral
    need = kv_blocks_per_seq(256, 4, window, 16)
    llm = LLM(str(folder), device="cpu", block_size=4, num_gpu_blocks=need, max_num_batched_tokens=16, max_num_seqs=1)
    assert llm.max_model_len == 256 > need * 4
    outs = llm.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True))
    assert [o.token_ids for o in outs] == refs


def test_prefix_hits_and_preemption_past_the_window(mistral):
    """Prefix-cache hits (blocks the window freed stay findable) and recompute after preemption, windowed."""
    folder, window, prompts, refs = mistral
    greedy = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    llm = LLM(str(folder), device="cpu", block_size=4, num_gpu_blocks=256, enable_prefix_caching=True)
    assert [o.token_ids for o in llm.generate(prompts, greedy)] == refs
    again = llm.generate(prompts, greedy)  # the same prompts: their full blocks come from the prefix cache
    assert [o.token_ids for o in again] == refs
    assert [o.num_cached_tokens for o in again] == [(n - 1) // 4 * 4 for n in PROMPT_LENS]
    # A pool of a few windows for three sequences: decodes run out of blocks and the newest is preempted.
    # Admission checks each whole prompt's blocks, capped at what its window and one step hold (vLLM V1's
    # scheduler_reserve_full_isl), so with 8 tokens a step a window of 8 never preempts here (each admitted
    # request already had its most); at 4 tokens a step it does, for both windows.
    need = kv_blocks_per_seq(256, 4, window, 4)
    traces = []
    small = LLM(str(folder), device="cpu", block_size=4, num_gpu_blocks=need + 2, max_num_batched_tokens=4)
    assert [o.token_ids for o in small.generate(prompts, greedy, on_step=traces.append)] == refs
    assert any(t.preempted for t in traces) and small.block_manager.num_free_blocks == need + 2
