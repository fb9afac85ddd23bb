"""The paged latent cache of multi-head latent attention: one row per token and layer, nothing else.

MLA (DeepSeek-V2, arXiv 2405.04434) keeps per token and layer the latent c (kv_lora_rank values, after
kv_a_layernorm) and the rotated rope key (qk_rope_head_dim values), whatever the head count: one cache
"head" of kv_lora_rank + qk_rope_head_dim (576 for DeepSeek-V3), as vLLM's MLAAttentionSpec sizes it
(vllm/v1/kv_cache_interface.py). Each layer's rows are `[num_blocks, block_size, 1, latent_dim]`; the attention
kernels read them as K and read V as a view of their first kv_lora_rank columns, so there is no second tensor.
Slots are addressed as in the K/V cache (engine/worker/kv_cache.py): same block tables, same slot mapping.
Bytes per token: layers * (kv_lora_rank + qk_rope_head_dim) * dtype bytes, half what a K/V cache of one
576-wide head would take. An fp8 latent cache is not built: its K and V scales would quantize the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.model.forward_meta import LayerKV
from engine.worker.kv_cache import check_kv_memory, kv_memory_message
from kernels.validate import is_whole


class LatentKVCache:
    """Latent + rope-key rows for every layer, cut into blocks: `rows[layer, block, offset, 0, latent_dim]`."""

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        kv_lora_rank: int,
        qk_rope_head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        sizes = (num_layers, num_blocks, block_size, kv_lora_rank, qk_rope_head_dim)
        assert all(is_whole(n) and n >= 1 for n in sizes), sizes
        self.num_layers, self.num_blocks, self.block_size = num_layers, num_blocks, block_size
        self.kv_lora_rank, self.qk_rope_head_dim = kv_lora_rank, qk_rope_head_dim
        self.latent_dim = kv_lora_rank + qk_rope_head_dim
        per_block = num_layers * block_size * self.latent_dim * torch.empty((), dtype=dtype).element_size()
        check_kv_memory(num_blocks, per_block, device)
        try:  # zeros, so an unwritten slot never holds garbage; one allocation for every layer
            self.rows = torch.zeros(num_layers, num_blocks, block_size, 1, self.latent_dim, dtype=dtype, device=device)
        except RuntimeError as exc:
            if not isinstance(exc, torch.OutOfMemoryError) and "memory" not in str(exc).lower():
                raise
            why = f"the allocator could not provide them ({str(exc).splitlines()[0][:200]})"
            raise ValueError(kv_memory_message(num_blocks, per_block, device, why)) from exc
        # K: the whole row [num_blocks, block_size, 1, rank + rope]; V: a view of its latent columns.
        self.layers: list[LayerKV] = [
            LayerKV(self.rows[layer], self.rows[layer][..., :kv_lora_rank]) for layer in range(num_layers)
        ]

    def __repr__(self) -> str:
        return (
            f"LatentKVCache(num_layers={self.num_layers}, num_blocks={self.num_blocks}, block_size={self.block_size}, "
            f"kv_lora_rank={self.kv_lora_rank}, qk_rope_head_dim={self.qk_rope_head_dim}, dtype={self.dtype}, "
            f"{self.nbytes} bytes)"
        )

    @property
    def dtype(self) -> torch.dtype:
        """Element type of the cache."""
        return self.rows.dtype

    @property
    def is_fp8(self) -> bool:
        """Always False: the latent cache keeps the model's dtype."""
        return False

    @property
    def num_slots(self) -> int:
        """Token slots in the cache: num_blocks * block_size."""
        return self.num_blocks * self.block_size

    @property
    def bytes_per_slot(self) -> int:
        """Bytes of one token over all layers: layers * (kv_lora_rank + qk_rope_head_dim) * dtype bytes."""
        return self.num_layers * self.latent_dim * self.rows.element_size()

    @property
    def nbytes(self) -> int:
        """Total bytes held by the cache tensor: num_slots * bytes_per_slot."""
        return self.num_slots * self.bytes_per_slot

    def copy_blocks(self, copies: Sequence[tuple[int, int]]) -> None:
        """Copy-on-write: copy block src's rows into block dst, in every layer (gather first, then scatter)."""
        if not copies:
            return
        assert all(0 <= b < self.num_blocks for pair in copies for b in pair), copies
        device = self.rows.device
        src = torch.tensor([s for s, _ in copies], dtype=torch.long, device=device)
        dst = torch.tensor([d for _, d in copies], dtype=torch.long, device=device)
        self.rows[:, dst] = self.rows[:, src]  # [L, n_copies, block_size, 1, latent_dim]
