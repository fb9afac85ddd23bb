"""Trace-driven serving simulation: static reservation (Max, Pow2, Oracle) vs paged KV blocks on the real engine.

Follows the vLLM paper's comparison (Kwon et al., SOSP 2023, §3 and Fig. 2): a *static* server reserves one
contiguous region of KV slots per request at admission — `max_model_len` (FasterTransformer), the next power
of two of its final length (Orca) or exactly its final length (the oracle) — first-fit in an arena; a *paged*
server takes fixed-size blocks from `engine.core.block_manager.BlockManager`, the block manager the engine
itself schedules with, only when a sequence crosses into a new block, and admits and preempts by the
scheduler's own rule (`engine.core.admission`). With `admission="unchecked"` a server admits blindly up to
`max_num_seqs`, so an allocation that does not fit is an OOM. The policies live in `lessons.sim.policies`,
the one loop that drives them and the `SimConfig` it runs under in `lessons.sim.loop`; the step time comes
from the roofline.

Memory terms per step (vLLM's): *stored* slots hold a live token; *reserved* slots are held for tokens the
request will still generate; *internal* slots will never be used (past the request's final length, or the
tail of its last block); *external* slots are free gaps the head of the queue cannot use; *free* is the rest.
The five always add up to the capacity. For a hybrid model's paged server a slot is one token of one KV-cache
group's layers, and a token takes one in every group that still holds it (`lessons.sim.group_blocks`). A page's
200-request trace runs in 20-30 ms per policy on one CPU core (a hybrid's about ten times that: every block
boundary and window step goes through the engine's `allocate_slots`).

Public API (the config is lessons.sim.loop.SimConfig):
    simulate(trace, config) -> SimResult             (lessons.sim.metrics: columns, events, requests, summary)
    simulate_model(trace, model, gpu, policy="paged", ...) -> SimResult   capacity and step time from the model
    make_policy(config)                             the lessons.sim.policies object a config runs
"""

from __future__ import annotations

from engine.memory.footprint import ServingFootprint, serving_footprint
from engine.memory.roofline import StepTimeModel
from engine.memory.specs import GpuSpec, ModelSpec
from engine.memory.startup import DEFAULT_BLOCK_SIZE, DEFAULT_GPU_MEMORY_UTILIZATION
from lessons.sim.group_blocks import GroupBlocks, sim_pool
from lessons.sim.loop import ServingLoop, SimConfig
from lessons.sim.metrics import SimResult
from lessons.sim.policies import RESERVATIONS, MemoryPolicy, PagedBlocks
from lessons.sim.traces import Request

__all__ = ["make_policy", "simulate", "simulate_model"]


def make_policy(config: SimConfig) -> MemoryPolicy:
    """The memory policy a config describes: PagedBlocks (GroupBlocks for a config with KV-cache groups), or the
    static reservation it names."""
    if config.policy == "paged":
        watermark = None if config.admission == "unchecked" else config.watermark
        if config.groups:  # a hybrid model: blocks per KV-cache group over one pool
            return GroupBlocks(config.capacity_tokens // config.block_size, config.block_size, config.groups, watermark)
        return PagedBlocks(config.capacity_tokens, config.block_size, watermark)
    return RESERVATIONS[config.reservation](config.capacity_tokens, config.max_model_len)


def simulate(trace: list[Request], config: SimConfig) -> SimResult:
    """Run the trace through the configured server until every request is finished, rejected or failed."""
    return ServingLoop(trace, config, make_policy(config)).run()


def simulate_model(
    trace: list[Request],
    model: ModelSpec | str,
    gpu: GpuSpec | str,
    policy: str = "paged",
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    max_model_len: int = 2048,
    max_num_seqs: int = 256,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    tensor_parallel: int = 1,
    reservation: str = "max_model_len",
    admission: str = "fcfs",
    footprint: ServingFootprint | None = None,
    kv_read_factor: float = 1.0,
) -> SimResult:
    """Simulate a model on a GPU: KV capacity from vLLM's memory arithmetic, step time from the roofline.

    Every policy gets the same KV bytes (the footprint's budget / bytes per token; for an MLA model the pool's
    num_blocks * block_size latents; for one with chunked-local or linear-state layers the token capacity vLLM
    reports for that budget), so a comparison between
    them is about how the memory is managed, not how much there is. A paged server for a full + sliding hybrid
    (gpt-oss, Gemma 3) holds the footprint's num_blocks blocks per KV-cache group instead
    (`lessons.sim.group_blocks`): its sliding groups give back the blocks that left their window; a static server
    for it keeps the token capacity. kv_read_factor > 1 makes each step's KV reads that much slower than the
    bandwidth roof (a kernel's measured cost, e.g. of small blocks).
    """
    fp = footprint or serving_footprint(
        model,
        gpu,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        block_size=block_size,
        tensor_parallel=tensor_parallel,
    )
    # A dense model's budget is simply bytes / bytes per token; an MLA model's, the pool's blocks of latents. A paged
    # full + sliding hybrid: the pool's blocks, per KV-cache group. Any other per-kind model (chunked-local, state)
    # holds what vLLM's "GPU KV cache size" line says at this max_model_len (engine/memory/kv_pool.py).
    capacity, groups = sim_pool(fp, policy)
    step_time = StepTimeModel.for_model(fp.model, fp.gpu, weight_dtype, kv_dtype, tensor_parallel, kv_read_factor)
    cfg = SimConfig(
        policy,
        capacity,
        block_size=block_size,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        reservation=reservation,
        admission=admission,
        step_time=step_time,
        groups=groups,
    )
    result = simulate(trace, cfg)
    result.extra.update(
        kv_bytes_per_token=fp.kv_bytes_per_token, kv_budget_bytes=fp.kv_budget_bytes, capacity_tokens=capacity
    )
    return result
