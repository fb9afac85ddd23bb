"""One decoder layer's KV cache, by kind, as vLLM V1 describes it: what a token costs and what a request holds.

vLLM V1 gives every attention layer a `KVCacheSpec` (vllm/v1/kv_cache_interface.py) with two rules: its
``page_size_bytes`` (one block of ``block_size`` tokens) and its ``max_memory_usage_bytes`` / per-request admission
cap (how many blocks one request can hold at most). The kinds here are those specs, each a small frozen dataclass
with the same three methods, so a model is a tuple of them (`ModelSpec.layer_kinds`), one per layer:

- `FullAttention` (`FullAttentionSpec`): K and V of every token, ``2 * kv_heads * head_dim`` values per token;
  ``cdiv(tokens, block_size)`` blocks.
- `SlidingWindow` (`SlidingWindowSpec`): the same page, but only the last ``window - 1`` tokens plus the tokens in
  flight, never more than ``max_model_len``, in whole blocks, + 1 block because the window need not start on a
  block boundary (``max_admission_blocks_per_request``; its ``extra_retained_tokens`` is 0 without multi-module
  speculative decoding, which the course does not model). Attention sinks (gpt-oss) are learned per-head
  logits, weights, not cache: they add nothing here.
- `ChunkedLocal` (`ChunkedLocalAttentionSpec`, Llama 4's ``attention_chunk_size``): at most one chunk plus the
  tokens in flight, whole blocks, no extra block.
- `LatentAttention` (`MLAAttentionSpec`, DeepSeek-V2/V3, Kimi K2): one latent of ``kv_lora_rank +
  qk_rope_head_dim`` values per token and one "head", no separate V (``head_size_v = 0``), and the same latent on
  every tensor-parallel rank (vLLM's `ModelConfig.get_num_kv_heads` returns 1 for MLA whatever the TP).
- `LinearState` (`MambaSpec`, Qwen3-Next's Gated DeltaNet): no per-token cache at all, a fixed conv and recurrent
  state per request, shaped as vllm/model_executor/layers/mamba/mamba_utils.py's ``gated_delta_net_state_shape``
  (conv ``(conv_dim / tp, kernel - 1)`` with ``conv_dim = 2 * k_heads * k_dim + v_heads * v_dim``; recurrent
  ``(v_heads / tp, v_dim, k_dim)``), in the model's dtype (``mamba_cache_dtype = "auto"``), one page per request
  (``mamba_cache_mode = "none"``: ``1 + num_speculative_blocks`` pages, no speculation here).

"In flight" is vLLM's ``VllmConfig.max_in_flight_tokens`` (vllm/config/vllm.py): ``max_concurrent_batches *
max_num_batched_tokens``, the tokens scheduled but not yet settled, whose blocks a sliding or chunked layer cannot
free yet. ``max_concurrent_batches`` is the pipeline-parallel size, plus one under async scheduling, which vLLM
turns on by default: a default `vllm serve` on one pipeline stage has two batches, twice its token budget, in
flight (`max_in_flight_tokens`). Mistral-7B v0.1 (a 4,096-token window, max_model_len 32,768) on an H100 with
its default 8,192-token budget: cdiv(min(4,095 + 16,384, 32,768), 16) + 1 = 1,281 blocks per request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kernels.validate import is_whole

# vLLM's VllmConfig.max_concurrent_batches on one pipeline stage under its defaults: pipeline_parallel_size (1)
# plus one, because async scheduling is on (VllmConfig turns async_scheduling None into True unless the model is
# a pooling model, the executor cannot, or ROCm's DeepEP high-throughput DBO is in use).
MAX_CONCURRENT_BATCHES = 2

# The in-flight tokens assumed when a caller names no device: a default `vllm serve` on a GPU under 70 GiB, two
# batches of its 2,048-token budget (engine.memory.startup.default_max_num_batched_tokens; a test holds the two
# equal). With a device in hand, `engine.memory.kv_pool.default_in_flight_tokens(gpu)` is its own default.
DEFAULT_IN_FLIGHT_TOKENS = MAX_CONCURRENT_BATCHES * 2048


def max_in_flight_tokens(
    max_num_batched_tokens: int, async_scheduling: bool = True, pipeline_parallel_size: int = 1
) -> int:
    """vLLM's ``VllmConfig.max_in_flight_tokens``: (pipeline stages, + 1 under async scheduling) x the token budget.

    A ValueError names a budget or a pipeline size that is not a positive whole number.
    """
    for name, value in (
        ("max_num_batched_tokens", max_num_batched_tokens),
        ("pipeline_parallel_size", pipeline_parallel_size),
    ):
        if not is_whole(value) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive whole number")
    return (int(pipeline_parallel_size) + bool(async_scheduling)) * int(max_num_batched_tokens)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _gqa_attention_params(hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int) -> int:
    """Weights of a K/V-head layer's attention: q and o (query heads), k and v (KV heads) projections."""
    return 2 * hidden_size * num_heads * head_dim + 2 * hidden_size * num_kv_heads * head_dim


