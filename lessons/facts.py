"""The course's vLLM facts as data, and the checker that reads them in vLLM's released source.

Each `Fact` is one claim the course makes about vLLM (a default, a metric name, a log line, an allocation rule),
the file of vLLM's source tree that shows it, and a regular expression that must be found there
(``re.search(pattern, text, re.MULTILINE)``; a pattern that spans lines says so with ``(?s)``). An ``absent`` fact
holds when the pattern is NOT found (a metric vLLM removed). Where the course has the number as a Python constant,
the pattern is built from that constant, so the number a page shows and the number checked are one value: if
either side drifts, the fact fails.

    python -m lessons.facts --wheel vllm-0.34.0-....whl     # a wheel on disk (read as a zip, nothing installed)
    python -m lessons.facts --version 0.34.0                # fetch that wheel with pip first (no install)
    python -m lessons.facts --source DIR                    # an unpacked tree, e.g. a git checkout
    python -m lessons.facts --version 0.20.0 --history      # the "since vX" facts (`HISTORY`) instead

It prints one line per fact and a summary, and exits 1 when a fact fails, 2 when the source cannot be read
(docs/VLLM_FACTS.md: how to re-run it for a new release and what to do with a failure).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.memory import extensible
from engine.memory.catalog import GPUS
from engine.memory.startup import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    cudagraph_capture_sizes,
    default_max_num_batched_tokens,
    default_max_num_seqs,
)
from lessons.diagnosis import metrics
from lessons.vllm_source import SourceError, VllmSource, open_source

STATED_RELEASE = "0.34.0"  # the vLLM release the course states ("vLLM v0.34.0" in every Sources list)

# The pip command `--version` runs (tests point it at a fake); pip is told to fetch the one wheel, not install it.
PIP_COMMAND: tuple[str, ...] = (sys.executable, "-m", "pip")


@dataclass(frozen=True)
class Fact:
    """One claim the course makes about vLLM, and what vLLM's source must show for it to hold."""

    key: str  # stable id, snake_case, unique
    claim: str  # the claim as the course states it (plain text)
    path: str  # file in vLLM's source tree, "vllm/config/cache.py"
    pattern: str  # re.search(pattern, text, re.MULTILINE) must match; (?s) in the pattern where it spans lines
    where: str  # the course's files that state it
    absent: bool = False  # True: the pattern must NOT be found (e.g. a removed metric name)


@dataclass(frozen=True)
class HistoryFact:
    """A "since vX" fact: it must hold at release `since` and fail at `before`, the release just before it.

    These are checked only at those two releases (``--history``): later releases may spell the same default
    differently, which says nothing about when it arrived.
    """

    fact: Fact
    since: str
    before: str


@dataclass(frozen=True)
class Result:
    fact: Fact
    holds: bool
    why: str  # on a failure: what was missing; empty when the fact holds


def _num(value: float | int) -> str:
    """A course number as it appears in vLLM's source, escaped for a pattern (0.92 -> 0\\.92)."""
    return re.escape(str(value))


def _metric(name: str) -> str:
    """The Prometheus name vLLM registers (a counter's exported `_total` suffix is added by the client)."""
    return rf'name="{re.escape(name.removesuffix("_total"))}"'


_LARGE_GPU, _HUGE_GPU, _SMALL_GPU = GPUS["h100-sxm"], GPUS["b200"], GPUS["l4"]  # one GPU of each default tier
_MAX_CAPTURE = cudagraph_capture_sizes(max_num_seqs=1024, max_num_batched_tokens=16384)[-1]  # the largest graph

