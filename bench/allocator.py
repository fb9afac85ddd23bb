"""Block allocator throughput: allocate + free pairs per second through the public BlockAllocator API.

The trace-driven simulator replays long serving traces through this allocator, so it must stay cheap in
CPython. Four workloads on a pool of `--num-blocks` blocks, timed interleaved (A, B, A, B, ...):
- plain: bursts of `--burst` allocate() calls, then free() of each block (prefix caching off);
- prefix_caching: every block in the pool starts cached and unreferenced, so each allocate() evicts the
  least recently freed cached block; each pair also registers the new block's hash (cache_block), so
  the freed block is cached again and the pool stays full of cached blocks;
- prefix_hits: lookup of a cached block + incref (reviving it from the free pool) + free;
- block_manager: admit and free whole sequences through BlockManager (prompt of `--seq-len` tokens,
  prefix caching on, half of the prompts share their first blocks) to show the per-sequence cost.

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


def manager_sequences(manager: BlockManager, prompts: list[list[int]], block_size: int) -> None:
    """Admit a batch of sequences, then free them all (their full blocks stay cached)."""
    seqs = [Sequence(i, p, block_size=block_size) for i, p in enumerate(prompts)]
    for seq in seqs:
        manager.allocate_sequence(seq)
        seq.num_computed_tokens = seq.num_tokens
    for seq in seqs:
        manager.free_sequence(seq)


def main() -> None:
    """Time the three workloads interleaved and print one JSON line."""
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
    rng = random.Random(args.seed)
    shared = [rng.randrange(50_000) for _ in range(args.seq_len // 2)]
    prompts = [
        (shared if i % 2 == 0 else [])
        + [rng.randrange(50_000) for _ in range(args.seq_len - (len(shared) if i % 2 == 0 else 0))]
        for i in range(args.num_seqs)
    ]
    manager = BlockManager(args.num_blocks, args.block_size, enable_prefix_caching=True)
    log(f"allocator: {args.num_blocks} blocks of {args.block_size}, {num_pairs} pairs per repeat, burst {args.burst}")
    times = time_interleaved(
        {
            "plain": lambda: plain_pairs(plain, num_pairs, args.burst),
            "prefix_caching": lambda: prefix_pairs(cached, keys, num_pairs, args.burst, counter),
            "prefix_hits": lambda: prefix_hits(hits_pool, hit_keys, num_pairs),
            "block_manager": lambda: manager_sequences(manager, prompts, args.block_size),
        },
        repeats=args.repeats,
        warmup=args.warmup,
    )
    blocks_per_seq = -(-args.seq_len // args.block_size)
    result = {
        "benchmark": "allocator",
        "pairs_per_s": num_pairs / times["plain"],
        "pairs_per_s_prefix_caching": num_pairs / times["prefix_caching"],
        "ns_per_pair": 1e9 * times["plain"] / num_pairs,
        "ns_per_pair_prefix_caching": 1e9 * times["prefix_caching"] / num_pairs,
        "prefix_hits_per_s": num_pairs / times["prefix_hits"],
        "block_manager_seqs_per_s": args.num_seqs / times["block_manager"],
        "block_manager_blocks_per_s": args.num_seqs * blocks_per_seq / times["block_manager"],
        "goal_pairs_per_s": 500_000,
        "num_blocks": args.num_blocks,
        "block_size": args.block_size,
        "pairs_per_repeat": num_pairs,
        "burst": args.burst,
        "prefix_caching_pair": "allocate (evicts the LRU cached block) + cache_block + free",
        "prefix_hit": "lookup + incref (revives a cached free block) + free",
        "block_manager_workload": f"{args.num_seqs} seqs x {args.seq_len} tokens, half share {len(shared)} tokens",
        "repeats": args.repeats,
        "warmup": args.warmup,
        "seed": args.seed,
        "load_avg_1m": os.getloadavg()[0],  # a shared machine: other processes slow every side alike
        **env_info(),
    }
    log(
        f"plain {result['pairs_per_s']:,.0f} pairs/s, prefix caching {result['pairs_per_s_prefix_caching']:,.0f} "
        f"pairs/s, {result['prefix_hits_per_s']:,.0f} hits/s, "
        f"block manager {result['block_manager_seqs_per_s']:,.0f} seqs/s"
    )
    if args.save:
        log(f"saved {save('allocator', result)}")
    emit(result)


if __name__ == "__main__":
    main()