def _kv_token_bytes(num_kv_heads: int, head_dim: int, dtype_bytes: float, tensor_parallel: int) -> int:
    """K and V bytes one token costs a K/V-head layer on one GPU (KV heads split over TP, replicated past them)."""
    return int(2 * heads_per_gpu(num_kv_heads, tensor_parallel) * head_dim * dtype_bytes)


def _positive(owner: str, **values: object) -> None:
    for field, value in values.items():
        if not is_whole(value) or value <= 0:
            raise ValueError(f"{owner}: {field} must be a positive integer, got {value!r}")


def heads_per_gpu(num_kv_heads: int, tensor_parallel: int) -> int:
    """KV heads one GPU stores: split over TP, one copy each once TP reaches the KV-head count."""
    return max(1, num_kv_heads // tensor_parallel)


@dataclass(frozen=True, slots=True)
class FullAttention:
    """A layer that keeps K and V of every token (vLLM's `FullAttentionSpec`)."""

    num_kv_heads: int
    head_dim: int
    kind: ClassVar[str] = "full_attention"
    keeps_every_token: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _positive(f"{self.kind} layer", num_kv_heads=self.num_kv_heads, head_dim=self.head_dim)

    def attention_params(self, hidden_size: int, num_heads: int) -> int:
        """Weights of this layer's attention: q and o (query heads), k and v (KV heads) projections."""
        return _gqa_attention_params(hidden_size, num_heads, self.num_kv_heads, self.head_dim)

    def bytes_per_token(self, dtype_bytes: float, tensor_parallel: int = 1) -> int:
        """K and V bytes one token adds to this layer on one GPU."""
        return _kv_token_bytes(self.num_kv_heads, self.head_dim, dtype_bytes, tensor_parallel)

    def blocks_held(self, num_tokens: int, block_size: int, in_flight_tokens: int) -> int:
        """Blocks one request of num_tokens tokens holds in this layer: every token's."""
        return _cdiv(num_tokens, block_size)

    def admission_blocks(self, max_model_len: int, block_size: int, in_flight_tokens: int) -> int:
        """vLLM's per-request cap at start-up: cdiv(max_model_len, block_size)."""
        return _cdiv(max_model_len, block_size)

    def state_bytes(self, dtype_bytes: float, tensor_parallel: int = 1) -> int:
        """Bytes a request holds whatever its length (none: attention pays per token)."""
        return 0


@dataclass(frozen=True, slots=True)
class SlidingWindow:
    """A layer that attends to the last `window` tokens (vLLM's `SlidingWindowSpec`)."""

    num_kv_heads: int
    head_dim: int
    window: int
    kind: ClassVar[str] = "sliding_attention"
    keeps_every_token: ClassVar[bool] = False

    def __post_init__(self) -> None:
        _positive(f"{self.kind} layer", num_kv_heads=self.num_kv_heads, head_dim=self.head_dim, window=self.window)

    def attention_params(self, hidden_size: int, num_heads: int) -> int:
        """Weights of this layer's attention: q and o (query heads), k and v (KV heads) projections."""
        return _gqa_attention_params(hidden_size, num_heads, self.num_kv_heads, self.head_dim)

    def bytes_per_token(self, dtype_bytes: float, tensor_parallel: int = 1) -> int:
        """K and V bytes one token inside the window costs this layer on one GPU."""
        return _kv_token_bytes(self.num_kv_heads, self.head_dim, dtype_bytes, tensor_parallel)

    def blocks_held(self, num_tokens: int, block_size: int, in_flight_tokens: int) -> int:
        """cdiv(min(window - 1 + in flight, tokens), block) + 1, never more than the request's own blocks."""
        kept = min(self.window - 1 + in_flight_tokens, num_tokens)
        return min(_cdiv(num_tokens, block_size), _cdiv(kept, block_size) + 1)

    def admission_blocks(self, max_model_len: int, block_size: int, in_flight_tokens: int) -> int:
        """vLLM's ``max_admission_blocks_per_request``: cdiv(min(window - 1 + in flight, max_model_len), block) + 1."""
        return _cdiv(min(self.window - 1 + in_flight_tokens, max_model_len), block_size) + 1

    def state_bytes(self, dtype_bytes: float, tensor_parallel: int = 1) -> int:
        """Bytes a request holds whatever its length (none)."""
        return 0


@dataclass(frozen=True, slots=True)
class ChunkedLocal:
    """A layer that attends within fixed chunks of `chunk` tokens (vLLM's `ChunkedLocalAttentionSpec`, Llama 4)."""

    num_kv_heads: int
    head_dim: int
    chunk: int
    kind: ClassVar[str] = "chunked_attention"
    keeps_every_token: ClassVar[bool] = False

    def __post_init__(self) -> None:
        _positive(f"{self.kind} layer", num_kv_heads=self.num_kv_heads, head_dim=self.head_dim, chunk=self.chunk)

    def attention_params(self, hidden_size: int, num_heads: int) -> int:
        """Weights of this layer's attention: q and o (query heads), k and v (KV heads) projections."""
        return _gqa_attention_params(hidden_size, num_heads, self.num_kv_heads, self.head_dim)

    def bytes_per_token(self, dtype_bytes: float, tensor_parallel: int = 1) -> int:
        """K and V bytes one token inside the current chunk costs this layer on one GPU."""
        return _kv_token_bytes(self.num_kv_heads, self.head_dim, dtype_bytes, tensor_parallel)

    def blocks_held(self, num_tokens: int, block_size: int, in_flight_tokens: int) -> int:
        """cdiv(min(chunk + in flight, tokens), block): one chunk and the tokens in flight."""
        return _cdiv(min(self.chunk + in_flight_tokens, num_tokens), block_size)

    def admission_blocks(self, max_model_len: int, block_size: int, in_flight_tokens: int) -> int:
        """vLLM's ``max_admission_blocks_per_request``: cdiv(min(chunk + in flight, max_model_len), block)."""
        return _cdiv(min(self.chunk + in_flight_tokens, max_model_len), block_size)

    def state_bytes(self, dtype_bytes: float, tensor_parallel: int = 1) -> int:
        """Bytes a request holds whatever its length (none)."""
        return 0


@dataclass(frozen=True, slots=True)
class LatentAttention:
    """A multi-head latent attention layer (vLLM's `MLAAttentionSpec`): one shared latent per token.

    The cache holds ``kv_lora_rank + qk_rope_head_dim`` values per token (the compressed KV and the decoupled
    RoPE key); the other dims shape the projections (weights), not the cache.
    """

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None  # None: queries are projected straight from the hidden state (DeepSeek-V2-Lite)
    kind: ClassVar[str] = "mla"
    keeps_every_token: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _positive(
            f"{self.kind} layer",
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            qk_nope_head_dim=self.qk_nope_head_dim,
            v_head_dim=self.v_head_dim,
        )
        if self.q_lora_rank is not None:
            _positive(f"{self.kind} layer", q_lora_rank=self.q_lora_rank)

    @property
    def latent_dim(self) -> int:
        """Values cached per token: kv_lora_rank + qk_rope_head_dim (576 for DeepSeek-V3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def attention_params(self, hidden_size: int, num_heads: int) -> int:
        """Weights of MLA's projections (vllm/model_executor/models/deepseek_v2.py): q (through the q_lora_rank
        bottleneck when there is one), kv_a to the latent, kv_b from it to per-head K (nope) and V, o, two norms."""
        qk = num_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        if self.q_lora_rank is None:
            q = hidden_size * qk
        else:
            q = hidden_size * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * qk
        kv_a = hidden_size * self.latent_dim + self.kv_lora_rank
        kv_b = self.kv_lora_rank * num_heads * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv_a + kv_b + num_heads * self.v_head_dim * hidden_size

    def bytes_per_token(self, dtype_bytes: float, tensor_parallel: int = 1) -> int:
        """The latent's bytes: one "head", no V, the same on every tensor-parallel rank."""
        return int(self.latent_dim * dtype_bytes)

    def blocks_held(self, num_tokens: int, block_size: int, in_flight_tokens: int) -> int:
        """Blocks one request holds: every token's, as full attention."""
        return _cdiv(num_tokens, block_size)

    def admission_blocks(self, max_model_len: int, block_size: int, in_flight_tokens: int) -> int:
        """vLLM's per-request cap at start-up: cdiv(max_model_len, block_size)."""
        return _cdiv(max_model_len, block_size)

    def state_bytes(self, dtype_bytes: float, tensor_parallel: int = 1) -> int:
        """Bytes a request holds whatever its length (none)."""
        return 0