FACTS: tuple[Fact, ...] = (
    # --- defaults (CacheConfig, SchedulerConfig, EngineArgs, envs) ---
    Fact(
        key="gpu_memory_utilization_default",
        claim=f"vLLM's default gpu_memory_utilization is {DEFAULT_GPU_MEMORY_UTILIZATION} when it sizes the KV cache "
        "from its profile",
        path="vllm/config/cache.py",
        pattern=rf"DEFAULT_GPU_MEMORY_UTILIZATION: ClassVar\[float\] = {_num(DEFAULT_GPU_MEMORY_UTILIZATION)}$",
        where="engine/memory/startup.py, engine/config.py, lessons/diagnosis.md, lessons/quizzes.json",
    ),
    Fact(
        key="gpu_memory_utilization_resolved",
        claim="an unset gpu_memory_utilization resolves to 1.0 with the extensible KV cache and to the 0.92 default "
        "otherwise",
        path="vllm/config/cache.py",
        pattern=r"(?s)def resolved_gpu_memory_utilization\(self\) -> float:.{0,200}?"
        r"if self\.enable_extensible_kv_cache:\s+return 1\.0\s+return self\.DEFAULT_GPU_MEMORY_UTILIZATION",
        where="engine/memory/startup.py",
    ),
    Fact(
        key="extensible_kv_cache_default",
        claim="the extensible KV cache (sized from the memory free after CUDA graph capture) is on by default on "
        "CUDA and ROCm",
        path="vllm/config/cache.py",
        pattern=r"unspecified, enabled on CUDA and ROCm unless kv_cache_memory_bytes is set",
        where="engine/memory/startup.py",
    ),
    Fact(
        key="block_size_default",
        claim=f"vLLM's default KV-cache block size is {DEFAULT_BLOCK_SIZE} tokens",
        path="vllm/config/cache.py",
        pattern=rf"DEFAULT_BLOCK_SIZE: ClassVar\[int\] = {DEFAULT_BLOCK_SIZE}$",
        where="engine/memory/startup.py, lessons/diagnosis/scenarios.py, lessons/paged.md, pages/5_paged_attention.py",
    ),
    Fact(
        key="block_size_flash_attention_keeps_default",
        claim="FlashAttention on NVIDIA GPUs takes any multiple of 16, so it keeps the default block size",
        path="vllm/v1/attention/backends/flash_attn.py",
        pattern=r"(?s)def get_supported_kernel_block_sizes\(.{0,600}?return \[MultipleOf\(16\)\]",
        where="engine/memory/startup.py, lessons/paged.md",
    ),
    Fact(
        key="extensible_unset_utilization",
        claim=f"with the extensible KV cache an unset gpu_memory_utilization is {extensible.UNSET_UTILIZATION}",
        path="vllm/config/cache.py",
        pattern=rf"if self\.enable_extensible_kv_cache:\s+return {_num(extensible.UNSET_UTILIZATION)}",
        where="engine/memory/extensible.py",
    ),
    Fact(
        key="extensible_margin",
        claim=f"the measured KV cache keeps a margin of max({extensible.MARGIN_FLOOR_BYTES['cuda'] >> 30} GiB "
        f"({extensible.MARGIN_FLOOR_BYTES['rocm'] >> 30} on ROCm), {extensible.MARGIN_FRACTION} x the transient "
        "peak) free, and the transient peak itself",
        path="vllm/v1/worker/extensible_kv_cache.py",
        pattern=rf"(?s)KV_CACHE_MARGIN_FLOOR_BYTES = \({extensible.MARGIN_FLOOR_BYTES['rocm'] >> 30} if "
        rf"current_platform\.is_rocm\(\) else {extensible.MARGIN_FLOOR_BYTES['cuda'] >> 30}\) << 30\s+"
        rf"KV_CACHE_MARGIN_FRACTION = {_num(extensible.MARGIN_FRACTION)}$"
        r".*available = min\(requested_memory - non_kv_used, headroom - margin\)\s+"
        r"available -= max\(transient_peak_bytes, torch_reserve_growth_bytes\)",
        where="engine/memory/extensible.py",
    ),
    Fact(
        key="extensible_non_torch_reserve",
        claim="after sizing, torch's allocator is capped to leave 0.5 GiB (1 GiB on ROCm) for memory outside it",
        path="vllm/v1/worker/extensible_kv_cache.py",
        pattern=r"KV_CACHE_NON_TORCH_RESERVE_BYTES = \(2 if current_platform\.is_rocm\(\) else 1\) << 29",
        where="engine/memory/extensible.py",
    ),
    Fact(
        key="extensible_peak_seeded_with_graphs",
        claim="the kept-free transient peak starts as the profiled activation peak plus the CUDA graphs' estimate",
        path="vllm/v1/worker/gpu_worker.py",
        pattern=r"(?s)self\.peak_activation_memory = \(\s+profile_result\.transient_peak_headroom \+ "
        r"cudagraph_memory_estimate\s+\).*kv_cache\.reserved_headroom_bytes = getattr\(\s+self, "
        r"\"peak_activation_memory\", 0\s+\)",
        where="engine/memory/extensible.py",
    ),
    Fact(
        key="extensible_log_lines",
        claim="the measured sizing logs 'Memory after warmup: ...' and 'Extended KV cache to N blocks (X GiB).'",
        path="vllm/v1/worker/extensible_kv_cache.py",
        pattern=r"(?s)\"Extended KV cache to %d blocks \(%\.2f GiB\)\.\".*"
        r"\"Memory after warmup: %s GiB free, %s GiB committed to the KV cache, \"",
        where="engine/memory/extensible.py",
    ),
    Fact(
        key="extensible_utilization_warning",
        claim="a gpu_memory_utilization set between 0.7 and 1.0 that keeps at least 1 GiB out of the measured cache "
        "is warned about",
        path="vllm/v1/worker/extensible_kv_cache.py",
        pattern=r"(?s)if utilization is not None and 0\.7 < utilization < 1\.0:.{0,400}?if withheld >= 1 << 30:",
        where="engine/memory/extensible.py",
    ),
    Fact(
        key="block_size_backend_preference",
        claim="the attention backend may replace the default block size with one it prefers, unless --block-size "
        "is given",
        path="vllm/platforms/interface.py",
        pattern=r"(?s)if not cache_config\.user_specified_block_size:\s+preferred = "
        r"cls\._preferred_block_size_for_backends\(",
        where="lessons/paged.md",
    ),
    Fact(
        key="prefix_caching_default_on",
        claim="prefix caching is on by default",
        path="vllm/config/cache.py",
        pattern=r"^\s+enable_prefix_caching: bool = True$",
        where="lessons/quizzes.json, lessons/paged.md",
    ),
    Fact(
        key="chunked_prefill_default_on",
        claim="chunked prefill is on by default, so the token budget, not max_model_len, sets the profiled peak",
        path="vllm/config/scheduler.py",
        pattern=r"^\s+enable_chunked_prefill: bool = True$",
        where="engine/memory/startup.py",
    ),
    Fact(
        key="no_chunked_prefill_budget",
        claim="without chunked prefill the token budget is raised to at least max_model_len",
        path="vllm/engine/arg_utils.py",
        pattern=r"if not self\.enable_chunked_prefill:\s+#[^\n]*\s+self\.max_num_batched_tokens = max\(\s+"
        r"model_config\.max_model_len,\s+self\.max_num_batched_tokens,",
        where="engine/memory/startup.py (token_budget)",
    ),
    Fact(
        key="async_scheduling_default_on",
        claim="async scheduling is on by default where it is supported",
        path="vllm/config/vllm.py",
        pattern=r"(?s)elif self\.scheduler_config\.async_scheduling is None:.{0,2000}?"
        r"self\.scheduler_config\.async_scheduling = True",
        where="engine/memory/layers.py",
    ),
    Fact(
        key="async_scheduling_two_batches",
        claim="async scheduling keeps two batches in flight (max_concurrent_batches = pipeline stages + 1)",
        path="vllm/config/vllm.py",
        pattern=r"if self\.scheduler_config\.async_scheduling:\s+return pp_size \+ 1",
        where="engine/memory/layers.py",
    ),
    Fact(
        key="max_in_flight_tokens",
        claim="tokens in flight = max_concurrent_batches * max_num_batched_tokens",
        path="vllm/config/vllm.py",
        pattern=r"self\.max_concurrent_batches \* self\.scheduler_config\.max_num_batched_tokens",
        where="engine/memory/layers.py, engine/memory/kv_pool.py",
    ),
    Fact(
        key="watermark_default",
        claim="admission keeps no watermark of free blocks by default (watermark 0.0)",
        path="vllm/config/scheduler.py",
        pattern=r"watermark: float = Field\(default=0\.0,",
        where="lessons/diagnosis/metrics.py (KV_FULL), engine/core/scheduler.py",
    ),
    Fact(
        key="scheduler_reserve_full_isl_default",
        claim="the scheduler reserves a prompt's full length before admitting it (scheduler_reserve_full_isl on)",
        path="vllm/config/scheduler.py",
        pattern=r"^\s+scheduler_reserve_full_isl: bool = True$",
        where="engine/core/admission.py",
    ),
    Fact(
        key="batch_defaults_large_gpu",
        claim=f"vllm serve on a >= 70 GiB GPU that is not an A100: max_num_batched_tokens "
        f"{default_max_num_batched_tokens(_LARGE_GPU)}, max_num_seqs {default_max_num_seqs(_LARGE_GPU)}",
        path="vllm/engine/arg_utils.py",
        pattern=r'(?s)device_memory >= 70 \* GiB_bytes\s+and "a100" not in device_name.{0,300}?'
        rf"UsageContext\.OPENAI_API_SERVER: {default_max_num_batched_tokens(_LARGE_GPU)},.{{0,200}}?"
        rf"UsageContext\.OPENAI_API_SERVER: {default_max_num_seqs(_LARGE_GPU)},",
        where="engine/memory/startup.py",
    ),
    Fact(
        key="batch_defaults_huge_gpu",
        claim=f"vllm serve on a >= 160 GiB GPU (B200): max_num_batched_tokens "
        f"{default_max_num_batched_tokens(_HUGE_GPU)}, max_num_seqs {default_max_num_seqs(_HUGE_GPU)}",
        path="vllm/engine/arg_utils.py",
        pattern=r"(?s)if device_memory >= 160 \* GiB_bytes:.{0,200}?"
        rf"UsageContext\.OPENAI_API_SERVER: {default_max_num_batched_tokens(_HUGE_GPU)},.{{0,200}}?"
        rf"UsageContext\.OPENAI_API_SERVER: {default_max_num_seqs(_HUGE_GPU)},",
        where="engine/memory/startup.py",
    ),
    Fact(
        key="batch_defaults_small_gpu",
        claim=f"vllm serve on smaller GPUs (and A100s): max_num_batched_tokens "
        f"{default_max_num_batched_tokens(_SMALL_GPU)}, max_num_seqs {default_max_num_seqs(_SMALL_GPU)}",
        path="vllm/engine/arg_utils.py",
        pattern=r"(?s)# TODO\(woosuk\): Tune the default values for other hardware\..{0,200}?"
        rf"UsageContext\.OPENAI_API_SERVER: {default_max_num_batched_tokens(_SMALL_GPU)},.{{0,200}}?"
        rf"UsageContext\.OPENAI_API_SERVER: {default_max_num_seqs(_SMALL_GPU)},",
        where="engine/memory/startup.py, lessons/diagnosis/metrics.py, engine/memory/layers.py",
    ),
    Fact(
        key="cudagraph_capture_sizes_rule",
        claim="CUDA graphs are captured for 1, 2, 4, then every 8 up to 256, then every 16",
        path="vllm/config/vllm.py",
        pattern=r"cudagraph_capture_sizes = \[1, 2, 4\] \+ list\(range\(8, 256, 8\)\) \+ list\(\s*"
        r"range\(256, max_graph_size \+ 1, 16\)\)",
        where="engine/memory/startup.py",
    ),
    Fact(
        key="cudagraph_capture_max",
        claim=f"the largest captured batch is at most {_MAX_CAPTURE} (2 * max_num_seqs and the token budget cap it)",
        path="vllm/config/vllm.py",
        pattern=rf"default_max_graph_size = \d+ if is_data_center_blackwell else {_MAX_CAPTURE}\b",
        where="engine/memory/startup.py",
    ),
    Fact(
        key="cudagraph_profiling_default_on",
        claim="CUDA graph memory is estimated during profiling by default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1)",
        path="vllm/envs.py",
        pattern=r'os\.getenv\("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "1"\)',
        where="engine/memory/startup.py, lessons/diagnosis/logs.py",
    ),
    # --- allocation rules (vllm/v1/kv_cache_interface.py, the block pool, the groups) ---
    Fact(
        key="null_block",
        claim="the block pool keeps one null block back, never handed to a request",
        path="vllm/v1/core/block_pool.py",
        pattern=r"self\.null_block = self\.free_block_queue\.popleft\(\)",
        where="engine/memory/startup.py, engine/memory/kv_pool.py",
    ),
    Fact(
        key="full_attention_blocks",
        claim="a full-attention layer plans cdiv(max_model_len, block_size) blocks for one request",
        path="vllm/v1/kv_cache_interface.py",
        pattern=r"return cdiv\(max_model_len, self\.block_size\) \* self\.page_size_bytes",
        where="engine/memory/layers.py",
    ),
    Fact(
        key="sliding_window_admission_blocks",
        claim="a sliding-window layer holds cdiv(min(window - 1 + in flight, max_model_len), block) + 1 blocks",
        path="vllm/v1/kv_cache_interface.py",
        pattern=r"(?s)class SlidingWindowSpec\(AttentionSpec\):.{0,3000}?"
        r"self\.sliding_window - 1 \+ self\.extra_retained_tokens \+ max_in_flight_tokens,\s+max_model_len,"
        r".{0,400}?return cdiv\(num_tokens, self\.block_size\) \+ 1",
        where="engine/memory/layers.py, lessons/quizzes.json, lessons/fragmentation.md",
    ),
    Fact(
        key="chunked_local_admission_blocks",
        claim="a chunked-local layer (Llama 4) holds cdiv(min(chunk + in flight, max_model_len), block) blocks",
        path="vllm/v1/kv_cache_interface.py",
        pattern=r"(?s)self\.attention_chunk_size \+ max_in_flight_tokens, max_model_len\s*\)\s+"
        r"return cdiv\(num_tokens, self\.block_size\)$",
        where="engine/memory/layers.py",
    ),
    Fact(
        key="mla_single_latent",
        claim="MLAAttentionSpec stores one latent vector per token, with no separate V",
        path="vllm/v1/kv_cache_interface.py",
        pattern=r"(?s)class MLAAttentionSpec\(FullAttentionSpec\):.{0,1000}?head_size_v: int = 0",
        where="lessons/gqa.md, lessons/sections/mla_cache.md, lessons/quizzes.json, lessons/predictions.py",
    ),
    Fact(
        key="mla_one_kv_head",
        claim="get_num_kv_heads returns 1 for MLA at any tensor-parallel size",
        path="vllm/config/model.py",
        pattern=r"(?s)def get_num_kv_heads\(.{0,800}?if self\.use_mla:\s+"
        r"# When using MLA during decode it becomes MQA\s+return 1$",
        where="engine/memory/layers.py, lessons/quizzes.json, lessons/sections/tensor_parallel.md",
    ),
    Fact(
        key="mla_head_size",
        claim="an MLA layer's one cached head is kv_lora_rank + qk_rope_head_dim values wide (576 for DeepSeek-V3)",
        path="vllm/transformers_utils/model_arch_config_convertor.py",
        pattern=r"return self\.hf_text_config\.kv_lora_rank \+ qk_rope_head_dim$",
        where="lessons/gqa.md, lessons/sections/mla_cache.md, engine/memory/layers.py",
    ),
    Fact(
        key="mla_decode_as_mqa",
        claim="MLA decode runs absorbed, as multi-query attention over the latent (forward_mqa, the "
        '"data-movement friendly" approach); prefill decompresses to MHA',
        path="vllm/model_executor/layers/attention/mla_attention.py",
        pattern=r'(?s)the data-movement friendly approach for "decode".*?def forward_mqa\(',
        where="lessons/gqa.md, lessons/sections/mla_cache.md",
    ),
    Fact(
        key="tp_kv_heads_per_gpu",
        claim="each GPU holds max(1, total_num_kv_heads // tensor_parallel_size) KV heads",
        path="vllm/config/model.py",
        pattern=r"return max\(1, total_num_kv_heads // parallel_config\.tensor_parallel_size\)",
        where="lessons/sections/tensor_parallel.md, engine/memory/parallel.py",
    ),
    Fact(
        key="tp_kv_head_replicas",
        claim="at a TP size of at least the KV-head count each GPU keeps one KV head, copied tp_size / "
        "num_kv_heads times",
        path="vllm/model_executor/layers/linear.py",
        pattern=r"if tp_size >= self\.total_num_kv_heads:\s+self\.num_kv_heads = 1\s+"
        r"self\.num_kv_head_replicas = divide\(tp_size, self\.total_num_kv_heads\)",
        where="lessons/sections/tensor_parallel.md, engine/memory/parallel.py",
    ),
    Fact(
        key="tp_divides_query_heads",
        claim="the TP size must divide the query heads",
        path="vllm/config/model.py",
        pattern=r"if total_num_attention_heads % tensor_parallel_size != 0:",
        where="lessons/sections/tensor_parallel.md, engine/memory/parallel.py",
    ),
    Fact(
        key="non_torch_memory",
        claim="vLLM's memory snapshot counts memory outside torch's allocator (NCCL's buffers among it) as "
        "non_torch_memory",
        path="vllm/utils/mem_utils.py",
        pattern=r"self\.non_torch_memory = self\.cuda_memory - self\.torch_memory",
        where="lessons/sections/tensor_parallel.md, lessons/diagnosis/readlog.py",
    ),
    Fact(
        key="kv_cache_dtype_fp8_is_e4m3",
        claim="--kv-cache-dtype fp8 means e4m3 on CUDA",
        path="vllm/config/cache.py",
        pattern=r"CUDA 11\.8\+ supports fp8 \(=fp8_e4m3\)",
        where="lessons/sections/kv_precision.md, engine/config.py",
    ),
    Fact(
        key="kv_scale_per_layer",
        claim="an fp8 KV cache keeps one K scale (and one V scale) per attention layer",
        path="vllm/model_executor/layers/attention/attention.py",
        pattern=r'layer\.register_buffer\("_k_scale", torch\.tensor\(1\.0, dtype=torch\.float32\)\)',
        where="lessons/sections/kv_precision.md",
    ),
    Fact(
        key="llama4_chunked_local",
        claim="Llama 4's attention_chunk_size makes its layers chunked-local",
        path="vllm/model_executor/models/llama4.py",
        pattern=r"use_chunked_local_attn = not self\.nope and config\.attention_chunk_size",
        where="engine/memory/layers.py",
    ),
    Fact(
        key="deepseek_q_lora",
        claim="DeepSeek's MLA projects the query through q_lora_rank when the model has one",
        path="vllm/model_executor/models/deepseek_v2.py",
        pattern=r"if self\.q_lora_rank is not None:",
        where="engine/memory/layers.py",
    ),
    Fact(
        key="gated_delta_net_state",
        claim="a Gated DeltaNet layer keeps a fixed state per request (gated_delta_net_state_shape)",
        path="vllm/model_executor/layers/mamba/mamba_utils.py",
        pattern=r"def gated_delta_net_state_shape\(",
        where="engine/memory/layers.py",
    ),
    Fact(
        key="kv_cache_groups_uniform_page",
        claim="layers are cut into KV-cache groups of one size over one block pool",
        path="vllm/v1/core/kv_cache_planning.py",
        pattern=r"def _get_kv_cache_groups_uniform_page_size\(",
        where="engine/memory/kv_pool.py, lessons/sections/mla_cache.md",
    ),
    Fact(
        key="block_size_any_positive",
        claim="CacheConfig.block_size accepts any integer > 0",
        path="vllm/config/cache.py",
        pattern=r"^\s+block_size: int = Field\(default=None, gt=0\)",
        where="lessons/paged.md, lessons/diagnosis.md",
    ),
    Fact(
        key="flash_attn_block_multiple_of_16",
        claim="the FlashAttention backend takes block sizes that are multiples of 16",
        path="vllm/v1/attention/backends/flash_attn.py",
        pattern=r"(?s)def get_supported_kernel_block_sizes\(.{0,600}?return \[MultipleOf\(16\)\]",
        where="lessons/paged.md, lessons/diagnosis.md",
    ),
    Fact(
        key="rocm_block_sizes",
        claim="ROCm's native paged-attention kernel takes block sizes 16 and 32",
        path="vllm/v1/attention/backends/rocm_attn.py",
        pattern=r"# ROCM paged attention native C\+\+ kernel only supports block sizes 16 and 32",
        where="lessons/paged.md",
    ),
    Fact(
        key="hybrid_attention_block_size",
        claim="a model with linear-attention state raises the attention block to align * cdiv(state page, align * "
        "attention page per token)",
        path="vllm/platforms/interface.py",
        pattern=r"attn_block_size = kernel_block_alignment_size \* cdiv\(\s+mamba_page_size,\s+"
        r"kernel_block_alignment_size \* attn_page_size_1_token,",
        where="engine/memory/kv_pool.py",
    ),
    Fact(
        key="sliding_window_manager",
        claim="SlidingWindowManager frees the blocks a sliding-window layer no longer reads",
        path="vllm/v1/core/single_type_kv_cache_manager.py",
        pattern=r"(?s)^class SlidingWindowManager\(SingleTypeKVCacheManager\):.*?def remove_skipped_blocks\(",
        where="lessons/fragmentation.md",
    ),
    Fact(
        key="fp8_quantizes_linear_and_moe",
        claim="Fp8Config quantizes linear and MoE layers only (attention's KV is --kv-cache-dtype's business)",
        path="vllm/model_executor/layers/quantization/fp8.py",
        pattern=r"(?s)def get_quant_method\(.{0,400}?if isinstance\(layer, LinearBase\):.{0,600}?"
        r"elif isinstance\(layer, RoutedExperts\):",
        where="lessons/diagnosis.md",
    ),
    Fact(
        key="block_ref_count",
        claim="a cached block is shared by reference count (KVCacheBlock.ref_cnt)",
        path="vllm/v1/core/kv_cache_utils.py",
        pattern=r"(?s)^class KVCacheBlock:.{0,400}?ref_cnt: int = 0",
        where="lessons/paged.md, lessons/quizzes.json",
    ),
    Fact(
        key="free_queue_lru",
        claim="free blocks wait in eviction order, least recently used first, keeping their hash until evicted",
        path="vllm/v1/core/kv_cache_utils.py",
        pattern=r"(?s)^class FreeKVCacheBlockQueue:.{0,1200}?The least recent used block is at the front \(LRU\)",
        where="lessons/paged.md, lessons/playground.md, lessons/quizzes.json",
    ),
    Fact(
        key="prefix_hash_chained",
        claim="a full block's hash covers its parent block's hash and its own tokens",
        path="vllm/v1/core/kv_cache_utils.py",
        pattern=r"(?s)def hash_block_tokens\(\s+hash_function: Callable\[\[Any\], bytes\],\s+"
        r"parent_block_hash: BlockHash \| None,\s+curr_block_token_ids:",
        where="lessons/quizzes.json, lessons/paged.md",
    ),
    Fact(
        key="prefix_cache_full_blocks_only",
        claim="only full blocks are hashed for prefix caching; a partly filled last block is never shared",
        path="vllm/v1/core/kv_cache_utils.py",
        pattern=r"# We only hash full blocks",
        where="lessons/quizzes.json, lessons/paged.md",
    ),
    Fact(
        key="parallel_sampling_children",
        claim="n > 1 becomes n child requests with n = 1",
        path="vllm/v1/engine/parallel_sampling.py",
        pattern=r"^class ParentRequest",
        where="lessons/quizzes.json",
    ),
    Fact(
        key="batched_tokens_at_least_max_num_seqs",
        claim="max_num_batched_tokens must be at least max_num_seqs",
        path="vllm/config/scheduler.py",
        pattern=r"if self\.max_num_batched_tokens < self\.max_num_seqs:\s+raise ValueError\(",
        where="lessons/pressure.md",
    ),
    Fact(
        key="no_chunked_prefill_budget_at_least_max_model_len",
        claim="without chunked prefill, a max_num_batched_tokens below max_model_len is refused",
        path="vllm/config/scheduler.py",
        pattern=r"self\.max_num_batched_tokens < max_model_len\s+and not self\.enable_chunked_prefill\s+\):\s+"
        r"raise ValueError\(",
        where="lessons/pressure.md",
    ),
    Fact(
        key="preempt_recompute",
        claim="a preempted request loses its KV and is recomputed (V1 does not swap)",
        path="vllm/v1/core/sched/scheduler.py",
        pattern=r"request\.status = RequestStatus\.PREEMPTED\s+request\.num_computed_tokens = 0",
        where="lessons/pressure.md, lessons/quizzes.json, engine/core/scheduler.py",
    ),
    Fact(
        key="allocate_slots_all_or_none",
        claim="KVCacheManager.allocate_slots gives a step all its new slots or returns None",
        path="vllm/v1/core/kv_cache_manager.py",
        pattern=r"(?s)def allocate_slots\(.{0,1200}?\) -> KVCacheBlocks \| None:",
        where="engine/core/block_manager.py",
    ),
    Fact(
        key="sampling_temperature_limits",
        claim="vLLM treats temperature < 1e-5 as greedy and raises 1e-5 .. 1e-2 to 1e-2",
        path="vllm/sampling_params.py",
        pattern=r"^_SAMPLING_EPS = 1e-5\n_MAX_TEMP = 1e-2$",
        where="engine/sampling_params.py",
    ),
    Fact(
        key="preempt_newest",
        claim="under FCFS the scheduler preempts the request it admitted last (the end of the running list)",
        path="vllm/v1/core/sched/scheduler.py",
        pattern=r"preempted_req = self\.running\.pop\(\)",
        where="engine/core/admission.py, lessons/pressure.md, lessons/quizzes.json",
    ),
    # --- metrics (/metrics) ---
    Fact(
        key="metric_running",
        claim=f"{metrics.RUNNING} is a gauge of the running requests",
        path="vllm/v1/metrics/loggers.py",
        pattern=_metric(metrics.RUNNING),
        where="lessons/diagnosis/metrics.py, lessons/quizzes.json",
    ),
    Fact(
        key="metric_waiting",
        claim=f"{metrics.WAITING} is a gauge of the waiting requests",
        path="vllm/v1/metrics/loggers.py",
        pattern=_metric(metrics.WAITING),
        where="lessons/diagnosis/metrics.py, lessons/quizzes.json",
    ),
    Fact(
        key="metric_waiting_by_reason",
        claim="vllm:num_requests_waiting_by_reason splits the waiting requests by why they wait",
        path="vllm/v1/metrics/loggers.py",
        pattern=_metric("vllm:num_requests_waiting_by_reason"),
        where="lessons/diagnosis/metrics.py",
    ),
    Fact(
        key="metric_kv_cache_usage",
        claim=f"{metrics.KV_NEW} is the KV-cache usage, 0..1",
        path="vllm/v1/metrics/loggers.py",
        pattern=_metric(metrics.KV_NEW),
        where="lessons/diagnosis/metrics.py, lessons/quizzes.json",
    ),
    Fact(
        key="metric_gpu_cache_usage_removed",
        claim=f"{metrics.KV_OLD} is the old name, gone from V1",
        path="vllm/v1/metrics/loggers.py",
        pattern=_metric(metrics.KV_OLD),
        where="lessons/diagnosis/metrics.py",
        absent=True,
    ),
    Fact(
        key="metric_swapped_removed",
        claim=f"{metrics.SWAPPED} was V0's (V1 does not swap)",
        path="vllm/v1/metrics/loggers.py",
        pattern=_metric(metrics.SWAPPED),
        where="lessons/diagnosis/metrics.py",
        absent=True,
    ),
    Fact(
        key="metric_preemptions",
        claim=f"{metrics.PREEMPTIONS} counts preemptions since the server started",
        path="vllm/v1/metrics/loggers.py",
        pattern=r"(?s)" + _metric(metrics.PREEMPTIONS) + r".{0,200}?documentation=\"Cumulative number of preemption",
        where="lessons/diagnosis/metrics.py, lessons/quizzes.json, lessons/pressure.md",
    ),
    Fact(
        key="metric_cache_config_info",
        claim=f"{metrics.CACHE_CONFIG} carries the cache config (num_gpu_blocks, block_size) as labels",
        path="vllm/v1/metrics/loggers.py",
        pattern=rf'name = "{re.escape(metrics.CACHE_CONFIG)}"',
        where="lessons/diagnosis/metrics.py",
    ),
    Fact(
        key="metric_prefix_cache",
        claim="vllm:prefix_cache_queries and vllm:prefix_cache_hits count prefix-cache lookups and hits in tokens",
        path="vllm/v1/metrics/loggers.py",
        pattern=r'(?s)name="vllm:prefix_cache_queries".{0,600}?name="vllm:prefix_cache_hits"',
        where="lessons/paged.md, lessons/playground.md",
    ),
    Fact(
        key="metric_latency_histograms",
        claim="TTFT, inter-token latency, TPOT and queue time are histograms vllm:time_to_first_token_seconds, "
        "vllm:inter_token_latency_seconds, vllm:request_time_per_output_token_seconds, "
        "vllm:request_queue_time_seconds",
        path="vllm/v1/metrics/loggers.py",
        pattern=r'(?s)name="vllm:time_to_first_token_seconds".{0,800}?name="vllm:inter_token_latency_seconds"'
        r'.{0,800}?name="vllm:request_time_per_output_token_seconds".{0,1600}?name="vllm:request_queue_time_seconds"',
        where="lessons/pressure.md, lessons/playground.md",
    ),
    # --- log lines and start-up errors ---
    Fact(
        key="log_model_loading",
        claim='model loading logs "Model loading took X GiB memory and Y seconds"',
        path="vllm/v1/worker/gpu/model_runner.py",
        pattern=r'"Model loading took %s GiB memory and %\.6f seconds"',
        where="lessons/diagnosis/logs.py, lessons/diagnosis/readlog.py",
    ),
    Fact(
        key="log_available_kv_memory",
        claim='the worker logs "Available KV cache memory: X GiB"',
        path="vllm/v1/worker/gpu_worker.py",
        pattern=r'"Available KV cache memory: %s GiB"',
        where="lessons/diagnosis/logs.py, lessons/diagnosis/readlog.py",
    ),
    Fact(
        key="log_kv_cache_size_and_concurrency",
        claim='one line: "GPU KV cache size: N tokens, Maximum concurrency for L tokens per request: Cx"',
        path="vllm/v1/core/kv_cache_utils.py",
        pattern=r'(?s)"%s KV cache size: %s tokens, "\s+"Maximum concurrency for %s tokens per request: %\.2fx",'
        r".{0,300}?$",
        where="lessons/diagnosis/logs.py, lessons/diagnosis/readlog.py, engine/memory/kv_pool.py",
    ),
    Fact(
        key="log_kv_cache_device_gpu",
        claim='on CUDA the KV cache lines name the pool "GPU"',
        path="vllm/v1/core/kv_cache_utils.py",
        pattern=r'return "GPU" if device_type == "cuda" else device_type\.upper\(\)',
        where="lessons/diagnosis/logs.py, lessons/diagnosis/readlog.py",
    ),
    Fact(
        key="log_cudagraph_profiling_notice",
        claim='the notice "CUDA graph memory profiling is enabled (default since v0.21.0)" suggests the '
        "--gpu-memory-utilization that keeps the old KV cache",
        path="vllm/v1/worker/gpu_worker.py",
        pattern=r'(?s)"CUDA graph memory profiling is enabled \(default since "\s+"v0\.21\.0\)\..{0,300}?'
        r'"--gpu-memory-utilization to %\.4f\.',
        where="lessons/diagnosis/logs.py, lessons/diagnosis/readlog.py",
    ),
    Fact(
        key="log_graph_capturing",
        claim='capture logs "Graph capturing finished in N secs, took X GiB"',
        path="vllm/v1/worker/gpu/model_runner.py",
        pattern=r'"Graph capturing finished in %\.0f secs, took %\.2f GiB"',
        where="lessons/diagnosis/readlog.py",
    ),
    Fact(
        key="log_estimated_cudagraph_memory_removed",
        claim='vLLM v0.34.0 no longer logs "Estimated CUDA graph memory: X GiB total" (v0.29 did)',
        path="vllm/v1/worker/gpu_worker.py",
        pattern=r"Estimated CUDA graph memory",
        where="lessons/diagnosis/logs.py, lessons/diagnosis/readlog.py, engine/memory/startup.py",
        absent=True,
    ),
    Fact(
        key="log_periodic_stats",
        claim='the periodic line "Avg prompt throughput: ... Running: N reqs, Waiting: N reqs" adds '
        '"Preemptions: N" once there were any, then "GPU KV cache usage: X%"',
        path="vllm/v1/metrics/loggers.py",
        pattern=r'(?s)"Avg prompt throughput: %\.1f tokens/s",\s+"Avg generation throughput: %\.1f tokens/s",\s+'
        r'"Running: %d reqs",\s+"Waiting: %d reqs",.{0,1500}?if self\.num_preemptions > 0:\s+'
        r'log_parts\.append\("Preemptions: %d"\).{0,300}?log_parts\.append\("%s KV cache usage: %\.1f%%"\)',
        where="lessons/diagnosis/logs.py, lessons/diagnosis/readlog.py",
    ),
    Fact(
        key="error_free_memory",
        claim='start-up fails with "Free memory on device ... is less than desired GPU memory utilization" when '
        "other processes hold the memory",
        path="vllm/v1/worker/utils.py",
        pattern=r'(?s)f"Free memory on device \{init_snapshot\.device_\} ".{0,300}?'
        r'f"is less than desired GPU memory utilization "',
        where="engine/memory/startup.py, lessons/diagnosis/readlog.py",
    ),
    Fact(
        key="error_no_memory_for_blocks",
        claim='start-up fails with "No available memory for the cache blocks" when no block fits',
        path="vllm/v1/core/kv_cache_planning.py",
        pattern=r'f"No available memory for the cache blocks\. \{hint\} "',
        where="engine/memory/startup.py, lessons/diagnosis/readlog.py",
    ),
    Fact(
        key="error_max_seq_len",
        claim="start-up fails when one request of the model's max seq len does not fit: \"... GiB KV cache is "
        'needed, which is larger than the available KV cache memory ... the estimated maximum model length is N"',
        path="vllm/v1/core/kv_cache_planning.py",
        pattern=r'(?s)f"To serve at least one request with the model\'s max seq len "\s+f"\(\{max_model_len\}\), '
        r'\(\{format_gib\(needed_memory\)\} GiB KV "\s+f"cache is needed, which is larger than the available KV '
        r'cache "\s+f"memory \(\{format_gib\(available_memory\)\} GiB\)\. \{estimated_msg\}"',
        where="engine/memory/startup.py, lessons/diagnosis/readlog.py, lessons/diagnosis/own_log.py, "
        "lessons/quizzes.json",
    ),
    Fact(
        key="error_hint_profiled",
        claim="without the extensible KV cache the error's hint is to increase gpu_memory_utilization; decreasing "
        "max_model_len also reduces what is needed",
        path="vllm/v1/core/kv_cache_planning.py",
        pattern=r'(?s)"Try increasing `gpu_memory_utilization` when initializing the engine "\s+'
        r'"\(this flag also controls CPU memory reservation on the CPU backend, "\s+"despite its name\)\.".{0,1500}?'
        r'f"\{hint\} Decreasing `max_model_len` also reduces what is needed\. "',
        where="engine/memory/startup.py, lessons/diagnosis/own_log.py",
    ),
    Fact(
        key="error_hint_extensible",
        claim="with the extensible KV cache at its default of 1.0 the hint is to decrease max_model_len or "
        "max_num_seqs, or use a device with more memory",
        path="vllm/v1/core/kv_cache_planning.py",
        pattern=r'"The extensible KV cache already takes all device memory left after "\s+'
        r'f"\{used_by\}; decrease `max_model_len` or `max_num_seqs`, or the "',
        where="engine/memory/startup.py",
    ),
    Fact(
        key="free_memory_check_skipped_when_extensible",
        claim="the free-memory check at start-up is skipped with the extensible KV cache",
        path="vllm/v1/worker/utils.py",
        pattern=r"init_snapshot\.free_memory < requested_memory\s+and not cache_config\.enable_extensible_kv_cache",
        where="engine/memory/startup.py",
    ),
    Fact(
        key="error_estimated_max_len",
        claim='the error names "the estimated maximum model length" the free blocks hold',
        path="vllm/v1/core/kv_cache_planning.py",
        pattern=r'f"the estimated maximum model length is \{estimated_max_len\}\. "',
        where="engine/memory/startup.py, lessons/diagnosis/own_log.py",
    ),
    Fact(
        key="error_check_plans_null_block",
        claim="the start-up check plans one max_model_len request against the pool",
        path="vllm/v1/core/kv_cache_planning.py",
        pattern=r"def _check_enough_kv_cache_memory\(",
        where="engine/memory/startup.py",
    ),
    Fact(
        key="sched_watermark_rounds_down",
        claim="a nonzero watermark keeps int(watermark x num_blocks) blocks free",
        path="vllm/v1/core/kv_cache_manager.py",
        pattern=r"self\.watermark_blocks = int\(watermark \* kv_cache_config\.num_blocks\)",
        where="engine/core/admission.py",
    ),
    Fact(
        key="sched_watermark_scope",
        claim="the watermark applies to waiting and preempted requests, and only while others are scheduled",
        path="vllm/v1/core/kv_cache_manager.py",
        pattern=r"if has_scheduled_reqs and request\.status in \(\s*RequestStatus\.WAITING,"
        r"\s*RequestStatus\.PREEMPTED,",
        where="engine/core/admission.py",
    ),
    Fact(
        key="sched_full_isl_passed",
        claim="the scheduler passes scheduler_reserve_full_isl as full_sequence_must_fit when it admits",
        path="vllm/v1/core/sched/scheduler.py",
        pattern=r"full_sequence_must_fit=self\.scheduler_reserve_full_isl",
        where="engine/core/scheduler.py, lessons/playground.md",
    ),
    Fact(
        key="sched_full_isl_counts_num_tokens",
        claim="the whole-sequence check counts all of a request's tokens (a resumed one's generated tokens too), "
        "capped at max_model_len, and only checks",
        path="vllm/v1/core/kv_cache_manager.py",
        pattern=r"full_num_tokens = min\(request\.num_tokens, self\.max_model_len\)",
        where="engine/core/block_manager.py",
    ),
    Fact(
        key="preempt_prefix_stats_apart",
        claim="a preempted request's readmission lookup is counted apart from vllm:prefix_cache_queries and hits",
        path="vllm/v1/metrics/stats.py",
        pattern=r"self\.preempted_queries \+= num_tokens",
        where="engine/core/block_manager.py, lessons/paged.md",
    ),
    Fact(
        key="cached_tokens_first_admission",
        claim="a request's reported cached tokens come from its first admission, not a readmission",
        path="vllm/v1/core/sched/scheduler.py",
        pattern=r"if request\.prefill_stats and request\.num_preemptions <= 0:",
        where="engine/core/block_manager.py, engine/outputs.py",
    ),
    Fact(
        key="cow_only_partial_hits",
        claim="V1 copies a block only on a partial-block prefix hit, which needs a Mamba group in 'align' mode",
        path="vllm/v1/core/kv_cache_utils.py",
        pattern=r'spec\.mamba_cache_mode == "align"',
        where="lessons/paged.md",
    ),
    Fact(
        key="cow_partial_hits_switch",
        claim="the KV-cache coordinator turns partial hash hits on only where every group allows them",
        path="vllm/v1/core/kv_cache_coordinator.py",
        pattern=r"self\.enable_partial_hash_hits = \(\s+allow_partial_hash_hits\s+and partial_hash_hits_enabled\(",
        where="lessons/paged.md",
    ),
    Fact(
        key="cuda_backend_order",
        claim="on NVIDIA GPUs other than compute capability 10.x, FlashAttention is the first attention backend "
        "tried; on 10.x (Blackwell data-center) FlashInfer is",
        path="vllm/platforms/cuda.py",
        pattern=r"(?s)if device_capability\.major == 10 and not use_non_causal:\s+return \[.{0,120}?"
        r"AttentionBackendEnum\.FLASHINFER,\s+AttentionBackendEnum\.FLASH_ATTN,.{0,300}?else:\s+return \[.{0,400}?"
        r"AttentionBackendEnum\.FLASH_ATTN,\s+AttentionBackendEnum\.FLASHINFER,",
        where="lessons/paged.md, lessons/labs/paged_kernel.py",
    ),
    Fact(
        key="block_size_divisible_by_a_kernel_size",
        claim="a backend accepts a --block-size that one of its kernel block sizes divides (a larger block is split)",
        path="vllm/v1/attention/backend.py",
        pattern=r"if block_size % supported_size == 0:\s+return True",
        where="lessons/labs/paged_kernel.py, lessons/paged.md",
    ),
    Fact(
        key="flashinfer_kernel_block_sizes",
        claim="FlashInfer's kernels read blocks of 16, 32 or 64 tokens",
        path="vllm/v1/attention/backends/flashinfer.py",
        pattern=r"return \[16, 32, 64\]",
        where="lessons/labs/paged_kernel.py, lessons/paged.md, pages/5_paged_attention.py",
    ),
    Fact(
        key="rocm_aiter_fa_kernel_block_sizes",
        claim="ROCm's AITER FlashAttention kernel reads blocks of 16 or 32 tokens",
        path="vllm/v1/attention/backends/rocm_aiter_fa.py",
        pattern=r"(?s)def get_supported_kernel_block_sizes\(.{0,300}?return \[16, 32\]",
        where="lessons/labs/paged_kernel.py, lessons/paged.md, pages/5_paged_attention.py",
    ),
    Fact(
        key="metric_waiting_reasons",
        claim='vllm:num_requests_waiting_by_reason has reason="capacity" and reason="deferred"',
        path="vllm/v1/metrics/loggers.py",
        pattern=r'(?s)WAITING_REASON_CAPACITY = "capacity"\s+WAITING_REASON_DEFERRED = "deferred"',
        where="lessons/pressure.md, lessons/labs/pressure.py, lessons/diagnosis/metrics.py",
    ),
    Fact(
        key="batch_defaults_gb10_small",
        claim="a GB10 keeps the small GPUs' batch defaults",
        path="vllm/engine/arg_utils.py",
        pattern=r'and "a100" not in device_name\s+and not is_gb10',
        where="engine/memory/startup.py, lessons/pressure.md",
    ),
    Fact(
        key="cudagraph_capture_max_blackwell",
        claim="captured graphs go up to 1024 on compute capability 10.x, else 512",
        path="vllm/config/vllm.py",
        pattern=r"1024 if current_platform\.is_device_capability_family\(100\) else 512",
        where="engine/memory/startup.py",
    ),
    Fact(
        key="cudagraph_capture_appends_budget",
        claim="max_num_batched_tokens is captured when within the ceiling",
        path="vllm/config/vllm.py",
        pattern=r"max_num_tokens <= max_cudagraph_capture_size\s+and max_num_tokens not in cudagraph_capture_sizes",
        where="engine/memory/startup.py",
    ),
    Fact(
        key="cudagraph_capture_appends_max_num_seqs",
        claim="max_num_seqs is captured when within the ceiling",
        path="vllm/config/vllm.py",
        pattern=r"elif max_num_seqs <= max_cudagraph_capture_size:\s+uniform_decode_sizes = \[max_num_seqs\]",
        where="engine/memory/startup.py",
    ),
    Fact(
        key="batch_defaults_cpu",
        claim="vllm serve on CPU: 128 sequences per rank",
        path="vllm/engine/arg_utils.py",
        pattern=r"UsageContext\.OPENAI_API_SERVER: 128 \* world_size",
        where="engine/memory/startup.py",
    ),
    Fact(
        key="chunked_prefill_disable_warning",
        claim="disabling chunked prefill warns that the model does not officially support it",
        path="vllm/engine/arg_utils.py",
        pattern=r"This model does not officially support disabling chunked prefill\. ",
        where="lessons/diagnosis.md",
    ),
    Fact(
        key="max_model_len_auto",
        claim="--max-model-len auto (-1) picks the longest length that fits",
        path="vllm/config/model.py",
        pattern="-1 or 'auto' -> Automatically choose the maximum model length",
        where="lessons/diagnosis.md, lessons/diagnosis/scenarios.py, lessons/diagnosis/own_log.py",
    ),
    Fact(
        key="auto_fit_uses_check_memory",
        claim="auto-fit plans against the pool less the null block, like the error's estimate",
        path="vllm/v1/core/kv_cache_planning.py",
        pattern=r"if vllm_config\.model_config\.original_max_model_len == -1:\s+_auto_fit_max_model_len\(\s+"
        r"builder, vllm_config, projected_groups_per_worker, check_memory",
        where="lessons/diagnosis/replay.py",
    ),
    Fact(
        key="auto_fit_short_warning",
        claim="auto-fit warns when it settles below 8,192 tokens",
        path="vllm/v1/core/kv_cache_planning.py",
        pattern="AUTO_FIT_SHORT_MAX_MODEL_LEN = 8192",
        where="lessons/diagnosis.md",
    ),
    Fact(
        key="format_gib",
        claim="GiB figures print rounded to 2 decimals with no trailing zero",
        path="vllm/utils/mem_utils.py",
        pattern='return f"\\{round\\(b / GiB_bytes, 2\\)\\}"',
        where="engine/memory/startup.py, engine/memory/extensible.py, lessons/diagnosis/logs.py",
    ),
    Fact(
        key="cudagraph_notice_suggestion_capped",
        claim="the CUDA graph notice's suggested utilization is at most 1.0",
        path="vllm/v1/worker/gpu_worker.py",
        pattern=r"suggested_util = min\(\s+round\(current_util \+ cg_util_delta, 4\),\s+1\.0,",
        where="lessons/diagnosis/logs.py, lessons/diagnosis/incident_graphs.py, lessons/diagnosis/own_log.py",
    ),
    Fact(
        key="log_stats_interval",
        claim="the metrics line is logged every 10 s",
        path="vllm/envs.py",
        pattern='os\\.getenv\\("VLLM_LOG_STATS_INTERVAL", "10\\."\\)',
        where="lessons/diagnosis/logs.py",
    ),
    Fact(
        key="log_preemptions_when_any",
        claim="the metrics line adds 'Preemptions: N' only when there were any",
        path="vllm/v1/metrics/loggers.py",
        pattern='if self\\.num_preemptions > 0:\\s+log_parts\\.append\\("Preemptions: %d"\\)',
        where="lessons/diagnosis/logs.py, lessons/diagnosis/readlog.py",
    ),
    Fact(
        key="log_cudagraph_pool_actual",
        claim="after capture vLLM logs 'CUDA graph pool memory: X GiB (actual), Y GiB (estimated)'",
        path="vllm/v1/worker/gpu_worker.py",
        pattern='"CUDA graph pool memory: %s GiB \\(actual\\), %s GiB \\(estimated\\), "',
        where="lessons/diagnosis/readlog.py",
    ),
    Fact(
        key="error_hint_decrease_max_model_len",
        claim="the max-seq-len error adds 'Decreasing `max_model_len` also reduces what is needed.'",
        path="vllm/v1/core/kv_cache_planning.py",
        pattern='f"\\{hint\\} Decreasing `max_model_len` also reduces what is needed\\. "',
        where="engine/memory/startup.py",
    ),
    Fact(
        key="embedding_gathered",
        claim="decode gathers one embedding row per token",
        path="vllm/model_executor/layers/vocab_parallel_embedding.py",
        pattern=r"F\.embedding\(",
        where="lessons/predictions.py, lessons/measure.py, lessons/bandwidth.md",
    ),
    Fact(
        key="wheel_commit",
        claim="the course follows v0.34.0, wheel commit 62d4bc3c7",
        path="vllm/_version.py",
        pattern="__commit_id__ = commit_id = 'g62d4bc3c7'",
        where="lessons/diagnosis.md, engine/memory/startup.py, README.md",
    ),
    Fact(
        key="free_memory_check_skipped_extensible",
        claim="the free-memory error needs the extensible KV cache off",
        path="vllm/v1/worker/utils.py",
        pattern=r"init_snapshot\.free_memory < requested_memory\s+and not cache_config\.enable_extensible_kv_cache",
        where="lessons/diagnosis/scenarios.py, lessons/diagnosis/incidents.py",
    ),
    Fact(
        key="no_extensible_flag",
        claim="--no-enable-extensible-kv-cache turns the extensible KV cache off",
        path="vllm/v1/worker/extensible_kv_cache.py",
        pattern="--no-enable-extensible-kv-cache",
        where="lessons/diagnosis/scenarios.py, lessons/sections/extensible_kv.md",
    ),
)

