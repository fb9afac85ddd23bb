"""Runtime state of the serving engine: requests, blocks and the scheduler.

sequence.py (one request's tokens, counters and block table), block_allocator.py (the pool of physical
blocks, reference counts, prefix-cache hashes), block_manager.py (block tables per sequence, prefix hits,
copy-on-write), kv_cache.py (the paged K/V tensors and slot arithmetic), scheduler.py (who runs each step)
and admission.py (the admission / preemption rule the scheduler and the simulator share).
"""
