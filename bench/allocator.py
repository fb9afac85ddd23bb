"""Block allocator throughput: allocate + free pairs per second through the public BlockAllocator API.

The trace-driven simulator replays long serving traces through this allocator, so it must stay cheap in
CPython. Four workloads on a pool of `--num-blocks` blocks, timed interleaved (A, B, A, B, ...):
- plain: bursts of `--burst` allocate() calls, then free() of each block (prefix caching off);
- prefix_caching: every block in the pool starts cached and unreferenced, so each allocate() evicts the
  least recently freed cached block; each pair also registers the new block's hash (cache_block), so
  the freed block is cached again and the pool stays full of cached blocks;
- prefix_hits: lookup of a cached block + incref (reviving it from the free pool) + free;
- block_manager: admit, prefill and free whole sequences through BlockManager (`--num-seqs` prompts of
  `--seq-len` tokens, prefix caching on, every other prompt starting with the same half-prompt prefix) to
  show the per-sequence cost. Reported apart, each with the prefix-hit rate it measured:
  cold: a fresh BlockManager per repeat (empty cache; only the shared prefix hits, once the first sharer
  has been prefilled); warm: one BlockManager whose cache already holds every prompt from an earlier,
  untimed pass (all but each prompt's last block hit).

Run: python -m bench.allocator --json
"""

from __future__ import annotations

import os
import random

from bench.harness import emit, env_info, log, parser, save, time_interleaved
from engine.core.block_allocator import BlockAllocator, compute_block_hash
from engine.core.block_manager import BlockManager
from engine.core.sequence import Sequence