HISTORY: tuple[HistoryFact, ...] = (
    HistoryFact(
        Fact(
            key="gpu_memory_utilization_092",
            claim=f"the gpu_memory_utilization default became {DEFAULT_GPU_MEMORY_UTILIZATION} in v0.20.0",
            path="vllm/config/cache.py",
            pattern=rf"gpu_memory_utilization: float = Field\(default={_num(DEFAULT_GPU_MEMORY_UTILIZATION)},",
            where="engine/memory/startup.py, lessons/quizzes.json",
        ),
        since="0.20.0",
        before="0.19.1",
    ),
    HistoryFact(
        Fact(
            key="cudagraph_profiling_on",
            claim="CUDA graph memory profiling became the default in v0.20.0 "
            "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1)",
            path="vllm/envs.py",
            pattern=r'os\.getenv\("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "1"\)',
            where="engine/memory/startup.py, lessons/diagnosis/logs.py",
        ),
        since="0.20.0",
        before="0.19.1",
    ),
)


def check(fact: Fact, source: VllmSource) -> Result:
    """Whether `fact` holds in `source`, with the reason when it does not."""
    text = source.read(fact.path)
    if text is None:
        return Result(fact, False, f"file missing: {fact.path}")
    found = re.search(fact.pattern, text, re.MULTILINE) is not None
    if fact.absent:
        return Result(fact, not found, "pattern found, but the fact says it is gone" if found else "")
    return Result(fact, found, "" if found else "pattern not found")


