"""KV-cache groups: how a model whose layers attend differently shares one pool of blocks.

vLLM V1's hybrid KV-cache manager (vllm/v1/core/kv_cache_utils.py, `_get_kv_cache_groups_uniform_page_size`)
puts the layers of each attention kind (full attention; a sliding window of W tokens) into groups of the
same size, `group_size`, and keeps one block table per group and request. All groups draw block ids from
one pool, and each block id belongs to one group at a time; the pool has `group_size` K/V tensors, and
layer j of every group reads and writes tensor j. So a block is one layer-slot of memory per tensor, and
the layers of different groups share the same bytes without ever sharing a block. A full-attention group
keeps every block of a request; a sliding group gives back the blocks that fell out of its window
(engine/core/sliding_window.py), so a hybrid model serves longer contexts from the same bytes.

The grouping rule, as vLLM writes it: group_size is the fewest layers of any kind, or the most when the
kinds are within 1.5x of each other (fewer padding layers); a kind with n layers forms ceil(n / group_size)
groups, the i-th holding its layers i, i + num_groups, ... (the last ones may be short: padding).

Public API (plain Python, no torch; the engine, its config and the serving simulator all call it):
    KVCacheGroup(sliding_window, layers)      one group: its window (None: full attention) and layer ids
    kv_cache_groups(layer_windows)            the groups for per-layer windows (None = full attention)
    group_size(groups)                        layers per group = K/V tensors in the pool
    layer_tensors(groups, num_layers)         the pool tensor each layer reads and writes
    blocks_per_seq(groups, context_len, block_size, max_num_batched_tokens)
                                              most blocks one request holds at once, over all groups
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.core.sliding_window import kv_blocks_per_seq

__all__ = ["KVCacheGroup", "blocks_per_seq", "group_size", "kv_cache_groups", "layer_tensors"]


@dataclass(frozen=True, slots=True)
class KVCacheGroup:
    """Layers that share one block table: all full attention (sliding_window None) or all one window."""

    sliding_window: int | None
    layers: tuple[int, ...]

    @property
    def kind(self) -> str:
        """ "full" or "sliding", as a lesson names the group."""
        return "full" if self.sliding_window is None else "sliding"


def kv_cache_groups(layer_windows: Sequence[int | None]) -> tuple[KVCacheGroup, ...]:
    """The KV-cache groups of a model whose layer i attends within layer_windows[i] tokens (None: every token).

    One kind of layer is one group holding every layer (the plain engine). Kinds appear in the order of
    their first layer, as vLLM's dict of specs keeps them."""
    if not layer_windows:
        raise ValueError("a model needs at least one attention layer to have KV-cache groups")
    by_kind: dict[int | None, list[int]] = {}
    for layer, window in enumerate(layer_windows):
        by_kind.setdefault(window, []).append(layer)
    counts = [len(layers) for layers in by_kind.values()]
    size = max(counts) if max(counts) < min(counts) * 1.5 else min(counts)
    groups: list[KVCacheGroup] = []
    for window, layers in by_kind.items():
        num_groups = -(-len(layers) // size)
        groups.extend(KVCacheGroup(window, tuple(layers[i::num_groups])) for i in range(num_groups))
    return tuple(groups)


def group_size(groups: Sequence[KVCacheGroup]) -> int:
    """Layers per group (the longest group; shorter ones are padded): the number of K/V tensors in the pool."""
    return max(len(g.layers) for g in groups)


def layer_tensors(groups: Sequence[KVCacheGroup], num_layers: int) -> list[int]:
    """tensors[layer]: the pool tensor a layer uses, its position inside its group."""
    tensors = [-1] * num_layers
    for g in groups:
        for j, layer in enumerate(g.layers):
            tensors[layer] = j
    assert -1 not in tensors, (groups, num_layers)  # every layer is in exactly one group
    return tensors


def blocks_per_seq(
    groups: Sequence[KVCacheGroup], context_len: int, block_size: int, max_num_batched_tokens: int | None = None
) -> int:
    """Most blocks one request of context_len tokens holds at once: each group's `kv_blocks_per_seq`, summed
    (every group has its own table over the shared pool)."""
    return sum(kv_blocks_per_seq(context_len, block_size, g.sliding_window, max_num_batched_tokens) for g in groups)