def plain_pairs(alloc: BlockAllocator, num_pairs: int, burst: int) -> None:
    """num_pairs allocate+free pairs in bursts: allocate `burst` blocks, then free them."""
    allocate, free = alloc.allocate, alloc.free
    for _ in range(num_pairs // burst):
        blocks = [allocate() for _ in range(burst)]
        for b in blocks:
            free(b)


# Token ids of the blocks a pool starts with; positive because hash(-1) == hash(-2) in CPython, so
# negative ids would collide (the allocator would then rightly refuse the second block).
POOL_KEY_OFFSET = 1 << 40


def make_keys(count: int, block_size: int, offset: int = 0) -> list[tuple[int, tuple[int, ...]]]:
    """`count` distinct (hash, token ids) block keys, built outside the timed loops."""
    keys = []
    for i in range(offset, offset + count):
        tokens = (i,) * block_size
        keys.append((compute_block_hash(None, tokens), tokens))
    return keys


def make_cached_pool(num_blocks: int, block_size: int) -> BlockAllocator:
    """A prefix-caching pool whose every block is cached and unreferenced (allocate() must evict)."""
    alloc = BlockAllocator(num_blocks, block_size, enable_prefix_caching=True)
    blocks = alloc.allocate_blocks(num_blocks)
    for b, key in zip(blocks, make_keys(num_blocks, block_size, offset=POOL_KEY_OFFSET), strict=True):
        alloc.cache_block(b, *key)
    for b in blocks:
        alloc.free(b)
    return alloc


def prefix_pairs(alloc: BlockAllocator, keys: list, num_pairs: int, burst: int, counter: list[int]) -> None:
    """num_pairs pairs of allocate (evicting the LRU cached block) + cache_block + free, in bursts."""
    allocate, free, cache_block = alloc.allocate, alloc.free, alloc.cache_block
    # keys cycle through twice the pool, so a key's previous block has always been evicted by now
    n, num_keys = counter[0], len(keys)
    for _ in range(num_pairs // burst):
        blocks = []
        for _ in range(burst):
            b = allocate()
            cache_block(b, *keys[n % num_keys])
            blocks.append(b)
            n += 1
        for b in blocks:
            free(b)
    counter[0] = n


def prefix_hits(alloc: BlockAllocator, keys: list, num_hits: int) -> None:
    """num_hits prefix-cache hits: lookup + incref (reviving a cached free block) + free."""
    lookup, incref, free = alloc.lookup, alloc.incref, alloc.free
    num_keys = len(keys)
    for i in range(num_hits):
        b = lookup(*keys[i % num_keys])
        incref(b)
        free(b)


def manager_sequences(manager: BlockManager, prompts: list[list[int]], block_size: int) -> tuple[int, int]:
    """Admit each sequence and prefill it (its full blocks are published to the prefix cache, as the engine
    does on the next step), then free them all (their full blocks stay cached).

    Returns (prompt tokens taken from the prefix cache, prompt tokens) over the batch.
    """
    seqs = [Sequence(i, p, block_size=block_size) for i, p in enumerate(prompts)]
    hits = 0
    for seq in seqs:
        got = manager.allocate_slots(seq)
        if got is None:
            raise ValueError(
                f"a pool of {manager.num_blocks} blocks cannot hold all {len(seqs)} prompts at once; raise "
                f"--num-blocks or lower --num-seqs / --seq-len"
            )
        hits += got.num_cached_tokens
        seq.num_computed_tokens = seq.num_tokens
        manager.cache_computed_blocks(seq)
    for seq in seqs:
        manager.free_sequence(seq)
    return hits, sum(len(p) for p in prompts)


def shared_prefix_prompts(num_seqs: int, seq_len: int, seed: int) -> list[list[int]]:
    """`num_seqs` prompts of `seq_len` random tokens; the even-numbered ones share their first seq_len // 2."""
    rng = random.Random(seed)
    shared = [rng.randrange(50_000) for _ in range(seq_len // 2)]
    return [
        (shared if i % 2 == 0 else [])
        + [rng.randrange(50_000) for _ in range(seq_len - (len(shared) if i % 2 == 0 else 0))]
        for i in range(num_seqs)
    ]


class ManagerRuns:
    """The block_manager workload, cold or warm, callable by time_interleaved; records each call's hit rate.

    cold: every call gets a fresh BlockManager, built in advance (construction is not timed), so the cache
    starts empty. warm: one BlockManager, primed by one untimed pass, so every call finds the prompts cached.
    """

    def __init__(self, prompts: list[list[int]], num_blocks: int, block_size: int, warm: bool, calls: int) -> None:
        self.prompts, self.block_size, self.warm = prompts, block_size, warm
        count = 1 if warm else calls
        self.managers = [BlockManager(num_blocks, block_size, enable_prefix_caching=True) for _ in range(count)]
        if warm:
            manager_sequences(self.managers[0], prompts, block_size)
        self.hit_rates: list[float] = []

    def __call__(self) -> None:
        if self.warm:
            manager = self.managers[0]
        elif self.managers:
            manager = self.managers.pop()
        else:
            raise RuntimeError("ManagerRuns(cold) called more often than the `calls` it was built for")
        hits, total = manager_sequences(manager, self.prompts, self.block_size)
        self.hit_rates.append(hits / total)

    def summary(self, seconds: float, repeats: int) -> dict[str, float]:
        """seqs/s and blocks/s at `seconds` per call, and the mean hit rate of the last `repeats` (timed) calls."""
        num_seqs = len(self.prompts)
        num_blocks = sum(-(-len(p) // self.block_size) for p in self.prompts)
        timed = self.hit_rates[-repeats:]
        return {
            "seqs_per_s": num_seqs / seconds,
            "blocks_per_s": num_blocks / seconds,
            "hit_rate": sum(timed) / len(timed),
        }


def main() -> None:
    """Time the workloads interleaved and print one JSON line."""
    p = parser("BlockAllocator allocate+free pairs per second")
    p.add_argument("--num-blocks", type=int, default=10_000)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--pairs", type=int, default=200_000, help="allocate+free pairs per timed repeat")
    p.add_argument("--burst", type=int, default=100, help="blocks allocated before they are freed")
    p.add_argument("--num-seqs", type=int, default=64, help="sequences per block_manager repeat")
    p.add_argument("--seq-len", type=int, default=512, help="prompt tokens per sequence")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.burst > args.num_blocks or args.pairs < args.burst:
        p.error(f"--burst ({args.burst}) must be <= --num-blocks ({args.num_blocks}) and <= --pairs ({args.pairs})")
    num_pairs = args.pairs // args.burst * args.burst

    plain = BlockAllocator(args.num_blocks, args.block_size)
    cached = make_cached_pool(args.num_blocks, args.block_size)
    keys = make_keys(2 * args.num_blocks, args.block_size)
    counter = [0]
    hits_pool = make_cached_pool(args.num_blocks, args.block_size)
    hit_keys = make_keys(args.num_blocks, args.block_size, offset=POOL_KEY_OFFSET)
    prompts = shared_prefix_prompts(args.num_seqs, args.seq_len, args.seed)
    calls = args.warmup + args.repeats
    cold = ManagerRuns(prompts, args.num_blocks, args.block_size, warm=False, calls=calls)
    warm = ManagerRuns(prompts, args.num_blocks, args.block_size, warm=True, calls=calls)
    log(f"allocator: {args.num_blocks} blocks of {args.block_size}, {num_pairs} pairs per repeat, burst {args.burst}")
    times = time_interleaved(
        {
            "plain": lambda: plain_pairs(plain, num_pairs, args.burst),
            "prefix_caching": lambda: prefix_pairs(cached, keys, num_pairs, args.burst, counter),
            "prefix_hits": lambda: prefix_hits(hits_pool, hit_keys, num_pairs),
            "block_manager_cold": cold,
            "block_manager_warm": warm,
        },
        repeats=args.repeats,
        warmup=args.warmup,
    )
    result = {
        "benchmark": "allocator",
        "pairs_per_s": num_pairs / times["plain"],
        "pairs_per_s_prefix_caching": num_pairs / times["prefix_caching"],
        "ns_per_pair": 1e9 * times["plain"] / num_pairs,
        "ns_per_pair_prefix_caching": 1e9 * times["prefix_caching"] / num_pairs,
        "prefix_hits_per_s": num_pairs / times["prefix_hits"],
        "block_manager_cold": cold.summary(times["block_manager_cold"], args.repeats),
        "block_manager_warm": warm.summary(times["block_manager_warm"], args.repeats),
        "goal_pairs_per_s": 500_000,
        "num_blocks": args.num_blocks,
        "block_size": args.block_size,
        "pairs_per_repeat": num_pairs,
        "burst": args.burst,
        "prefix_caching_pair": "allocate (evicts the LRU cached block) + cache_block + free",
        "prefix_hit": "lookup + incref (revives a cached free block) + free",
        "block_manager_workload": (
            f"{args.num_seqs} seqs x {args.seq_len} tokens, admit + prefill + free; every other prompt starts with "
            f"the same {args.seq_len // 2} tokens"
        ),
        "block_manager_cold_cache": "fresh BlockManager per repeat (empty prefix cache)",
        "block_manager_warm_cache": "one BlockManager holding every prompt from an untimed earlier pass",
        "hit_rate": "prompt tokens taken from the prefix cache / prompt tokens",
        "repeats": args.repeats,
        "warmup": args.warmup,
        "seed": args.seed,
        "load_avg_1m": os.getloadavg()[0],  # a shared machine: other processes slow every side alike
        **env_info(),
    }
    cold_row, warm_row = result["block_manager_cold"], result["block_manager_warm"]
    log(
        f"plain {result['pairs_per_s']:,.0f} pairs/s, prefix caching {result['pairs_per_s_prefix_caching']:,.0f} "
        f"pairs/s, {result['prefix_hits_per_s']:,.0f} hits/s, block manager cold {cold_row['seqs_per_s']:,.0f} "
        f"seqs/s (hits {cold_row['hit_rate']:.1%}), warm {warm_row['seqs_per_s']:,.0f} seqs/s "
        f"(hits {warm_row['hit_rate']:.1%})"
    )
    if args.save:
        log(f"saved {save('allocator', result)}")
    emit(result)


if __name__ == "__main__":
    main()
