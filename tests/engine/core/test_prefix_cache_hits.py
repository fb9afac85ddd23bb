"""BlockManager's prefix-cache counters: tokens looked up and tokens found at admission (vLLM's
vllm:prefix_cache_queries / vllm:prefix_cache_hits count tokens the same way), and the hit rate they give."""

import pytest

from engine.core.block_manager import BlockManager
from engine.core.sequence import Sequence


def toks(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def test_hits_count_only_full_cached_blocks_of_each_admission():
    bm = BlockManager(10, 4, enable_prefix_caching=True)
    assert (bm.prefix_cache_queries, bm.prefix_cache_hits, bm.prefix_cache_hit_rate) == (0, 0, 0.0)
    a = Sequence(0, toks(10), block_size=4)
    bm.allocate_sequence(a)  # nothing cached yet: 10 tokens queried, 0 found
    assert (bm.prefix_cache_queries, bm.prefix_cache_hits) == (10, 0)
    a.num_computed_tokens = a.num_tokens
    bm.free_sequence(a)  # its two full blocks stay cached; the 2-token tail is not cached
    b = Sequence(1, toks(10) + [50, 51], block_size=4)
    assert bm.allocate_sequence(b) == 8  # two full blocks hit; the partial third block never can
    assert (bm.prefix_cache_queries, bm.prefix_cache_hits) == (22, 8)
    assert bm.prefix_cache_hit_rate == pytest.approx(8 / 22)
    bm.can_allocate(Sequence(2, toks(10), block_size=4))  # a query changes no counter
    assert bm.num_cached_prefix_tokens(Sequence(3, toks(10), block_size=4)) == 8
    assert (bm.prefix_cache_queries, bm.prefix_cache_hits) == (22, 8)


def test_a_different_first_block_breaks_the_hash_chain():
    bm = BlockManager(10, 2, enable_prefix_caching=True)
    a = Sequence(0, [1, 2, 3, 4, 5], block_size=2)
    bm.allocate_sequence(a)
    a.num_computed_tokens = a.num_tokens
    bm.free_sequence(a)
    other = Sequence(1, [9, 9, 3, 4, 5], block_size=2)  # same second block, different parent: no hit at all
    assert bm.allocate_sequence(other) == 0
    assert bm.prefix_cache_hits == 0 and bm.prefix_cache_queries == 10


def test_no_counting_without_prefix_caching():
    bm = BlockManager(10, 4)
    bm.allocate_sequence(Sequence(0, toks(10), block_size=4))
    assert (bm.prefix_cache_queries, bm.prefix_cache_hits, bm.prefix_cache_hit_rate) == (0, 0, 0.0)
