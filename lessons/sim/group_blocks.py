"""Paged blocks per KV-cache group: the simulator's server for a model whose layers attend differently.

A hybrid model (gpt-oss: sliding-window and full layers in turn; Gemma 3: five sliding layers to one full) has
several KV-cache groups (`engine.core.kv_groups`, vLLM V1's hybrid KV-cache manager): every request keeps one
block table per group, all drawn from one shared pool of `ServingFootprint.num_blocks` blocks, each block
`ServingFootprint.pool_block_bytes` bytes (the largest group's layers times one page). `GroupBlocks` runs that
pool through the engine's own `BlockManager(groups=...)`: admission allocates the prompt's blocks in every
group; when a token opens a new block every group takes one; a sliding group gives back the blocks that fell
out of its window (`engine.core.sliding_window`) as the engine's `allocate_slots` does, so a long request
holds its full group's blocks plus a few per sliding group, and more requests fit the same bytes than if
every layer kept every token. Admission and preemption are `PagedBlocks`' (the scheduler's rule).

`grow()` is called at the steps whose token changes the request's blocks: it opens a block (position a
multiple of block_size), or a sliding window leaves a block behind (position - window + 1 a positive
multiple of block_size; the first decode after admission too, when the prompt already reaches past the
window). Each call is the engine's `allocate_slots(seq, 1)` at that position; between them the engine's own
call changes nothing.

What the memory chart shows for a hybrid: the pool's slots, num_blocks * block_size (the config's
`capacity_tokens`), one slot holding one token of one group's layers. A token a request keeps takes a slot
in every group that still holds it, so *stored* counts each token once per full group and once per sliding
group until its block leaves the window (`stored_slots`, which the loop records instead of the token count);
*internal* is the tails of the groups' last blocks; *free* the free blocks' slots; nothing is reserved or
external. The five still add up to the pool's slots. A dense model keeps `PagedBlocks` and its numbers.

Which models: those whose layers are full attention and sliding windows in more than one group
(`engine_groups`, the engine's mapping of a catalog `ModelSpec`: gpt-oss, Gemma 3). MLA (DeepSeek-V3, Kimi K2)
is one group, one latent slot per token: `PagedBlocks` over the memory model's num_blocks blocks. Chunked-local
(Llama 4) and linear-state (Qwen3-Next) layers have no engine block rule here; those models keep the token
capacity vLLM reports for their budget (`ServingFootprint.kv_token_capacity`), one slot per token.

Public API:
    engine_groups(model) -> tuple[KVCacheGroup, ...]    the engine's groups for a full + sliding model, else ()
    sim_pool(footprint, policy) -> (capacity_tokens, groups)   the pool simulate_model gives SimConfig
    GroupBlocks(num_blocks, block_size, groups, watermark)   the policy (lessons.sim.policies' protocol)
"""

from __future__ import annotations

from engine.core.admission import admission_headroom
from engine.core.block_manager import BlockManager
from engine.core.kv_groups import KVCacheGroup, kv_cache_groups
from engine.core.sliding_window import FREED, kv_blocks_per_seq
from engine.memory import kv_pool
from engine.memory.catalog import resolve_model
from engine.memory.footprint import ServingFootprint
from engine.memory.layers import FullAttention, SlidingWindow
from engine.memory.specs import ModelSpec
from lessons.sim.policies import NEVER, PagedBlocks, SimRequest

__all__ = ["GroupBlocks", "engine_groups", "sim_pool"]


def engine_groups(model: ModelSpec | str) -> tuple[KVCacheGroup, ...]:
    """The engine's KV-cache groups (`engine.core.kv_groups.kv_cache_groups`) for a model whose layers are full
    attention and sliding windows in more than one group; () for any other model (one group, or a layer kind the
    engine's block manager has no rule for: latent, chunked-local, linear state)."""
    kinds = resolve_model(model).layer_kinds
    windows: list[int | None] = []
    for kind in kinds:
        if type(kind) is FullAttention:
            windows.append(None)
        elif type(kind) is SlidingWindow:
            windows.append(kind.window)
        else:
            return ()
    groups = kv_cache_groups(windows)
    return groups if len(groups) > 1 else ()


