"""The paged kernels over an MLA latent cache: one cache row per token (latent + rope key), V a view of its front.

MLA's absorbed decode (DeepSeek-V2, arXiv 2405.04434; vLLM's MLA backends) is multi-query attention whose key
row is [latent, rope key] (kv_lora_rank + qk_rope_head_dim wide) and whose value is the latent alone: the first
kv_lora_rank columns of the same row. Both backends take v_cache as that narrower view of k_cache and return
[T, Hq, kv_lora_rank]. Compared with kernels.reference (token-by-token lookups) and with plain math written
out here (softmax(q . row) @ row[:rank] per sequence), so a bug shared by kernel and reference still fails.
What each test catches:
- the value read with the key's width (D instead of Dv), or from the wrong columns: the plain-math comparison;
- padded value columns written into the output (Dv not a power of two): the output's shape and values;
- a store that writes V with K's head dim through the view (overrunning into the rope key): the stored rows;
- NaN in unused slots or blocks leaking: every cache starts NaN-filled.
"""

from __future__ import annotations

import pytest
import torch

from kernels.ops import paged_varlen_attention, store_kv
from kernels.reference import paged_varlen_attention_ref
from tests.conftest import TRITON_OK

BACKENDS = ["torch", pytest.param("triton", marks=pytest.mark.skipif(not TRITON_OK, reason="triton not installed"))]
RANK, ROPE = 12, 4  # neither a power of two: the Triton tiles pad both widths
# (seq_len, len_q): decode rows, a fresh prefill, a prefix-cached chunk and a sequence without a query.
MIX = [(7, 1), (9, 9), (13, 3), (5, 0), (11, 1)]


def latent_case(block_size: int, num_heads: int = 4, seed: int = 0):
    """A NaN-filled latent cache [N, block_size, 1, RANK + ROPE] with each sequence's rows scattered over shuffled
    blocks, its V view, q [T, Hq, RANK + ROPE] and the step's metadata; rows: each sequence's [n, RANK + ROPE]."""
    gen = torch.Generator().manual_seed(seed)
    blocks = [-(-n // block_size) for n, _ in MIX]
    physical = torch.randperm(sum(blocks) + 1, generator=gen).tolist()
    cache = torch.full((sum(blocks) + 1, block_size, 1, RANK + ROPE), float("nan"))
    tables = torch.full((len(MIX), max(blocks)), 1 << 20, dtype=torch.int32)
    rows = []
    for i, (n, _) in enumerate(MIX):
        r = torch.randn(n, RANK + ROPE, generator=gen)
        rows.append(r)
        for b in range(blocks[i]):
            tables[i, b] = block = physical.pop()
            part = r[b * block_size : (b + 1) * block_size]
            cache[block, : len(part), 0] = part
    cu = torch.tensor([0, *torch.tensor([q for _, q in MIX]).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(int(cu[-1]), num_heads, RANK + ROPE, generator=gen)
    seq_lens = torch.tensor([n for n, _ in MIX], dtype=torch.int32)
    return cache, cache[..., :RANK], q, cu, seq_lens, tables, rows


def plain_math(q, cu, rows, scale):
    """Per query: softmax(scale * q . row_t) over the visible rows, times their first RANK columns."""
    out = torch.zeros(q.shape[0], q.shape[1], RANK)
    starts = cu.tolist()
    for i, (n, len_q) in enumerate(MIX):
        for j in range(len_q):
            p = n - len_q + j
            visible = rows[i][: p + 1]  # [p + 1, RANK + ROPE]
            weights = torch.softmax(scale * q[starts[i] + j] @ visible.T, dim=-1)  # [Hq, p + 1]
            out[starts[i] + j] = weights @ visible[:, :RANK]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("block_size", [4, 16])
def test_latent_attention_reads_v_as_a_view_of_the_key_rows(backend, block_size):
    k_cache, v_cache, q, cu, seq_lens, tables, rows = latent_case(block_size)
    scale = 0.3
    max_q = max(len_q for _, len_q in MIX)
    out = paged_varlen_attention(q, k_cache, v_cache, cu, seq_lens, tables, max_q, scale=scale, backend=backend)
    assert out.shape == (q.shape[0], q.shape[1], RANK)
    assert not out.isnan().any()
    ref = paged_varlen_attention_ref(q, k_cache, v_cache, cu, seq_lens, tables, scale=scale)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(out, plain_math(q, cu, rows, scale), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_store_through_a_value_view_writes_each_row_once_in_place(backend):
    cache = torch.full((3, 4, 1, RANK + ROPE), float("nan"))
    rows = torch.randn(5, 1, RANK + ROPE)
    slots = torch.tensor([6, 0, 11, -1, 3])
    store_kv(rows, rows[..., :RANK], cache, cache[..., :RANK], slots, backend=backend)
    flat = cache.view(-1, 1, RANK + ROPE)
    for i, slot in enumerate(slots.tolist()):
        if slot >= 0:
            torch.testing.assert_close(flat[slot], rows[i], rtol=0, atol=0)  # rope key intact, latent exact
    untouched = [s for s in range(12) if s not in slots.tolist()]
    assert flat[untouched].isnan().all()


def test_a_value_cache_with_other_blocks_is_refused():
    cache = torch.zeros(3, 4, 1, RANK + ROPE)
    with pytest.raises(ValueError, match="all but the last dim"):
        paged_varlen_attention(
            torch.zeros(1, 2, RANK + ROPE),
            cache,
            torch.zeros(2, 4, 1, RANK),
            torch.tensor([0, 1], dtype=torch.int32),
            torch.tensor([1], dtype=torch.int32),
            torch.zeros(1, 1, dtype=torch.int32),
            1,
        )
