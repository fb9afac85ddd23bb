"""Physical KV-cache blocks: free queue, reference counts and prefix-cache hashes.

Follows PagedAttention (Kwon et al., SOSP 2023, "Efficient Memory Management for Large Language Model
Serving with PagedAttention") and vLLM v1's prefix caching: the cache is cut into fixed-size blocks, a
block is shared by reference counting, and a *full* block can be found again by a hash chained over
its parent block's hash and its own token ids. Sequence-level bookkeeping (block tables, prefix hits,
copy-on-write, snapshots) is `engine.core.block_manager.BlockManager`, built on this class.

Public API (every call is O(1)):
    BlockAllocator(num_blocks, block_size, enable_prefix_caching=False)
        .num_blocks, .block_size, .enable_prefix_caching
        .num_free_blocks         blocks allocate() can hand out (never used + cached but unreferenced)
        .num_cached_blocks       blocks holding a prefix-cache hash (referenced or not)
        .num_evictable_blocks    cached blocks with ref count 0 (evicted LRU when a fresh block is needed)
        .allocate() -> int       ref count 1; raises OutOfBlocksError when nothing is free
        .allocate_blocks(n) -> list[int]   all or nothing
        .incref(b)               one more owner; also revives a cached, unreferenced block
        .free(b)                 one owner fewer; at 0 the block returns to the pool (keeping its hash)
        .ref_count(b) -> int;  .ref_counts / .block_hashes   live read-only views, indexed by block id
        .cache_block(b, block_hash, token_ids) -> bool   register a full, referenced block
        .lookup(block_hash, token_ids) -> int | None      cached block with these exact tokens
        .block_hash(b) -> int | None;  .is_evictable(b) -> bool
    compute_block_hash(parent_hash, token_ids) -> int
    OutOfBlocksError(requested, free, num_blocks=None, unit="blocks")
        RuntimeError with .requested / .free / .num_blocks and a message saying what to do
Misuse is a ValueError: freeing a block twice, incref of a free block, or an id that is not an int in
0..num_blocks-1 (a bool is not an id, although True would index block 1).

Allocation prefers never-used (or uncached) blocks in FIFO order, so block ids are predictable: a fresh
pool hands out 0, 1, 2, ... Only when those run out is the least recently freed cached block evicted.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence

from engine.core.sequence import check_block_size
from kernels.validate import check_int, is_whole


class OutOfBlocksError(RuntimeError):
    """Raised when more KV-cache blocks are requested than are free."""

    def __init__(self, requested: int, free: int, num_blocks: int | None = None, unit: str = "blocks") -> None:
        self.requested = requested
        self.free = free
        self.num_blocks = num_blocks
        pool = f" of {num_blocks}" if num_blocks is not None else ""
        super().__init__(
            f"out of KV-cache {unit}: asked for {requested} but only {free}{pool} are free; free or preempt "
            f"a running sequence, wait for one to finish, or give the cache more memory (num_blocks / budget)"
        )


def compute_block_hash(parent_hash: int | None, token_ids: Sequence[int]) -> int:
    """Hash of a full block chained over its parent's hash, so equal hashes imply equal prefixes."""
    # Python hashes ints and tuples of ints deterministically (no per-process salt, unlike str).
    return hash((-1 if parent_hash is None else parent_hash, tuple(token_ids)))