def sim_pool(fp: ServingFootprint, policy: str = "paged") -> tuple[int, tuple[KVCacheGroup, ...]]:
    """(capacity_tokens, groups): the pool a simulation of this footprint runs over (`SimConfig`'s fields).

    A paged server for a full + sliding hybrid: its pool's slots, num_blocks * block_size, and the engine's groups.
    A model with per-kind layers in one group (MLA): the pool's tokens, num_blocks * block_size, whatever the
    policy (vLLM's "GPU KV cache size" line prints fewer when max_model_len is not a whole number of blocks: it
    counts whole max_model_len requests). Any other per-kind model (chunked-local, linear state; a static server
    for a hybrid): the token capacity vLLM reports for the budget, one slot per token. A dense model: its budget
    over its bytes per token (the numbers the course always had)."""
    groups = engine_groups(fp.model) if policy == "paged" else ()
    if groups or (fp.per_kind and len(kv_pool.kv_groups(fp.model)) == 1):
        return max(1, fp.num_blocks * fp.block_size), groups
    if fp.per_kind:
        return max(1, fp.kv_token_capacity), ()
    return max(1, fp.kv_budget_bytes // fp.kv_bytes_per_token), ()


class GroupBlocks(PagedBlocks):
    """PagedBlocks with one block table per KV-cache group over one pool, through BlockManager(groups=...)."""

    def __init__(
        self, num_blocks: int, block_size: int, groups: tuple[KVCacheGroup, ...], watermark: float | None
    ) -> None:
        if len(groups) < 2:
            raise ValueError(f"GroupBlocks needs two or more KV-cache groups, got {len(groups)}; use PagedBlocks")
        super().__init__(num_blocks * block_size, block_size, watermark)
        bm = self.block_manager = BlockManager(num_blocks, block_size, groups=groups)
        self._allocator, self._allocate = bm.allocator, bm.allocator.allocate
        self.groups = groups
        self.num_groups = len(groups)
        self._windows = sorted({g.sliding_window for g in groups if g.sliding_window is not None})
        self._dropped = 0  # blocks the running requests' sliding groups gave back (FREED table entries)
        self.num_gave_back = 0  # grow() calls that gave blocks back
        self.shortage = f"no free KV block ({num_blocks} in the pool, {len(groups)} KV-cache groups)"

    def most_blocks(self, req: SimRequest) -> int:
        """At most the blocks the request holds at once, over all groups: its ctx tokens' in every group at
        admission, or at its end each full group's and each sliding group's window (`kv_blocks_per_seq`)."""
        bs = self.block_size
        ends = sum(kv_blocks_per_seq(req.final, bs, g.sliding_window, 1) for g in self.groups)
        return max(self.num_groups * -(-req.ctx // bs), ends)

    def admit(self, req: SimRequest, num_running: int) -> str:
        """NEVER when its blocks over all groups exceed the pool; else PagedBlocks' admission, every group at once."""
        if self.most_blocks(req) > self.block_manager.num_blocks:
            return NEVER
        return super().admit(req, num_running)

    def refusal(self, req: SimRequest, num_running: int) -> str:
        """Why the request's blocks, in every group, do not fit."""
        most, num_blocks = self.most_blocks(req), self.block_manager.num_blocks
        if most > num_blocks:
            return f"needs {most} blocks over {self.num_groups} KV-cache groups, the pool has {num_blocks}"
        headroom = admission_headroom(num_running, self.watermark_blocks)
        need = -(-req.ctx // self.block_size) * self.num_groups
        return (
            f"needed {need} blocks ({self.num_groups} KV-cache groups) + {headroom} watermark, "
            f"{self.block_manager.num_free_blocks} free"
        )

    def _next_change(self, pos: int) -> int:
        """The first position >= pos whose token opens a block or moves a sliding window past one."""
        bs = self.block_size
        best = pos + (-pos) % bs
        for w in self._windows:  # a window drops block k - 1 at position w - 1 + k * bs (k >= 1)
            k = max(1, -(-(pos - w + 1) // bs))
            best = min(best, w - 1 + k * bs)
        return best

    def first_growth(self, req: SimRequest) -> int:
        """The first decode, when the prompt already reaches past a window; else the first change after it."""
        ctx, bs = req.ctx, self.block_size
        if any(ctx - w + 1 >= bs for w in self._windows):
            return req.admit_step + 1  # the step after admission writes position ctx
        return req.admit_step + 1 + self._next_change(ctx) - ctx

    def grow(self, req: SimRequest, step: int) -> int | None:
        """The engine's allocate_slots for the token `step` writes: the next step that changes the request's
        blocks, or None (nothing changed) when the pool cannot give them."""
        seq = req.handle
        pos = req.ctx + step - req.admit_step - 1
        seq.num_computed_tokens = pos
        got = self.block_manager.allocate_slots(seq, 1)
        if got is None:
            return None
        if got.num_freed_blocks:
            self._dropped += got.num_freed_blocks
            self.num_gave_back += 1  # the loop's cue that a waiting request may fit now
        return step + self._next_change(pos + 1) - pos

    def release(self, req: SimRequest) -> None:
        """Free the request's blocks in every group (its Sequence is kept for a re-admission)."""
        self._dropped -= sum(table.count(FREED) for table in req.handle.block_tables)
        self.block_manager.free_sequence(req.handle)

    def stored_slots(self, stored: int) -> int:
        """Slots holding a token: each of the `stored` tokens in every group, less the blocks windows gave back."""
        return self.num_groups * stored - self._dropped * self.block_size
