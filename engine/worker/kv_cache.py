"""The paged KV cache: the K/V tensors every layer writes, one allocation for the whole model.

PagedAttention (Kwon et al., SOSP 2023): every layer owns K and V tensors
`[num_blocks, block_size, num_kv_heads, head_dim]`; token p of a sequence lives at slot
`block_table[p // block_size] * block_size + p % block_size` (`slots_of`), where the block table comes from
`engine.core.block_manager.BlockManager`. Its size in bytes is `engine.memory.units.kv_bytes`, the
formula the memory lessons teach, so the cache the engine allocates is the cache the course computes.

An fp8 cache (vLLM's `kv_cache_dtype="fp8"`) stores `torch.float8_e4m3fn`, one byte per element, with one
float32 scale per layer for K and one for V. Each layer's tensors and scales travel together as a `LayerKV`;
`kernels.ops.store_kv` sets a layer's scales at its first write and quantizes with them, and the attention
kernel dequantizes. The cache is checked against the device's available memory before it is allocated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.memory.units import kv_bytes
from engine.model.forward_meta import LayerKV
from engine.worker.device import available_memory
from kernels.fp8 import FP8_DTYPE
from kernels.validate import is_whole


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """The KV pool one engine runs with, fixed once its model is loaded (`EngineConfig.size_cache`).

    dtype: the cache's element type (the model's, or float8 e4m3); num_blocks: blocks of block_size tokens;
    kv_bytes_per_token: K+V bytes of one token over all layers; max_model_len: the longest sequence the engine
    accepts, which always fits in the pool; pool_tokens: num_blocks * block_size when the pool, not the model,
    set max_model_len (so a too-long prompt can say so), else None."""

    block_size: int
    num_blocks: int
    dtype: torch.dtype
    kv_bytes_per_token: int
    max_model_len: int
    pool_tokens: int | None
    sliding_window: int | None
    enable_prefix_caching: bool
    # A hybrid model's KV-cache groups (engine/core/kv_groups.py): each has its own block tables over this one
    # pool, and kv_bytes_per_token is then one slot of the pool (group_size layers' K+V). () for one kind of layer.
    kv_groups: tuple = ()


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB"


def check_kv_memory(
    num_blocks: int, bytes_per_block: int, device: torch.device | str, available: int | None = None, source: str = ""
) -> None:
    """A ValueError, before anything is allocated, when `num_blocks` blocks of `bytes_per_block` bytes exceed
    the memory `device` has available (`available_memory`, unless given); nothing happens when it is unknown."""
    if available is None:
        available, source = available_memory(device)
        if available is None:
            return
    need = num_blocks * bytes_per_block
    if need > available:
        why = f"only {_gib(available)} is available ({source})"
        raise ValueError(kv_memory_message(num_blocks, bytes_per_block, device, why, available))


def kv_memory_message(
    num_blocks: int, bytes_per_block: int, device: torch.device | str, why: str, available: int | None = None
) -> str:
    """The out-of-memory message: the blocks asked for, their bytes, the memory there is, and the fix."""
    need = num_blocks * bytes_per_block
    fits = f"at most {available // bytes_per_block} blocks fit now; " if available is not None else ""
    return (
        f"a KV cache of num_gpu_blocks={num_blocks} blocks x {bytes_per_block} bytes = {need} bytes "
        f"({_gib(need)}) does not fit on {torch.device(device)}: {why}; {fits}pass a smaller num_gpu_blocks (or "
        "kv_cache_memory_bytes), None to size the cache from the memory there is, a smaller block_size, "
        "or kv_cache_dtype='fp8'"
    )


class PagedKVCache:
    """K and V for every layer, cut into blocks: `kv[layer, 0 | 1, block, offset, kv_head, dim]`."""

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        layer_tensors: Sequence[int] | None = None,
    ) -> None:
        """layer_tensors: a hybrid model's tensor per layer (engine/core/kv_groups.py `layer_tensors`): layers of
        different KV-cache groups share a tensor, each writing only the blocks its group owns. None: one each."""
        # Sized from a CacheConfig (EngineConfig.size_cache) and a loaded ModelConfig, both checked already.
        sizes = (num_layers, num_blocks, block_size, num_kv_heads, head_dim)
        assert all(is_whole(n) and n >= 1 for n in sizes), sizes
        tensor_of = list(range(num_layers)) if layer_tensors is None else list(layer_tensors)
        assert len(tensor_of) == num_layers and min(tensor_of) >= 0, tensor_of
        num_tensors = max(tensor_of) + 1
        self.layer_tensors = tensor_of
        self.num_tensors = num_tensors
        self.num_layers = num_layers
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        # One allocation for the whole cache; zeros so an unwritten slot never holds garbage. Checked first:
        # on CPU an overcommitted allocation may "succeed" and get the process killed when it is touched.
        per_block = 2 * num_tensors * block_size * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()
        check_kv_memory(num_blocks, per_block, device)
        try:
            self.kv = torch.zeros(
                num_tensors, 2, num_blocks, block_size, num_kv_heads, head_dim, dtype=dtype, device=device
            )  # [num_tensors, 2, num_blocks, block_size, Hkv, D]
        except RuntimeError as exc:  # torch.OutOfMemoryError (CUDA) is a RuntimeError, so is the CPU allocator's
            if not isinstance(exc, torch.OutOfMemoryError) and "memory" not in str(exc).lower():
                raise
            why = f"the allocator could not provide them ({str(exc).splitlines()[0][:200]})"
            raise ValueError(kv_memory_message(num_blocks, per_block, device, why)) from exc
        # fp8: per-layer K and V scales, 0 until the layer's first write sets them (kernels.ops.store_kv).
        self.scales = torch.zeros(num_layers, 2, 1, dtype=torch.float32, device=device) if self.is_fp8 else None
        # Per-layer views, each contiguous [num_blocks, block_size, Hkv, D] as the kernels take them, with scales.
        self.layers: list[LayerKV] = [
            LayerKV(
                self.kv[tensor_of[layer], 0],
                self.kv[tensor_of[layer], 1],
                None if self.scales is None else self.scales[layer, 0],
                None if self.scales is None else self.scales[layer, 1],
            )
            for layer in range(num_layers)
        ]

    def __repr__(self) -> str:
        return (
            f"PagedKVCache(num_layers={self.num_layers}, num_blocks={self.num_blocks}, block_size={self.block_size}, "
            f"num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, dtype={self.dtype}, {self.nbytes} bytes)"
        )

    @property
    def dtype(self) -> torch.dtype:
        """Element type of the cache."""
        return self.kv.dtype

    @property
    def is_fp8(self) -> bool:
        """True for an fp8 cache (values stored divided by the layer's scale)."""
        return self.kv.dtype == FP8_DTYPE

    @property
    def num_slots(self) -> int:
        """Token slots in the cache: num_blocks * block_size."""
        return self.num_blocks * self.block_size

    @property
    def bytes_per_slot(self) -> int:
        """Bytes of one slot's K and V over all the pool's tensors (`engine.memory.units.kv_bytes`): one token
        over all layers, or over one KV-cache group's layers for a hybrid model."""
        return kv_bytes(self.num_tensors, self.num_kv_heads, self.head_dim, self.kv.element_size())

    @property
    def nbytes(self) -> int:
        """Total bytes held by the cache tensors: num_slots * bytes_per_slot."""
        return self.num_slots * self.bytes_per_slot

    def k_cache(self, layer: int) -> torch.Tensor:
        """Layer `layer`'s keys [num_blocks, block_size, Hkv, D]."""
        return self.layers[layer].k

    def v_cache(self, layer: int) -> torch.Tensor:
        """Layer `layer`'s values [num_blocks, block_size, Hkv, D]."""
        return self.layers[layer].v

    def copy_blocks(self, copies: Sequence[tuple[int, int]]) -> None:
        """Copy-on-write: copy block src's K/V rows into block dst, in every layer."""
        if not copies:
            return
        # The pairs come from BlockManager.allocate_slots: blocks of this pool, each destination a fresh block.
        assert all(0 <= b < self.num_blocks for pair in copies for b in pair), copies
        dsts = [dst for _, dst in copies]
        assert len(set(dsts)) == len(dsts), copies
        device = self.kv.device
        src_idx = torch.tensor([src for src, _ in copies], dtype=torch.long, device=device)
        dst_idx = torch.tensor(dsts, dtype=torch.long, device=device)
        # Gather first, then scatter: a block that is both a source and a destination reads its old rows.
        kv = self.kv.view(torch.uint8) if self.is_fp8 else self.kv  # CPU torch cannot index fp8: copy the bytes
        kv[:, :, dst_idx] = kv[:, :, src_idx]  # [L, 2, n_copies, block_size, Hkv, D]
