"""PagedKVCache tensors (one allocation, per-layer views with their fp8 scales, copy-on-write), the slot
formula, and the cache end to end with the block manager and the kernels."""

import pytest
import torch

from engine.core.block_manager import BlockManager, slots_of
from engine.core.sequence import Sequence
from engine.model.forward_meta import ForwardMeta, LayerKV
from engine.worker.kv_cache import PagedKVCache
from kernels.ops import paged_varlen_attention_planned, store_kv_planned
from tests.conftest import DEVICE

# ---- sizing ---------------------------------------------------------------------------------------


def test_bytes_per_slot_matches_llama3_8b():
    # Llama-3-8B: 32 layers, 8 KV heads, head_dim 128, fp16 -> 128 KiB per token (vLLM's log prints this).
    assert PagedKVCache(32, 1, 1, 8, 128, dtype=torch.float16).bytes_per_slot == 131072


def test_nbytes_is_blocks_times_block_bytes():
    per_block = 16 * (2 * 2 * 2 * 8 * 4)  # 16 tokens * (2 * 2 layers * 2 heads * 8 dims * 4 bytes) = 4096
    cache = PagedKVCache(2, 3, 16, 2, 8)
    assert cache.nbytes == 3 * per_block == cache.kv.numel() * cache.kv.element_size()


@pytest.mark.parametrize("bad", [{"num_layers": 0}, {"num_blocks": -1}, {"num_kv_heads": 1.5}, {"head_dim": True}])
def test_cache_asserts_its_sizes(bad):
    # Sized from a checked CacheConfig and ModelConfig: a bad size here is a bug, not a user's input.
    kwargs = {"num_layers": 2, "num_blocks": 4, "block_size": 4, "num_kv_heads": 2, "head_dim": 8, **bad}
    with pytest.raises(AssertionError, match=repr(next(iter(bad.values())))):
        PagedKVCache(**kwargs)


# ---- tensors --------------------------------------------------------------------------------------


def test_layer_views_share_one_allocation():
    cache = PagedKVCache(3, 5, 4, 2, 8, dtype=torch.float16)
    assert cache.kv.shape == (3, 2, 5, 4, 2, 8)
    assert len(cache.layers) == 3 and cache.scales is None
    for layer, (k, v, k_scale, v_scale) in enumerate(cache.layers):
        assert k_scale is None and v_scale is None
        assert k.shape == v.shape == (5, 4, 2, 8) and k.is_contiguous() and v.is_contiguous()
        assert k.dtype == torch.float16 and k is cache.k_cache(layer) and v is cache.v_cache(layer)
        k.fill_(layer + 1)
        v.fill_(-(layer + 1))
    assert torch.equal(cache.kv[1, 0], torch.full((5, 4, 2, 8), 2.0, dtype=torch.float16))
    assert torch.equal(cache.kv[2, 1], torch.full((5, 4, 2, 8), -3.0, dtype=torch.float16))
    assert cache.bytes_per_slot == 2 * 3 * 2 * 8 * 2 and cache.num_slots == 20


def test_copy_blocks_copies_every_layer():
    cache = PagedKVCache(2, 6, 4, 2, 3, device=DEVICE)  # on the GPU box this runs on CUDA
    cache.kv.copy_(torch.randn(cache.kv.shape))
    before = cache.kv.clone()
    cache.copy_blocks([(1, 4), (4, 5)])  # block 4 is a destination and a source: the old rows move on
    expected = before.clone()
    expected[:, :, 4] = before[:, :, 1]
    expected[:, :, 5] = before[:, :, 4]
    assert torch.equal(cache.kv, expected)
    cache.copy_blocks([])
    assert torch.equal(cache.kv, expected)
    # The pairs come from the block manager: a block outside the pool or a repeated destination is a bug.
    with pytest.raises(AssertionError, match=r"\(0, 6\)"):
        cache.copy_blocks([(0, 6)])
    with pytest.raises(AssertionError, match=r"\(1, 2\)"):
        cache.copy_blocks([(0, 2), (1, 2)])


def test_fp8_layers_carry_their_own_scales():
    cache = PagedKVCache(2, 4, 4, 2, 8, dtype=torch.float8_e4m3fn)
    assert cache.is_fp8 and cache.scales.shape == (2, 2, 1) and not cache.scales.any()  # 0: not set yet
    for layer, entry in enumerate(cache.layers):
        assert isinstance(entry, LayerKV) and entry.k.dtype == torch.float8_e4m3fn
        entry.k_scale.fill_(layer + 1)
        entry.v_scale.fill_(-(layer + 1))
    assert cache.scales[:, :, 0].tolist() == [[1.0, -1.0], [2.0, -2.0]]  # views of the one scales tensor


