"""Memory model of an LLM server: weights, KV cache, activations and vLLM's start-up memory arithmetic.

This module is the one place a model's weight, KV and activation bytes and budget -> blocks are computed: its
per-token KV bytes come from `kv_bytes` (engine/memory/units.py, the formula the engine's `PagedKVCache` sizes
itself with too), and every KV budget becomes blocks through `kv_blocks_from_budget`. The arithmetic follows
the vLLM paper (Kwon et al., SOSP 2023, arXiv 2309.06180) and vLLM V1's start-up profiling
(engine/memory/startup.py: weights, the activation peak over ``max_num_batched_tokens``, non-torch memory and
CUDA graphs come off ``total * gpu_memory_utilization``, 0.92 by default; the rest becomes KV blocks). vllm#10517
(Llama-3.1-8B, RTX 3090: 3.81 GiB of KV = 1,952 blocks of 16 tokens at 128 KiB/token) is reproduced in the
tests. Models and GPUs come from engine/memory/catalog.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.sliding_window import kv_blocks_per_seq
from engine.memory import kv_pool
from engine.memory.catalog import resolve_gpu, resolve_model
from engine.memory.specs import GpuSpec, ModelSpec, param_parts
from engine.memory.startup import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    check_startup_args,
    default_max_num_batched_tokens,
    startup_error_text,
)
from engine.memory.units import GiB, dtype_bytes, kv_bytes
from kernels.validate import is_whole

# CUDA context, cuBLAS workspaces and allocator slack that vLLM reports as non-torch memory: vllm#10517 logs
# non_torch_memory=0.35GiB on one RTX 3090.
NON_TORCH_BYTES = int(0.35 * GiB)
# Tensor parallelism adds NCCL's buffers on every GPU, outside torch's allocator too: vLLM PR #10511's two start-up
# logs of Llama-3-8B on one 80 GB GPU show non_torch_memory 1.79 GiB at TP 1 and 3.58 GiB at TP 2. The difference is
# charged to every GPU for any TP > 1 (one pair of logs: an estimate).
NCCL_EXTRA_BYTES = int((3.58 - 1.79) * GiB)


def non_torch_bytes(tensor_parallel: int = 1) -> int:
    """Memory outside torch's allocator on each GPU: CUDA context and workspaces, plus NCCL's buffers under TP."""
    return NON_TORCH_BYTES + (NCCL_EXTRA_BYTES if tensor_parallel > 1 else 0)


def _check_tokens(name: str, value: object, minimum: int = 0, hint: str = "") -> int:
    """A token count: a whole number >= minimum (a bool or a float is not a count); returns it."""
    if not is_whole(value) or value < minimum:
        raise ValueError(f"{name}={value!r} must be a whole number of tokens >= {minimum}{hint}")
    return int(value)


def _check_tp(model: ModelSpec, tensor_parallel: int) -> None:
    if not is_whole(tensor_parallel) or tensor_parallel < 1:
        raise ValueError(f"tensor_parallel must be a positive integer, got {tensor_parallel!r}")
    if model.num_heads % tensor_parallel:
        raise ValueError(
            f"{model.name} has {model.num_heads} attention heads, not divisible by "
            f"tensor_parallel={tensor_parallel}; pick a divisor of {model.num_heads}"
        )


def embedding_params(model: ModelSpec | str) -> int:
    """Parameters of the token embedding and the lm_head (one matrix when the two are tied)."""
    m = resolve_model(model)
    return m.vocab_size * m.hidden_size * (1 if m.tie_word_embeddings else 2)


# Bytes per parameter of the quantized parts of a checkpoint, scales included: DeepSeek's block-wise fp8 is one byte
# per weight plus one fp32 scale per 128 x 128 tile (`weight_scale_inv`; exact when both dims are multiples of 128);
# MXFP4 is 4 bits per weight plus one 8-bit (E8M0) scale per 32 weights (OCP Microscaling spec v1.0).
FP8_BLOCK_BYTES = 1 + 4 / (128 * 128)
MXFP4_BYTES = 0.5 + 1 / 32


def shipped_weight_bytes(model: ModelSpec | str) -> int:
    """Bytes of the checkpoint's weights as shipped (`ModelSpec.weight_format`, from quantization_config).

    bf16: two bytes each. fp8_block (DeepSeek-V3, Kimi K2): every linear layer (attention projections, routed and
    shared experts, dense MLPs) in fp8 with its tile scales; the embeddings, router and norms in bf16. mxfp4
    (gpt-oss): the routed experts in MXFP4; attention, router and embeddings in bf16 (its `modules_to_not_convert`).
    """
    m = resolve_model(model)
    parts = param_parts(m)
    bf16 = dtype_bytes("bf16")
    if m.weight_format == "fp8_block":
        linear = parts["attention"] + parts["experts"] + parts["mlp"]
        return int(linear * FP8_BLOCK_BYTES + (parts["embeddings"] + parts["router"] + parts["norms"]) * bf16)
    if m.weight_format == "mxfp4":
        return int(parts["experts"] * MXFP4_BYTES + (sum(parts.values()) - parts["experts"]) * bf16)
    return int(m.num_params * bf16)


def weight_bytes(model: ModelSpec | str, dtype: str | float = "bf16", tensor_parallel: int = 1) -> int:
    """Bytes of weights on each GPU: parameters * bytes per parameter / tensor-parallel degree.

    dtype "auto" is the checkpoint as shipped (`shipped_weight_bytes`: fp8 for DeepSeek-V3, MXFP4 experts for
    gpt-oss, bf16 for the rest), vLLM's default for a quantized checkpoint.

    Quantized weights (fewer than 2 bytes per parameter) cover the linear layers only: the embedding and the
    lm_head stay in bf16. vLLM's `--quantization fp8` quantizes `LinearBase` and MoE layers and returns no
    method for `VocabParallelEmbedding` / `ParallelLMHead` (`Fp8Config.get_quant_method`,
    vllm/model_executor/layers/quantization/fp8.py).
    """
    m = resolve_model(model)
    _check_tp(m, tensor_parallel)
    if dtype == "auto" and m.weight_format != "bf16":
        return int(shipped_weight_bytes(m) / tensor_parallel)
    per_param = dtype_bytes(dtype)
    if per_param >= dtype_bytes("bf16"):
        return int(m.num_params * per_param / tensor_parallel)
    table = embedding_params(m)
    return int(((m.num_params - table) * per_param + table * dtype_bytes("bf16")) / tensor_parallel)


def kv_bytes_per_token(model: ModelSpec | str, kv_dtype: str | float = "bf16", tensor_parallel: int = 1) -> int:
    """KV bytes each further token adds on each GPU; KV heads split over TP and are replicated past num_kv_heads.

    Dense models: every layer's K and V. Per-kind models (`ModelSpec.layer_kinds`): what a token adds at long
    context, the layers that keep every token (full attention, MLA); an MLA latent is the same on every TP rank.
    """
    m = resolve_model(model)
    _check_tp(m, tensor_parallel)
    if m.layers:
        return m.kv_bytes_per_token(dtype_bytes(kv_dtype), tensor_parallel)
    heads_per_gpu = max(1, m.num_kv_heads // tensor_parallel)
    return kv_bytes(m.num_layers, heads_per_gpu, m.head_dim, dtype_bytes(kv_dtype))


def kv_cache_bytes(
    model: ModelSpec | str, num_tokens: int, kv_dtype: str | float = "bf16", tensor_parallel: int = 1
) -> int:
    """Bytes of KV cache for num_tokens tokens (summed over sequences) on each GPU: tokens * kv_bytes_per_token.

    For a hybrid model that is the long-context rate only; one request's bytes, windows and states included,
    are `engine.memory.kv_request_bytes`."""
    return _check_tokens("num_tokens", num_tokens) * kv_bytes_per_token(model, kv_dtype, tensor_parallel)


def activation_bytes(
    model: ModelSpec | str, num_batched_tokens: int, dtype: str | float = "bf16", tensor_parallel: int = 1
) -> int:
    """Peak activation memory of one forward pass over num_batched_tokens tokens (vLLM's profiling run).

    Per token, one layer's live tensors: the residual and normed hidden state (2h), q/k/v (sharded) and the
    gated MLP's gate, up and product (3 * intermediate, sharded). Layers run one after another, so the peak is
    one layer's worth. For Llama-3.1-8B this is 112 KiB/token, which matches the 9,000-token longer profile
    costing vllm#10517 about 0.93 GiB of KV (1952 -> 1478 blocks).
    """
    _check_tokens("num_batched_tokens", num_batched_tokens)
    m = resolve_model(model)
    _check_tp(m, tensor_parallel)
    qkv = (m.num_heads + 2 * m.num_kv_heads) * m.head_dim // tensor_parallel
    per_token = 2 * m.hidden_size + qkv + 3 * m.intermediate_size // tensor_parallel
    return int(num_batched_tokens * per_token * dtype_bytes(dtype))


def kv_blocks_from_budget(kv_budget_bytes: float, bytes_per_token: int, block_size: int = 16) -> int:
    """Whole KV blocks that fit a byte budget (never negative)."""
    if block_size < 1 or bytes_per_token < 1:
        raise ValueError(f"block_size and bytes_per_token must be positive, got {block_size}, {bytes_per_token}")
    return max(0, int(kv_budget_bytes // (bytes_per_token * block_size)))


def kv_budget_bytes(
    model: ModelSpec | str,
    capacity_bytes: int,
    used_bytes: int,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_num_batched_tokens: int = 2048,
    act_dtype: str | float = "bf16",
    tensor_parallel: int = 1,
    overhead_bytes: int = NON_TORCH_BYTES,
    cuda_graph_bytes: int = 0,
) -> int:
    """vLLM's start-up sizing: capacity * utilization - used - activation peak - non-torch - CUDA graphs (may be < 0).

    used_bytes is what already sits on the device before the KV cache: the weights (the calculator passes
    `weight_bytes`; the engine passes what the device reports in use, weights and other processes included).
    cuda_graph_bytes is vLLM's estimate of its CUDA graphs when it profiles them (0 otherwise).
    """
    _check_tokens("max_num_batched_tokens", max_num_batched_tokens, 1)
    acts = activation_bytes(model, max_num_batched_tokens, act_dtype, tensor_parallel)
    return int(capacity_bytes * gpu_memory_utilization) - used_bytes - acts - overhead_bytes - cuda_graph_bytes


@dataclass(frozen=True, slots=True)
class ServingFootprint:
    """Where one GPU's memory goes under a vLLM-style configuration, and what the KV pool can hold."""

    model: ModelSpec
    gpu: GpuSpec
    gpu_memory_utilization: float
    weights_bytes: int
    activation_bytes: int
    overhead_bytes: int
    other_process_bytes: int
    kv_budget_bytes: int
    kv_bytes_per_token: int
    naive_kv_bytes_per_token: int
    block_size: int
    num_blocks: int
    max_model_len: int
    max_num_batched_tokens: int
    tensor_parallel: int
    weight_dtype: str
    kv_dtype: str
    cuda_graph_bytes: int = 0
    total_bytes: int | None = None  # what CUDA reports as the device's total (None: the catalog's capacity)
    block_bytes: int | None = None  # one block id's bytes in the shared pool (None: block_size * kv_bytes_per_token)

    @property
    def pool_block_bytes(self) -> int:
        """Bytes one block id costs: every layer's page for a uniform model, the largest KV-cache group's for a
        hybrid (engine/memory/kv_pool.py)."""
        return self.block_size * self.kv_bytes_per_token if self.block_bytes is None else self.block_bytes

    @property
    def per_kind(self) -> bool:
        """Whether the model's layers are sized per KV kind (explicit layer kinds: hybrids, MLA, state)."""
        return bool(self.model.layers)

    def _request_blocks(self, context_len: int) -> int:
        return kv_pool.blocks_per_request(
            self.model, context_len, self.block_size, self.max_num_batched_tokens, self.kv_dtype, self.tensor_parallel
        )

    @property
    def capacity_bytes(self) -> int:
        """Total memory of one GPU as vLLM sees it: the total passed in, else the catalog's CUDA figure."""
        return self.gpu.total_bytes if self.total_bytes is None else self.total_bytes

    @property
    def kv_token_capacity(self) -> int:
        """Tokens the KV pool holds (all sequences together): num_blocks * block_size.

        Per-kind models: vLLM's "GPU KV cache size" line, int(max concurrency * max_model_len)
        (``get_kv_cache_capacity`` in vllm/v1/core/kv_cache_utils.py)."""
        if self.per_kind:
            return int(self.vllm_concurrency() * self.max_model_len)
        return self.num_blocks * self.block_size

    @property
    def startup_error(self) -> str | None:
        """The error vLLM V1 would raise at start-up with this configuration (its wording), or None."""
        if self.per_kind:  # vLLM checks the sum over groups of each group's admission cap
            per_seq = kv_pool.admission_blocks(
                self.model,
                self.max_model_len,
                self.block_size,
                self.max_num_batched_tokens,
                self.kv_dtype,
                self.tensor_parallel,
            )
        else:
            per_seq = kv_blocks_per_seq(
                self.max_model_len, self.block_size, self.model.sliding_window, self.max_num_batched_tokens
            )
        return startup_error_text(
            self.capacity_bytes,
            self.other_process_bytes,
            self.gpu_memory_utilization,
            self.num_blocks,
            self.block_size,
            self.kv_bytes_per_token,
            self.max_model_len,
            per_seq,
            self.block_bytes,
            self._longest_admissible() if self.per_kind else None,
        )

    def _longest_admissible(self) -> int:
        """The longest max_model_len whose admission blocks, summed over groups, fit the pool less its null block."""
        usable, lo, hi = self.num_blocks - 1, 0, self.max_model_len
        while lo < hi:
            mid = (lo + hi + 1) // 2
            fits = (
                kv_pool.admission_blocks(
                    self.model, mid, self.block_size, self.max_num_batched_tokens, self.kv_dtype, self.tensor_parallel
                )
                <= usable
            )
            lo, hi = (mid, hi) if fits else (lo, mid - 1)
        return lo

    def max_concurrency(self, context_len: int | None = None) -> int:
        """Sequences of context_len tokens (None: max_model_len) that fit at once, in whole blocks.

        A sliding-window model's sequence holds at most its window's blocks (`kv_blocks_per_seq`)."""
        length = self._context_len(context_len)
        if self.per_kind:
            return self.num_blocks // self._request_blocks(length)
        per_seq = kv_blocks_per_seq(length, self.block_size, self.model.sliding_window, self.max_num_batched_tokens)
        return self.num_blocks // per_seq

    def vllm_concurrency(self, context_len: int | None = None) -> float:
        """vLLM's log figure "Maximum concurrency for N tokens per request: X.XXx" (tokens / N).

        Per-kind models follow ``get_max_concurrency_for_kv_cache_config``: the pool's blocks over the sum of each
        KV-cache group's admission cap for one N-token request."""
        if self.per_kind:
            return kv_pool.max_concurrency(
                self.model,
                self.num_blocks,
                self._context_len(context_len),
                self.block_size,
                self.max_num_batched_tokens,
                self.kv_dtype,
                self.tensor_parallel,
            )
        return self.num_blocks * self.block_size / self._context_len(context_len)

    def _context_len(self, context_len: int | None) -> int:
        if context_len is None:
            return self.max_model_len
        return _check_tokens("context_len", context_len, 1, " (None means max_model_len)")

    def max_context(self, concurrency: int) -> int:
        """Longest context each of `concurrency` simultaneous sequences can reach (whole blocks each)."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be a positive integer, got {concurrency}")
        if self.per_kind:  # the longest context whose blocks, summed over groups, fit each share of the pool
            share, lo, hi = self.num_blocks // concurrency, 0, 1 << 40
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if self._request_blocks(mid) <= share else (lo, mid - 1)
            return lo
        return (self.num_blocks // concurrency) * self.block_size

    def breakdown(self) -> list[dict[str, float | str]]:
        """Rows (part, bytes, GiB) adding up to the capacity; the last is negative ("over capacity") if oversold."""
        kv_used = self.num_blocks * self.pool_block_bytes
        parts = [
            ("weights", self.weights_bytes),
            ("activations (profiled peak)", self.activation_bytes),
            ("CUDA context / non-torch", self.overhead_bytes),
            ("CUDA graphs", self.cuda_graph_bytes),
            ("KV cache", kv_used),
            ("other processes", self.other_process_bytes),
        ]
        rest = self.capacity_bytes - sum(b for _, b in parts)
        parts.append(("unallocated (1 - utilization)" if rest >= 0 else "over capacity", rest))
        return [{"part": p, "bytes": float(b), "GiB": b / GiB} for p, b in parts]


def serving_footprint(
    model: ModelSpec | str,
    gpu: GpuSpec | str,
    *,
    weight_dtype: str = "auto",
    kv_dtype: str = "bf16",
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_model_len: int | None = None,
    max_num_batched_tokens: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    tensor_parallel: int = 1,
    other_process_bytes: int = 0,
    overhead_bytes: int | None = None,
    cuda_graph_bytes: int = 0,
    kv_cache_memory_bytes: int | None = None,
    total_bytes: int | None = None,
) -> ServingFootprint:
    """vLLM V1's start-up arithmetic: KV blocks = (total * util - weights - activations - non-torch - graphs) / block.

    weight_dtype "auto" (the default) sizes the checkpoint as shipped (`shipped_weight_bytes`; bf16 for a bf16
    checkpoint). max_model_len defaults to the model's max context; max_num_batched_tokens to V1's `vllm serve`
    default (with
    chunked prefill, on by default, the activation peak does not depend on max_model_len; without it pass
    `startup.token_budget(..., enable_chunked_prefill=False)`, at least max_model_len). cuda_graph_bytes: vLLM's
    CUDA-graph estimate when it profiles graphs. kv_cache_memory_bytes, when set, is the KV size itself (vLLM's
    --kv-cache-memory-bytes). total_bytes: the device total CUDA reports (None: the catalog's CUDA figure).
    overhead_bytes: non-torch memory per GPU (None: `non_torch_bytes(tensor_parallel)`, NCCL's buffers included).
    """
    m, g = resolve_model(model), resolve_gpu(gpu)
    if overhead_bytes is None:
        overhead_bytes = non_torch_bytes(tensor_parallel) if isinstance(tensor_parallel, int) else NON_TORCH_BYTES
    check_startup_args(
        gpu_memory_utilization,
        block_size,
        other_process_bytes,
        overhead_bytes,
        cuda_graph_bytes,
        kv_cache_memory_bytes,
        total_bytes,
    )
    max_model_len = m.max_context if max_model_len is None else max_model_len
    if max_model_len < 1:
        raise ValueError(f"max_model_len must be a positive integer, got {max_model_len}")
    if max_num_batched_tokens is None:
        max_num_batched_tokens = default_max_num_batched_tokens(g)
    _check_tokens("max_num_batched_tokens", max_num_batched_tokens, 1, " (None picks vLLM's default)")
    weights = weight_bytes(m, weight_dtype, tensor_parallel)
    acts = activation_bytes(m, max_num_batched_tokens, "bf16", tensor_parallel)
    per_token = kv_bytes_per_token(m, kv_dtype, tensor_parallel)
    block_bytes = kv_pool.pool_bytes_per_block(m, kv_dtype, block_size, tensor_parallel) if m.layers else None
    total = g.total_bytes if total_bytes is None else total_bytes
    budget = (
        kv_cache_memory_bytes
        if kv_cache_memory_bytes is not None
        else kv_budget_bytes(
            m,
            total,
            weights,
            gpu_memory_utilization,
            max_num_batched_tokens,
            "bf16",
            tensor_parallel,
            overhead_bytes,
            cuda_graph_bytes,
        )
    )
    return ServingFootprint(
        model=m,
        gpu=g,
        gpu_memory_utilization=gpu_memory_utilization,
        weights_bytes=weights,
        activation_bytes=acts,
        overhead_bytes=overhead_bytes,
        other_process_bytes=other_process_bytes,
        kv_budget_bytes=budget,
        kv_bytes_per_token=per_token,
        naive_kv_bytes_per_token=m.kv_bytes_per_token_mha(dtype_bytes(kv_dtype)),
        block_size=block_size,
        num_blocks=(
            kv_blocks_from_budget(budget, per_token, block_size)
            if block_bytes is None
            else max(0, int(budget // block_bytes))
        ),
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
        tensor_parallel=tensor_parallel,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        cuda_graph_bytes=cuda_graph_bytes,
        total_bytes=total_bytes,
        block_bytes=block_bytes,
    )
