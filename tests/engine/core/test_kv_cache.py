"""PagedKVCache tensors, the slot formula, kernel metadata builders, and Sequence state."""

import pytest
import torch

from engine.core.block_manager import BlockManager
from engine.core.kv_cache import PagedKVCache, build_block_tables, build_seq_lens, build_slot_mapping, slots_of
from engine.core.sequence import Sequence, SequenceStatus
from tests.conftest import DEVICE

# ---- sizing ---------------------------------------------------------------------------------------


def test_bytes_per_slot_matches_llama3_8b():
    # Llama-3-8B: 32 layers, 8 KV heads, head_dim 128, fp16 -> 128 KiB per token (vLLM's log prints this).
    assert PagedKVCache(32, 1, 1, 8, 128, dtype=torch.float16).bytes_per_slot == 131072


def test_nbytes_is_blocks_times_block_bytes():
    per_block = 16 * (2 * 2 * 2 * 8 * 4)  # 16 tokens * (2 * 2 layers * 2 heads * 8 dims * 4 bytes) = 4096
    cache = PagedKVCache(2, 3, 16, 2, 8)
    assert cache.nbytes == 3 * per_block == cache.kv.numel() * cache.kv.element_size()
    with pytest.raises(ValueError, match="power of two"):
        PagedKVCache(2, 3, 24, 2, 8)


@pytest.mark.parametrize("bad", [{"num_layers": 0}, {"num_blocks": -1}, {"num_kv_heads": 1.5}, {"head_dim": True}])
def test_cache_rejects_bad_sizes(bad):
    kwargs = {"num_layers": 2, "num_blocks": 4, "block_size": 4, "num_kv_heads": 2, "head_dim": 8, **bad}
    with pytest.raises(ValueError, match=f"{next(iter(bad))}=.* must be an integer >= 1"):
        PagedKVCache(**kwargs)


# ---- tensors --------------------------------------------------------------------------------------


def test_layer_views_share_one_allocation():
    cache = PagedKVCache(3, 5, 4, 2, 8, dtype=torch.float16)
    assert cache.kv.shape == (3, 2, 5, 4, 2, 8)
    assert len(cache.kv_caches) == 3
    for layer, (k, v) in enumerate(cache.kv_caches):
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
    with pytest.raises(ValueError, match="dst block must be in 0..5"):
        cache.copy_blocks([(0, 6)])
    with pytest.raises(ValueError, match="repeat a block"):
        cache.copy_blocks([(0, 2), (1, 2)])


# ---- metadata -------------------------------------------------------------------------------------