def history_at(version: str) -> tuple[HistoryFact, ...]:
    """The history facts that concern `version`: it is their `since` or their `before` release."""
    return tuple(h for h in HISTORY if version in (h.since, h.before))


def check_history(item: HistoryFact, source: VllmSource) -> Result:
    """A history fact holds when its pattern is found at `since` and missing at `before`."""
    raw = check(item.fact, source)
    if source.version == item.since:
        return raw if raw.holds else Result(item.fact, False, f"{raw.why} (expected since v{item.since})")
    if raw.holds:
        return Result(item.fact, False, f"found at v{item.before}, but the course says it arrived in v{item.since}")
    return Result(item.fact, True, "")


def download(version: str, dest: Path) -> Path:
    """vLLM's wheel for `version`, fetched with pip into `dest` (no install); SourceError when pip fails."""
    if not re.fullmatch(r"[0-9][0-9A-Za-z.+-]{0,40}", version):
        raise SourceError(f"{version!r} is not a vLLM version; pass one such as {STATED_RELEASE}")
    command = [*PIP_COMMAND, "download", "--no-deps", "--only-binary=:all:", f"vllm=={version}", "-d", str(dest)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as error:
        raise SourceError(f"could not run pip to fetch vllm=={version}: {error}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SourceError(
            f"pip could not fetch vllm=={version} (exit {done.returncode}): {tail[0]}. Check the version and the "
            f"network, or download the wheel yourself and pass --wheel PATH"
        )
    wheels = sorted(dest.glob("vllm-*.whl"))
    if not wheels:
        raise SourceError(f"pip finished but left no vllm-*.whl for vllm=={version}; pass --wheel PATH instead")
    return wheels[0]


def line(result: Result) -> str:
    """`PASS key  claim  (path)`, or `FAIL ...: why`."""
    fact = result.fact
    text = f"{'PASS' if result.holds else 'FAIL'} {fact.key}  {fact.claim}  ({fact.path})"
    return text if result.holds else f"{text}: {result.why}"


def summary(results: Sequence[Result], version: str) -> str:
    return f"{sum(r.holds for r in results)} of {len(results)} facts hold at vLLM {version}"


def as_json(results: Sequence[Result], version: str) -> str:
    facts = [
        {
            "key": r.fact.key,
            "claim": r.fact.claim,
            "path": r.fact.path,
            "where": r.fact.where,
            "absent": r.fact.absent,
            "holds": r.holds,
            "why": r.why,
        }
        for r in results
    ]
    held = sum(r.holds for r in results)
    return json.dumps({"version": version, "held": held, "total": len(results), "facts": facts}, indent=2)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lessons.facts", description="Check the course's vLLM facts in vLLM's released source."
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--wheel", type=Path, help="a vllm-*.whl file (read as a zip, not installed)")
    where.add_argument("--source", type=Path, help="an unpacked source tree: the folder that holds vllm/")
    where.add_argument("--version", help=f"fetch this release's wheel with pip first, e.g. {STATED_RELEASE}")
    parser.add_argument("--history", action="store_true", help='check the "since vX" facts instead')
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    return parser


def _load(args: argparse.Namespace, tmp: Path) -> VllmSource:
    if args.version is not None:
        return open_source(download(args.version, tmp))
    if args.source is not None and not args.source.is_dir():
        raise SourceError(f"{args.source} is not a folder; pass the folder that holds vllm/ (or --wheel FILE)")
    return open_source(args.wheel if args.wheel is not None else args.source)


def main(argv: Sequence[str] | None = None) -> int:
    """Print each fact's verdict; 0 when all hold, 1 when one fails, 2 when the source cannot be read."""
    args = _parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vllm-wheel-") as tmp:
        try:
            source = _load(args, Path(tmp))
        except SourceError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        if args.history:
            items = history_at(source.version)
            if not items:
                releases = sorted({v for h in HISTORY for v in (h.since, h.before)})
                print(
                    f"error: no history fact concerns vLLM {source.version}; check one of {releases}", file=sys.stderr
                )
                return 2
            results = [check_history(item, source) for item in items]
        else:
            results = [check(fact, source) for fact in FACTS]
    if args.json:
        print(as_json(results, source.version))
    else:
        print("\n".join(line(r) for r in results))
        print(summary(results, source.version))
    return 0 if all(r.holds for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