# ---- slots ------------------------------------------------------------------------------------------


def test_slots_of_follows_the_block_table():
    table = [5, 2, 7]
    assert slots_of(table, 0, 10, 4) == [20, 21, 22, 23, 8, 9, 10, 11, 28, 29]
    assert slots_of(table, 6, 9, 4) == [10, 11, 28]
    assert slots_of(table, 3, 3, 4) == []


# ---- end to end: block manager + cache + kernels ---------------------------------------------------


def test_paged_pipeline_matches_plain_attention_after_prefix_hit_fork_and_cow():
    """K/V written through the step's slot mapping and read through its block tables equals attention over the
    tokens' own K/V, after a prefix-cache hit, a fork and a copy-on-write."""
    bs, hkv, hq, d, vocab = 4, 2, 4, 8, 50
    gen = torch.Generator().manual_seed(0)
    emb_k, emb_v = torch.randn(vocab, hkv, d, generator=gen), torch.randn(vocab, hkv, d, generator=gen)
    pos_k = torch.randn(64, hkv, d, generator=gen)

    def kv_of(tokens: list[int], positions: range) -> tuple[torch.Tensor, torch.Tensor]:
        ids, pos = torch.tensor([tokens[p] for p in positions]), torch.tensor(list(positions))
        return emb_k[ids] + pos_k[pos], emb_v[ids]  # [n, Hkv, D] each: K depends on token and position

    bm = BlockManager(16, bs, enable_prefix_caching=True)
    cache = PagedKVCache(1, 16, bs, hkv, d)
    layer = cache.layers[0]
    cache.kv.fill_(float("nan"))  # unused slots must never be read

    def meta(seqs: list[Sequence], new: list[int]) -> ForwardMeta:
        ctx = [s.num_computed_tokens for s in seqs]
        return ForwardMeta.build(new, ctx, [s.block_table for s in seqs], layer, num_heads=hq, q_dtype=torch.float32)

    def run(seqs: list[Sequence], new: list[int]) -> torch.Tensor:
        """One model step: store the new tokens' K/V, then they count as computed; returns its queries' output."""
        kvs = [
            kv_of(s.token_ids, range(s.num_computed_tokens, s.num_computed_tokens + n))
            for s, n in zip(seqs, new, strict=True)
        ]
        k, v = torch.cat([k for k, _ in kvs]), torch.cat([v for _, v in kvs])  # [sum(new), Hkv, D]
        plan = meta(seqs, new).attention
        store_kv_planned(k, v, layer, plan)
        for s, n in zip(seqs, new, strict=True):
            s.num_computed_tokens += n
        q = torch.randn(sum(new), hq, d, generator=gen)
        out = paged_varlen_attention_planned(q, layer, plan)
        return q, out

    a = Sequence(0, [3, 1, 4, 1, 5, 9, 2, 6, 5, 3], block_size=bs)
    bm.allocate_sequence(a)
    run([a], [10])
    b = Sequence(1, a.token_ids, block_size=bs)
    bm.fork(a, b)  # shares the partial block [5, 3]
    a.append_token(7)
    b.append_token(8)
    copies = bm.append_slots(a) + bm.append_slots(b)
    assert copies == [(2, 3)]
    cache.copy_blocks(copies)
    c = Sequence(2, a.token_ids[:8] + [11, 12, 13], block_size=bs)
    assert bm.allocate_sequence(c) == 8  # prefix hit on a's first two blocks (published by append_slots)
    assert c.block_table[:2] == a.block_table[:2]
    q, out = run([a, b, c], [1, 1, 3])  # two decodes and a 3-token chunk on top of the 8 cached tokens

    rows = [(a, 0), (b, 1), (c, 4)]  # each sequence's last query row; c's rows 2..4 see 9..11 keys
    for s, row in rows:
        k, v = kv_of(s.token_ids, range(s.num_tokens))  # [L, Hkv, D]
        k, v = k.repeat_interleave(hq // hkv, dim=1), v.repeat_interleave(hq // hkv, dim=1)  # [L, Hq, D]
        probs = torch.softmax(torch.einsum("hd,lhd->hl", q[row], k) * d**-0.5, dim=-1)  # [Hq, L]
        torch.testing.assert_close(out[row], torch.einsum("hl,lhd->hd", probs, v))
    k, v = kv_of(c.token_ids, range(9))  # c's first new query (position 8) sees keys 0..8 only (causal)
    k, v = k.repeat_interleave(hq // hkv, dim=1), v.repeat_interleave(hq // hkv, dim=1)
    probs = torch.softmax(torch.einsum("hd,lhd->hl", q[2], k) * d**-0.5, dim=-1)
    torch.testing.assert_close(out[2], torch.einsum("hl,lhd->hd", probs, v))