@dataclass(frozen=True, slots=True)
class LinearState:
    """A linear-attention layer (Gated DeltaNet, vLLM's `MambaSpec`): a fixed state per request, no per-token KV."""

    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int
    kind: ClassVar[str] = "linear_attention"
    keeps_every_token: ClassVar[bool] = False

    def __post_init__(self) -> None:
        _positive(
            f"{self.kind} layer",
            num_k_heads=self.num_k_heads,
            num_v_heads=self.num_v_heads,
            head_k_dim=self.head_k_dim,
            head_v_dim=self.head_v_dim,
            conv_kernel=self.conv_kernel,
        )

    @property
    def conv_dim(self) -> int:
        """Channels of the short convolution over q, k and v: 2 * k_heads * k_dim + v_heads * v_dim."""
        return 2 * self.num_k_heads * self.head_k_dim + self.num_v_heads * self.head_v_dim

    def attention_params(self, hidden_size: int, num_heads: int) -> int:
        """Weights of a Gated DeltaNet layer (transformers' Qwen3NextGatedDeltaNet): in_proj_qkvz, in_proj_ba, the
        depthwise conv, out_proj, and per-head A_log and dt_bias and the gated norm."""
        qkvz = hidden_size * (2 * self.num_k_heads * self.head_k_dim + 2 * self.num_v_heads * self.head_v_dim)
        ba = hidden_size * 2 * self.num_v_heads
        out = self.num_v_heads * self.head_v_dim * hidden_size
        return qkvz + ba + self.conv_dim * self.conv_kernel + out + 2 * self.num_v_heads + self.head_v_dim

    def bytes_per_token(self, dtype_bytes: float, tensor_parallel: int = 1) -> int:
        """Bytes one token adds (none: the state does not grow)."""
        return 0

    def blocks_held(self, num_tokens: int, block_size: int, in_flight_tokens: int) -> int:
        """Pages one request holds: its one state (vLLM's mamba_cache_mode "none", no speculation)."""
        return 1

    def admission_blocks(self, max_model_len: int, block_size: int, in_flight_tokens: int) -> int:
        """vLLM's cap at start-up: one state page per request."""
        return 1

    def state_bytes(self, dtype_bytes: float, tensor_parallel: int = 1) -> int:
        """Conv state (conv_dim / tp, kernel - 1) plus recurrent state (v_heads / tp, v_dim, k_dim), on one GPU."""
        conv = self.conv_dim // tensor_parallel * (self.conv_kernel - 1)
        recurrent = self.num_v_heads // tensor_parallel * self.head_v_dim * self.head_k_dim
        return int((conv + recurrent) * dtype_bytes)


LayerKind = FullAttention | SlidingWindow | ChunkedLocal | LatentAttention | LinearState
