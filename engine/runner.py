"""ModelRunner: one engine step on the model - the step's inputs, one forward pass, the sampled tokens.

The scheduler (engine/core/scheduler.py) decides which sequences run and how many tokens each computes.
`ModelRunner.run` turns that `SchedulerOutput` into the packed input ids and one `ForwardMeta`
(engine/forward_meta.py), applies the step's copy-on-write block copies to the paged KV cache, runs the
model once over the whole batch (engine/model/llama.py) and samples a next token for every sequence whose
step reached the end of its tokens (engine/sampling.py). It keeps no per-request state: each sequence
carries its own sampling parameters and RNG. The kernel backend is resolved once, before the runner is
built, and travels to the kernels in every step's ForwardMeta. Follows nano-vllm's `model_runner.py`.

The runner also owns the paged KV cache, sized here through the memory model (engine/memory/footprint.py,
the one place for KV bytes per token, the activation reserve and budget -> blocks): on CUDA,
`gpu_memory_utilization` of the device's memory minus what is already in use (weights, other processes),
one step's activation peak and `CUDA_OVERHEAD_BYTES`; on CPU, `CPU_KV_BUDGET_BYTES`. Either is capped at
what `max_num_seqs` sequences of `max_model_len` tokens can use (for a sliding-window model, of the blocks
one sequence can hold at most: `engine.memory.window.kv_blocks_per_seq`). The cache's element type is
the model's dtype or fp8 (`kv_cache_dtype`, engine/core/kv_cache.py); an fp8 cache's per-layer scales
travel to the model beside the K/V tensors.
"""

from __future__ import annotations

import torch

from engine.core.kv_cache import PagedKVCache
from engine.core.scheduler import ScheduledSequence, SchedulerOutput
from engine.forward_meta import ForwardMeta
from engine.memory import ModelSpec, kv_blocks_from_budget, kv_budget_bytes, kv_bytes_per_token, model_from_config
from engine.memory.window import kv_blocks_per_seq
from engine.model.config import ModelConfig
from engine.model.llama import CausalLM
from engine.sampling import sample

CPU_KV_BUDGET_BYTES = 256 * 2**20  # documented CPU default: small enough for a laptop, plenty for tiny models
# On CUDA, beyond the activation peak: allocator slack plus one step's fp32 logits and sampler temporaries
# (the CUDA context and the weights are already counted in the memory the device reports in use).
CUDA_OVERHEAD_BYTES = 256 * 2**20
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(device: torch.device | str | None) -> torch.device:
    """The engine's device: CUDA when present for None; a CUDA device that is not there is a ValueError."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device={device!r} is not a torch device; use 'cpu', 'cuda' or 'cuda:N'") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device={device!r} but torch sees no CUDA device (torch.cuda.is_available() is False: no GPU, or "
                "a CPU-only torch build); use device='cpu', or device=None to pick the CPU"
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ValueError(f"device={device!r} but only {count} CUDA device(s) are visible: cuda:0..cuda:{count - 1}")
    return dev


def parse_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    """The model dtype an LLM was asked for: a torch.dtype, one of DTYPES' names, or None (the checkpoint's)."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {', '.join(DTYPES)} or a torch.dtype")
    return DTYPES[dtype]


def model_spec(config: ModelConfig) -> ModelSpec:
    """The memory model's description of a loaded model, from its config."""
    return model_from_config(config.to_hf(), name=config.architecture, source="the loaded model's config.json")


def auto_num_blocks(
    spec: ModelSpec,
    element_size: int,
    block_size: int,
    device: torch.device,
    max_model_len: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    gpu_memory_utilization: float,
) -> int:
    """KV blocks for a cache of `element_size`-byte elements: the device's budget, capped by the batch limits."""
    per_token = kv_bytes_per_token(spec, element_size)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        budget = kv_budget_bytes(
            spec,
            total,
            total - free,
            gpu_memory_utilization,
            max_num_batched_tokens,
            element_size,
            1,
            CUDA_OVERHEAD_BYTES,
        )
    else:
        budget = CPU_KV_BUDGET_BYTES
    # More than max_num_seqs full-length sequences can never be resident at once; a bigger pool would only
    # cost memory and make every allocator snapshot the playground draws longer.
    per_seq = max_model_len
    if spec.sliding_window is not None:  # a windowed sequence never holds more than its window's blocks
        per_seq = kv_blocks_per_seq(max_model_len, block_size, spec.sliding_window, max_num_batched_tokens) * block_size
    budget = min(budget, max_num_seqs * per_seq * per_token)
    num_blocks = kv_blocks_from_budget(budget, per_token, block_size)
    if num_blocks < 1:
        raise ValueError(
            f"no memory left for the KV cache (budget {budget} bytes, one block is {per_token * block_size} "
            "bytes); raise gpu_memory_utilization, use a smaller model, or pass num_gpu_blocks"
        )
    return num_blocks


class ModelRunner:
    """Runs scheduled steps of one model over its own paged KV cache."""

    def __init__(
        self,
        model: CausalLM,
        num_blocks: int,
        block_size: int,
        device: torch.device,
        backend: str,
        kv_dtype: torch.dtype | None = None,
    ) -> None:
        """backend: an already resolved kernels backend ("torch" or "triton") for `device`; kv_dtype: the cache's
        element type (None: the model's dtype; torch.float8_e4m3fn for an fp8 cache)."""
        cfg = model.config
        self.model = model
        self.device = device
        self.backend = backend
        self.block_size = block_size
        self.kv_cache = PagedKVCache(
            cfg.num_hidden_layers,
            num_blocks,
            block_size,
            cfg.num_key_value_heads,
            cfg.head_dim,
            dtype=kv_dtype or model.lm_head.weight.dtype,
            device=device,
        )

    def prepare(self, scheduled: list[ScheduledSequence]) -> tuple[torch.Tensor, ForwardMeta]:
        """The step's packed input ids [T] and its ForwardMeta."""
        input_ids = [token for s in scheduled for token in s.token_ids]
        meta = ForwardMeta.build(
            [s.num_new_tokens for s in scheduled],
            [s.num_computed_tokens for s in scheduled],
            [s.seq.block_table for s in scheduled],
            self.block_size,
            self.device,
            self.backend,
        )
        return torch.tensor(input_ids, device=self.device), meta

    def run(self, out: SchedulerOutput) -> list[int | None]:
        """Run one scheduled step; returns each scheduled sequence's sampled token (None after a partial chunk)."""
        self.kv_cache.copy_blocks(out.copies)
        input_ids, meta = self.prepare(out.scheduled)
        logits = self.model(input_ids, meta, self.kv_cache.kv_caches, self.kv_cache.kv_scales)  # [S, vocab]
        return self.sample(out.scheduled, logits)

    def sample(self, scheduled: list[ScheduledSequence], logits: torch.Tensor) -> list[int | None]:
        """Tokens from logits [S, vocab] for the sequences whose step reached their last token, None elsewhere."""
        rows = [i for i, s in enumerate(scheduled) if s.samples]
        sampled: list[int | None] = [None] * len(scheduled)
        if rows:
            seqs = [scheduled[i].seq for i in rows]
            tokens = sample(logits[rows], [s.sampling_params for s in seqs], [s.generator for s in seqs])
            for i, token in zip(rows, tokens, strict=True):
                sampled[i] = token
        return sampled