def test_slot_mapping_stores_where_block_table_reads():
    """Write each token through slot_mapping, read it back through the block table (the kernels' two views)."""
    bs = 4
    bm = BlockManager(16, bs)
    bm.allocate_sequence(Sequence(99, range(9), block_size=bs))  # occupy blocks 0..2 so tables are not 0-based
    a, b = Sequence(0, range(10, 17), block_size=bs), Sequence(1, range(20, 22), block_size=bs)
    bm.allocate_sequence(a, num_new_tokens=5)
    bm.allocate_sequence(b)
    a.num_computed_tokens = 5
    bm.append_slots(a, 2)
    a.num_computed_tokens = 3  # pretend tokens 3..6 are this step's (a chunk spanning a block boundary)
    new = [4, 2]
    slots = build_slot_mapping([a, b], new)
    assert slots.dtype == torch.int64 and slots.shape == (6,)
    assert build_slot_mapping([a, b], new, dtype=torch.int32).dtype == torch.int32
    cache = torch.full((16 * bs,), -1)
    values = torch.tensor([13, 14, 15, 16, 20, 21])  # token ids stand in for K rows
    cache[slots] = values
    blocks = cache.view(16, bs)  # [num_blocks, block_size]
    tables = build_block_tables([a, b])
    lens = build_seq_lens([a, b], new)
    assert lens.tolist() == [7, 2] and lens.dtype == torch.int32
    read = [blocks[tables[0, p // bs], p % bs].item() for p in range(3, 7)]
    read += [blocks[tables[1, p // bs], p % bs].item() for p in range(2)]
    assert read == values.tolist()


def test_block_tables_padding_and_errors():
    a, b = Sequence(0, [1], block_size=2), Sequence(1, [1], block_size=2)
    a.block_table, b.block_table = [5, 3, 7], [2]
    t = build_block_tables([a, b])
    assert t.dtype == torch.int32 and t.tolist() == [[5, 3, 7], [2, 0, 0]]
    assert build_block_tables([a, b], max_num_blocks=4, pad_value=-1).tolist() == [[5, 3, 7, -1], [2, -1, -1, -1]]
    assert build_block_tables([]).shape == (0, 0)
    with pytest.raises(ValueError, match="smaller than the longest block table"):
        build_block_tables([a], max_num_blocks=2)
    assert build_seq_lens([a, b]).tolist() == [0, 0]
    with pytest.raises(ValueError, match="2 entries for 1 sequences"):
        build_seq_lens([a], [1, 1])
    with pytest.raises(ValueError, match="call BlockManager.append_slots"):
        build_slot_mapping([b], [3])


def test_slots_of_follows_the_block_table():
    table = [5, 2, 7]
    assert slots_of(table, 0, 10, 4) == [20, 21, 22, 23, 8, 9, 10, 11, 28, 29]
    assert slots_of(table, 6, 9, 4) == [10, 11, 28]
    assert slots_of(table, 3, 3, 4) == []


def test_paged_internal_fragmentation_is_only_each_last_block_tail():
    lens = [5, 17, 33, 2]
    paged = BlockManager(64, 16)
    for i, n in enumerate(lens):
        paged.allocate_sequence(Sequence(i, range(n), block_size=16))
    p = paged.usage()
    assert p.used_slots == sum(lens)
    assert p.internal_fragmentation_slots == sum(-n % 16 for n in lens) == 11 + 15 + 15 + 14


# ---- Sequence -------------------------------------------------------------------------------------


def test_sequence_state():
    s = Sequence(7, [3, 4, 5, 6, 7], block_size=4, arrival_time=1.5)
    assert (s.num_tokens, len(s), s.num_blocks, s.last_block_num_tokens) == (5, 5, 2, 1)
    assert s.status is SequenceStatus.WAITING and not s.is_finished and s.finish_reason is None
    s.append_token(8)
    s.append_token(9)
    assert s.prompt_token_ids == [3, 4, 5, 6, 7] and s.completion_token_ids == [8, 9]
    assert (s.num_completion_tokens, s.last_token, s.last_block_num_tokens) == (2, 9, 3)
    assert s.block_token_ids(1) == [7, 8, 9]
    s.append_token(1)
    assert (s.num_blocks, s.last_block_num_tokens) == (2, 4)
    s.status = SequenceStatus.FINISHED
    assert s.is_finished and "FINISHED" in repr(s)
    with pytest.raises(ValueError, match="out of range"):
        s.block_token_ids(2)
    with pytest.raises(ValueError, match="empty prompt"):
        Sequence(0, [])
    with pytest.raises(ValueError, match="power of two"):
        Sequence(0, [1], block_size=5)


# ---- end to end: block manager + cache + kernels ---------------------------------------------------


def test_paged_pipeline_matches_plain_attention_after_prefix_hit_fork_and_cow():
    """K/V written through slot_mapping and read through block tables equals attention over the tokens' own K/V."""
    from kernels.ops import paged_attention, store_kv

    bs, hkv, hq, d, vocab = 4, 2, 4, 8, 50
    gen = torch.Generator().manual_seed(0)
    emb_k, emb_v = torch.randn(vocab, hkv, d, generator=gen), torch.randn(vocab, hkv, d, generator=gen)
    pos_k = torch.randn(64, hkv, d, generator=gen)

    def kv_of(tokens: list[int], positions: range) -> tuple[torch.Tensor, torch.Tensor]:
        ids, pos = torch.tensor([tokens[p] for p in positions]), torch.tensor(list(positions))
        return emb_k[ids] + pos_k[pos], emb_v[ids]  # [n, Hkv, D] each: K depends on token and position

    bm = BlockManager(16, bs, enable_prefix_caching=True)
    cache = PagedKVCache(1, 16, bs, hkv, d)
    k_cache, v_cache = cache.kv_caches[0]
    cache.kv.fill_(float("nan"))  # unused slots must never be read

    def run(seqs: list[Sequence], new: list[int]) -> None:
        """One model step: store the new tokens' K/V, then they count as computed."""
        kvs = [
            kv_of(s.token_ids, range(s.num_computed_tokens, s.num_computed_tokens + n))
            for s, n in zip(seqs, new, strict=True)
        ]
        k, v = torch.cat([k for k, _ in kvs]), torch.cat([v for _, v in kvs])  # [sum(new), Hkv, D]
        store_kv(k, v, k_cache, v_cache, build_slot_mapping(seqs, new), backend="torch")
        for s, n in zip(seqs, new, strict=True):
            s.num_computed_tokens += n

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
    run([a, b, c], [1, 1, 3])

    seqs = [a, b, c]
    q = torch.randn(3, hq, d, generator=gen)
    out = paged_attention(q, k_cache, v_cache, build_block_tables(seqs), build_seq_lens(seqs), backend="torch")
    for i, s in enumerate(seqs):
        k, v = kv_of(s.token_ids, range(s.num_tokens))  # [L, Hkv, D]
        k, v = k.repeat_interleave(hq // hkv, dim=1), v.repeat_interleave(hq // hkv, dim=1)  # [L, Hq, D]
        probs = torch.softmax(torch.einsum("hd,lhd->hl", q[i], k) * d**-0.5, dim=-1)  # [Hq, L]
        torch.testing.assert_close(out[i], torch.einsum("hl,lhd->hd", probs, v))
