"""The serving engine's bookkeeping, in plain Python (no torch): requests, blocks and the scheduler.

sequence.py (one request's tokens, counters and block table), block_allocator.py (the pool of physical
blocks, reference counts, prefix-cache hashes), block_manager.py (block tables per sequence: one
`allocate_slots` call per step for prefix hits, copy-on-write and growth), block_usage.py (what the pool
holds, as the lessons draw it), sliding_window.py (which blocks a windowed sequence still needs, and how
many it can hold), admission.py (the admission / preemption rule the scheduler and the simulator share) and
scheduler.py (who runs each step).
"""