class BlockAllocator:
    """A pool of `num_blocks` KV-cache blocks of `block_size` token slots with reference counts."""

    __slots__ = (
        "num_blocks",
        "block_size",
        "enable_prefix_caching",
        "_ref_counts",
        "_free",
        "_evictable",
        "_block_hashes",
        "_block_tokens",
        "_hash_to_block",
    )

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False) -> None:
        self.num_blocks = check_int("num_blocks", num_blocks)
        self.block_size = check_block_size(block_size)
        self.enable_prefix_caching = bool(enable_prefix_caching)
        self._ref_counts = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))  # unreferenced blocks without a hash, FIFO
        # Unreferenced blocks that still hold a reusable prefix, least recently freed first.
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self._block_hashes: list[int | None] = [None] * num_blocks
        self._block_tokens: list[tuple[int, ...] | None] = [None] * num_blocks  # verifies hash hits
        self._hash_to_block: dict[int, int] = {}

    def __repr__(self) -> str:
        return (
            f"BlockAllocator(num_blocks={self.num_blocks}, block_size={self.block_size}, "
            f"enable_prefix_caching={self.enable_prefix_caching}, num_free_blocks={self.num_free_blocks})"
        )

    @property
    def num_free_blocks(self) -> int:
        """Blocks `allocate()` can hand out, counting cached blocks nobody references."""
        return len(self._free) + len(self._evictable)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks that hold a prefix-cache hash, referenced or not."""
        return len(self._hash_to_block)

    @property
    def num_evictable_blocks(self) -> int:
        """Cached blocks with ref count 0: free, but reusable until evicted."""
        return len(self._evictable)

    def allocate(self) -> int:
        """Take a free block (ref count 1); evicts the least recently freed cached block if needed."""
        # A truth test, not try/except: raising IndexError costs more than the whole call when the pool
        # runs on evictions (prefix caching with a full cache).
        block_id = self._free.popleft() if self._free else self._evict()
        self._ref_counts[block_id] = 1
        return block_id

    def allocate_blocks(self, n: int) -> list[int]:
        """Take `n` blocks at once, or none (raises OutOfBlocksError) if fewer are free."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks; n must be >= 0")
        if n > self.num_free_blocks:
            raise OutOfBlocksError(n, self.num_free_blocks, self.num_blocks)
        return [self.allocate() for _ in range(n)]

    def _evict(self) -> int:
        if not self._evictable:
            raise OutOfBlocksError(1, 0, self.num_blocks)
        block_id, _ = self._evictable.popitem(last=False)
        del self._hash_to_block[self._block_hashes[block_id]]
        self._block_hashes[block_id] = None
        self._block_tokens[block_id] = None
        return block_id

    def _bad_block(self, block_id: object, action: str) -> ValueError:
        if not is_whole(block_id):  # True would index block 1
            return ValueError(
                f"cannot {action} block {block_id!r}: a {type(block_id).__name__} is not a block id; block ids run "
                f"from 0 to {self.num_blocks - 1} (pass the int that allocate() returned)"
            )
        if 0 <= block_id < self.num_blocks:
            return ValueError(
                f"cannot {action} block {block_id}: it is not allocated (ref count 0); "
                f"allocate() it first, and free() each reference exactly once"
            )
        return ValueError(f"cannot {action} block {block_id!r}: block ids run from 0 to {self.num_blocks - 1}")

    def incref(self, block_id: int) -> None:
        """Add an owner to an allocated block, or revive a cached block that nobody references."""
        if type(block_id) is not int and not is_whole(block_id):  # the common int skips the slower check
            raise self._bad_block(block_id, "incref")
        try:
            count = self._ref_counts[block_id]
        except IndexError:
            raise self._bad_block(block_id, "incref") from None
        if block_id < 0:
            raise self._bad_block(block_id, "incref")
        if count == 0:
            if block_id not in self._evictable:
                raise self._bad_block(block_id, "incref")
            del self._evictable[block_id]
        self._ref_counts[block_id] = count + 1

    def free(self, block_id: int) -> None:
        """Drop one owner; at ref count 0 the block returns to the pool (a cached one keeps its hash)."""
        if type(block_id) is not int and not is_whole(block_id):  # the common int skips the slower check
            raise self._bad_block(block_id, "free")
        try:
            count = self._ref_counts[block_id]
        except IndexError:
            raise self._bad_block(block_id, "free") from None
        if count <= 0 or block_id < 0:
            raise self._bad_block(block_id, "free")
        count -= 1
        self._ref_counts[block_id] = count
        if count == 0:
            if self._block_hashes[block_id] is None:
                self._free.append(block_id)
            else:
                self._evictable[block_id] = None  # most recently freed goes last, evicted last

    @property
    def ref_counts(self) -> Sequence[int]:
        """Every block's ref count, indexed by block id: a live view for hot loops (read it, never write it)."""
        # The list itself, not a copy: the block manager reads it on every decode step, and a copy or a
        # validating ref_count() call per block would cost more than the rest of that step's bookkeeping.
        return self._ref_counts

    @property
    def block_hashes(self) -> Sequence[int | None]:
        """Every block's prefix-cache hash (None when not cached), indexed by block id; a live read-only view."""
        return self._block_hashes

    def ref_count(self, block_id: int) -> int:
        """Number of owners of a block (0 when free)."""
        if not is_whole(block_id) or not 0 <= block_id < self.num_blocks:
            raise self._bad_block(block_id, "read the ref count of")
        return self._ref_counts[block_id]

    def block_hash(self, block_id: int) -> int | None:
        """The prefix-cache hash a block holds, or None."""
        self.ref_count(block_id)  # validates the id
        return self._block_hashes[block_id]

    def cache_block(self, block_id: int, block_hash: int, token_ids: Sequence[int]) -> bool:
        """Register a full, referenced block under `block_hash`; False if another block already holds it."""
        if not self.enable_prefix_caching:
            raise ValueError("cache_block() needs BlockAllocator(..., enable_prefix_caching=True)")
        if type(block_id) is not int and not is_whole(block_id):  # the common int skips the slower check
            raise self._bad_block(block_id, "cache")
        try:
            count = self._ref_counts[block_id]
        except IndexError:
            raise self._bad_block(block_id, "cache") from None
        if count <= 0 or block_id < 0:
            raise self._bad_block(block_id, "cache")
        tokens = token_ids if type(token_ids) is tuple else tuple(token_ids)
        if len(tokens) != self.block_size:
            raise ValueError(
                f"only full blocks are cached: block {block_id} got {len(tokens)} token ids, block_size is "
                f"{self.block_size}"
            )
        current = self._block_hashes[block_id]
        if current is not None:
            if current != block_hash or self._block_tokens[block_id] != tokens:
                raise ValueError(f"block {block_id} is already cached under a different hash or tokens")
            return True
        if block_hash in self._hash_to_block:
            return False  # same prefix computed twice; keep the first copy
        self._hash_to_block[block_hash] = block_id
        self._block_hashes[block_id] = block_hash
        self._block_tokens[block_id] = tokens
        return True

    def lookup(self, block_hash: int, token_ids: Sequence[int]) -> int | None:
        """The cached block with this hash and exactly these tokens (ref count unchanged), else None."""
        block_id = self._hash_to_block.get(block_hash)
        if block_id is None or self._block_tokens[block_id] != (
            token_ids if type(token_ids) is tuple else tuple(token_ids)
        ):
            return None  # a miss, or a hash collision caught by comparing the tokens
        return block_id

    def is_evictable(self, block_id: int) -> bool:
        """True for a cached block that nobody references (free, but still reusable)."""
        return block_id in self._evictable
